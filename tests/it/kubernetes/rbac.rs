//! RBAC mistakes and credentials the API server refuses, each with the
//! exact message `check` and `run` give.

use super::{Candidate, PATIENCE, logs};
use crate::support;
use serde_json::json;
use support::backends::lease_name;
use support::kube::{Kube, NAMESPACE};

fn lease_rules(verbs: &[&str], names: Option<&[String]>) -> serde_json::Value {
    let mut rule = json!({
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": verbs,
    });
    if let Some(names) = names {
        rule["resourceNames"] = json!(names);
    }
    rule
}

/// A Lease (or the registry's) created by the admin, held by nobody.
fn precreate(kube: &Kube, name: &str) {
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": { "name": name }, "spec": {},
    });
    kube.ok(
        "POST",
        &format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"),
        Some(&lease),
    );
}

#[test]
fn rbac_mistakes_and_a_bad_token_say_exactly_what_is_wrong() {
    let kube = Kube::start(1);
    let key = support::key("k8s-rbac");
    let name = lease_name(&key);
    let names = [name.clone(), format!("{name}-candidates")];
    let as_user = |user| Candidate {
        kube: &kube,
        server: 0,
        user,
        key: &key,
        ttl: "3s",
    };
    // The minimal Role but `update` and `patch`.
    let no_update = [
        lease_rules(&["get", "watch"], Some(&names)),
        lease_rules(&["create"], None),
    ];
    kube.role("no-update", &json!(no_update), "no-update");
    let (code, out) = as_user("no-update").check();
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains(&format!(
            "may not update the Lease {name}, patch the Lease {name}-candidates in namespace {NAMESPACE}"
        )) && out.contains("docs/kubernetes.md"),
        "{out}"
    );
    // The minimal Role but `create`, the Lease absent.
    let no_create = [lease_rules(
        &["get", "update", "patch", "watch"],
        Some(&names),
    )];
    kube.role("no-create", &json!(no_create), "no-create");
    let (code, out) = as_user("no-create").check();
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains(&format!(
            "may not create leases in namespace {NAMESPACE} (the Lease {name} and the Lease {name}-candidates do not exist yet: grant create, or create them first)"
        )),
        "{out}"
    );
    // Pre-created, the same identity leads normally.
    precreate(&kube, &name);
    precreate(&kube, &format!("{name}-candidates"));
    let (code, out) = as_user("no-create").check();
    assert_eq!(code, 0, "{out}");
    let (_dir, logs) = logs("k8s-rbac", 1);
    let node = as_user("no-create").run("a", &logs[0], &[]);
    node.wait_leading(PATIENCE);
    // No `watch`: it leads by polling, and says so once.
    let no_watch = [
        lease_rules(&["get", "update", "patch"], Some(&names)),
        lease_rules(&["create"], None),
    ];
    kube.role("no-watch", &json!(no_watch), "no-watch");
    let (code, out) = as_user("no-watch").check();
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!("watch on the Lease {name} is not allowed")),
        "{out}"
    );
    let standby = as_user("no-watch").run("b", &logs[0].with_extension("b"), &[]);
    let warned = standby.wait_log(PATIENCE, "cannot wait for release wake-ups");
    assert!(
        warned.contains("WARN") && warned.contains(r#"cannot watch resource "leases""#),
        "{warned}"
    );
    drop(node);
    standby.wait_leading(PATIENCE);
    let warnings = standby
        .log()
        .iter()
        .filter(|l| l.contains("WARN") && l.contains("cannot watch"))
        .count();
    assert_eq!(warnings, 1, "{:#?}", standby.log());
    // A token the API server does not know: 401, and what to check.
    let bad = kube.kubeconfig_with("stranger", "not-a-token", 0);
    let (code, out) = as_user("stranger").check_with(&bad);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("401 Unauthorized") && out.contains("check the token"),
        "{out}"
    );
    // Bound to nothing: the server's own 403 text, and the Role to apply.
    let (code, out) = as_user("stranger").check();
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains(r#"User "stranger" cannot get resource "leases""#)
            && out.contains("docs/kubernetes.md"),
        "{out}"
    );
}
