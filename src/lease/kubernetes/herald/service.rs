//! The Service that follows the leader: a selector-less Service whose one
//! EndpointSlice (`NAME-leaderd`, labelled `kubernetes.io/service-name`
//! and managed-by `leaderd`) the leader writes with its own address as its
//! term's work starts and empties as the term ends, before its release.
//! Patroni's way on Kubernetes: every pod stays Ready, rolling updates and
//! PodDisruptionBudgets work as for any Deployment, and only the Service
//! follows leadership.
//!
//! Two leaders never both appear, and a deposed leader never writes over a
//! newer term: the slice carries the fencing token of the term that wrote
//! it (an annotation), every write is a compare-and-swap on the
//! `resourceVersion` this term read, and [`decide`] refuses to touch a
//! slice a newer term wrote. Tokens only grow, so the newest term wins
//! whatever order the writes arrive in.

use super::super::client::{Client, Failure};
use super::options::ServiceConfig;
use crate::lease::contract::Error;
use k8s_openapi::api::core::v1::{ObjectReference, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use kube::api::{ObjectMeta, PostParams};
use std::collections::BTreeMap;

/// The annotation with the fencing token of the term that last wrote.
pub const TOKEN: &str = "leaderd.io/fencing-token";
/// The annotation with the id of the candidate that last wrote.
const HOLDER: &str = "leaderd.io/holder";
const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";

/// What the herald wants the slice to say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// Our address, for the term with this token.
    Lead(u64),
    /// No address: the term with this token ended.
    Empty(u64),
}

/// The slice as read: the writing term's token (0: none) and addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub token: u64,
    pub addresses: Vec<String>,
}

/// What one look at the slice leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Create,
    /// A compare-and-swap on what was read.
    Replace,
    /// It says what we want already, or it is not ours to change.
    Nothing,
    /// A newer term wrote it: we are deposed, whatever we believe.
    Refuse {
        newer: u64,
    },
}

/// The pure rule: what to do with the slice `seen` (`None`: absent) to
/// make it say `want`, when our address is `me`.
pub fn decide(seen: Option<&Seen>, want: Want, me: &str) -> Step {
    match (want, seen) {
        (Want::Lead(_), None) => Step::Create,
        (Want::Empty(_), None) => Step::Nothing,
        (Want::Lead(t), Some(s)) if s.token > t => Step::Refuse { newer: s.token },
        (Want::Lead(t), Some(s)) if s.token == t && s.addresses == [me] => Step::Nothing,
        (Want::Lead(_), Some(_)) => Step::Replace,
        // A newer term's slice is its own: we were deposed before our end.
        (Want::Empty(t), Some(s)) if s.token > t => Step::Refuse { newer: s.token },
        (Want::Empty(_), Some(s)) if s.addresses.is_empty() => Step::Nothing,
        // Ours, or an older term's that still names someone: no longer true.
        (Want::Empty(_), Some(_)) => Step::Replace,
    }
}

/// What one attempt did.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Written,
    Unchanged,
    Refused { newer: u64 },
}

/// How often one attempt reads again after a conflict: two candidates'
/// writes cross at most once per handover.
const ROUNDS: usize = 4;

/// Makes the slice say `want`, reading before every write.
pub(super) async fn apply(
    client: &mut Client,
    config: &ServiceConfig,
    id: &str,
    want: Want,
) -> Result<Outcome, Error> {
    let me = config.address.to_string();
    for _ in 0..ROUNDS {
        let found = client
            .request_in(|api: kube::Api<EndpointSlice>| {
                let name = config.slice.clone();
                async move { api.get_opt(&name).await }
            })
            .await
            .map_err(|f| failed(client, f))?;
        let seen = found.as_ref().map(seen_of);
        let mut slice = match (decide(seen.as_ref(), want, &me), found) {
            (Step::Nothing, _) => return Ok(Outcome::Unchanged),
            (Step::Refuse { newer }, _) => return Ok(Outcome::Refused { newer }),
            (Step::Create, _) | (Step::Replace, None) => fresh(config),
            (Step::Replace, Some(old)) => old,
        };
        fill(&mut slice, config, id, want);
        let creating = slice.metadata.resource_version.is_none();
        let sent = client
            .request_in(|api: kube::Api<EndpointSlice>| {
                let slice = slice.clone();
                let name = config.slice.clone();
                async move {
                    let params = PostParams::default();
                    if creating {
                        api.create(&params, &slice).await
                    } else {
                        api.replace(&name, &params, &slice).await
                    }
                }
            })
            .await;
        match sent {
            Ok(_) => return Ok(Outcome::Written),
            // Changed (or created) since we read it: read and judge again.
            Err(Failure::Conflict | Failure::Missing) => continue,
            Err(f) => return Err(failed(client, f)),
        }
    }
    Err(Error::Unexpected {
        backend: "the Kubernetes API server".into(),
        detail: format!(
            "the EndpointSlice {} changed under every one of {ROUNDS} writes",
            config.slice
        ),
    })
}

/// `check`: the Service is one the slice can steer — there, without a
/// selector (whose own slices would send traffic to every pod it selects),
/// and with the ports' names. A Service leaderd may not read is a note.
pub(in crate::lease::kubernetes) async fn check_service(
    client: &mut Client,
    config: &ServiceConfig,
) -> Result<String, Error> {
    let found = client
        .request_in(|api: kube::Api<Service>| {
            let name = config.name.clone();
            async move { api.get_opt(&name).await }
        })
        .await;
    let refused = |detail: String| Error::NotSetUp {
        backend: format!("the Service {}/{}", client.namespace, config.name),
        detail: format!(
            "{detail}; leaderd steers a Service with no selector whose port names are those of --kubernetes-service-ports (docs/kubernetes.md, \"Send traffic to the leader\")"
        ),
    };
    let service = match found {
        Ok(Some(service)) => service,
        Ok(None) => return Err(refused("it does not exist".into())),
        Err(Failure::Other(Error::Misconfigured { detail, .. })) if detail.starts_with("403") => {
            return Ok(format!(
                "cannot read the Service {} to check it (get on services is optional): make sure it has no selector and its ports are named {}",
                config.name,
                config
                    .ports
                    .iter()
                    .map(|p| format!("{:?}", p.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        Err(f) => return Err(client.sorted(f)),
    };
    let spec = service.spec.unwrap_or_default();
    if spec.selector.as_ref().is_some_and(|s| !s.is_empty()) {
        return Err(refused(
            "it has a selector: Kubernetes' own EndpointSlices would send its traffic to every pod it selects, standbys too; remove spec.selector".into(),
        ));
    }
    let mut theirs: Vec<String> = spec
        .ports
        .unwrap_or_default()
        .into_iter()
        .map(|p| p.name.unwrap_or_default())
        .collect();
    let mut ours: Vec<String> = config.ports.iter().map(|p| p.name.clone()).collect();
    theirs.sort();
    ours.sort();
    if theirs != ours {
        return Err(refused(format!(
            "its ports are named {theirs:?} and --kubernetes-service-ports names {ours:?}: kube-proxy matches a slice's ports to the Service's by name"
        )));
    }
    Ok(format!(
        "the Service {} has no selector and its ports' names match",
        config.name
    ))
}

fn seen_of(slice: &EndpointSlice) -> Seen {
    let token = slice
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(TOKEN))
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    let addresses = slice
        .endpoints
        .iter()
        .flatten()
        .flat_map(|e| e.addresses.iter().cloned())
        .collect();
    Seen { token, addresses }
}

/// A new slice of the Service, before [`fill`].
fn fresh(config: &ServiceConfig) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            name: Some(config.slice.clone()),
            ..ObjectMeta::default()
        },
        address_type: if config.address.is_ipv4() {
            "IPv4"
        } else {
            "IPv6"
        }
        .into(),
        ..EndpointSlice::default()
    }
}

/// Writes `want` into `slice`, keeping what others added to it (labels,
/// annotations) and its `resourceVersion`, the compare of the swap.
fn fill(slice: &mut EndpointSlice, config: &ServiceConfig, id: &str, want: Want) {
    let labels = slice.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.insert("kubernetes.io/service-name".into(), config.name.clone());
    labels.insert(MANAGED_BY.into(), "leaderd".into());
    let (token, lead) = match want {
        Want::Lead(t) => (t, true),
        Want::Empty(t) => (t, false),
    };
    let notes = slice.metadata.annotations.get_or_insert_with(BTreeMap::new);
    notes.insert(TOKEN.into(), token.to_string());
    notes.insert(
        HOLDER.into(),
        if lead { id.to_string() } else { String::new() },
    );
    slice.ports = Some(
        config
            .ports
            .iter()
            .map(|p| EndpointPort {
                name: Some(p.name.clone()),
                port: Some(i32::from(p.port)),
                protocol: Some(p.protocol.to_string()),
                ..EndpointPort::default()
            })
            .collect(),
    );
    slice.endpoints = Some(if lead {
        vec![Endpoint {
            addresses: vec![config.address.to_string()],
            conditions: Some(EndpointConditions {
                ready: Some(true),
                serving: Some(true),
                terminating: Some(false),
            }),
            target_ref: pod_ref(id),
            ..Endpoint::default()
        }]
    } else {
        Vec::new()
    });
}

/// The pod behind the address, when leaderd runs in one (`POD_NAME`, the
/// id's default there), so `kubectl describe` names it.
fn pod_ref(id: &str) -> Option<ObjectReference> {
    let pod = std::env::var("POD_NAME").ok().filter(|p| p == id)?;
    Some(ObjectReference {
        kind: Some("Pod".into()),
        name: Some(pod),
        ..ObjectReference::default()
    })
}

/// A failure as the herald reports it, with the hint for its rights.
fn failed(client: &Client, f: Failure) -> Error {
    match client.sorted(f) {
        Error::Misconfigured {
            backend, detail, ..
        } if detail.starts_with("403") => Error::Misconfigured {
            backend,
            detail,
            hint: "give leaderd's identity get, update and create on endpointslices (discovery.k8s.io) in the Lease's namespace: the Role in docs/kubernetes.md",
        },
        Error::Unexpected { backend, detail } if detail.starts_with("422") => {
            Error::Misconfigured {
                backend,
                detail,
                hint: "the API server refused the slice: check --kubernetes-service-address (the pod's IP, from status.podIP; loopback addresses are refused) and --kubernetes-service-ports",
            }
        }
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(token: u64, addresses: &[&str]) -> Seen {
        Seen {
            token,
            addresses: addresses.iter().map(|a| a.to_string()).collect(),
        }
    }

    #[test]
    fn a_term_writes_over_older_terms_only_and_empties_only_what_is_no_longer_true() {
        let me = "10.0.0.7";
        #[rustfmt::skip]
        let rows: &[(Option<Seen>, Want, Step)] = &[
            // The first term creates it.
            (None,                          Want::Lead(5),  Step::Create),
            // An older term's, or one with no token (made by a person).
            (Some(seen(4, &["10.0.0.9"])),  Want::Lead(5),  Step::Replace),
            (Some(seen(0, &[])),            Want::Lead(5),  Step::Replace),
            // Ours already.
            (Some(seen(5, &[me])),          Want::Lead(5),  Step::Nothing),
            // Our term, emptied (by us) or edited: written again.
            (Some(seen(5, &[])),            Want::Lead(5),  Step::Replace),
            (Some(seen(5, &[me, "1.1.1.1"])), Want::Lead(5), Step::Replace),
            // A newer term wrote it: a deposed leader never writes.
            (Some(seen(6, &["10.0.0.9"])),  Want::Lead(5),  Step::Refuse { newer: 6 }),
            (Some(seen(6, &[])),            Want::Lead(5),  Step::Refuse { newer: 6 }),
            // A term's end empties ours, and an older term's.
            (Some(seen(5, &[me])),          Want::Empty(5), Step::Replace),
            (Some(seen(4, &["10.0.0.9"])),  Want::Empty(5), Step::Replace),
            // Nothing to empty.
            (None,                          Want::Empty(5), Step::Nothing),
            (Some(seen(5, &[])),            Want::Empty(5), Step::Nothing),
            // A newer term's is not ours to touch, even to empty it.
            (Some(seen(6, &["10.0.0.9"])),  Want::Empty(5), Step::Refuse { newer: 6 }),
            (Some(seen(6, &[])),            Want::Empty(5), Step::Refuse { newer: 6 }),
        ];
        for (i, (s, want, step)) in rows.iter().enumerate() {
            assert_eq!(
                decide(s.as_ref(), *want, me),
                *step,
                "row {i}: {s:?} {want:?}"
            );
        }
    }

    #[test]
    fn a_filled_slice_has_one_address_or_none_and_keeps_what_others_added() {
        let config = ServiceConfig {
            name: "jobs".into(),
            slice: "jobs-leaderd".into(),
            ports: vec![super::super::options::parse_port("http:8080").unwrap()],
            address: "10.0.0.7".parse().unwrap(),
        };
        let mut slice = fresh(&config);
        slice.metadata.labels = Some([("team".to_string(), "a".to_string())].into());
        fill(&mut slice, &config, "a", Want::Lead(9));
        assert_eq!(seen_of(&slice), seen(9, &["10.0.0.7"]));
        assert_eq!(slice.address_type, "IPv4");
        let labels = slice.metadata.labels.clone().unwrap();
        assert_eq!(labels["kubernetes.io/service-name"], "jobs");
        assert_eq!(labels["team"], "a");
        fill(&mut slice, &config, "a", Want::Empty(9));
        assert_eq!(seen_of(&slice), seen(9, &[]));
        assert_eq!(slice.ports.as_ref().unwrap()[0].port, Some(8080));
    }
}
