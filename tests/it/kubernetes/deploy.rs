//! Kubernetes as users deploy it (#39): `deploy/kubernetes` applied to a
//! real API server with the kubectl of the same version, the
//! ServiceAccount's rights asked of the API server itself, and leaderd run
//! as in a pod, with the manifests' configuration and that ServiceAccount's
//! projected token at the pod's own paths (a private mount namespace):
//! elected; the token rotated in the middle of a term and the old one
//! invalidated; an expired token refused clearly, then replaced.

use crate::support;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::kube::Kube;
use support::serviceaccount::{Projected, expired_token, may, token_request};
use support::{Leaderd, eventually, probe_child, probe_events};

const PATIENCE: Duration = Duration::from_secs(30);
const NAMESPACE: &str = "leaderd-demo";
const ACCOUNT: &str = "jobs-leaderd";

/// `kubectl apply -k DIR`; the lines it printed.
pub(super) fn apply(kube: &Kube, dir: &str) -> String {
    let (ok, out) = kube.kubectl(&["apply", "-k", dir]);
    assert!(ok, "kubectl apply -k {dir} failed:\n{out}");
    out
}

/// A workload's leaderd sidecar as the API server stores it: the
/// ConfigMap's leaderd.toml (written to a file) and the sidecar's plain
/// environment (its `value`s; the downward API's are set by [`pod`]).
pub(super) struct Sidecar {
    config: PathBuf,
    env: Vec<(String, String)>,
}

impl Sidecar {
    /// The sidecar of the `kind` (`deployments`, `statefulsets`) `name` in
    /// `namespace`, its config written to `dir`.
    pub(super) fn of(kube: &Kube, namespace: &str, kind: &str, name: &str, dir: &Path) -> Sidecar {
        let workload = kube.ok(
            "GET",
            &format!("/apis/apps/v1/namespaces/{namespace}/{kind}/{name}"),
            None,
        );
        let pod = &workload["spec"]["template"]["spec"];
        let sidecar = pod["initContainers"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["name"] == "leaderd")
            .unwrap_or_else(|| panic!("no leaderd sidecar in {kind}/{name}: {pod}"));
        let env = sidecar["env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| Some((e["name"].as_str()?.into(), e["value"].as_str()?.into())))
            .collect();
        let map = pod["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == "leaderd-config")
            .and_then(|v| v["configMap"]["name"].as_str())
            .expect("the leaderd-config volume");
        let map = kube.ok(
            "GET",
            &format!("/api/v1/namespaces/{namespace}/configmaps/{map}"),
            None,
        );
        let config = dir.join(format!("{name}.toml"));
        let text = map["data"]["leaderd.toml"].as_str().expect("leaderd.toml");
        std::fs::write(&config, text).expect("write the config");
        Sidecar { config, env }
    }
}

/// leaderd as the sidecar of pod `name` runs it: the manifests' arguments,
/// configuration and environment (the HTTP address on loopback instead of
/// the pod's), the pod's own environment, `projected` at the pod's paths;
/// the probe child logs to `log`. `None` when this machine cannot make a
/// mount namespace (outside CI only).
pub(super) fn pod(
    kube: &Kube,
    name: &str,
    sidecar: &Sidecar,
    projected: &Projected,
    log: &Path,
) -> Option<Leaderd> {
    let wrapper = match projected.wrapper() {
        Ok(w) => w,
        Err(why) if std::env::var_os("CI").is_none() => {
            eprintln!("SKIPPED: cannot make a mount namespace here ({why})");
            return None;
        }
        Err(why) => panic!("cannot make a mount namespace in CI: {why}"),
    };
    let http = format!("127.0.0.1:{}", support::free_port());
    let probe = probe_child();
    let args = [
        "run",
        "--config",
        support::path_str(&sidecar.config),
        "--http",
        &http,
        "--",
        &probe,
        support::path_str(log),
    ];
    let port = kube.servers[0].port.to_string();
    let mut env = vec![
        ("KUBERNETES_SERVICE_HOST", "127.0.0.1"),
        ("KUBERNETES_SERVICE_PORT", port.as_str()),
        ("POD_NAME", name),
        // Data only: the API server refuses loopback addresses in a slice.
        ("POD_IP", "192.0.2.10"),
    ];
    env.extend(sidecar.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    Some(Leaderd::attach(
        name,
        &http,
        support::spawn_wrapped(&wrapper, &args, &env),
    ))
}

fn lease_rule(verb: &str, name: Option<&str>) -> Value {
    let mut rule = json!({ "group": "coordination.k8s.io", "resource": "leases", "verb": verb });
    if let Some(name) = name {
        rule["name"] = json!(name);
    }
    rule
}

#[test]
fn the_manifests_apply_and_their_service_account_may_touch_its_leases_only() {
    let kube = Kube::start(1);
    // Every kustomization, applied for real: each object created (or, for
    // the overlays, configured) by the API server.
    let base = apply(&kube, "deploy/kubernetes");
    eprintln!("kubectl apply -k deploy/kubernetes:\n{base}");
    for object in [
        "namespace/leaderd-demo created",
        "serviceaccount/jobs-leaderd created",
        "role.rbac.authorization.k8s.io/jobs-leaderd created",
        "rolebinding.rbac.authorization.k8s.io/jobs-leaderd created",
        "configmap/jobs-leaderd created",
        "deployment.apps/jobs created",
    ] {
        assert!(base.contains(object), "{object} missing from:\n{base}");
    }
    let readiness = apply(&kube, "deploy/kubernetes/leader-service-readiness");
    assert!(
        readiness.contains("service/jobs-leader created"),
        "{readiness}"
    );
    let service = apply(&kube, "deploy/kubernetes/leader-service");
    assert!(
        service.contains("service/jobs-leader configured")
            && service.contains("deployment.apps/jobs configured"),
        "{service}"
    );
    let leader_service = kube.ok(
        "GET",
        &format!("/api/v1/namespaces/{NAMESPACE}/services/jobs-leader"),
        None,
    );
    assert!(
        leader_service["spec"]["selector"].is_null(),
        "the maintained Service kept the readiness way's selector: {leader_service}"
    );
    let redis = apply(&kube, "deploy/kubernetes/redis");
    for object in [
        "secret/leaderd-redis created",
        "deployment.apps/leaderd-redis created",
        "service/leaderd-redis created",
        "deployment.apps/jobs configured",
    ] {
        assert!(redis.contains(object), "{object} missing from:\n{redis}");
    }
    let flow = apply(&kube, "deploy/kubernetes/flowcontrol");
    for object in [
        "prioritylevelconfiguration.flowcontrol.apiserver.k8s.io/leaderd created",
        "flowschema.flowcontrol.apiserver.k8s.io/leaderd created",
    ] {
        assert!(flow.contains(object), "{object} missing from:\n{flow}");
    }
    // Back to the default, as a user switching back would.
    apply(&kube, "deploy/kubernetes");

    // What the ServiceAccount may do, asked of the API server.
    let allowed = [
        lease_rule("get", Some("jobs")),
        lease_rule("update", Some("jobs")),
        lease_rule("watch", Some("jobs")),
        lease_rule("patch", Some("jobs")),
        lease_rule("get", Some("jobs-candidates")),
        lease_rule("patch", Some("jobs-candidates")),
        lease_rule("update", Some("jobs-candidates")),
        lease_rule("watch", Some("jobs-candidates")),
        lease_rule("create", None),
        json!({ "resource": "events", "verb": "create" }),
        json!({ "group": "discovery.k8s.io", "resource": "endpointslices", "verb": "get", "name": "jobs-leader-leaderd" }),
        json!({ "group": "discovery.k8s.io", "resource": "endpointslices", "verb": "update", "name": "jobs-leader-leaderd" }),
        json!({ "group": "discovery.k8s.io", "resource": "endpointslices", "verb": "create" }),
    ];
    let refused = [
        lease_rule("get", Some("kube-controller-manager")),
        lease_rule("update", Some("another-lease")),
        lease_rule("delete", Some("jobs")),
        lease_rule("list", None),
        json!({ "resource": "secrets", "verb": "get", "name": "leaderd-redis" }),
        json!({ "resource": "secrets", "verb": "list" }),
        json!({ "resource": "pods", "verb": "get" }),
        json!({ "resource": "configmaps", "verb": "get", "name": "jobs-leaderd" }),
        json!({ "resource": "events", "verb": "delete" }),
        json!({ "group": "discovery.k8s.io", "resource": "endpointslices", "verb": "delete", "name": "jobs-leader-leaderd" }),
        json!({ "group": "discovery.k8s.io", "resource": "endpointslices", "verb": "list" }),
    ];
    for (rules, expected) in [(&allowed[..], true), (&refused[..], false)] {
        for rule in rules {
            let answer = may(&kube, NAMESPACE, ACCOUNT, rule.clone());
            eprintln!("SubjectAccessReview {rule}: allowed {answer}");
            assert_eq!(answer, expected, "{rule}");
        }
    }

    // Three pods' sidecars, each with a token of its own from TokenRequest:
    // one leads, the Lease names it, and a SIGTERM hands over at once.
    let dir = support::Scratch::new("k8s-deploy");
    let sidecar = Sidecar::of(&kube, NAMESPACE, "deployments", "jobs", &dir);
    let mut pods = Vec::new();
    for name in ["jobs-a", "jobs-b", "jobs-c"] {
        let token = token_request(&kube, NAMESPACE, ACCOUNT, None);
        let projected = Projected::new(&dir.join(name), &kube, NAMESPACE, &token);
        let Some(node) = pod(
            &kube,
            name,
            &sidecar,
            &projected,
            &dir.join(format!("{name}.probe")),
        ) else {
            return;
        };
        pods.push(node);
    }
    let (leader, token) = support::the_leader(&pods, PATIENCE);
    let lease = kube.ok(
        "GET",
        &format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/jobs"),
        None,
    );
    assert_eq!(lease["spec"]["holderIdentity"], json!(pods[leader].id));
    let stopped = Instant::now();
    pods[leader].signal("TERM");
    let (next, next_token) = eventually(PATIENCE, "the next leader", || {
        pods.iter()
            .enumerate()
            .filter(|(i, _)| *i != leader)
            .find_map(|(i, p)| {
                Some((
                    i,
                    p.leader().filter(|(l, _)| *l)?.1["fencing_token"].as_u64()?,
                ))
            })
    });
    eprintln!(
        "{} → {} in {:?} (ttl 15s), tokens {token} → {next_token}",
        pods[leader].id,
        pods[next].id,
        stopped.elapsed()
    );
    assert!(next_token > token);
    assert!(
        stopped.elapsed() < Duration::from_secs(10),
        "a SIGTERM handed over only by expiry"
    );
}

/// Every `leaderd run` line with `needle`, and when it was first seen.
fn wait_line(node: &Leaderd, needle: &str) -> Instant {
    node.wait_log(PATIENCE, needle);
    Instant::now()
}

#[test]
fn a_token_rotated_mid_term_is_read_again_and_an_expired_one_is_refused_then_replaced() {
    let kube = Kube::start(1);
    apply(&kube, "deploy/kubernetes");
    let dir = support::Scratch::new("k8s-rotation");
    let sidecar = Sidecar::of(&kube, NAMESPACE, "deployments", "jobs", &dir);
    let secret = |name: &str| {
        let body = json!({ "apiVersion": "v1", "kind": "Secret", "metadata": { "name": name } });
        kube.ok(
            "POST",
            &format!("/api/v1/namespaces/{NAMESPACE}/secrets"),
            Some(&body),
        );
    };

    // A leader on token A, which is bound to the Secret "pod-a" as a pod's
    // token is bound to its pod.
    secret("pod-a");
    let first = token_request(&kube, NAMESPACE, ACCOUNT, Some("pod-a"));
    let mut projected = Projected::new(&dir.join("sa"), &kube, NAMESPACE, &first);
    let log = dir.join("rotation.probe");
    let Some(node) = pod(&kube, "jobs-a", &sidecar, &projected, &log) else {
        return;
    };
    let t0 = Instant::now();
    node.wait_leading(PATIENCE);
    let led = t0.elapsed();
    let term = node.leader().unwrap().1["fencing_token"].as_u64().unwrap();

    // The kubelet rotates the file to token B; then token A dies (its
    // Secret deleted). kube read the file at start and would read it again
    // only after a minute: the next request is refused with 401, and
    // leaderd must read the file again at once, within the term.
    secret("pod-b");
    projected.rotate(&token_request(&kube, NAMESPACE, ACCOUNT, Some("pod-b")));
    let rotated = t0.elapsed();
    kube.ok(
        "DELETE",
        &format!("/api/v1/namespaces/{NAMESPACE}/secrets/pod-a"),
        None,
    );
    let invalidated = t0.elapsed();
    let reread = wait_line(&node, "reading them again").duration_since(t0);
    // The API server caches a token's validation for up to 10 s, so the
    // 401 comes at the first renewal after that; then two more renewals
    // (5 s apart) on token B, in the same term.
    std::thread::sleep(Duration::from_secs(11)); // the window the term must survive
    let (leads, body) = node.leader().expect("/leader answers");
    assert!(leads, "the token's rotation cost the term: {body}");
    assert_eq!(body["fencing_token"].as_u64(), Some(term), "{body}");
    let starts = probe_events(&log)
        .iter()
        .filter(|e| e.kind == "start")
        .count();
    assert_eq!(starts, 1, "the child was restarted over a token rotation");
    assert!(
        !node
            .log()
            .iter()
            .any(|l| l.contains("stepping down") || l.contains("lost the lease")),
        "{:#?}",
        node.log()
    );
    eprintln!(
        "timeline: leading at {led:?}; token rotated at {rotated:?}; token A invalidated at {invalidated:?}; \
         the 401 answered by reading the file again at {reread:?}; same term (token {term}) at {:?}",
        t0.elapsed()
    );
    // Released on the way out, so the next pod need not wait out a TTL.
    let mut node = node;
    node.signal("TERM");
    node.wait_exit(PATIENCE);

    // A pod whose token has expired: a clear refusal naming the token, and
    // a leader without a restart once the kubelet writes a fresh one.
    let mut stale = Projected::new(
        &dir.join("sa-expired"),
        &kube,
        NAMESPACE,
        &expired_token(&kube, NAMESPACE, ACCOUNT),
    );
    let log = dir.join("expired.probe");
    let Some(node) = pod(&kube, "jobs-b", &sidecar, &stale, &log) else {
        return;
    };
    // After the 401 leaderd reads the file again, and is refused again.
    let refusal = node.wait_log(PATIENCE, "does not accept leaderd's credentials");
    assert!(
        refusal.contains("401") && refusal.contains("service account token"),
        "the refusal does not say what was wrong and what to fix: {refusal}"
    );
    assert!(!node.is_leader());
    stale.rotate(&token_request(&kube, NAMESPACE, ACCOUNT, None));
    let fixed = Instant::now();
    node.wait_leading(PATIENCE);
    eprintln!(
        "an expired token: refused with `{refusal}`; leading {:?} after a fresh token was written",
        fixed.elapsed()
    );
}
