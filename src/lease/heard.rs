//! What a standby heard of the current term without asking the store
//! (issue #47): each renewal, announced by the holder's own renewal (a
//! Redis `PUBLISH`, a PostgreSQL `NOTIFY`, an etcd put) to the watch or
//! subscription every candidate keeps for releases. A standby whose timer comes due while it heard the holder
//! renew answers its own acquire from it — `Held`, until the renewal's TTL
//! has run out on its own clock — instead of asking the store: so idle
//! standbys send nothing on a timer, and the store's idle load is the
//! leader's, whatever the number of candidates.
//!
//! Only ever a `Held` answer, never a win, so it cannot make two leaders;
//! what it can cost is latency, and each rule below bounds that:
//! - a term is believed only until its renewal's TTL is spent (less the
//!   drift allowance), so a holder that stops renewing is asked about at
//!   its expiry, as before: crash takeover keeps its speed;
//! - a release (a wake-up, or the release's own notice) forgets the term,
//!   and a notice of a term at or below one released, or below the
//!   highest token a real answer showed, is stale and ignored: wake-ups
//!   and notices may arrive on different connections, in either order;
//! - while the subscription is down, nothing is believed: standbys ask on
//!   their timers, as they did before (reported as `fallback`).
//!
//! Pure: the backends' subscriptions feed it.

use crate::lease::contract::Holder;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// A believed term is used only while more than this is left of it: a
/// look that close to the expiry asks the store.
const GUARD: Duration = Duration::from_millis(50);

/// What this candidate heard of the current term, shared by the
/// subscription and the lease.
#[derive(Clone, Default)]
pub struct Heard(Arc<Mutex<Seen>>);

#[derive(Debug, Default)]
struct Seen {
    /// The subscription is open.
    live: bool,
    term: Option<Term>,
    /// The highest token a release was heard for.
    released: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Term {
    id: Option<String>,
    token: u64,
    until: Instant,
}

/// One notice, as the holders publish it: `TOKEN TTL_MS ID_JSON`.
pub fn parse(payload: &str) -> Option<(u64, u64, Option<String>)> {
    let mut parts = payload.splitn(3, ' ');
    let token = parts.next()?.parse().ok()?;
    let ms = parts.next()?.parse().ok()?;
    let id = serde_json::from_str(parts.next()?).ok();
    Some((token, ms, id))
}

impl Heard {
    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A notice arrived at `now`: term `token` of `id` runs `ms` from its
    /// renewal. `floor`: the highest token a real answer showed.
    pub fn renewed(&self, token: u64, ms: u64, id: Option<String>, now: Instant, floor: u64) {
        let mut h = self.seen();
        if !h.live || token <= h.released || token < floor {
            return;
        }
        if h.term.as_ref().is_some_and(|t| t.token > token) {
            return;
        }
        // The drift allowance the holder's own validity keeps
        // (`Timing::drift`): believed no longer than the holder believes.
        let ttl = Duration::from_millis(ms);
        let until = now + ttl.saturating_sub(ttl / 100 + Duration::from_millis(2));
        h.term = Some(Term { id, token, until });
    }

    /// A release was heard (or a wake-up came): forget the term.
    pub fn released(&self) {
        let mut h = self.seen();
        if let Some(term) = h.term.take() {
            h.released = h.released.max(term.token);
        }
    }

    /// The subscription opened or closed: nothing heard before counts.
    pub fn set_live(&self, live: bool) {
        let mut h = self.seen();
        h.live = live;
        h.term = None;
    }

    pub fn live(&self) -> bool {
        self.seen().live
    }

    /// The answer to a timed acquire without asking the store: another's term,
    /// believed for the time returned; `None`: ask. `own_id`: ours is never
    /// answered from here (after our own release we ask).
    pub fn answer(&self, now: Instant, floor: u64, own_id: &str) -> Option<(Holder, Duration)> {
        let h = self.seen();
        let term = h.term.as_ref().filter(|t| {
            h.live
                && t.token > h.released
                && t.token >= floor
                && t.id.as_deref() != Some(own_id)
                && t.until > now + GUARD
        })?;
        let holder = Holder {
            id: term.id.clone(),
            fencing_token: Some(term.token),
        };
        Some((holder, term.until - now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn heard(live: bool) -> Heard {
        let r = Heard::default();
        r.set_live(live);
        r
    }

    #[test]
    fn a_heard_renewal_answers_until_its_ttl_is_spent() {
        let t0 = Instant::now();
        let r = heard(true);
        r.renewed(7, 10_000, Some("a".into()), t0, 0);
        let (holder, left) = r.answer(t0, 0, "me").expect("believed");
        assert_eq!(holder.id.as_deref(), Some("a"));
        assert_eq!(holder.fencing_token, Some(7));
        // 10 s less the drift allowance (1 % + 2 ms).
        assert_eq!(left, Duration::from_millis(9898));
        // Near and past the expiry: ask.
        assert!(
            r.answer(t0 + 9870 * Duration::from_millis(1), 0, "me")
                .is_none()
        );
        assert!(r.answer(t0 + 11 * S, 0, "me").is_none());
    }

    #[test]
    fn nothing_is_believed_without_a_live_subscription() {
        let t0 = Instant::now();
        let r = heard(false);
        r.renewed(7, 10_000, Some("a".into()), t0, 0);
        assert!(r.answer(t0, 0, "me").is_none());
        let r = heard(true);
        r.renewed(7, 10_000, Some("a".into()), t0, 0);
        r.set_live(false);
        r.set_live(true);
        assert!(
            r.answer(t0, 0, "me").is_none(),
            "heard before a reconnection"
        );
    }

    #[test]
    fn a_release_forgets_the_term_and_a_late_notice_of_it_is_stale() {
        let t0 = Instant::now();
        let r = heard(true);
        r.renewed(7, 10_000, Some("a".into()), t0, 0);
        r.released();
        assert!(r.answer(t0, 0, "me").is_none());
        // The released term's renewal, delivered after its release.
        r.renewed(7, 10_000, Some("a".into()), t0, 0);
        assert!(r.answer(t0, 0, "me").is_none());
        // The next term counts.
        r.renewed(8, 10_000, Some("b".into()), t0, 0);
        assert_eq!(r.answer(t0, 0, "me").unwrap().0.fencing_token, Some(8));
    }

    #[test]
    fn a_term_older_than_a_real_answer_or_our_own_is_not_believed() {
        let t0 = Instant::now();
        let r = heard(true);
        r.renewed(7, 10_000, Some("a".into()), t0, 0);
        assert!(r.answer(t0, 8, "me").is_none(), "a real answer showed 8");
        r.renewed(9, 10_000, Some("me".into()), t0, 0);
        assert!(r.answer(t0, 0, "me").is_none(), "our own term");
        // An older term's notice never replaces a newer one.
        r.renewed(8, 10_000, Some("b".into()), t0, 0);
        assert!(r.answer(t0, 0, "me").is_none());
    }

    #[test]
    fn notices_parse_as_the_scripts_write_them() {
        assert_eq!(
            parse(r#"1764000000123 10000 "web-0""#),
            Some((1764000000123, 10000, Some("web-0".into())))
        );
        assert_eq!(
            parse(r#"5 3000 "a b""#),
            Some((5, 3000, Some("a b".into())))
        );
        assert_eq!(parse("5 3000 not-json"), Some((5, 3000, None)));
        assert_eq!(parse("x 3000 \"a\""), None);
        assert_eq!(parse("5"), None);
    }
}
