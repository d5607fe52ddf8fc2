//! The binary as users run it: `status`, `check`, the lock-file default, and
//! bad input (exit codes and messages).

use crate::support;

use std::time::Duration;
use support::{Leaderd, Redis, eventually, run_to_end};

#[test]
fn status_reports_holder_token_and_time_left() {
    let redis = Redis::start();
    let url = redis.url();
    let (code, out, err) = run_to_end(&["status", "--redis", &url, "--key", "st"]);
    assert_eq!(code, 3, "vacant: {out}{err}");
    assert_eq!(out.trim(), "st: vacant\nno candidates registered");

    let node = Leaderd::run("holder-1", &["--redis", &url, "--key", "st", "--ttl", "5s"]);
    node.wait_leading(support::WAIT);
    let (_, body) = node.leader().unwrap();
    let token = body["fencing_token"].as_u64().unwrap();
    let (code, out, _) = run_to_end(&["status", "--redis", &url, "--key", "st"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.starts_with(&format!(
            "st: held by holder-1, fencing token {token}, expires in "
        )),
        "{out}"
    );
    let (code, out, _) = run_to_end(&["status", "--redis", &url, "--key", "st", "--json"]);
    assert_eq!(code, 0);
    let json: serde_json::Value = serde_json::from_str(&out).expect("status --json is JSON");
    assert_eq!(
        (json["held"].as_bool(), json["leader"].as_str()),
        (Some(true), Some("holder-1"))
    );
    assert_eq!(json["fencing_token"].as_u64(), Some(token));
    let left = json["expires_in_ms"].as_u64().unwrap();
    assert!(left > 0 && left <= 5000, "{left}");
}

#[test]
fn status_exits_1_when_the_backend_is_unreachable() {
    let url = format!("redis://127.0.0.1:{}", support::free_port());
    let (code, _, err) = run_to_end(&["status", "--redis", &url, "--redis-timeout", "300ms"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.starts_with("leaderd: cannot reach redis://127.0.0.1:"),
        "{err}"
    );
}

#[test]
fn check_prints_effective_config_with_secrets_redacted() {
    let redis = Redis::start();
    let url = format!("redis://default:s3cr3tpw@127.0.0.1:{}", redis.port);
    redis.cmd(&["CONFIG", "SET", "requirepass", "s3cr3tpw"]);
    let (code, out, err) = run_to_end(&["check", "--redis", &url, "--key", "chk", "--ttl", "4s"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("lease.ttl = \"4s\"  # --ttl"), "{out}");
    assert!(
        out.contains("lease.renew_interval = \"1333ms\"  # default: ttl / 3"),
        "{out}"
    );
    assert!(
        out.contains("# ok: reached redis://default:***@127.0.0.1:"),
        "{out}"
    );
    assert!(!out.contains("s3cr3tpw") && !err.contains("s3cr3tpw"));

    let wrong = format!("redis://default:wrongpw@127.0.0.1:{}", redis.port);
    let (code, out, err) = run_to_end(&["check", "--redis", &wrong, "--key", "chk"]);
    assert_eq!(
        code, 2,
        "a wrong password is a configuration error: {out}{err}"
    );
    assert!(
        err.contains("refused leaderd's credentials") && !err.contains("wrongpw"),
        "{err}"
    );
}

#[test]
fn a_wrong_password_is_logged_loudly_and_retried_slowly() {
    let redis = Redis::start();
    redis.cmd(&["CONFIG", "SET", "requirepass", "right"]);
    let url = format!("redis://default:wrong@127.0.0.1:{}", redis.port);
    let node = Leaderd::run(
        "a",
        &[
            "--redis",
            &url,
            "--key",
            "auth",
            "--ttl",
            "2s",
            "--redis-timeout",
            "200ms",
            "--retry-interval",
            "100ms",
            "--log-level",
            "debug",
        ],
    );
    node.wait_log(support::WAIT, "fix the configuration");
    let first = node
        .log()
        .iter()
        .filter(|l| l.contains("to=\"acquiring\""))
        .count();
    std::thread::sleep(Duration::from_secs(2)); // observing a rate over a window, not synchronising
    let later = node
        .log()
        .iter()
        .filter(|l| l.contains("to=\"acquiring\""))
        .count();
    assert!(
        later - first <= 1,
        "auth failures must not be retried every 100ms: {} attempts in 2s",
        later - first
    );
    assert!(
        !node.log().join("\n").contains("wrong@"),
        "password not logged"
    );
}

#[test]
fn lock_file_elects_one_and_hands_over_on_kill_9_long_before_the_ttl() {
    let dir = support::Scratch::new("lockfile");
    let lock = dir.join("jobs.lock");
    let lock = support::path_str(&lock);
    // The kernel drops a dead holder's lock at once: a takeover within the
    // suite's bound, half this TTL, cannot have waited for the lease to
    // lapse. How fast it is, is `scripts/bench`'s to measure.
    let ttl = ["--lock-file", lock, "--ttl", "60s"];
    let mut a = Leaderd::run("a", &ttl);
    a.wait_leading(support::WAIT);
    let b = Leaderd::run("b", &ttl);
    let (code, body) = eventually(support::WAIT, "b to see a", || {
        b.leader().filter(|(_, body)| body["leader"] == "a")
    });
    assert!(!code, "{body}");
    a.signal("KILL");
    let killed = std::time::Instant::now();
    a.wait_exit(support::WAIT);
    eventually(support::WAIT, "b to lead before the TTL", || {
        b.is_leader().then_some(())
    });
    eprintln!("b led {:?} after a's kill -9", killed.elapsed());
    let content = std::fs::read_to_string(lock).unwrap();
    assert!(content.contains("\"id\":\"b\""), "{content}");
}

#[test]
fn embedded_default_runs_without_any_backend() {
    let dir = support::Scratch::new("default");
    let port = support::free_port().to_string();
    let http = format!("127.0.0.1:{port}");
    let (mut child, log) = support::spawn_with_env(
        &["run", "--id", "solo", "--http", &http, "--key", "dflt"],
        &[("XDG_RUNTIME_DIR", support::path_str(&dir))],
    );
    eventually(support::WAIT, "solo to lead", || {
        support::http_get(port.parse().unwrap(), "/leader").filter(|(c, _)| *c == 200)
    });
    let text = log.lock().unwrap().join("\n");
    assert!(
        text.contains("coordinates candidates on this host only"),
        "{text}"
    );
    assert!(dir.join("leaderd-dflt.lock").exists());
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn inside_kubernetes_the_default_is_a_lease_and_check_says_why() {
    let (code, err) = support::run_with_env(
        &["check", "--key", "Nightly_Job"],
        &[("KUBERNETES_SERVICE_HOST", "10.0.0.1")],
    );
    // No service account is mounted here: a configuration error, exit 2.
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("service account") && err.contains("nightly-job"),
        "{err}"
    );
}

#[test]
fn malformed_redis_url_exits_2_without_echoing_the_password() {
    let (code, _, err) = run_to_end(&["run", "--redis", "redis://admin:hunter2@:6379/x"]);
    assert_eq!(code, 2);
    assert!(
        err.starts_with("leaderd: --redis:") && !err.contains("hunter2"),
        "{err}"
    );
}

#[test]
fn taken_http_port_exits_2_naming_the_address() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = support::Scratch::new("port");
    let lock = dir.join("l.lock");
    let (code, _, err) = run_to_end(&[
        "run",
        "--http",
        &addr,
        "--lock-file",
        support::path_str(&lock),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&addr), "{err}");
}

#[test]
fn bad_flags_and_env_exit_2_naming_the_source() {
    let (code, _, err) = run_to_end(&["check", "--ttl", "10"]);
    assert_eq!(code, 2);
    assert!(
        err.starts_with("leaderd: --ttl:") && err.contains("no unit"),
        "{err}"
    );
    let (code, err) = support::run_with_env(&["check"], &[("LEADERD_TTL", "")]);
    assert_eq!(code, 2);
    assert!(err.contains("LEADERD_TTL is set but empty"), "{err}");
    let dir = support::Scratch::new("badfile");
    let file = dir.join("leaderd.toml");
    std::fs::write(
        &file,
        "key = \"k\"\n\n[lease]\nttl = \"1s\"\nrenew_deadline = \"2s\"\n",
    )
    .unwrap();
    let (code, _, err) = run_to_end(&["check", "--config", support::path_str(&file)]);
    assert_eq!(code, 2);
    assert!(
        err.contains("leaderd.toml line 5 (lease.renew_deadline)"),
        "{err}"
    );
}

#[test]
fn json_logs_parse_and_transitions_carry_their_fields() {
    let dir = support::Scratch::new("json");
    let lock = dir.join("j.lock");
    let mut node = Leaderd::run(
        "j",
        &[
            "--lock-file",
            support::path_str(&lock),
            "--log-format",
            "json",
        ],
    );
    node.wait_leading(support::WAIT);
    node.signal("TERM");
    assert_eq!(node.wait_exit(support::WAIT).code(), Some(0));
    let lines = node.log();
    let mut transitions = 0;
    for line in &lines {
        let json: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        if json["message"] == "transition" {
            transitions += 1;
            for field in ["from", "to", "reason", "id", "key"] {
                assert!(json[field].is_string(), "{field} missing: {line}");
            }
        }
    }
    // idle→acquiring→working, then working→pausing→releasing→idle on SIGTERM.
    assert!(transitions >= 5, "{lines:#?}");
}

#[test]
fn check_offline_validates_a_run_command_line_without_a_backend() {
    // Nothing listens on this port: --offline must not try it.
    let url = format!("redis://user:pw123@127.0.0.1:{}", support::free_port());
    let (code, out, err) = run_to_end(&[
        "check",
        "--offline",
        "--redis",
        &url,
        "--key",
        "jobs",
        "--",
        "worker",
        "--flag",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("child.command = [\"worker\", \"--flag\"]  # the command after --"),
        "{out}"
    );
    assert!(
        out.contains("# ok: configuration is valid (--offline"),
        "{out}"
    );
    assert!(!out.contains("pw123"), "{out}");

    let (code, _, err) = run_to_end(&[
        "check",
        "--offline",
        "--ttl",
        "1s",
        "--renew-interval",
        "2s",
    ]);
    assert_eq!(code, 2, "offline still validates: {err}");
    assert!(err.contains("--renew-interval"), "{err}");
}

#[test]
fn completions_and_manual_pages_come_from_the_command_line_definition() {
    let (code, bash, err) = run_to_end(&["completions", "bash"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        bash.contains("--renew-deadline") && bash.contains("leaderd"),
        "{bash}"
    );
    // Enum options complete to their values.
    for values in [
        "restart release exit",
        "text json",
        "SIGTERM SIGINT SIGQUIT SIGHUP SIGUSR1 SIGUSR2 SIGKILL",
    ] {
        assert!(
            bash.contains(values),
            "no {values:?} in the bash completions"
        );
    }
    let (code, _, err) = run_to_end(&["completions", "tcsh"]);
    assert_eq!(code, 2, "an unknown shell is a usage error: {err}");

    let (code, page, err) = run_to_end(&["manpage"]);
    assert_eq!(code, 0, "{err}");
    assert!(page.starts_with(".ie \\n(.g .ds Aq"), "roff: {page}");
    assert!(
        page.contains(".SH \"EXIT STATUS\"\n.TP\n\\fB0\\fR"),
        "{page}"
    );
    assert!(page.contains("\\fB75\\fR"), "{page}");
    let dir = support::Scratch::new("man");
    let (code, _, err) = run_to_end(&["manpage", "--dir", support::path_str(&dir)]);
    assert_eq!(code, 0, "{err}");
    let run_page = std::fs::read_to_string(dir.join("leaderd-run.1")).unwrap();
    assert!(run_page.contains("renew\\-deadline"), "{run_page}");
    // The synopsis shows the command after `--`.
    let synopsis = run_page.split(".SH DESCRIPTION").next().unwrap();
    assert!(
        synopsis.contains("[\\fB\\-\\-\\fR \\fICOMMAND\\fR [\\fIARG\\fR]...]"),
        "{synopsis}"
    );
    assert!(dir.join("leaderd-step-down.1").exists());
    let (code, _, err) = run_to_end(&["manpage", "--dir", "/nonexistent/leaderd-man"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("cannot write the manual pages into /nonexistent/leaderd-man"),
        "{err}"
    );
}

#[test]
fn check_meets_every_start_up_error_that_run_meets() {
    let dir = support::Scratch::new("preflight");
    let lock = dir.join("lease.lock");
    let not_executable = dir.join("worker.sh");
    std::fs::write(&not_executable, "#!/bin/sh\n").unwrap();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = busy.local_addr().unwrap().to_string();
    let missing = dir.join("missing");
    let base = ["--lock-file", support::path_str(&lock)];
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("no such child", vec!["--", "no-such-worker-leaderd"]),
        (
            "child not executable",
            vec!["--", support::path_str(&not_executable)],
        ),
        ("HTTP address in use", vec!["--http", &busy, "--", "true"]),
        ("unknown log level", vec!["--log-level", "verbose"]),
        (
            "unreadable webhook secret",
            vec![
                "--webhook",
                "http://127.0.0.1:9/hook",
                "--webhook-secret-file",
                support::path_str(&missing),
            ],
        ),
        (
            "lock file in a directory that does not exist",
            vec!["--lock-file", "/nonexistent-leaderd-dir/lease.lock"],
        ),
        (
            "unreadable TLS CA",
            vec![
                "--redis",
                "rediss://127.0.0.1:9",
                "--redis-tls-ca",
                support::path_str(&missing),
            ],
        ),
    ];
    for (what, extra) in cases {
        let mut args: Vec<&str> = Vec::new();
        if !extra.contains(&"--redis") && !extra.contains(&"--lock-file") {
            args.extend(base);
        }
        if !extra.contains(&"--http") {
            args.extend(["--http", "off"]);
        }
        args.extend(extra);
        let outcome = |command: &str| {
            let mut line = vec![command];
            line.extend(&args);
            let (code, _, err) = run_to_end(&line);
            let last = err.lines().last().unwrap_or_default().to_string();
            (code, last)
        };
        let (run, check) = (outcome("run"), outcome("check"));
        assert_eq!(run.0, 2, "{what}: run exits 2: {}", run.1);
        assert!(run.1.starts_with("leaderd: "), "{what}: {}", run.1);
        assert_eq!(check, run, "{what}: check and run disagree");
    }
}
