use super::*;
use crate::config::tests::Case;

#[test]
fn a_url_or_a_command_from_flag_env_or_file() {
    let c = Case::new()
        .args(|a| a.set(&URL, "http://127.0.0.1:8080/ready"))
        .build()
        .unwrap();
    let h = HealthConfig::of(&c).expect("configured").clone();
    assert_eq!(
        h.probe,
        Probe::Http(url::Url::parse("http://127.0.0.1:8080/ready").unwrap())
    );
    assert_eq!(
        (
            h.interval,
            h.timeout,
            h.failures,
            h.successes,
            h.start_period,
            h.policy
        ),
        (
            Duration::from_secs(2),
            Duration::from_secs(1),
            3,
            1,
            Duration::ZERO,
            Policy::Gate
        )
    );
    assert_eq!(h.hold(), Duration::from_secs(6));

    let c = Case::new()
        .env("LEADERD_HEALTH_COMMAND", "pg_isready -h '127.0.0.1' -q")
        .env("LEADERD_HEALTH_POLICY", "report")
        .build()
        .unwrap();
    let h = HealthConfig::of(&c).unwrap().clone();
    assert_eq!(
        h.probe,
        Probe::Command(vec![
            "pg_isready".into(),
            "-h".into(),
            "127.0.0.1".into(),
            "-q".into()
        ])
    );
    assert_eq!(h.policy, Policy::Report);

    let c = Case::new()
        .file("[health]\ncommand = \"true\"\ninterval = \"500ms\"\ntimeout = \"200ms\"\nfailures = 2\nsuccesses = 2\nstart_period = \"30s\"\n")
        .build()
        .unwrap();
    let h = HealthConfig::of(&c).unwrap().clone();
    assert_eq!(
        (
            h.interval,
            h.timeout,
            h.failures,
            h.successes,
            h.start_period
        ),
        (
            Duration::from_millis(500),
            Duration::from_millis(200),
            2,
            2,
            Duration::from_secs(30)
        )
    );
    assert!(HealthConfig::of(&Case::new().build().unwrap()).is_none());
}

#[test]
fn bad_input_is_refused_with_its_source_and_fix() {
    let cases: Vec<(Case, &str)> = vec![
        (
            Case::new()
                .env("LEADERD_HEALTH", "http://127.0.0.1/")
                .env("LEADERD_HEALTH_COMMAND", "true"),
            "choose one",
        ),
        (
            Case::new().env("LEADERD_HEALTH_INTERVAL", "5s"),
            "LEADERD_HEALTH_INTERVAL: a health option, but no health check is configured",
        ),
        (
            Case::new().env("LEADERD_HEALTH", "127.0.0.1:8080/ready"),
            "give http://HOST:PORT/PATH",
        ),
        (
            Case::new().env("LEADERD_HEALTH", "unix:/run/worker.sock"),
            "not an http:// or https:// URL",
        ),
        (
            Case::new().env("LEADERD_HEALTH", "http://u:hunter2@[::1/"),
            "not a URL",
        ),
        (
            Case::new().env("LEADERD_HEALTH_COMMAND", "check 'unclosed"),
            "check its quotes",
        ),
        (
            Case::new().env("LEADERD_HEALTH_COMMAND", "   "),
            "the command is empty",
        ),
        (
            Case::new()
                .env("LEADERD_HEALTH", "http://127.0.0.1/")
                .env("LEADERD_HEALTH_FAILURES", "0"),
            "LEADERD_HEALTH_FAILURES: `0` is not a count from 1 to 1000",
        ),
        (
            Case::new()
                .env("LEADERD_HEALTH", "http://127.0.0.1/")
                .env("LEADERD_HEALTH_TIMEOUT", "3s"),
            "health.timeout = 3s (LEADERD_HEALTH_TIMEOUT) is longer than health.interval = 2s",
        ),
        (
            Case::new()
                .env("LEADERD_HEALTH", "http://127.0.0.1/")
                .env("LEADERD_HEALTH_POLICY", "warn"),
            "use gate or report",
        ),
        (
            Case::new()
                .env("LEADERD_HEALTH", "http://127.0.0.1/")
                .env("LEADERD_HEALTH_TARGET", "child"),
            "health.target = child (LEADERD_HEALTH_TARGET), but no command is configured",
        ),
    ];
    for (case, expected) in cases {
        let err = case.err();
        assert!(err.contains(expected), "{err:?} lacks {expected:?}");
        assert!(!err.contains("hunter2"), "a password leaked: {err}");
    }
}
