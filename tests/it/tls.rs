//! Issue #11: Redis over TLS, against a real `redis-server` listening only on
//! a TLS port, with certificates minted by the test (rcgen). The election
//! itself over TLS runs in the contract suite; here: mutual TLS, what
//! `check` reports, and every way a handshake fails closed.

use crate::support;

use std::path::Path;
use std::time::Duration;
use support::tls::{Pki, days_from_now};
use support::{Leaderd, run_to_end};

const PATIENCE: Duration = Duration::from_secs(10);

fn p(path: &Path) -> &str {
    support::path_str(path)
}

fn check(url: &str, extra: &[&str]) -> (i32, String) {
    let mut args = vec![
        "check",
        "--redis",
        url,
        "--key",
        "tls",
        "--redis-timeout",
        "400ms",
    ];
    args.extend_from_slice(extra);
    let (code, out, err) = run_to_end(&args);
    (code, out + &err)
}

#[test]
fn mutual_tls_works_with_the_client_certificate_and_fails_closed_without_it() {
    let pki = Pki::new("mtls");
    let server = pki.leaf("server", &["127.0.0.1"], false);
    let client = pki.leaf("client", &["leaderd"], false);
    let redis = support::tls::redis(&pki, &server, true);
    let url = redis.url();
    let ca_path = pki.ca();
    let ca = ["--redis-tls-ca", p(&ca_path)];
    let with_cert = [
        ca[0],
        ca[1],
        "--redis-tls-cert",
        p(&client.0),
        "--redis-tls-key",
        p(&client.1),
    ];
    let (code, out) = check(&url, &with_cert);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("# ok: TLS handshake with 127.0.0.1:")
            && out.contains("server certificate CN=server")
            && out.contains("valid until"),
        "{out}"
    );
    let (code, out) = check(&url, &ca);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("TLS with rediss://127.0.0.1"), "{out}");
    // run: not leader, and a (rate-limited) error naming TLS.
    let node = Leaderd::run("a", &[&["--redis", &url, "--key", "tls"][..], &ca].concat());
    node.wait_log(PATIENCE, "TLS with rediss://");
    assert_eq!(node.leader().map(|(leads, _)| leads), Some(false));
    let mut args = vec!["--redis", url.as_str(), "--key", "tls"];
    args.extend_from_slice(&with_cert);
    let node = Leaderd::run("b", &args);
    node.wait_leading(PATIENCE);
    // Half a client identity is a usage error.
    let (code, out) = check(&url, &[ca[0], ca[1], "--redis-tls-cert", p(&client.0)]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("needs both --redis-tls-cert and --redis-tls-key"),
        "{out}"
    );
}

#[test]
fn an_untrusted_a_misnamed_and_an_expired_server_certificate_each_fail_closed() {
    let pki = Pki::new("bad-certs");
    let stranger = Pki::new("stranger");
    let cases = [
        (
            "untrusted",
            pki.leaf("server", &["127.0.0.1"], false),
            stranger.ca(),
            "not signed by a trusted CA",
        ),
        (
            "misnamed",
            pki.leaf("misnamed", &["other.example"], false),
            pki.ca(),
            "does not name the host",
        ),
        (
            "expired",
            pki.leaf("expired", &["127.0.0.1"], true),
            pki.ca(),
            "has expired",
        ),
    ];
    for (what, server, ca, says) in cases {
        let redis = support::tls::redis(&pki, &server, false);
        let (code, out) = check(&redis.url(), &["--redis-tls-ca", p(&ca)]);
        assert_eq!(code, 2, "{what}: {out}");
        assert!(out.contains(says), "{what}: {out}");
        let url = redis.url();
        let node = Leaderd::run(
            "a",
            &["--redis", &url, "--key", what, "--redis-tls-ca", p(&ca)],
        );
        let line = node.wait_log(PATIENCE, "TLS with rediss://");
        assert!(line.contains(says), "{what}: {line}");
        assert_eq!(node.leader().map(|(leads, _)| leads), Some(false), "{what}");
    }
}

#[test]
fn check_warns_about_a_server_certificate_that_expires_within_14_days() {
    let pki = Pki::new("expiring");
    let server = pki.leaf_until("server", &["127.0.0.1"], Some(days_from_now(5)));
    let redis = support::tls::redis(&pki, &server, false);
    let (code, out) = check(&redis.url(), &["--redis-tls-ca", p(&pki.ca())]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("expires in less than 14 days"), "{out}");
    let healthy = pki.leaf("healthy", &["127.0.0.1"], false);
    let redis = support::tls::redis(&pki, &healthy, false);
    let (code, out) = check(&redis.url(), &["--redis-tls-ca", p(&pki.ca())]);
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("expires in less than"), "{out}");
}

#[test]
fn verification_cannot_be_turned_off_and_tls_files_need_rediss() {
    let (code, out) = check("rediss://127.0.0.1:6390/#insecure", &[]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("never does") && out.contains("--redis-tls-ca"),
        "{out}"
    );
    let (code, out) = check(
        "redis://127.0.0.1:6390",
        &["--redis-tls-ca", "/etc/hostname"],
    );
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("apply to rediss:// URLs"), "{out}");
}
