//! `leaderd check` on Kubernetes: the API server's version, the Lease as it
//! stands, and whether leaderd's identity may do what it will do — one
//! `SelfSubjectAccessReview` per verb, each missing one named with the Role
//! to apply. No scratch election: the minimal Role names the Lease and its
//! registry by `resourceNames`, so a scratch Lease would be refused by
//! design; the access reviews stand for it.

use super::KubeLease;
use super::client::Failure;
use super::record::{self, Seen};
use crate::lease::contract::Error;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

/// One verb on a kind (leases unless said): on the object `name`, or on
/// any (`None`).
struct Need {
    verb: &'static str,
    name: Option<String>,
    /// The API group, the resource and how one object is called.
    kind: (&'static str, &'static str, &'static str),
}

const LEASES: (&str, &str, &str) = ("coordination.k8s.io", "leases", "the Lease");
const SLICES: (&str, &str, &str) = ("discovery.k8s.io", "endpointslices", "the EndpointSlice");
const EVENTS: (&str, &str, &str) = ("", "events", "the Event");

impl Need {
    fn shown(&self) -> String {
        let (_, resource, one) = self.kind;
        match &self.name {
            Some(n) => format!("{} {one} {n}", self.verb),
            None => format!("{} {resource}", self.verb),
        }
    }
}

/// Whether leaderd's identity may do `need` in `namespace`.
async fn allowed(lease: &mut KubeLease, namespace: &str, need: &Need) -> Result<bool, Error> {
    let client = lease.client.kube().await?;
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client);
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(need.kind.0.into()),
                resource: Some(need.kind.1.into()),
                namespace: Some(namespace.to_string()),
                verb: Some(need.verb.into()),
                name: need.name.clone(),
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
            Failure::Other(e) => e,
            _ => unexpected("the access review was refused"),
        })?;
    Ok(answer.status.as_ref().is_some_and(|s| s.allowed))
}

pub(super) async fn report(lease: &mut KubeLease) -> Result<Vec<String>, Error> {
    let client = lease.client.kube().await?;
    let namespace = lease.client.namespace.clone();
    let version = lease.client.call(client.apiserver_version()).await;
    let mut lines = vec![match version {
        Ok(v) => format!(
            "API server {} reached ({})",
            v.git_version, lease.client.shown
        ),
        Err(Failure::Other(e)) => return Err(e),
        Err(_) => return Err(unexpected("no version from the API server")),
    }];
    let name = lease.name.clone();
    let registry = format!("{name}-candidates");
    let on = |verb, name: &String| Need {
        verb,
        name: Some(name.clone()),
        kind: LEASES,
    };
    let mut missing = Vec::new();
    for need in [
        on("get", &name),
        on("update", &name),
        on("get", &registry),
        on("patch", &registry),
    ] {
        if !allowed(lease, &namespace, &need).await? {
            missing.push(need.shown());
        }
    }
    if !missing.is_empty() {
        return Err(refused(
            lease,
            format!(
                "leaderd's identity may not {} in namespace {namespace}",
                missing.join(", ")
            ),
        ));
    }
    // Both objects there (pre-created): no `create` needed.
    let current = lease.client.get(&name).await?;
    let absent: Vec<&String> = [(&name, current.is_some())]
        .into_iter()
        .chain([(&registry, lease.client.get(&registry).await?.is_some())])
        .filter(|(_, there)| !there)
        .map(|(n, _)| n)
        .collect();
    let create = Need {
        verb: "create",
        name: None,
        kind: LEASES,
    };
    if !absent.is_empty() && !allowed(lease, &namespace, &create).await? {
        let names: Vec<String> = absent.iter().map(|n| format!("the Lease {n}")).collect();
        return Err(refused(
            lease,
            format!(
                "leaderd's identity may not create leases in namespace {namespace} ({} {} not exist yet: grant create, or create {} first)",
                names.join(" and "),
                if names.len() > 1 { "do" } else { "does" },
                if names.len() > 1 { "them" } else { "it" },
            ),
        ));
    }
    lines.push(format!(
        "allowed in namespace {namespace}: get and update on the Lease {name}, get and patch on {registry}{}",
        if absent.is_empty() {
            ""
        } else {
            ", create on leases"
        }
    ));
    if allowed(lease, &namespace, &on("watch", &name)).await? {
        lines.push(format!(
            "watch on the Lease {name} is allowed: waiters wake at a release and see every renewal as it happens, so they read nothing on a timer"
        ));
    } else {
        lines.push(format!(
            "watch on the Lease {name} is not allowed, which costs: a release is seen only at a waiter's next read (a handover takes up to a lease duration instead of milliseconds), a crashed holder is taken over up to a duration late (each waiter reads when the record it saw would expire), a holder hears of an edit or a delete of its Lease only at its next renewal, and every waiter reads the Lease once a duration; grant watch"
        ));
    }
    if let Some(l) = &current
        && l.metadata.resource_version.is_some()
        && record::revision(l).is_none()
    {
        lines.push(format!(
            "the API server's resourceVersion {:?} is not a number: fencing tokens only count up from each process's last one, so a restarted candidate may hand out a token an earlier process used (docs/kubernetes.md)",
            l.metadata.resource_version.as_deref().unwrap_or_default()
        ));
    }
    lines.extend(announcing(lease, &namespace).await?);
    lines.push(match current {
        None => format!("the Lease {name} does not exist yet; the first candidate creates it"),
        Some(l) => {
            let seen = Seen::of(&l);
            format!(
                "the Lease {name} is held by {}, leaseDurationSeconds {}, {} transition(s)",
                seen.holder.as_deref().unwrap_or("nobody"),
                seen.duration.as_secs(),
                seen.transitions
            )
        }
    });
    Ok(lines)
}

/// What the herald will write: the Service's slice (refused when a right
/// is missing, or the Service is not one leaderd can steer) and the Events
/// (a note when they cannot be recorded: they never affect the election).
async fn announcing(lease: &mut KubeLease, namespace: &str) -> Result<Vec<String>, Error> {
    let announce = lease.announce.0.announce.clone();
    let mut lines = Vec::new();
    if let Some(service) = &announce.service {
        let slice = |verb| Need {
            verb,
            name: Some(service.slice.clone()),
            kind: SLICES,
        };
        let mut missing = Vec::new();
        for need in [slice("get"), slice("update")] {
            if !allowed(lease, namespace, &need).await? {
                missing.push(need.shown());
            }
        }
        let create = Need {
            verb: "create",
            name: None,
            kind: SLICES,
        };
        if !allowed(lease, namespace, &create).await? {
            missing.push(format!(
                "{} (the first leader creates its slice; grant create, or create the slice first)",
                create.shown()
            ));
        }
        if !missing.is_empty() {
            return Err(refused(
                lease,
                format!(
                    "--kubernetes-service {}: leaderd's identity may not {} in namespace {namespace}",
                    service.name,
                    missing.join(", ")
                ),
            ));
        }
        lines.push(super::herald::service::check_service(&mut lease.client, service).await?);
        lines.push(format!(
            "allowed in namespace {namespace}: get, update and create on endpointslices: the leader keeps the EndpointSlice {} at {} on ports {}",
            service.slice,
            service.address,
            service.ports.iter().map(|p| p.shown()).collect::<Vec<_>>().join(", ")
        ));
    }
    if announce.events {
        let create = Need {
            verb: "create",
            name: None,
            kind: EVENTS,
        };
        lines.push(if allowed(lease, namespace, &create).await? {
            format!("create on events is allowed: each term's start and end is an Event on the Lease {}", lease.name)
        } else {
            format!("create on events is not allowed in namespace {namespace}: no Event will tell of a term (the election is not affected); grant it, or give --kubernetes-events=false")
        });
    }
    Ok(lines)
}

/// What leaderd's identity may not do, and the Role that fixes it.
fn refused(lease: &KubeLease, detail: String) -> Error {
    Error::Misconfigured {
        backend: lease.client.shown.clone(),
        detail,
        hint: "apply the Role and RoleBinding in docs/kubernetes.md (it says why each verb)",
    }
}
fn unexpected(detail: &str) -> Error {
    Error::Unexpected {
        backend: "the Kubernetes API server".into(),
        detail: detail.into(),
    }
}
