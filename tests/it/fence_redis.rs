//! The Redis guard (`fence/redis.lua`, #40) on a real redis-server: loaded
//! with `FUNCTION LOAD`, each fenced write refuses a deposed term's token
//! with an LDF01 error naming both tokens and leaves the data as the newer
//! term wrote it; a missing token is LDF02; the same and newer terms pass.

use crate::support;

use std::time::{Duration, Instant};
use support::{Leaderd, Redis};

const GUARD: &str = include_str!("../../fence/redis.lua");

fn fcall(
    redis: &Redis,
    function: &str,
    keys: &[&str],
    args: &[&str],
) -> redis::RedisResult<redis::Value> {
    let mut cmd = redis::cmd("FCALL");
    cmd.arg(function).arg(keys.len()).arg(keys).arg(args);
    cmd.query(&mut redis.conn())
}

fn refused(answer: redis::RedisResult<redis::Value>, code: &str, needle: &str) {
    let e = answer.expect_err("a refusal");
    let text = e.to_string();
    assert!(
        e.code() == Some(code) && text.contains(needle),
        "{code} with `{needle}` expected, got {text}"
    );
}

#[test]
fn every_fenced_write_refuses_a_deposed_terms_token_naming_both() {
    let redis = Redis::start();
    let loaded = redis.cmd(&["FUNCTION", "LOAD", GUARD]);
    assert_eq!(loaded, redis::Value::BulkString(b"leaderd_fence".to_vec()));
    // Loading again needs REPLACE, as an upgrade would.
    redis.cmd(&["FUNCTION", "LOAD", "REPLACE", GUARD]);
    let fence = "{jobs}:fence";
    let data = "{jobs}:result";
    let older = "fencing token 5 is older than token 7 that already wrote for {jobs}:fence";

    fcall(
        &redis,
        "leaderd_fence_set",
        &[fence, data],
        &["5", "old term"],
    )
    .unwrap();
    fcall(
        &redis,
        "leaderd_fence_set",
        &[fence, data],
        &["7", "new term"],
    )
    .unwrap();
    refused(
        fcall(&redis, "leaderd_fence_set", &[fence, data], &["5", "late"]),
        "LDF01",
        older,
    );
    assert_eq!(redis.get(data).as_deref(), Some("new term"));
    // SET's own options pass through.
    fcall(
        &redis,
        "leaderd_fence_set",
        &[fence, data],
        &["7", "again", "XX", "GET"],
    )
    .unwrap();
    assert_eq!(redis.get(data).as_deref(), Some("again"));

    let hash = "{jobs}:hash";
    fcall(
        &redis,
        "leaderd_fence_hset",
        &[fence, hash],
        &["7", "a", "1", "b", "2"],
    )
    .unwrap();
    refused(
        fcall(
            &redis,
            "leaderd_fence_hset",
            &[fence, hash],
            &["5", "a", "late"],
        ),
        "LDF01",
        older,
    );
    let stream = "{jobs}:stream";
    fcall(
        &redis,
        "leaderd_fence_xadd",
        &[fence, stream],
        &["7", "*", "job", "1"],
    )
    .unwrap();
    refused(
        fcall(
            &redis,
            "leaderd_fence_xadd",
            &[fence, stream],
            &["5", "*", "job", "late"],
        ),
        "LDF01",
        older,
    );
    let list = "{jobs}:list";
    fcall(
        &redis,
        "leaderd_fence_call",
        &[fence, list],
        &["7", "RPUSH", list, "x"],
    )
    .unwrap();
    refused(
        fcall(
            &redis,
            "leaderd_fence_call",
            &[fence, list],
            &["5", "RPUSH", list, "late"],
        ),
        "LDF01",
        older,
    );
    refused(
        fcall(&redis, "leaderd_fence_del", &[fence, data, hash], &["5"]),
        "LDF01",
        older,
    );
    // Nothing the old term sent landed.
    assert_eq!(
        redis.cmd(&["HGET", hash, "a"]),
        redis::Value::BulkString(b"1".to_vec())
    );
    assert_eq!(redis.cmd(&["XLEN", stream]), redis::Value::Int(1));
    assert_eq!(redis.cmd(&["LLEN", list]), redis::Value::Int(1));
    // A later term deletes; a missing token is refused as such.
    fcall(&redis, "leaderd_fence_del", &[fence, data, hash], &["9"]).unwrap();
    assert_eq!(redis.get(data), None);
    refused(
        fcall(&redis, "leaderd_fence_set", &[fence, data], &["", "x"]),
        "LDF02",
        "no fencing token",
    );
    refused(
        fcall(&redis, "leaderd_fence_set", &[fence, data], &["1.5", "x"]),
        "LDF02",
        "no fencing token",
    );
    let mut read = redis::cmd("FCALL_RO");
    read.arg("leaderd_fence_token").arg(1).arg(fence);
    let token: i64 = read.query(&mut redis.conn()).unwrap();
    assert_eq!(token, 9);
}

/// The VM-pause case, end to end: two `leaderd run` candidates whose child
/// is the example worker, writing through the fence. The leader's whole
/// process tree (leaderd, its guard, the worker) is stopped past the TTL;
/// the other takes over and writes; the old worker is let run first (the
/// worst order a thaw can take) and its next write, under its old token,
/// is refused by Redis; then the rest of the tree resumes.
#[test]
fn a_paused_leaders_late_write_is_refused_by_the_store_end_to_end() {
    let redis = Redis::start();
    let url = redis.url();
    let key = support::key("fence-e2e");
    let worker = support::example("worker");
    let start = |id: &str| {
        let http = format!("127.0.0.1:{}", support::free_port());
        let args = [
            "run", "--id", id, "--http", &http, "--redis", &url, "--key", &key, "--ttl", "2s",
            "--", &worker,
        ];
        Leaderd::attach(
            id,
            &http,
            support::spawn_with_env(&args, &[("WORKER_REDIS_URL", url.as_str())]),
        )
    };
    let last = || redis.get("demo:{results}:last").unwrap_or_default();
    let fence = || redis.get("demo:{results}:fence").unwrap_or_default();
    let a = start("a");
    a.wait_leading(Duration::from_secs(10));
    support::eventually(Duration::from_secs(10), "a's worker to write", || {
        last().ends_with("by a").then_some(())
    });
    let old = fence();
    let b = start("b");
    support::eventually(Duration::from_secs(10), "b to stand by", || {
        b.leader().map(drop)
    });

    // The pause: leaderd first, then everything below it.
    let paused: Vec<u32> = support::os::tree(a.pid());
    let t0 = Instant::now();
    for pid in &paused {
        support::os::kill(*pid, libc::SIGSTOP);
    }
    let worker_pid = *paused
        .iter()
        .find(|p| support::os::cmdline(**p).starts_with(&worker))
        .expect("a's worker in its tree");
    support::eventually(Duration::from_secs(20), "b's worker to write", || {
        last().ends_with("by b").then_some(())
    });
    let taken = t0.elapsed();
    let new = fence();
    assert!(
        new.parse::<u64>().unwrap() > old.parse::<u64>().unwrap(),
        "{old} → {new}"
    );

    // The old worker runs again before its leaderd: its next write carries
    // the old token and is refused by the fence.
    support::os::kill(worker_pid, libc::SIGCONT);
    let refused = a.wait_log(
        Duration::from_secs(10),
        &format!("fencing token {old}: REFUSED"),
    );
    let refused_at = t0.elapsed();
    for pid in &paused {
        support::os::kill(*pid, libc::SIGCONT);
    }
    assert_eq!(fence(), new, "the fence went back");
    assert!(
        last().ends_with("by b"),
        "the old term's write landed: {}",
        last()
    );
    // The old leaderd, resumed, stops its worker and stands by.
    support::eventually(Duration::from_secs(10), "a to stop its worker", || {
        (!support::alive(worker_pid as i32)).then_some(())
    });
    assert!(!a.is_leader());
    eprintln!(
        "paused a (token {old}) at 0; b's worker wrote with token {new} at {taken:?}; \
         a's worker resumed and was refused at {refused_at:?}: {refused}"
    );
}

/// The EVAL form (`fence/redis-eval.lua`, generated from the library) for
/// Redis before 7, run here on the 7.0 server the fixtures have: the same
/// operations, chosen by name, with the same refusals.
#[test]
fn the_eval_form_fences_each_operation_as_the_library_does() {
    const EVAL: &str = include_str!("../../fence/redis-eval.lua");
    let redis = Redis::start();
    let eval = |op: &str, keys: &[&str], args: &[&str]| {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(EVAL).arg(keys.len()).arg(keys).arg(op).arg(args);
        cmd.query::<redis::Value>(&mut redis.conn())
    };
    let fence = "{jobs}:fence";
    let data = "{jobs}:result";
    let older = "fencing token 5 is older than token 7 that already wrote for {jobs}:fence";
    eval("set", &[fence, data], &["5", "old term"]).unwrap();
    assert_eq!(
        eval("raise", &[fence], &["7"]).unwrap(),
        redis::Value::Int(7)
    );
    refused(eval("set", &[fence, data], &["5", "late"]), "LDF01", older);
    assert_eq!(redis.get(data).as_deref(), Some("old term"));
    eval("hset", &[fence, "{jobs}:h"], &["7", "a", "1"]).unwrap();
    refused(
        eval("hset", &[fence, "{jobs}:h"], &["5", "a", "2"]),
        "LDF01",
        older,
    );
    eval("xadd", &[fence, "{jobs}:s"], &["7", "*", "f", "v"]).unwrap();
    refused(
        eval("xadd", &[fence, "{jobs}:s"], &["6", "*", "f", "v"]),
        "LDF01",
        "fencing token 6 is older than token 7",
    );
    eval(
        "call",
        &[fence, "{jobs}:l"],
        &["8", "RPUSH", "{jobs}:l", "x"],
    )
    .unwrap();
    refused(
        eval("del", &[fence, data], &["7"]),
        "LDF01",
        "token 7 is older than token 8",
    );
    eval("del", &[fence, data], &["8"]).unwrap();
    assert_eq!(redis.get(data), None);
    assert_eq!(eval("token", &[fence], &[]).unwrap(), redis::Value::Int(8));
    refused(
        eval("set", &[fence, data], &["x", "v"]),
        "LDF02",
        "no fencing token",
    );
    refused(eval("drop", &[fence], &["9"]), "LDF02", "no operation drop");
    assert_eq!(redis.cmd(&["LLEN", "{jobs}:l"]), redis::Value::Int(1));
}
