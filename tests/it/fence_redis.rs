//! The Redis fence (`fence/redis.lua`, #40) on a real redis-server: loaded
//! with `FUNCTION LOAD`, each fenced write refuses a deposed term's token
//! with an LDF01 error naming both tokens and leaves the data as the newer
//! term wrote it; a missing token is LDF02; the same and newer terms pass.

use crate::support;

use support::Redis;

const LIBRARY: &str = include_str!("../../fence/redis.lua");

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
    let loaded = redis.cmd(&["FUNCTION", "LOAD", LIBRARY]);
    assert_eq!(loaded, redis::Value::BulkString(b"leaderd_fence".to_vec()));
    // Loading again needs REPLACE, as an upgrade would.
    redis.cmd(&["FUNCTION", "LOAD", "REPLACE", LIBRARY]);
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
