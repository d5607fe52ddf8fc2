//! The Redis options' resolution: one URL or Redlock's several, from every
//! layer and from secret files, and the relations they must keep.

use super::config::*;
use crate::config::tests::Case;
use std::time::Duration;

#[test]
fn the_redis_timeout_must_be_shorter_than_the_renew_interval() {
    let err = Case::new()
        .args(|a| a.set(&REDIS, "redis://127.0.0.1:6379"))
        .args(|a| a.set(&REDIS_TIMEOUT, "4s"))
        .err();
    assert!(
        err.contains("redis.timeout = 4s (--redis-timeout)")
            && err.contains("lease.renew_interval = 3333ms (default: ttl / 3)"),
        "{err}"
    );
}

#[test]
fn the_redis_timeout_only_matters_with_redis() {
    assert!(
        Case::new()
            .args(|a| a.set(&REDIS_TIMEOUT, "4s"))
            .build()
            .is_ok()
    );
}

#[test]
fn malformed_redis_url_is_named_and_redacted() {
    let err = Case::new()
        .args(|a| a.set(&REDIS, "redis://u:hunter2@:6379"))
        .err();
    assert!(
        err.starts_with("--redis:") && !err.contains("hunter2") && err.contains("u:***@"),
        "{err}"
    );
}

#[test]
fn redis_urls_come_from_a_comma_separated_env_var() {
    let err = Case::new()
        .env("LEADERD_REDIS_URL", "redis://a:1,redis://b:2")
        .err();
    assert!(err.contains("LEADERD_REDIS_URL: two Redis URLs"), "{err}");
    assert!(err.contains("survives no failure"), "{err}");
    let c = Case::new()
        .env("LEADERD_REDIS_URL", "redis://a:pw@h:1")
        .build()
        .unwrap();
    assert!(c.describe().contains("redis://a:***@h:1") && !c.describe().contains("pw"));
}

#[test]
fn the_redis_url_can_come_from_a_secret_file_at_either_layer() {
    let url = "redis://app:pw@10.0.0.5:6379/0\n";
    let from_env = Case::new()
        .env("LEADERD_REDIS_URL_FILE", "/run/secrets/url")
        .secret_file("/run/secrets/url", url, 0o100600)
        .build()
        .unwrap();
    let got = from_env.backend.get::<RedisConfig>().expect("one Redis");
    assert_eq!(got.url.expose(), url.trim());
    assert!(from_env.warnings.is_empty(), "{:?}", from_env.warnings);
    let loose = Case::new()
        .file("[redis]\nurl_file = \"/etc/leaderd/url\"\n")
        .secret_file("/etc/leaderd/url", url, 0o100644)
        .build()
        .unwrap();
    assert!(
        loose.warnings[0].contains("leaderd.toml line 2 (redis.url_file)")
            && loose.warnings[0].contains("mode 0644"),
        "{:?}",
        loose.warnings
    );
    // The environment's file beats the TOML URLs, as any env beats the file.
    let layered = Case::new()
        .file("[redis]\nurls = [\"redis://other:6379\"]\n")
        .env("LEADERD_REDIS_URL_FILE", "/run/secrets/url")
        .secret_file("/run/secrets/url", url, 0o100400)
        .build()
        .unwrap();
    let got = layered.backend.get::<RedisConfig>().expect("one Redis");
    assert!(got.url.redacted().contains("10.0.0.5"), "{got:?}");
    let both = Case::new()
        .env("LEADERD_REDIS_URL", "redis://a:6379")
        .env("LEADERD_REDIS_URL_FILE", "/run/secrets/url")
        .err();
    assert!(both.contains("choose one"), "{both}");
    let missing = Case::new().env("LEADERD_REDIS_URL_FILE", "/nope").err();
    assert!(
        missing.starts_with("LEADERD_REDIS_URL_FILE: cannot read /nope"),
        "{missing}"
    );
    let bad = Case::new()
        .env("LEADERD_REDIS_URL_FILE", "/run/secrets/url")
        .secret_file("/run/secrets/url", "redis://u:Kq/Vv@h:x\n", 0o100600)
        .err();
    assert!(!bad.contains("Kq/Vv") && bad.contains("***"), "{bad}");
}

#[test]
fn a_password_on_the_command_line_is_warned_about() {
    let c = Case::new()
        .args(|a| a.set(&REDIS, "redis://app:pw@h:6379"))
        .build()
        .unwrap();
    assert!(
        c.warnings[0].starts_with("--redis: the URL's password"),
        "{:?}",
        c.warnings
    );
    let plain = Case::new()
        .args(|a| a.set(&REDIS, "redis://h:6379"))
        .build()
        .unwrap();
    assert!(plain.warnings.is_empty());
}

#[test]
fn three_or_more_urls_are_redlock_with_a_node_timeout_checked_against_the_ttl() {
    let c = Case::new()
        .env("LEADERD_REDIS_URL", "redis://a:1,redis://b:2,redis://c:3")
        .build()
        .unwrap();
    let redlock = c.backend.get::<RedlockConfig>().expect("Redlock");
    assert_eq!(redlock.urls.len(), 3);
    // ttl 10s: ttl/100.
    assert_eq!(redlock.node_timeout, Duration::from_millis(100));
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    assert!(
        c.describe().contains("node_timeout = \"100ms\""),
        "{}",
        c.describe()
    );

    let four = Case::new()
        .env(
            "LEADERD_REDIS_URL",
            "redis://a:1,redis://b:2,redis://c:3,redis://d:4",
        )
        .build()
        .unwrap();
    assert!(
        four.warnings.iter().any(|w| w.contains("4 Redis masters")),
        "{:?}",
        four.warnings
    );

    for (env, value, expected) in [
        ("LEADERD_REDIS_NODE_TIMEOUT", "2s", "at most ttl/10"),
        (
            "LEADERD_REDIS_WAIT_REPLICAS",
            "1",
            "does not apply to Redlock",
        ),
    ] {
        let err = Case::new()
            .env("LEADERD_REDIS_URL", "redis://a:1,redis://b:2,redis://c:3")
            .env(env, value)
            .err();
        assert!(err.contains(expected), "{env}: {err}");
    }
    let err = Case::new()
        .env(
            "LEADERD_REDIS_URL",
            "redis://a:1,redis+cluster://h:7000,redis://c:3",
        )
        .err();
    assert!(
        err.contains("Sentinel and Cluster URLs stand alone"),
        "{err}"
    );
    let err = Case::new()
        .env("LEADERD_REDIS_URL", "redis://a:1")
        .env("LEADERD_REDIS_NODE_TIMEOUT", "50ms")
        .err();
    assert!(err.contains("applies to Redlock"), "{err}");
}
