//! `--fence-redis` / `--fence-postgres` on `run` (#40): leaderd raises the
//! fence to each new term's token before the term's work starts, so a
//! deposed term's late write is refused even before the new term's worker
//! has written anything; a term whose fence cannot be raised is given back
//! and its work never starts; the child learns the fence's name, never the
//! resource's URL.

use crate::support;

use std::time::Duration;
use support::postgres::Postgres;
use support::{Leaderd, Redis};

const LIBRARY: &str = include_str!("../../fence/redis.lua");

/// The lines the children appended to `seen`, split into words.
fn lines(seen: &std::path::Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(seen)
        .unwrap_or_default()
        .lines()
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect()
}

/// Each child, as it starts, reads the fence from the resource and records
/// it beside its own token: the fence was raised before the work began
/// exactly when the two are equal. The workers themselves never write.
#[test]
fn the_fence_is_raised_before_each_terms_work_so_an_old_write_is_refused_before_the_new_worker_writes()
 {
    let redis = Redis::start();
    redis.cmd(&["FUNCTION", "LOAD", LIBRARY]);
    let url = redis.url();
    let key = support::key("fence-raise");
    let fence = format!("{{{key}}}:fence");
    let dir = support::Scratch::new("fence-raise");
    let seen = dir.join("seen");
    let child = format!(
        "echo \"$LEADERD_FENCING_TOKEN $(redis-cli -p {} GET '{fence}') $LEADERD_FENCE_KEY ${{LEADERD_FENCE_REDIS_URL:-unset}}\" >> {}; exec sleep 600",
        redis.port,
        support::path_str(&seen)
    );
    let start = |id: &str| {
        let http = format!("127.0.0.1:{}", support::free_port());
        let args = [
            "run",
            "--id",
            id,
            "--http",
            &http,
            "--redis",
            &url,
            "--key",
            &key,
            "--ttl",
            "2s",
            "--fence-key",
            &fence,
            "--",
            "sh",
            "-c",
            &child,
        ];
        // The fence's URL from the environment: the child must not see it.
        let env = [("LEADERD_FENCE_REDIS_URL", url.as_str())];
        Leaderd::attach(id, &http, support::spawn_with_env(&args, &env))
    };
    let mut a = start("a");
    let first = support::eventually(Duration::from_secs(15), "a's child to start", || {
        lines(&seen).into_iter().next()
    });
    assert_eq!(
        first[0], first[1],
        "a's child found the fence below its token: {first:?}"
    );
    assert_eq!(first[2], fence);
    assert_eq!(first[3], "unset", "the child saw the fenced resource's URL");
    let old = first[0].clone();
    assert_eq!(a.leader().unwrap().1["fence"]["fence_key"], fence.as_str());

    let b = start("b");
    support::eventually(Duration::from_secs(10), "b to stand by", || {
        b.leader().map(drop)
    });
    a.signal("KILL");
    a.wait_exit(Duration::from_secs(10));
    let second = support::eventually(Duration::from_secs(20), "b's child to start", || {
        lines(&seen).into_iter().nth(1)
    });
    assert_eq!(
        second[0], second[1],
        "b's child found the fence below its token: {second:?}"
    );
    let new = second[0].parse::<u64>().unwrap();
    assert!(new > old.parse::<u64>().unwrap(), "{old} then {new}");

    // a's worker, had it been paused rather than killed, would write now
    // with its old token; b's worker has not written at all.
    let data = format!("{{{key}}}:data");
    let mut late = redis::cmd("FCALL");
    late.arg("leaderd_fence_set")
        .arg(2)
        .arg(&fence)
        .arg(&data)
        .arg(&old)
        .arg("late");
    let e = late
        .query::<redis::Value>(&mut redis.conn())
        .expect_err("the old term's write refused");
    assert_eq!(e.code(), Some("LDF01"), "{e}");
    assert!(
        e.to_string()
            .contains(&format!("fencing token {old} is older than token {new}")),
        "{e}"
    );
    assert_eq!(redis.get(&data), None);
}

/// The fence is not installed: the leader cannot raise it, so it gives the
/// lease back and never starts its work; once installed (by `leaderd fence
/// install`), the next attempt leads, with the fence raised first.
#[test]
fn a_term_whose_fence_cannot_be_raised_is_given_back_and_its_work_never_starts() {
    let pg = Postgres::start();
    let url = pg.url("");
    let key = support::key("fence-missing");
    let dir = support::Scratch::new("fence-missing");
    let seen = dir.join("seen");
    let psql = support::postgres::bin("psql");
    let child = format!(
        "echo \"$LEADERD_FENCING_TOKEN $({} \"$WORKER_DATABASE_URL\" -XAtc \"SELECT token FROM leaderd_fence WHERE key = '{key}'\")\" >> {}; exec sleep 600",
        support::path_str(&psql),
        support::path_str(&seen)
    );
    let http = format!("127.0.0.1:{}", support::free_port());
    let args = [
        "run",
        "--id",
        "a",
        "--http",
        &http,
        "--postgres",
        &url,
        "--key",
        &key,
        "--ttl",
        "2s",
        "--",
        "sh",
        "-c",
        &child,
    ];
    let env = [
        ("LEADERD_FENCE_POSTGRES_URL", url.as_str()),
        ("WORKER_DATABASE_URL", url.as_str()),
    ];
    let a = Leaderd::attach("a", &http, support::spawn_with_env(&args, &env));
    let line = a.wait_log(Duration::from_secs(20), "cannot raise the fence");
    assert!(line.contains("the guard is not installed"), "{line}");
    assert!(!line.contains(support::postgres::PASSWORD), "{line}");
    // Given back: the lease is vacant, nobody leads, nothing ran.
    support::eventually(
        Duration::from_secs(10),
        "the lease to be given back",
        || {
            let (code, _, _) = support::run_to_end(&["status", "--postgres", &url, "--key", &key]);
            (code == 3).then_some(())
        },
    );
    assert_eq!(a.leader().map(|(leads, _)| leads), Some(false));
    assert!(lines(&seen).is_empty(), "the work started unfenced");

    let (code, out, err) =
        support::run_to_end(&["fence", "install", "--apply", "--fence-postgres", &url]);
    assert_eq!(code, 0, "{out}{err}");
    // The refusal backs off 10 s: a person had to act.
    a.wait_leading(Duration::from_secs(40));
    let first = support::eventually(Duration::from_secs(10), "the child to start", || {
        lines(&seen).into_iter().next()
    });
    assert_eq!(
        first[0], first[1],
        "the child found the fence below its token: {first:?}"
    );
}
