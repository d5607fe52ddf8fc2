//! leaderd added to a user's own workload (issue #48): the component
//! `deploy/kubernetes/components/leaderd-sidecar`, applied with kubectl to
//! the sample Deployment and StatefulSet of `deploy/kubernetes/examples`.
//! Each gets the native sidecar, the token mounted into the sidecar only,
//! and RBAC for its own Lease alone (SubjectAccessReviews allow and refuse
//! as documented); its sidecars, run as its ServiceAccount, elect.

use super::deploy::{Sidecar, apply, pod};
use crate::support;
use serde_json::{Value, json};
use std::time::Duration;
use support::kube::{Kube, NAMESPACE};
use support::serviceaccount::{Projected, may, token_request};

const PATIENCE: Duration = Duration::from_secs(30);
const TOKEN_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// What the component must have made of the workload's pod template.
fn check_template(kind: &str, name: &str, workload: &Value) {
    let spec = &workload["spec"]["template"]["spec"];
    let what = format!("{kind}/{name}");
    assert_eq!(
        spec["serviceAccountName"],
        json!(format!("{name}-leaderd")),
        "{what}"
    );
    assert_eq!(spec["automountServiceAccountToken"], json!(false), "{what}");
    let inits = spec["initContainers"].as_array().expect("init containers");
    let sidecar = inits
        .iter()
        .find(|c| c["name"] == "leaderd")
        .expect("the sidecar");
    assert_eq!(
        sidecar["restartPolicy"],
        json!("Always"),
        "{what}: not a native sidecar"
    );
    let env = sidecar["env"].as_array().unwrap();
    assert!(
        env.contains(&json!({ "name": "LEADERD_KEY", "value": name })),
        "{what}: the key is not the workload's name: {env:?}"
    );
    // The token reaches the sidecar and nothing else.
    let all = spec["containers"].as_array().unwrap().iter().chain(inits);
    for c in all {
        let mounts_token = c["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|m| m["mountPath"] == TOKEN_PATH);
        assert_eq!(
            mounts_token,
            c["name"] == "leaderd",
            "{what}: container {}",
            c["name"]
        );
    }
    // The user's own container is untouched.
    assert_eq!(spec["containers"].as_array().unwrap().len(), 1, "{what}");
}

fn rule(group: &str, resource: &str, verb: &str, name: Option<&str>) -> Value {
    let mut r = json!({ "group": group, "resource": resource, "verb": verb });
    if let Some(name) = name {
        r["name"] = json!(name);
    }
    r
}

#[test]
fn the_component_adds_leaderd_to_a_deployment_and_a_statefulset_which_then_elect() {
    let kube = Kube::start(1);
    let dir = support::Scratch::new("k8s-component");
    let samples = [
        ("deployments", "Deployment", "report"),
        ("statefulsets", "StatefulSet", "ledger"),
    ];
    for (_, kind, name) in samples {
        let out = apply(
            &kube,
            &format!("deploy/kubernetes/examples/{}", kind.to_lowercase()),
        );
        for object in [
            format!("serviceaccount/{name}-leaderd created"),
            format!("role.rbac.authorization.k8s.io/{name}-leaderd created"),
            format!("rolebinding.rbac.authorization.k8s.io/{name}-leaderd created"),
            format!("configmap/{name}-leaderd created"),
            format!("{}.apps/{name} created", kind.to_lowercase()),
        ] {
            assert!(out.contains(&object), "{object} missing from:\n{out}");
        }
    }
    for (resource, kind, name) in samples {
        let workload = kube.ok(
            "GET",
            &format!("/apis/apps/v1/namespaces/{NAMESPACE}/{resource}/{name}"),
            None,
        );
        check_template(kind, name, &workload);
        // Its own Lease, and no other: the two workloads are apart.
        let other = if name == "report" { "ledger" } else { "report" };
        let account = format!("{name}-leaderd");
        let candidates = format!("{name}-candidates");
        let slice = format!("{name}-leader-leaderd");
        let lease = "coordination.k8s.io";
        let allowed = [
            rule(lease, "leases", "get", Some(name)),
            rule(lease, "leases", "update", Some(name)),
            rule(lease, "leases", "watch", Some(name)),
            rule(lease, "leases", "patch", Some(&candidates)),
            rule(lease, "leases", "create", None),
            rule("", "events", "create", None),
            rule("discovery.k8s.io", "endpointslices", "update", Some(&slice)),
        ];
        let refused = [
            rule(lease, "leases", "update", Some(other)),
            rule(lease, "leases", "get", Some("kube-scheduler")),
            rule(lease, "leases", "delete", Some(name)),
            rule(
                "discovery.k8s.io",
                "endpointslices",
                "update",
                Some("other-leaderd"),
            ),
            rule("", "secrets", "get", None),
            rule("", "pods", "list", None),
        ];
        for (rules, expected) in [(&allowed[..], true), (&refused[..], false)] {
            for r in rules {
                assert_eq!(
                    may(&kube, NAMESPACE, &account, r.clone()),
                    expected,
                    "{account}: {r}"
                );
            }
        }
        // Two of its pods' sidecars, as that ServiceAccount: one leads,
        // and the Lease named after the workload says so.
        let sidecar = Sidecar::of(&kube, NAMESPACE, resource, name, &dir);
        let mut pods = Vec::new();
        for i in 0..2 {
            let pod_name = format!("{name}-{i}");
            let token = token_request(&kube, NAMESPACE, &account, None);
            let projected = Projected::new(&dir.join(&pod_name), &kube, NAMESPACE, &token);
            let log = dir.join(format!("{pod_name}.probe"));
            let Some(node) = pod(&kube, &pod_name, &sidecar, &projected, &log) else {
                return;
            };
            pods.push(node);
        }
        let (leader, _) = support::the_leader(&pods, PATIENCE);
        let lease_object = kube.ok(
            "GET",
            &format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{name}"),
            None,
        );
        assert_eq!(
            lease_object["spec"]["holderIdentity"],
            json!(pods[leader].id)
        );
    }
}
