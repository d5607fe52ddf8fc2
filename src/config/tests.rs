//! Precedence, units and validation, tested without files or the process
//! env, with the registered backends ([`Case`] is the backends' tests' too).

use super::*;
use crate::lease::file::config::{LOCK_FILE, LockFileConfig};
use crate::lease::redis::config::REDIS;
use crate::timing::Timing;
use std::collections::HashMap;
use std::ffi::OsString;
use std::time::Duration;

/// Every option of leaderd and of the registered backends.
fn every() -> Vec<&'static options::Spec> {
    all_options(&crate::catalog())
}

/// A configuration to build: flags, env, file and secret files, all in
/// memory.
pub(crate) struct Case {
    args: ConfigArgs,
    env: HashMap<&'static str, &'static str>,
    file: Option<ConfigFile>,
    /// Secret files by path: text and permission bits.
    files: HashMap<&'static str, (&'static str, u32)>,
}

impl Case {
    pub(crate) fn new() -> Self {
        Case {
            args: ConfigArgs::default(),
            env: HashMap::new(),
            file: None,
            files: HashMap::new(),
        }
    }
    pub(crate) fn secret_file(mut self, path: &'static str, text: &'static str, mode: u32) -> Self {
        self.files.insert(path, (text, mode));
        self
    }
    pub(crate) fn env(mut self, k: &'static str, v: &'static str) -> Self {
        self.env.insert(k, v);
        self
    }
    pub(crate) fn file(mut self, text: &str) -> Self {
        let all = all_options(&crate::catalog());
        self.file = Some(ConfigFile::parse("leaderd.toml", text, &all).expect("test TOML parses"));
        self
    }
    pub(crate) fn args(mut self, f: impl FnOnce(&mut ConfigArgs)) -> Self {
        f(&mut self.args);
        self
    }
    pub(crate) fn build(&self) -> Result<Config, ConfigError> {
        let env = |name: &str| self.env.get(name).map(OsString::from);
        let sources = Sources {
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
        };
        Config::from_sources(sources, &crate::catalog())
    }
    pub(crate) fn err(&self) -> String {
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
            registry_heartbeat: Duration::from_secs(120),
        }
    );
    assert_eq!(c.http, Some(([127, 0, 0, 1], 4040).into()));
    let file = c.backend.get::<LockFileConfig>().expect("the lock file");
    assert!(file.implicit);
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
    let err = ConfigFile::parse(
        "leaderd.toml",
        "key = \"a\"\n[lease]\nttll = \"1s\"\n",
        &every(),
    )
    .unwrap_err();
    assert!(
        err.contains("leaderd.toml") && err.contains("line 3") && err.contains("ttll"),
        "{err}"
    );
}

#[test]
fn bare_number_is_refused_everywhere() {
    let err = ConfigFile::parse("leaderd.toml", "[lease]\nttl = 10\n", &every()).unwrap_err();
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
fn another_backends_options_are_ignored_with_a_warning() {
    let c = Case::new()
        .env("LEADERD_REDIS_TIMEOUT", "4s")
        .file("[etcd]\nprefix = \"x/\"\n")
        .build()
        .unwrap();
    assert_eq!(
        c.warnings,
        [
            "LEADERD_REDIS_TIMEOUT: an option of Redis, but the backend is a lock file; it is ignored",
            "leaderd.toml line 2 (etcd.prefix): an option of etcd, but the backend is a lock file; it is ignored",
        ]
    );
}

#[test]
fn backends_are_exclusive_and_a_pod_defaults_to_a_kubernetes_lease() {
    let err = Case::new()
        .args(|a| {
            a.set(&REDIS, "redis://127.0.0.1:6379");
            a.set(&LOCK_FILE, "/tmp/x.lock");
        })
        .err();
    assert!(
        err.contains("choose one") && err.contains("--redis") && err.contains("--lock-file"),
        "{err}"
    );
    let pod = Case::new()
        .env("KUBERNETES_SERVICE_HOST", "10.0.0.1")
        .args(|a| a.set(&crate::config::options::KEY, "Billing/Nightly"))
        .build()
        .unwrap();
    let lease = pod
        .backend
        .get::<crate::lease::kubernetes::config::KubernetesConfig>()
        .expect("a pod with no backend configured elects with a Lease");
    assert_eq!(lease.lease, "billing-nightly");
    assert!(lease.implicit);
    assert_eq!(
        lease.source,
        crate::lease::kubernetes::config::Source::InCluster
    );
    let explicit = Case::new()
        .env("KUBERNETES_SERVICE_HOST", "10.0.0.1")
        .args(|a| a.set(&LOCK_FILE, "/shared/l"));
    assert!(
        explicit.build().is_ok(),
        "an explicit lock file is the user's choice"
    );
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

/// The example file documents every key with its default: uncommented, the
/// common keys build and their defaults are what leaderd really uses, and
/// each backend's and feature's table holds only its own rows, each value of
/// the row's type (no hand-kept list of lines to leave out).
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
    // Every backend's table and every feature's is checked on its own: each
    // key is one of its owner's rows, and its value has the row's type.
    // They show alternatives side by side (a URL or a URL file, Redlock's
    // node timeout beside one URL, a health URL or a command) and name
    // files that exist only on a real host, so they are not built together.
    let catalog = crate::catalog();
    let owners: Vec<(&str, Vec<&'static options::Spec>)> = catalog
        .backends
        .iter()
        .map(|b| (b.name, b.options.to_vec()))
        .chain(
            catalog
                .features
                .iter()
                .map(|f| (f.name, f.options.to_vec())),
        )
        .collect();
    let owner_of = |table: &str| {
        owners.iter().find(|(_, rows)| {
            rows.iter()
                .any(|s| s.key.is_some_and(|k| k.starts_with(&format!("{table}."))))
        })
    };
    let mut common = String::new();
    let mut table = String::new();
    for line in uncommented.lines() {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            table = name.to_string();
        }
        let Some((name, rows)) = owner_of(&table) else {
            common.push_str(line);
            common.push('\n');
            continue;
        };
        let Some((leaf, _)) = line.split_once(" = ") else {
            continue;
        };
        let key = format!("{table}.{leaf}");
        assert!(
            rows.iter().any(|s| s.key == Some(key.as_str())),
            "the example's {key} is not an option of {name}"
        );
        let one = format!("[{table}]\n{line}\n");
        let all = all_options(&catalog);
        if let Err(e) = super::ConfigFile::parse("example", &one, &all) {
            panic!("the example's {key}: {e}");
        }
    }
    // The rest builds as one configuration; run-once, a mode of its own
    // (it makes the child's exit leaderd's), is shown but left out here.
    let uncommented = common.replace("wait = \"30s\"", "");
    let c = Case::new()
        .file(&uncommented)
        .build()
        .expect("example parses when uncommented");
    let d = Case::new()
        .args(|a| a.set(&REDIS, "redis://127.0.0.1:6379/0"))
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

/// The manual's table of secret variables is the secret rows', exactly.
#[test]
fn the_documented_secret_variables_are_the_secret_rows() {
    let manual = include_str!("../../docs/configuration.md");
    let documented: Vec<&str> = manual
        .lines()
        .skip_while(|l| !l.starts_with("| secret variable |"))
        .skip(2)
        .take_while(|l| l.starts_with("| `"))
        .filter_map(|l| l.split('`').nth(1))
        .collect();
    let mut declared = options::secret_envs(&all_options(&crate::catalog()));
    let mut documented = documented;
    declared.sort();
    documented.sort();
    assert_eq!(
        documented, declared,
        "docs/configuration.md's secret variables"
    );
}

/// A secret row's value is shown with every URL's password masked, or
/// masked whole.
#[test]
fn a_secret_row_is_shown_redacted() {
    for (shown, redacted) in [
        ("\"hunter2\"", "\"***\""),
        ("\"postgres://u:pw@db/x\"", "\"postgres://u:***@db/x\""),
        (
            "[\"redis://:a@h1:1\", \"redis://b:c@h2:2/0\"]",
            "[\"redis://:***@h1:1\", \"redis://b:***@h2:2/0\"]",
        ),
        ("\"redis://h:1\"", "\"redis://h:1\""),
        ("\"redis://u:***@h:1\"", "\"redis://u:***@h:1\""),
    ] {
        assert_eq!(values::redact_secret(shown), redacted, "{shown}");
    }
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
    for spec in all_options(&crate::catalog()) {
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
    let every = all_options(&crate::catalog());
    for row in &rows {
        let documented = tokens(row);
        let known = documented
            .iter()
            .filter(|t| t.starts_with("--") && t.len() > 2)
            .all(|t| every.iter().any(|s| s.flag == Some(t.as_str())));
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
    for spec in all_options(&crate::catalog()) {
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
        .args(|a| a.set(&REDIS, "redis://127.0.0.1:6379/0"))
        .build()
        .unwrap();
    for line in c.describe().lines() {
        let key = line.split(" = ").next().expect("key = value");
        assert!(
            options::by_key(&all_options(&crate::catalog()), key).is_some(),
            "undeclared key in check: {line}"
        );
    }
}

#[test]
fn option_names_are_unique_and_well_formed() {
    let all = every();
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            assert_ne!(a.id, b.id);
            assert!(a.flag.is_none() || a.flag != b.flag, "{}", a.id);
            assert!(a.env.is_none() || a.env != b.env, "{}", a.id);
            assert!(a.key.is_none() || a.key != b.key, "{}", a.id);
        }
        assert!(a.flag.is_none_or(|f| f.starts_with("--")), "{}", a.id);
        assert!(!a.help.is_empty() && !a.heading.is_empty(), "{}", a.id);
        assert!(
            a.flag.is_some() || a.env.is_some() || a.key.is_some(),
            "{}",
            a.id
        );
    }
}

/// A default bounded by another option follows it (#37): every store's
/// timeout and Redlock's node timeout under a TTL at its extremes, the
/// health check's timeout under an interval at its extremes, each with
/// nothing else given.
#[test]
fn a_default_bounded_by_another_option_follows_it_at_its_extremes() {
    let stores: [&[(&'static str, &'static str)]; 5] = [
        &[("LEADERD_REDIS_URL", "redis://h:1")],
        &[("LEADERD_REDIS_URL", "redis://h:1,redis://h:2,redis://h:3")],
        &[("LEADERD_ETCD_ENDPOINTS", "http://h:1")],
        &[("LEADERD_ZOOKEEPER", "h:1")],
        &[("LEADERD_POSTGRES_URL", "postgres://u@h/d")],
    ];
    for ttl in ["150ms", "1s", "10s", "1h"] {
        for store in stores {
            let mut case = Case::new().env("LEADERD_TTL", ttl);
            for (k, v) in store {
                case = case.env(k, v);
            }
            let c = case
                .build()
                .unwrap_or_else(|e| panic!("ttl {ttl}, {store:?}: {}", e.0));
            for (name, value, _) in &c.effective {
                if name.ends_with("timeout") && !name.starts_with("child") {
                    let shown = value.trim_matches('"');
                    let d = values::parse_duration(shown).expect("a duration");
                    assert!(
                        d < c.timing.renew_interval,
                        "ttl {ttl}: {name} = {shown} is not below the renew interval"
                    );
                }
            }
        }
    }
    for interval in ["100ms", "500ms", "2s", "1h"] {
        let c = Case::new()
            .env("LEADERD_HEALTH_COMMAND", "true")
            .env("LEADERD_HEALTH_INTERVAL", interval)
            .build()
            .unwrap_or_else(|e| panic!("health interval {interval}: {}", e.0));
        let h = crate::health::HealthConfig::of(&c).expect("a health check");
        assert!(h.timeout <= h.interval, "{interval}: {:?}", h.timeout);
        assert!(h.timeout <= Duration::from_secs(1));
    }
}
