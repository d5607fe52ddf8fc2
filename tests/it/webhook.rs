//! Webhooks against a real local receiver: signed per Standard Webhooks
//! (checked with an independent HMAC computation), retried on 500, and never
//! in the way of renewals.

use crate::support;

use base64::Engine;
use hmac::{KeyInit, Mac};
use std::time::Duration;
use support::{Answer, Leaderd, Receiver, Redis, eventually};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn expected_signature(id: &str, timestamp: &str, body: &[u8]) -> String {
    let key = base64::engine::general_purpose::STANDARD
        .decode(SECRET.trim_start_matches("whsec_"))
        .unwrap();
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    )
}

fn leaderd_with_hook(redis: &Redis, key: &str, id: &str, hook: &str, extra: &[&str]) -> Leaderd {
    let url = redis.url();
    let mut args = vec!["--redis", url.as_str(), "--key", key, "--webhook", hook];
    args.extend_from_slice(extra);
    let http = format!("127.0.0.1:{}", support::free_port());
    let mut full = vec!["run", "--id", id, "--http", http.as_str()];
    full.extend_from_slice(&args);
    Leaderd::attach(
        id,
        &http,
        support::spawn_with_env(&full, &[("LEADERD_WEBHOOK_SECRET", SECRET)]),
    )
}

#[test]
fn elected_and_demoted_are_posted_and_signed() {
    let redis = Redis::start();
    let receiver = Receiver::start(|_| Answer::Status(204));
    let mut a = leaderd_with_hook(&redis, "hooks", "a", &receiver.url(), &[]);
    eventually(support::WAIT, "elected to arrive", || {
        (receiver.requests().len() == 1).then_some(())
    });
    a.signal("TERM");
    assert_eq!(a.wait_exit(support::WAIT).code(), Some(0));
    let requests = eventually(support::WAIT, "demoted to arrive", || {
        let r = receiver.requests();
        (r.len() == 2).then_some(r)
    });
    let mut tokens = Vec::new();
    for (request, event) in requests.iter().zip(["elected", "demoted"]) {
        let id = request.header("webhook-id").expect("webhook-id");
        let timestamp = request
            .header("webhook-timestamp")
            .expect("webhook-timestamp");
        let signature = request
            .header("webhook-signature")
            .expect("webhook-signature");
        assert_eq!(
            signature,
            expected_signature(id, timestamp, &request.body),
            "signature of {event}"
        );
        let json: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(
            (
                json["event"].as_str(),
                json["id"].as_str(),
                json["key"].as_str()
            ),
            (Some(event), Some("a"), Some("hooks"))
        );
        assert!(
            json["reason"].is_string() && json["at"].is_string(),
            "{json}"
        );
        tokens.push(json["fencing_token"].as_u64().unwrap());
    }
    assert_eq!(tokens[0], tokens[1], "both events name the same term");
    assert!(
        !a.log().join("\n").contains("MfKQ9r8G"),
        "the secret is never logged"
    );
}

#[test]
fn a_receiver_answering_500_is_retried() {
    let redis = Redis::start();
    let receiver = Receiver::start(|n| {
        if n < 2 {
            Answer::Status(500)
        } else {
            Answer::Status(200)
        }
    });
    let a = leaderd_with_hook(&redis, "retry", "a", &receiver.url(), &[]);
    let requests = eventually(Duration::from_secs(10), "three attempts", || {
        let r = receiver.requests();
        (r.len() >= 3).then_some(r)
    });
    let ids: Vec<&str> = requests
        .iter()
        .map(|r| r.header("webhook-id").unwrap())
        .collect();
    assert!(
        ids.iter().all(|id| *id == ids[0]),
        "retries keep the message id: {ids:?}"
    );
    a.wait_log(support::WAIT, "webhook delivered");
}

#[test]
fn a_hanging_receiver_does_not_delay_renewals() {
    let redis = Redis::start();
    let receiver = Receiver::start(|_| Answer::Hang);
    let a = leaderd_with_hook(
        &redis,
        "hang",
        "a",
        &receiver.url(),
        &[
            "--ttl",
            "1s",
            "--redis-timeout",
            "200ms",
            "--log-level",
            "debug",
        ],
    );
    a.wait_leading(support::WAIT);
    eventually(support::WAIT, "the hook to hang", || {
        (!receiver.requests().is_empty()).then_some(())
    });
    // Renewals every 333ms while the receiver hangs (its attempt times out after 5s).
    let renewed = |log: &[String]| {
        log.iter()
            .filter(|l| l.contains("reason=\"lease renewed\""))
            .count()
    };
    let before = renewed(&a.log());
    eventually(Duration::from_secs(4), "eight more renewals", || {
        (renewed(&a.log()) >= before + 8).then_some(())
    });
    assert!(a.is_leader());
    assert!(
        !a.log().iter().any(|l| l.contains("to=\"pausing\"")),
        "no step-down while the hook hangs"
    );
}
