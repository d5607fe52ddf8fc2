//! `leaderd fence install` and `leaderd fence check` (#40) on real servers:
//! the shipped texts printed as shipped; installed into PostgreSQL and Redis
//! (functions, or the EVAL form's script cache), idempotently; each
//! resource reported as not fenced, fenced with its token, or fenced by a
//! text this leaderd did not ship; `leaderd check` refusing an unfenced
//! resource; an unreachable one named without its password.

use crate::support;

use support::Redis;
use support::postgres::Postgres;
use support::run_to_end;

const PG_GUARD: &str = include_str!("../../fence/postgres.sql");
const REDIS_GUARD: &str = include_str!("../../fence/redis.lua");
const REDIS_EVAL_GUARD: &str = include_str!("../../fence/redis-eval.lua");

#[test]
fn install_prints_each_shipped_fence_as_shipped_and_asks_what_otherwise() {
    for (kind, text) in [
        ("postgres", PG_GUARD),
        ("redis", REDIS_GUARD),
        ("redis-eval", REDIS_EVAL_GUARD),
    ] {
        let (code, out, err) = run_to_end(&["fence", "install", kind]);
        assert_eq!(code, 0, "{kind}: {err}");
        assert!(
            out == text,
            "{kind}: printed text differs from the shipped file"
        );
    }
    let (code, _, err) = run_to_end(&["fence", "install"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("say what to print (postgres, redis or redis-eval)"),
        "{err}"
    );
    let (code, _, err) = run_to_end(&["fence", "check"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("no fenced resource is configured: give --fence-postgres URL"),
        "{err}"
    );
    let (code, _, err) = run_to_end(&["fence", "install", "--apply", "--fence-key", "x"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no fenced resource is configured"), "{err}");
}

#[test]
fn postgres_is_reported_unfenced_then_installed_idempotently_then_fenced_with_its_token() {
    let pg = Postgres::start();
    let url = pg.url("");
    let on = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--fence-postgres", &url, "--key", "jobs"]);
        run_to_end(&all)
    };
    let (code, out, err) = on(&["fence", "check"]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        err.contains("not fenced: the table leaderd_fence, the function leaderd_fence_check(text,bigint), the function leaderd_fence_trigger() missing"),
        "{err}"
    );
    // `check` refuses what `run` could not use.
    let (code, _, err) = on(&["check"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not fenced"), "{err}");

    for _ in 0..2 {
        let (code, out, err) = on(&["fence", "install", "--apply"]);
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains("PostgreSQL postgres://postgres:***@127.0.0.1")
                && out.contains("installed: the table leaderd_fence"),
            "{out}"
        );
    }
    let (code, out, err) = on(&["fence", "check"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("fenced (as this leaderd ships it); fence jobs: no token yet"),
        "{out}"
    );
    pg.sql("SELECT leaderd_fence_check('jobs', 42)");
    let (code, out, _) = on(&["fence", "check"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("fence jobs: token 42") && out.contains("raised 20"),
        "{out}"
    );
    let (code, out, err) = on(&["check"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("# ok: PostgreSQL postgres://postgres:***@"),
        "{out}"
    );

    // A body that is not the shipped one (an older leaderd's) still fences.
    pg.sql(
        "CREATE OR REPLACE FUNCTION leaderd_fence_trigger() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$",
    );
    let (code, out, _) = on(&["fence", "check"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("fenced, but leaderd_fence_trigger() not as this leaderd ships it"),
        "{out}"
    );
    for printed in [out, err] {
        assert!(!printed.contains(support::postgres::PASSWORD), "{printed}");
    }
}

#[test]
fn redis_is_reported_unfenced_then_loaded_then_fenced_with_its_token() {
    let redis = Redis::start();
    let url = redis.url();
    let on = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--fence-redis", &url, "--fence-key", "{jobs}:fence"]);
        run_to_end(&all)
    };
    let (code, _, err) = on(&["fence", "check"]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("not fenced: the function library leaderd_fence is not loaded"),
        "{err}"
    );
    for _ in 0..2 {
        let (code, out, err) = on(&["fence", "install", "--apply"]);
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains("loaded the function library leaderd_fence (Redis 7"),
            "{out}"
        );
    }
    let (code, out, err) = on(&["fence", "check"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(
            "fenced (the function library leaderd_fence, as this leaderd ships it); fence {jobs}:fence: no token yet"
        ),
        "{out}"
    );
    redis.cmd(&["FCALL", "leaderd_fence_raise", "1", "{jobs}:fence", "42"]);
    let (_, out, _) = on(&["fence", "check"]);
    assert!(out.contains("fence {jobs}:fence: token 42"), "{out}");

    // The EVAL form, asked for: loaded into the script cache by its SHA1.
    let (code, out, err) = on(&["fence", "install", "redis-eval", "--apply"]);
    assert_eq!(code, 0, "{err}");
    let sha = out
        .split("EVALSHA ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no SHA1 in {out}"));
    assert_eq!(
        redis.cmd(&["SCRIPT", "EXISTS", sha]),
        redis::Value::Array(vec![redis::Value::Int(1)])
    );

    // A library that is not the shipped one still fences.
    let changed = REDIS_GUARD.replace("this worker was deposed", "deposed");
    redis.cmd(&["FUNCTION", "LOAD", "REPLACE", &changed]);
    let (code, out, _) = on(&["fence", "check"]);
    assert_eq!(code, 0);
    assert!(
        out.contains(
            "fenced, but the function library leaderd_fence, not as this leaderd ships it"
        ),
        "{out}"
    );
    // A fence key holding something else is no fence.
    redis.cmd(&["SET", "taken", "not a token"]);
    let (code, _, err) = run_to_end(&[
        "fence",
        "check",
        "--fence-redis",
        &url,
        "--fence-key",
        "taken",
    ]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("holds something that is not a fencing token"),
        "{err}"
    );
}

#[test]
fn an_unreachable_resource_is_exit_1_named_without_its_password() {
    let port = support::free_port();
    let pg = format!("postgres://app:pg-s3cret@127.0.0.1:{port}/app");
    let redis = format!("redis://:redis-s3cret@127.0.0.1:{port}/0");
    for url in [("--fence-postgres", &pg), ("--fence-redis", &redis)] {
        let (code, out, err) = run_to_end(&["fence", "check", url.0, url.1]);
        assert_eq!(code, 1, "{url:?}: {out}{err}");
        assert!(err.contains("127.0.0.1") && err.contains("***"), "{err}");
        let (code, _, err) = run_to_end(&["fence", "install", "--apply", url.0, url.1]);
        assert_eq!(code, 1, "{err}");
        for printed in [out, err] {
            assert!(!printed.contains("s3cret"), "{printed}");
        }
    }
}

/// The fenced resources' TLS is the backends': a rediss:// URL with
/// `--fence-redis-tls-*` (mutual TLS here), a PostgreSQL URL with
/// `sslmode=verify-full&sslrootcert=…`; without the CA both fail closed,
/// naming what to give.
#[test]
fn the_fence_is_installed_and_checked_over_tls_as_the_backends_connect() {
    let pki = support::tls::Pki::new(&format!("fence-tls-{}", support::os::below(1 << 30)));
    let ca = pki.ca();
    let ca = support::path_str(&ca);

    let server = pki.leaf("server", &["127.0.0.1"], false);
    let client = pki.leaf("client", &["leaderd"], false);
    let redis = support::tls::redis(&pki, &server, true);
    let url = redis.url();
    let tls = [
        "--fence-redis",
        url.as_str(),
        "--fence-redis-tls-ca",
        ca,
        "--fence-redis-tls-cert",
        support::path_str(&client.0),
        "--fence-redis-tls-key",
        support::path_str(&client.1),
    ];
    let (code, out, err) = run_to_end(&[&["fence", "install", "--apply"][..], &tls].concat());
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("loaded the function library leaderd_fence"),
        "{out}"
    );
    let (code, out, err) = run_to_end(&[&["fence", "check"][..], &tls].concat());
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("rediss://127.0.0.1") && out.contains(": fenced ("),
        "{out}"
    );
    let (code, _, err) = run_to_end(&["fence", "check", "--fence-redis", &url]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("TLS with Redis rediss://127.0.0.1")
            && err.contains("give its CA bundle with --fence-redis-tls-ca"),
        "{err}"
    );
    // TLS files without a rediss:// URL (or without any Redis) are refused.
    let (code, _, err) = run_to_end(&[
        "fence",
        "check",
        "--fence-redis",
        "redis://127.0.0.1:1",
        "--fence-redis-tls-ca",
        ca,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("use rediss://"), "{err}");

    let (cert, key) = pki.leaf("pg", &["localhost"], false);
    let pg = Postgres::start_tls(&cert, &key);
    let verified = pg
        .url(&format!("sslmode=verify-full&sslrootcert={ca}"))
        .replace("127.0.0.1", "localhost");
    let (code, out, err) =
        run_to_end(&["fence", "install", "--apply", "--fence-postgres", &verified]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = run_to_end(&["fence", "check", "--fence-postgres", &verified]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("sslmode=verify-full") && out.contains(": fenced ("),
        "{out}"
    );
    let unverified = pg
        .url("sslmode=verify-full")
        .replace("127.0.0.1", "localhost");
    let (code, _, err) = run_to_end(&["fence", "check", "--fence-postgres", &unverified]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("TLS with PostgreSQL postgres://postgres:***@localhost")
            && err.contains("give its CA with sslrootcert=FILE in the URL"),
        "{err}"
    );
}
