//! The Lease as client-go writes it, and what a candidate reads from it.
//! Pure: the writes of an acquisition, a renewal and a release, whose own
//! writes a candidate recognises ([`is_ours`]: its latest write still
//! there, not merely its id), and whether a record without a holder is a
//! release its holder announced ([`announced_release`]). When a record
//! expires is the observer's business (`observe.rs`).

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;
use std::time::Duration;

/// Who wrote the lease: a digest of the candidate's ownership token (the
/// token itself never leaves the process).
pub(super) const OWNER: &str = "leaderd.io/owner";
/// The term's fencing token, for people to read (`kubectl get lease -o
/// yaml`); never read back as input.
pub(super) const FENCING: &str = "leaderd.io/fencing-token";
/// Whose term the token is: a client-go elector that takes the Lease over
/// from a crashed leaderd keeps the annotations it finds, so the token is
/// shown only while this still names the holder. Written with every
/// acquisition, so it also tells a leaderd term from a client-go one.
pub(super) const TOKEN_HOLDER: &str = "leaderd.io/fencing-token-holder";

/// The client-go record of a Lease, as compared between looks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Seen {
    pub(super) holder: Option<String>,
    pub(super) duration: Duration,
    pub(super) acquired: Option<Timestamp>,
    pub(super) renewed: Option<Timestamp>,
    pub(super) transitions: i32,
}

impl Seen {
    pub(super) fn of(lease: &Lease) -> Seen {
        let spec = lease.spec.clone().unwrap_or_default();
        Seen {
            holder: spec.holder_identity.filter(|h| !h.is_empty()),
            duration: Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64),
            acquired: spec.acquire_time.map(|t| t.0),
            renewed: spec.renew_time.map(|t| t.0),
            transitions: spec.lease_transitions.unwrap_or(0),
        }
    }
}

impl Seen {
    /// The term, for the vacancy rule: its acquisition's instant.
    pub(super) fn term(&self) -> u64 {
        self.acquired
            .map_or(0, |t| t.as_microsecond().unsigned_abs())
    }
}

/// This candidate's own latest write (`digest`, and the record one of
/// `writes` left) is still what the Lease holds: nobody wrote the record
/// since, as a restore, an edit, a cleared holder or another process using
/// the same id would. Annotations others add do not count.
pub(super) fn is_ours(lease: &Lease, digest: &str, writes: &[&Seen]) -> bool {
    let seen = Seen::of(lease);
    annotation(lease, OWNER).as_deref() == Some(digest) && writes.contains(&&seen)
}

/// A record without a holder: a release its holder announced? leaderd's
/// own release takes its annotations with it; a client-go elector's clears
/// a term that was not a leaderd's (`before`, the held record this waiter
/// saw last, names another holder than the leaderd annotations do). A
/// leaderd term emptied with its annotations kept was emptied by someone
/// else (`kubectl patch`, a client-go elector's stale release): its holder
/// may still be working.
pub(super) fn announced_release(lease: &Lease, before: Option<&Seen>) -> bool {
    if annotation(lease, OWNER).is_none() {
        return true;
    }
    let leaderd_term = annotation(lease, TOKEN_HOLDER);
    before
        .and_then(|b| b.holder.as_ref())
        .is_some_and(|held| leaderd_term.as_ref() != Some(held))
}

/// `now` to the microsecond, as a `MicroTime` keeps it: what this
/// candidate writes reads back equal, so it knows its own writes.
pub(super) fn stamp(now: Timestamp) -> Timestamp {
    Timestamp::from_microsecond(now.as_microsecond()).unwrap_or(now)
}

pub(super) fn annotation(lease: &Lease, key: &str) -> Option<String> {
    lease.metadata.annotations.as_ref()?.get(key).cloned()
}

/// The fencing token an annotation shows (people's view only), if it is
/// the current holder's.
pub(super) fn shown_token(lease: &Lease) -> Option<u64> {
    let holder = Seen::of(lease).holder?;
    (annotation(lease, TOKEN_HOLDER)? == holder).then_some(())?;
    annotation(lease, FENCING)?.parse().ok()
}

/// The object's `resourceVersion` as a number (comparable since
/// Kubernetes 1.35: etcd's revision of the write).
pub(super) fn revision(lease: &Lease) -> Option<u64> {
    lease.metadata.resource_version.as_deref()?.parse().ok()
}

/// What an acquisition writes over `base` (the object read; `None`: a
/// create): client-go's record with us the holder, our digest, and
/// `leaseTransitions` one up when the holder changes.
pub(super) fn acquisition(
    base: Option<&Lease>,
    name: &str,
    id: &str,
    digest: &str,
    duration_secs: i32,
    now: Timestamp,
) -> Lease {
    let mut lease = base.cloned().unwrap_or_else(|| Lease {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        },
        spec: None,
    });
    let old = lease.spec.clone().unwrap_or_default();
    let transitions = old.lease_transitions.unwrap_or(0);
    let changed = old.holder_identity.as_deref() != Some(id) && base.is_some();
    lease.spec = Some(LeaseSpec {
        holder_identity: Some(id.to_string()),
        lease_duration_seconds: Some(duration_secs),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(if changed {
            transitions + 1
        } else {
            transitions
        }),
        ..old
    });
    let notes = lease.metadata.annotations.get_or_insert_with(BTreeMap::new);
    notes.insert(OWNER.to_string(), digest.to_string());
    notes.remove(FENCING);
    notes.insert(TOKEN_HOLDER.to_string(), id.to_string());
    lease
}

/// The same lease with the term's token shown, as its holder's.
pub(super) fn with_token(mut lease: Lease, token: u64) -> Lease {
    let holder = Seen::of(&lease).holder.unwrap_or_default();
    let notes = lease.metadata.annotations.get_or_insert_with(BTreeMap::new);
    notes.insert(FENCING.to_string(), token.to_string());
    notes.insert(TOKEN_HOLDER.to_string(), holder);
    lease
}

/// A renewal of `current` (ours): `renewTime` now, the rest as it is.
pub(super) fn renewal(mut current: Lease, duration_secs: i32, now: Timestamp) -> Lease {
    let spec = current.spec.get_or_insert_with(LeaseSpec::default);
    spec.renew_time = Some(MicroTime(now));
    spec.lease_duration_seconds = Some(duration_secs);
    current
}

/// client-go's release (`ReleaseOnCancel`): the holder cleared, one second
/// left, the transitions kept; and our annotations gone.
pub(super) fn release(mut current: Lease, now: Timestamp) -> Lease {
    let spec = current.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.acquire_time = Some(MicroTime(now));
    spec.renew_time = Some(MicroTime(now));
    if let Some(notes) = current.metadata.annotations.as_mut() {
        notes.remove(OWNER);
        notes.remove(FENCING);
        notes.remove(TOKEN_HOLDER);
    }
    current
}

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;
