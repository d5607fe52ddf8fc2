//! Precedence, units and validation, tested without files or the process env.

use super::*;
use options;
use std::collections::HashMap;

struct Case {
    args: ConfigArgs,
    env: HashMap<&'static str, &'static str>,
    file: Option<ConfigFile>,
    /// Secret files by path: text and permission bits.
    files: HashMap<&'static str, (&'static str, u32)>,
}

impl Case {
    fn new() -> Self {
        Case {
            args: ConfigArgs::default(),
            env: HashMap::new(),
            file: None,
            files: HashMap::new(),
        }
    }
    fn secret_file(mut self, path: &'static str, text: &'static str, mode: u32) -> Self {
        self.files.insert(path, (text, mode));
        self
    }
    fn env(mut self, k: &'static str, v: &'static str) -> Self {
        self.env.insert(k, v);
        self
    }
    fn file(mut self, text: &str) -> Self {
        self.file = Some(ConfigFile::parse("leaderd.toml", text).expect("test TOML parses"));
        self
    }
    fn args(mut self, f: impl FnOnce(&mut ConfigArgs)) -> Self {
        f(&mut self.args);
        self
    }
    fn build(&self) -> Result<Config, ConfigError> {
        let env = |name: &str| self.env.get(name).map(OsString::from);
        Config::from_sources(Sources {
            args: &self.args,
            command: &[],
            file: self.file.as_ref(),
            env: &env,
            hostname: Some("host-1".into()),
            read_secret: &|path| {
                self.files
                    .get(path.to_str().expect("utf-8 test path"))
                    .map(|(text, mode)| (text.to_string(), *mode))
                    .ok_or_else(|| std::io::ErrorKind::NotFound.into())
            },
        })
    }
    fn err(&self) -> String {
        self.build().expect_err("config should be refused").0
    }
}

#[test]
fn defaults_apply_when_nothing_is_set() {
    let c = Case::new().build().unwrap();
    assert_eq!(c.key, "leaderd");
    assert_eq!(c.id, "host-1");
    assert_eq!(
        c.timing,
        Timing {
            ttl: Duration::from_secs(10),
            renew_interval: Duration::from_millis(3333),
            renew_deadline: Duration::from_millis(6666),
            retry_interval: Duration::from_secs(2),
        }
    );
    assert_eq!(c.http, Some(([127, 0, 0, 1], 4040).into()));
    assert!(matches!(
        c.backend,
        BackendConfig::LockFile { implicit: true, .. }
    ));
    assert_eq!(c.child.on_exit, OnChildExit::Release);
    assert_eq!(c.log.format, LogFormat::Text);
}

#[test]
fn precedence_is_flag_then_env_then_file_then_default() {
    let file = "key = \"from-file\"\n[lease]\nttl = \"30s\"\nretry_interval = \"3s\"\n[log]\nformat = \"json\"\n";
    let all = Case::new()
        .file(file)
        .env("LEADERD_KEY", "from-env")
        .env("LEADERD_TTL", "20s")
        .args(|a| a.set(&options::KEY, "from-flag"));
    let c = all.build().unwrap();
    assert_eq!(c.key, "from-flag", "flag beats env and file");
    assert_eq!(c.timing.ttl, Duration::from_secs(20), "env beats file");
    assert_eq!(
        c.timing.retry_interval,
        Duration::from_secs(3),
        "file beats default"
    );
    assert_eq!(c.log.format, LogFormat::Json);
    assert_eq!(
        c.timing.renew_interval,
        Duration::from_millis(6666),
        "derived default follows ttl"
    );
    let describe = c.describe();
    assert!(
        describe.contains("key = \"from-flag\"  # --key"),
        "{describe}"
    );
    assert!(
        describe.contains("lease.ttl = \"20s\"  # LEADERD_TTL"),
        "{describe}"
    );
    assert!(
        describe.contains(
            "lease.retry_interval = \"3s\"  # leaderd.toml line 4 (lease.retry_interval)"
        ),
        "{describe}"
    );
}

#[test]
fn id_defaults_to_pod_name_then_host_name() {
    assert_eq!(
        Case::new().env("POD_NAME", "web-0").build().unwrap().id,
        "web-0"
    );
    assert_eq!(
        Case::new()
            .env("LEADERD_ID", "me")
            .env("POD_NAME", "web-0")
            .build()
            .unwrap()
            .id,
        "me"
    );
}

#[test]
fn unknown_file_key_is_named_with_its_line() {
    let err =
        ConfigFile::parse("leaderd.toml", "key = \"a\"\n[lease]\nttll = \"1s\"\n").unwrap_err();
    assert!(
        err.contains("leaderd.toml") && err.contains("line 3") && err.contains("ttll"),
        "{err}"
    );
}

#[test]
fn bare_number_is_refused_everywhere() {
    let err = ConfigFile::parse("leaderd.toml", "[lease]\nttl = 10\n").unwrap_err();
    assert!(err.contains("line 2") && err.contains("\"10s\""), "{err}");
    let err = Case::new().file("[lease]\nttl = \"10\"\n").err();
    assert!(
        err.starts_with("leaderd.toml line 2 (lease.ttl):") && err.contains("no unit"),
        "{err}"
    );
    let err = Case::new().env("LEADERD_TTL", "10").err();
    assert!(
        err.starts_with("LEADERD_TTL:") && err.contains("10s"),
        "{err}"
    );
    let err = Case::new().args(|a| a.set(&options::TTL, "10")).err();
    assert!(
        err.starts_with("--ttl:") && err.contains("no unit"),
        "{err}"
    );
    // Zero needs no unit; whether it is allowed is the option's business.
    assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
    let err = Case::new().args(|a| a.set(&options::TTL, "0")).err();
    assert!(err.contains("greater than zero"), "{err}");
}

#[test]
fn empty_env_var_is_an_error_not_a_default() {
    let err = Case::new().env("LEADERD_TTL", "").err();
    assert!(err.contains("LEADERD_TTL is set but empty"), "{err}");
    let err = Case::new().env("LEADERD_REDIS_URL", "").err();
    assert!(err.contains("LEADERD_REDIS_URL is set but empty"), "{err}");
}

#[test]
fn each_timing_relation_is_enforced_and_named() {
    let redis = |a: &mut ConfigArgs| a.set(&options::REDIS, "redis://127.0.0.1:6379");

    let err = Case::new()
        .args(redis)
        .args(|a| a.set(&options::REDIS_TIMEOUT, "4s"))
        .err();
    assert!(
        err.contains("redis.timeout = 4s (--redis-timeout)")
            && err.contains("lease.renew_interval = 3333ms (default: ttl / 3)"),
        "{err}"
    );

    let err = Case::new().env("LEADERD_RENEW_INTERVAL", "7s").err();
    assert!(err.contains("lease.renew_interval = 7s (LEADERD_RENEW_INTERVAL) must be shorter than lease.renew_deadline"), "{err}");

    let err = Case::new()
        .file("[lease]\nttl = \"5s\"\nrenew_deadline = \"6s\"\nrenew_interval = \"1s\"\n")
        .err();
    assert!(err.contains("lease.renew_deadline = 6s (leaderd.toml line 3 (lease.renew_deadline)) must be shorter than lease.ttl = 5s (leaderd.toml line 2"), "{err}");

    let err = Case::new()
        .args(|a| a.set(&options::RENEW_DEADLINE, "9500ms"))
        .err();
    assert!(
        err.contains("to stop the work") && err.contains("set renew_deadline ≤ 8398ms"),
        "{err}"
    );

    let err = Case::new()
        .args(|a| a.set(&options::RETRY_INTERVAL, "0s"))
        .err();
    assert!(
        err.starts_with("--retry-interval:") && err.contains("greater than zero"),
        "{err}"
    );
}

#[test]
fn the_redis_timeout_only_matters_with_redis() {
    assert!(
        Case::new()
            .args(|a| a.set(&options::REDIS_TIMEOUT, "4s"))
            .build()
            .is_ok()
    );
}

#[test]
fn malformed_redis_url_is_named_and_redacted() {
    let err = Case::new()
        .args(|a| a.set(&options::REDIS, "redis://u:hunter2@:6379"))
        .err();
    assert!(
        err.starts_with("--redis:") && !err.contains("hunter2") && err.contains("u:***@"),
        "{err}"
    );
}

#[test]
fn backends_are_exclusive_and_kubernetes_needs_redis() {
    let err = Case::new()
        .args(|a| {
            a.set(&options::REDIS, "redis://127.0.0.1:6379");
            a.set(&options::LOCK_FILE, "/tmp/x.lock");
        })
        .err();
    assert!(
        err.contains("choose one") && err.contains("--redis") && err.contains("--lock-file"),
        "{err}"
    );
    let err = Case::new().env("KUBERNETES_SERVICE_HOST", "10.0.0.1").err();
    assert!(
        err.contains("Kubernetes") && err.contains("--redis"),
        "{err}"
    );
    let explicit = Case::new()
        .env("KUBERNETES_SERVICE_HOST", "10.0.0.1")
        .args(|a| a.set(&options::LOCK_FILE, "/shared/l"));
    assert!(
        explicit.build().is_ok(),
        "an explicit lock file is the user's choice"
    );
}

#[test]
fn implicit_lock_file_lives_in_the_runtime_dir() {
    let c = Case::new()
        .env("XDG_RUNTIME_DIR", "/run/user/7")
        .args(|a| a.set(&options::KEY, "jobs/a"))
        .build()
        .unwrap();
    match c.backend {
        BackendConfig::LockFile { path, implicit } => {
            assert!(implicit);
            assert_eq!(path, PathBuf::from("/run/user/7/leaderd-jobs_a.lock"));
        }
        other => panic!("expected lock file, got {other:?}"),
    }
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
fn other_values_name_their_source() {
    let err = Case::new().file("[child]\non_exit = \"explode\"\n").err();
    assert!(
        err.starts_with("leaderd.toml line 2 (child.on_exit):"),
        "{err}"
    );
    let err = Case::new().env("LEADERD_HTTP", "localhost").err();
    assert!(err.starts_with("LEADERD_HTTP:"), "{err}");
    let err = Case::new().args(|a| a.set(&options::KEY, "a b")).err();
    assert!(err.starts_with("--key:"), "{err}");
    let err = Case::new().env("LEADERD_LOG_FORMAT", "yaml").err();
    assert!(err.starts_with("LEADERD_LOG_FORMAT:"), "{err}");
    let err = Case::new().file("[child]\ncommand = []\n").err();
    assert!(
        err.contains("child.command") && err.contains("empty"),
        "{err}"
    );
}

#[test]
fn log_levels_and_filters_are_checked_word_by_word() {
    for good in [
        "info",
        "DEBUG",
        " warn ",
        "info,leaderd=debug",
        "leaderd=trace",
        "off",
    ] {
        let config = Case::new().env("RUST_LOG", good).build();
        assert!(config.is_ok(), "{good}: {config:?}");
    }
    for bad in ["verbose", "info,verbose", "leaderd=loud", "", "leaderd"] {
        let err = Case::new().args(|a| a.set(&options::LOG_LEVEL, bad)).err();
        assert!(err.starts_with("--log-level:"), "{bad}: {err}");
        assert!(err.contains("debug or trace"), "{bad}: {err}");
    }
}

#[test]
fn webhook_secret_never_prints() {
    let c = Case::new()
        .env("LEADERD_WEBHOOK_SECRET", "whsec-hunter2")
        .build()
        .unwrap();
    assert!(!c.describe().contains("hunter2"));
    assert!(!format!("{c:?}").contains("hunter2"));
}

/// The example file documents every key with its default: uncommented, each
/// key must parse, and the defaults must be what leaderd really uses.
#[test]
fn the_example_config_is_valid_and_shows_the_defaults() {
    let example = include_str!("../../config/leaderd.example.toml");
    let uncommented: String = example
        .lines()
        .map(|l| match l.strip_prefix("# ") {
            Some(rest) if rest.contains(" = ") && !rest.starts_with(' ') => rest,
            _ if l.starts_with('#') => "",
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    // Both backends, and both ways to give the Redis URL, are shown; keep
    // the lock file and the URL file out of this check.
    let uncommented = uncommented
        .replace("lock_file = \"/run/leaderd/jobs.lock\"", "")
        .replace("url_file = \"/run/secrets/leaderd-redis-url\"", "")
        // PostgreSQL is another backend: one at a time.
        .replace("url = \"postgres://leaderd@127.0.0.1:5432/app\"", "")
        .replace("url_file = \"/run/secrets/leaderd-postgres-url\"", "")
        .replace("endpoints = [\"http://10.0.1.5:2379\", \"http://10.0.2.5:2379\", \"http://10.0.3.5:2379\"]", "")
        .replace("password_file = \"/run/secrets/leaderd-etcd-password\"", "")
        .replace("tls_ca_file = \"/etc/leaderd/etcd-ca.pem\"", "")
        .replace("tls_cert_file = \"/etc/leaderd/etcd-client.pem\"", "")
        .replace("tls_key_file = \"/etc/leaderd/etcd-client.key\"", "")
        .replace(
            "sentinel_password_file = \"/run/secrets/leaderd-sentinel-password\"",
            "",
        )
        // Redlock's (three URLs or more) is shown beside the one URL.
        .replace("node_timeout = \"100ms\"", "")
        .replace("tls_ca_file = \"/etc/leaderd/redis-ca.pem\"", "")
        .replace("tls_cert_file = \"/etc/leaderd/client.pem\"", "")
        .replace("tls_key_file = \"/etc/leaderd/client.key\"", "")
        // Run-once is a mode of its own (it makes the child's exit leaderd's).
        .replace("wait = \"30s\"", "");
    let c = Case::new()
        .file(&uncommented)
        .build()
        .expect("example parses when uncommented");
    let d = Case::new()
        .args(|a| a.set(&options::REDIS, "redis://127.0.0.1:6379/0"))
        .build()
        .unwrap();
    assert_eq!(c.timing, d.timing);
    assert_eq!(
        (c.key.as_str(), c.http, c.log.format),
        (d.key.as_str(), d.http, d.log.format)
    );
    assert_eq!(
        (c.child.stop_signal, c.child.stop_timeout, c.child.on_exit),
        (d.child.stop_signal, d.child.stop_timeout, d.child.on_exit)
    );
}

#[test]
fn the_redis_url_can_come_from_a_secret_file_at_either_layer() {
    let url = "redis://app:pw@10.0.0.5:6379/0\n";
    let from_env = Case::new()
        .env("LEADERD_REDIS_URL_FILE", "/run/secrets/url")
        .secret_file("/run/secrets/url", url, 0o100600)
        .build()
        .unwrap();
    let BackendConfig::Redis { url: got, .. } = &from_env.backend else {
        panic!("{:?}", from_env.backend)
    };
    assert_eq!(got.expose(), url.trim());
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
    assert!(
        matches!(&layered.backend, BackendConfig::Redis { url, .. } if url.expose() == url.expose() && url.redacted().contains("10.0.0.5"))
    );
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
        .args(|a| a.set(&options::REDIS, "redis://app:pw@h:6379"))
        .build()
        .unwrap();
    assert!(
        c.warnings[0].starts_with("--redis: the URL's password"),
        "{:?}",
        c.warnings
    );
    let plain = Case::new()
        .args(|a| a.set(&options::REDIS, "redis://h:6379"))
        .build()
        .unwrap();
    assert!(plain.warnings.is_empty());
}

/// The manual's option table (docs/configuration.md) has a row naming each
/// option's flag, environment variable and TOML key together, and no row
/// for an option that is gone.
#[test]
fn the_documented_option_table_matches_the_declarations() {
    let readme = include_str!("../../docs/configuration.md");
    let rows: Vec<&str> = readme
        .lines()
        .filter(|l| {
            l.starts_with("| `--") || l.starts_with("| `-c") || l.starts_with("| the command")
        })
        .collect();
    let tokens = |row: &str| -> Vec<String> {
        row.split([' ', '`', '|', ',', '(', ')', '='])
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .collect()
    };
    for spec in options::ALL {
        let names: Vec<&str> = [spec.flag, spec.env, spec.key]
            .into_iter()
            .flatten()
            .collect();
        assert!(
            rows.iter()
                .any(|row| names.iter().all(|n| tokens(row).iter().any(|t| t == n))),
            "docs/configuration.md has no option-table row with {names:?}"
        );
    }
    for row in &rows {
        let documented = tokens(row);
        let known = documented
            .iter()
            .filter(|t| t.starts_with("--") && t.len() > 2)
            .all(|t| options::ALL.iter().any(|s| s.flag == Some(t.as_str())));
        assert!(
            known,
            "docs/configuration.md documents an option leaderd does not have: {row}"
        );
    }
}

/// The example config shows every TOML key, and names each option's flag
/// and environment variable beside it.
#[test]
fn the_example_config_shows_every_key_with_its_flag_and_env() {
    let example = include_str!("../../config/leaderd.example.toml");
    for spec in options::ALL {
        let Some(key) = spec.key else { continue };
        let leaf = key.rsplit('.').next().expect("a key");
        assert!(
            example.contains(&format!("# {leaf} = ")),
            "the example config does not show {key}"
        );
        for name in [spec.flag, spec.env].into_iter().flatten() {
            assert!(
                example.contains(name),
                "the example config does not name {name} ({key})"
            );
        }
    }
}

/// `check` prints options by their declared TOML keys.
#[test]
fn check_names_every_option_by_its_declared_key() {
    let c = Case::new()
        .args(|a| a.set(&options::REDIS, "redis://127.0.0.1:6379/0"))
        .build()
        .unwrap();
    for line in c.describe().lines() {
        let key = line.split(" = ").next().expect("key = value");
        assert!(
            options::by_key(key).is_some(),
            "undeclared key in check: {line}"
        );
    }
}

#[test]
fn sentinel_and_cluster_urls_name_their_nodes_with_the_credentials() {
    let url = parse_redis_url(
        "rediss+sentinel://app:p%2Fw@s1:26379,[::1]:26380,s3/svc/2?sentinel_user=sen",
    )
    .expect("valid");
    assert!(url.is_tls());
    assert_eq!(
        url.redacted(),
        "rediss+sentinel://app:***@s1:26379,[::1]:26380,s3/svc/2?sentinel_user=sen"
    );
    let sentinel = url.sentinel().expect("a sentinel URL");
    assert_eq!(
        sentinel.sentinels,
        [
            ("s1".into(), 26379),
            ("::1".into(), 26380),
            ("s3".into(), 26379)
        ]
    );
    assert_eq!((sentinel.service.as_str(), sentinel.db), ("svc", 2));
    assert_eq!(sentinel.sentinel_user.as_deref(), Some("sen"));
    assert_eq!(
        sentinel.node_url("10.0.0.9", 6380),
        "rediss://app:p%2Fw@10.0.0.9:6380/2"
    );

    let url = parse_redis_url("redis+cluster://n1:7000,n2").expect("valid");
    let cluster = url.cluster().expect("a cluster URL");
    assert_eq!(cluster.seeds, [("n1".into(), 7000), ("n2".into(), 6379)]);
    assert_eq!(cluster.node_url("::1", 7001), "redis://[::1]:7001");
    assert!(url.sentinel().is_none() && !url.is_tls());

    for bad in [
        "redis+sentinel://s1,s2/svc",
        "redis+sentinel://s1,s2,s3",
        "redis+sentinel://s1,s2,s3/svc?other=1",
        "redis+cluster://n1,n2/1",
    ] {
        assert!(parse_redis_url(bad).is_err(), "{bad}");
    }
}

#[test]
fn three_or_more_urls_are_redlock_with_a_node_timeout_checked_against_the_ttl() {
    let c = Case::new()
        .env("LEADERD_REDIS_URL", "redis://a:1,redis://b:2,redis://c:3")
        .build()
        .unwrap();
    let BackendConfig::Redlock {
        urls, node_timeout, ..
    } = &c.backend
    else {
        panic!("expected Redlock, got {:?}", c.backend)
    };
    assert_eq!(urls.len(), 3);
    // ttl 10s: ttl/100.
    assert_eq!(*node_timeout, Duration::from_millis(100));
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
