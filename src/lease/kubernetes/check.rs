//! `leaderd check` on Kubernetes: the API server's version, the Lease as it
//! stands, and whether leaderd's identity may do what it will do — one
//! `SelfSubjectAccessReview` per verb, each missing one named with the Role
//! to apply. No scratch election: the minimal Role names the Lease and its
//! registry by `resourceNames`, so a scratch Lease would be refused by
//! design; the access reviews stand for it.

use super::KubeLease;
use super::record::Seen;
use crate::lease::contract::Error;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

/// What leaderd does with leases: (verb, on which object; `None`: any).
fn needed(name: &str) -> Vec<(&'static str, Option<String>)> {
    let registry = format!("{name}-candidates");
    vec![
        ("get", Some(name.to_string())),
        ("update", Some(name.to_string())),
        ("watch", Some(name.to_string())),
        ("create", None),
        ("get", Some(registry.clone())),
        ("update", Some(registry)),
    ]
}

pub(super) async fn report(lease: &mut KubeLease) -> Result<Vec<String>, Error> {
    let client = lease.client.kube().await?;
    let namespace = lease.client.namespace().await?;
    let version = lease.client.call(client.apiserver_version()).await;
    let mut lines = vec![match version {
        Ok(v) => format!(
            "API server {} reached ({})",
            v.git_version, lease.client.shown
        ),
        Err(super::client::Failure::Other(e)) => return Err(e),
        Err(_) => return Err(unexpected("no version from the API server")),
    }];
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client);
    let mut missing = Vec::new();
    for (verb, name) in needed(&lease.name) {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some("coordination.k8s.io".into()),
                    resource: Some("leases".into()),
                    namespace: Some(namespace.clone()),
                    verb: Some(verb.into()),
                    name: name.clone(),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        let answer = lease
            .client
            .call(reviews.create(&PostParams::default(), &review))
            .await
            .map_err(|f| match f {
                super::client::Failure::Other(e) => e,
                _ => unexpected("the access review was refused"),
            })?;
        let allowed = answer.status.as_ref().is_some_and(|s| s.allowed);
        if !allowed {
            let on = name.map_or("leases".to_string(), |n| format!("the Lease {n}"));
            missing.push(format!("{verb} on {on}"));
        }
    }
    if !missing.is_empty() {
        return Err(Error::Misconfigured {
            backend: lease.client.shown.clone(),
            detail: format!(
                "leaderd's identity may not {} in namespace {namespace}",
                missing.join(", ")
            ),
            hint: "apply the Role and RoleBinding in deploy/kubernetes/rbac.yaml (docs/kubernetes.md says why each verb)",
        });
    }
    lines.push(format!(
        "allowed: get, update and watch on the Lease {name}, create on leases, get and update on {name}-candidates (namespace {namespace})",
        name = lease.name
    ));
    lines.push(match lease.client.get(&lease.name).await? {
        None => format!(
            "the Lease {} does not exist yet; the first candidate creates it",
            lease.name
        ),
        Some(l) => {
            let seen = Seen::of(&l);
            format!(
                "the Lease {} is held by {}, leaseDurationSeconds {}, {} transition(s)",
                lease.name,
                seen.holder.as_deref().unwrap_or("nobody"),
                seen.duration.as_secs(),
                seen.transitions
            )
        }
    });
    Ok(lines)
}

fn unexpected(detail: &str) -> Error {
    Error::Unexpected {
        backend: "the Kubernetes API server".into(),
        detail: detail.into(),
    }
}
