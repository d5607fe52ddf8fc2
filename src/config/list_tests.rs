//! Every list option, in every form it is given in: the flag repeated and
//! with commas, the env var, the TOML array with one value per item and
//! with commas inside an item, and a URL file. One rule per option
//! ([`Commas`]), so one table drives them all; an option added without a
//! row here fails `every_list_option_has_a_row`.

use super::options::{Commas, Spec};
use super::tests::Case;
use crate::config::all_options;
use crate::lease::etcd::config::ETCD;
use crate::lease::redis::config::REDIS;

/// A list option and three values, as `check` shows them back.
struct Row {
    spec: &'static Spec,
    /// Environment the option needs beside it (the options it belongs to).
    base: &'static [(&'static str, &'static str)],
    given: [&'static str; 3],
    shown: [&'static str; 3],
}

const ROWS: &[Row] = &[
    Row {
        spec: &ETCD,
        base: &[],
        given: ["http://a:2379", "http://b:2379", "https://c:2379"],
        shown: ["http://a:2379/", "http://b:2379/", "https://c:2379/"],
    },
    Row {
        spec: &REDIS,
        base: &[],
        given: ["redis://a:6379", "rediss://b:6379/0", "redis://c:6379"],
        shown: ["redis://a:6379", "rediss://b:6379/0", "redis://c:6379"],
    },
    Row {
        spec: &crate::work::webhook::options::WEBHOOK,
        base: &[],
        given: ["http://a/hook", "https://b:8443/x?y=1", "http://c/"],
        shown: ["http://a/hook", "https://b:8443/x?y=1", "http://c/"],
    },
    Row {
        spec: &crate::lease::kubernetes::herald::options::KUBERNETES_SERVICE_PORTS,
        base: &[
            ("LEADERD_KUBERNETES_LEASE", "jobs"),
            ("LEADERD_KUBERNETES_SERVICE", "jobs"),
            ("POD_IP", "10.0.0.7"),
        ],
        given: ["http:8080", "dns:53/udp", "metrics:9090"],
        shown: ["http:8080/TCP", "dns:53/UDP", "metrics:9090/TCP"],
    },
];

/// A case with the row's surroundings set.
fn start(row: &Row) -> Case {
    row.base.iter().fold(Case::new(), |c, (k, v)| c.env(k, v))
}

fn leak(text: String) -> &'static str {
    text.leak()
}

/// The configuration `check` would print, or why it was refused.
fn outcome(case: Case) -> Result<String, String> {
    case.build().map(|c| c.describe()).map_err(|e| e.0)
}

fn shows_all(row: &Row, how: &str, got: Result<String, String>) {
    let printed = got.unwrap_or_else(|e| panic!("{} {how}: refused: {e}", row.spec.id));
    let line = printed
        .lines()
        .find(|l| l.starts_with(&format!("{} = ", row.spec.key.unwrap())))
        .unwrap_or_else(|| panic!("{} {how}: no line in\n{printed}", row.spec.id));
    let want = row.shown.map(|v| format!("\"{v}\"")).join(", ");
    assert!(
        line.contains(&format!("[{want}]")),
        "{} {how}: {line}",
        row.spec.id
    );
}

fn flags(row: &Row, values: &[&str]) -> Case {
    let spec = row.spec;
    let values: Vec<String> = values.iter().map(|v| v.to_string()).collect();
    start(row).args(move |a| values.iter().for_each(|v| a.set(spec, v)))
}

fn toml(row: &Row, items: &[&str]) -> Case {
    let items = items.iter().map(|v| format!("\"{v}\"")).collect::<Vec<_>>();
    start(row).file(&format!(
        "{} = [{}]\n",
        row.spec.key.unwrap(),
        items.join(", ")
    ))
}

#[test]
fn every_list_option_has_a_row() {
    for spec in all_options(&crate::catalog()) {
        if spec.list && spec.commas != Commas::Kept {
            assert!(
                ROWS.iter().any(|r| r.spec.id == spec.id),
                "{} is a list option without a row in config/list_tests.rs",
                spec.id
            );
        }
    }
}

#[test]
fn repetition_the_env_var_and_a_toml_array_give_every_value() {
    for row in ROWS {
        let env = row.spec.env.unwrap();
        shows_all(row, "repeated", outcome(flags(row, &row.given)));
        let joined = leak(row.given.join(","));
        shows_all(row, "env", outcome(start(row).env(env, joined)));
        let spaced = leak(row.given.join(", "));
        shows_all(row, "env, spaces", outcome(start(row).env(env, spaced)));
        shows_all(row, "TOML", outcome(toml(row, &row.given)));
    }
}

#[test]
fn commas_inside_a_flag_or_a_toml_item_follow_the_options_rule() {
    for row in ROWS {
        let joined = leak(row.given.join(","));
        let one_flag = outcome(flags(row, &[joined]));
        let one_item = outcome(toml(row, &[joined]));
        // Two forms at once: one flag with two values, then a third.
        let mixed = outcome(flags(row, &[leak(row.given[..2].join(",")), row.given[2]]));
        match row.spec.commas {
            Commas::Separate => {
                shows_all(row, "one flag with commas", one_flag);
                shows_all(row, "one TOML item with commas", one_item);
                shows_all(row, "commas and repetition", mixed);
            }
            Commas::BeforeScheme => {
                let flag = row.spec.flag.unwrap();
                for (how, got) in [("flag", one_flag), ("TOML", one_item), ("mixed", mixed)] {
                    let err = got.expect_err(how);
                    assert!(
                        err.contains(&format!("give {flag} once per URL"))
                            && err.contains("for Redlock"),
                        "{how}: {err}"
                    );
                }
            }
            Commas::Kept => unreachable!("not in the table"),
        }
    }
}

#[test]
fn an_empty_value_between_commas_is_refused_where_it_came_from() {
    let err = Case::new()
        .env("LEADERD_ETCD_ENDPOINTS", "http://a:2379,,http://b:2379")
        .err();
    assert_eq!(err, "LEADERD_ETCD_ENDPOINTS: an empty value between commas");
    let err = Case::new().args(|a| a.set(&ETCD, "http://a:2379,")).err();
    assert_eq!(err, "--etcd: an empty value between commas");
}

#[test]
fn a_sentinel_or_cluster_url_keeps_its_commas_in_every_form() {
    let sentinel = "redis+sentinel://s1:26379,s2:26379,s3:26379/svc";
    let cluster = "redis+cluster://n1:6379,n2:6379,n3:6379";
    for url in [sentinel, cluster] {
        let forms = [
            ("flag", Case::new().args(|a| a.set(&REDIS, url))),
            ("env", Case::new().env("LEADERD_REDIS_URL", url)),
            (
                "TOML",
                Case::new().file(&format!("redis.urls = [\"{url}\"]")),
            ),
            (
                "URL file",
                Case::new()
                    .env("LEADERD_REDIS_URL_FILE", "/run/secrets/url")
                    .secret_file("/run/secrets/url", leak(format!("{url}\n")), 0o600),
            ),
        ];
        for (how, case) in forms {
            let printed = outcome(case).unwrap_or_else(|e| panic!("{url} from {how}: {e}"));
            assert!(
                printed.contains(&format!("redis.urls = [\"{url}\"]")),
                "{url} from {how}:\n{printed}"
            );
        }
    }
}

#[test]
fn a_url_file_takes_lines_and_the_options_commas() {
    let lines = "redis://a:6379\nredis://b:6379, redis://c:6379\n";
    let printed = outcome(
        Case::new()
            .env("LEADERD_REDIS_URL_FILE", "/run/secrets/urls")
            .secret_file("/run/secrets/urls", lines, 0o600),
    )
    .unwrap();
    assert!(
        printed.contains(r#"redis.urls = ["redis://a:6379", "redis://b:6379", "redis://c:6379"]"#),
        "{printed}"
    );
}
