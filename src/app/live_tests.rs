//! `status --watch`'s memory, table-tested: what counts as a change, the
//! changes it lists and how each mode renders a look.

use super::*;
use crate::app::status::StatusView;
use crate::lease::registry::Record;
use crate::lease::{Holder, Peek};
use std::time::UNIX_EPOCH;

/// 2026-11-26T09:00:00Z plus `ms`.
fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(1_795_683_600_000 + ms)
}

fn record(id: &str, healthy: Option<bool>) -> Record {
    Record {
        id: id.to_string(),
        priority: crate::priority::Priority::parse("1").unwrap(),
        healthy,
        version: "0.1.0".to_string(),
        since_ms: 0,
        successor: None,
        instance: String::new(),
        leads: false,
    }
}

/// A look: `holder` with `token` (None: vacant), `left` ms to live, and
/// the candidates.
fn look(
    holder: Option<&str>,
    token: u64,
    left: u64,
    candidates: Vec<Record>,
) -> Result<Look, String> {
    let peek = Peek {
        holder: holder.map(|id| Holder {
            id: Some(id.to_string()),
            fencing_token: Some(token),
        }),
        expires_in: holder.map(|_| Duration::from_millis(left)),
        contested: false,
    };
    Ok(Look {
        view: StatusView {
            key: "jobs".into(),
            backend: "redis://127.0.0.1:6379".into(),
            held: holder.is_some(),
            leader: holder.map(str::to_string),
            fencing_token: holder.map(|_| token),
            expires_in_ms: holder.map(|_| left),
            contested: false,
            candidates,
            registry_error: None,
        },
        peek,
    })
}

fn two() -> Vec<Record> {
    vec![record("c1", Some(true)), record("c2", Some(true))]
}

#[test]
fn changes_are_the_holder_token_candidates_and_reachability_not_the_time_left() {
    let unreachable = || Err::<Look, _>("cannot reach redis://127.0.0.1:6379".to_string());
    // (look, a change?, the newest listed change after it)
    let steps: Vec<(Result<Look, String>, bool, &str)> = vec![
        (
            look(Some("c1"), 41, 9000, two()),
            true,
            "c1 leads, fencing token 41",
        ),
        (
            look(Some("c1"), 41, 8500, two()),
            false,
            "c1 leads, fencing token 41",
        ),
        (
            look(
                Some("c1"),
                41,
                9000,
                vec![record("c1", Some(true)), record("c2", Some(false))],
            ),
            true,
            "c1 leads, fencing token 41",
        ),
        (look(None, 0, 0, two()), true, "c1 → vacant"),
        (
            look(Some("c2"), 42, 10000, two()),
            true,
            "vacant → c2, fencing token 42",
        ),
        (
            look(Some("c2"), 43, 10000, two()),
            true,
            "c2 again, fencing token 43",
        ),
        (
            unreachable(),
            true,
            "the store is unreachable: cannot reach redis://127.0.0.1:6379",
        ),
        (
            unreachable(),
            false,
            "the store is unreachable: cannot reach redis://127.0.0.1:6379",
        ),
        (
            look(Some("c2"), 43, 9000, two()),
            true,
            "the store answers again",
        ),
        (
            look(Some("c1"), 44, 9000, two()),
            true,
            "c2 → c1, fencing token 44",
        ),
    ];
    let mut live = Live::default();
    for (i, (outcome, change, newest)) in steps.into_iter().enumerate() {
        assert_eq!(
            live.observe(outcome, at(i as u64 * 500)),
            change,
            "step {i}"
        );
        assert_eq!(live.history[0].1, newest, "step {i}");
    }
    assert_eq!(live.history.len(), 7);
    live.observe(look(Some("c2"), 45, 9000, two()), at(6000));
    live.observe(look(Some("c1"), 46, 9000, two()), at(6500));
    assert_eq!(
        live.history.len(),
        HISTORY,
        "the oldest changes are dropped"
    );
    assert_eq!(live.history[HISTORY - 1].1, "c1 → vacant");
}

#[test]
fn the_terminal_view_shows_the_lease_the_candidates_and_the_timed_changes() {
    let mut live = Live::default();
    live.observe(look(Some("c1"), 41, 9000, two()), at(0));
    live.observe(look(Some("c2"), 42, 10000, two()), at(1234));
    let frame = live.frame("jobs", Duration::from_millis(500), at(2000));
    let want = [
        "leaderd status --watch: jobs, every 500ms, Ctrl-C quits    09:00:02 UTC",
        "",
        "jobs: held by c2, fencing token 42, expires in 10s",
        "",
        "2 candidate(s), in the order they would lead:",
    ];
    let lines: Vec<&str> = frame.lines().collect();
    assert_eq!(lines[..5], want, "{frame}");
    assert!(lines[5].trim_start().starts_with("c1  standby"), "{frame}");
    let tail = &lines[lines.len() - 3..];
    assert_eq!(
        tail,
        [
            "last changes (UTC):",
            "  09:00:01.234  c1 → c2, fencing token 42",
            "  09:00:00.000  c1 leads, fencing token 41",
        ],
        "{frame}"
    );
}

#[test]
fn a_line_and_a_json_object_per_change() {
    let mut live = Live::default();
    live.observe(
        look(
            Some("c1"),
            41,
            9000,
            vec![record("c1", Some(true)), record("c2", Some(false))],
        ),
        at(0),
    );
    assert_eq!(
        live.line("jobs", at(0)),
        "2026-11-26T09:00:00.000Z jobs: held by c1, fencing token 41, expires in 9s; candidates: c1 (leader), c2 (worker UNHEALTHY)"
    );
    let json: serde_json::Value = serde_json::from_str(&live.json("jobs", at(0))).unwrap();
    assert_eq!(json["at"], "2026-11-26T09:00:00.000Z");
    assert_eq!(json["leader"], "c1");
    assert_eq!(json["fencing_token"], 41);
    assert_eq!(json["candidates"][1]["healthy"], false);
    live.observe(Err("cannot reach it".into()), at(500));
    assert_eq!(
        live.line("jobs", at(500)),
        "2026-11-26T09:00:00.500Z jobs: the store is unreachable: cannot reach it"
    );
    let json: serde_json::Value = serde_json::from_str(&live.json("jobs", at(500))).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"at": "2026-11-26T09:00:00.500Z", "key": "jobs", "error": "cannot reach it"})
    );
}
