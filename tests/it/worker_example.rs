//! The example worker the compose demo and the Kubernetes example run
//! (`examples/worker.rs`): it must do what README says it shows.

use crate::support;

use std::time::Duration;
use support::{Leaderd, Redis};

const LIMIT: Duration = Duration::from_secs(10);

#[test]
fn worker_writes_under_its_token_and_is_refused_once_a_newer_token_wrote() {
    let redis = Redis::start();
    let url = redis.url();
    let mut worker = Leaderd::attach(
        "worker",
        "127.0.0.1:0",
        support::spawn_example(
            "worker",
            &[],
            &[
                ("LEADERD_ID", "w1"),
                ("LEADERD_FENCING_TOKEN", "100"),
                ("WORKER_REDIS_URL", &url),
            ],
        ),
    );
    worker.wait_log(LIMIT, "fencing token 100: stored");
    assert_eq!(redis.get("demo:{results}:fence").as_deref(), Some("100"));

    // A newer leader wrote with a higher token: this one is now stale.
    redis.cmd(&["SET", "demo:{results}:fence", "200"]);
    worker.wait_log(LIMIT, "fencing token 100: REFUSED");
    assert_eq!(redis.get("demo:{results}:fence").as_deref(), Some("200"));

    worker.signal("TERM");
    assert!(worker.wait_exit(LIMIT).success());
    assert!(
        worker
            .log()
            .iter()
            .any(|l| l.starts_with("worker w1: stopping after"))
    );
}

#[test]
fn following_worker_works_only_while_its_leaderd_leads() {
    let redis = Redis::start();
    let mut leaderd = support::on_redis(&redis, &support::key("follow"), "f1", &[]);
    let api = format!("http://127.0.0.1:{}", leaderd.http_port);
    let mut worker = Leaderd::attach(
        "worker",
        "127.0.0.1:0",
        support::spawn_example("worker", &["--follow", &api], &[("LEADERD_ID", "f1")]),
    );
    worker.wait_log(LIMIT, "worker f1: leading");
    let token = leaderd.leader().expect("/leader answers").1["fencing_token"]
        .as_u64()
        .expect("a leader has a token");
    worker.wait_log(LIMIT, &format!("fencing token {token}"));

    leaderd.signal("TERM");
    assert!(leaderd.wait_exit(LIMIT).success());
    worker.wait_log(LIMIT, "worker f1: standing by");
    worker.signal("TERM");
    assert!(worker.wait_exit(LIMIT).success());
}
