//! The candidates registry on Kubernetes: one more Lease, `NAME-candidates`
//! (so the Role names both by `resourceNames` and needs no `list`), with an
//! annotation per candidate process, `leaderd.io/candidate.ID.INSTANCE`
//! ([`crate::lease::registry::entry`]): its record, its
//! expiry in ms on the writer's clock, and, while it leads, its term's
//! token (what a candidate that never saw a deleted Lease's holder learns
//! the vacancy rule from). A registration is one JSON merge patch of its own
//! annotation, which conflicts with nobody and answers with the whole
//! object: every record, in one request. Entries expired by more than a TTL
//! (the slack absorbs clocks that disagree) are dropped by the next writer
//! that sees them, by a patch conditional on the version it saw, so an entry
//! written meanwhile is never lost. An entry that says its writer leads is
//! never judged by wall-clock times, which a holder's skewed clock would
//! make lie: it counts for the vacancy rule however old it looks, and only
//! a candidate that leads itself (a later term) drops it.

use super::client::{Client, Failure};
use crate::lease::contract::Error;
use crate::lease::registry::{Age, Record, Stamp, parse_all};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value, json};
use sha2::Digest;
use std::collections::BTreeMap;
use std::time::Duration;

const PREFIX: &str = "leaderd.io/candidate.";
/// Conflicts a registration rides out (a create racing another's).
const ROUNDS: usize = 4;

pub(super) struct Registry {
    object: String,
    /// Our annotation's key.
    key: String,
    ttl: Duration,
}

/// One candidate's entry.
#[derive(serde::Serialize, serde::Deserialize, Clone)]
struct Entry {
    r: Record,
    x: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    t: Option<u64>,
}

/// The annotation key of candidate `id`: the id itself where an annotation
/// name may hold it (readable in `kubectl get lease -o yaml`), else a
/// digest of it (the record inside carries the id either way).
pub(super) fn key_of(id: &str) -> String {
    let fits = id.len() <= 63 - "candidate.".len()
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && id.ends_with(|c: char| c.is_ascii_alphanumeric());
    if fits {
        return format!("{PREFIX}{id}");
    }
    let digest = sha2::Sha256::digest(id.as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("{PREFIX}sha256-{hex}")
}

/// Every entry of the registry object, by annotation key.
fn entries(lease: &Lease) -> BTreeMap<String, Entry> {
    let Some(notes) = lease.metadata.annotations.as_ref() else {
        return BTreeMap::new();
    };
    notes
        .iter()
        .filter(|(k, _)| k.starts_with(PREFIX))
        .filter_map(|(k, text)| Some((k.clone(), serde_json::from_str(text).ok()?)))
        .collect()
}

impl Registry {
    pub(super) fn new(lease: &str, id: &str, ttl: Duration) -> Registry {
        Registry {
            object: format!("{lease}-candidates"),
            key: key_of(id),
            ttl,
        }
    }

    /// Writes (or removes) ours, with the token of the term we lead, and
    /// returns every live record.
    pub(super) async fn register(
        &mut self,
        client: &mut Client,
        me: Option<&Record>,
        leads: Option<u64>,
    ) -> Result<Vec<Record>, Error> {
        let value = match me {
            Some(record) => {
                let entry = Entry {
                    r: record.clone(),
                    x: Stamp::now().plus(self.ttl).0,
                    t: leads,
                };
                Value::String(serde_json::to_string(&entry).expect("an entry serialises"))
            }
            None => Value::Null,
        };
        for _ in 0..ROUNDS {
            let patch = json!({ "metadata": { "annotations": { &self.key: value } } });
            let written = match client.merge(&self.object, &patch).await {
                Err(Failure::Missing) if value.is_null() => return Ok(Vec::new()),
                Err(Failure::Missing) => {
                    let notes = BTreeMap::from([(
                        self.key.clone(),
                        value.as_str().unwrap_or_default().to_string(),
                    )]);
                    let lease = Lease {
                        metadata: ObjectMeta {
                            name: Some(self.object.clone()),
                            annotations: Some(notes),
                            ..ObjectMeta::default()
                        },
                        spec: None,
                    };
                    client.create(&lease).await
                }
                other => other,
            };
            match written {
                Ok(lease) => {
                    self.prune(client, &lease, leads.is_some()).await;
                    return Ok(live(&lease));
                }
                // Another candidate created it first: patch it now.
                Err(Failure::Conflict | Failure::Missing) => continue,
                Err(Failure::Other(e)) => return Err(e),
            }
        }
        Err(Error::Connection {
            backend: "the Kubernetes API server".into(),
            detail: format!(
                "the Lease {} was created and deleted under {ROUNDS} registrations in a row",
                self.object
            ),
        })
    }

    /// Drops the entries of candidates gone for more than a TTL past their
    /// expiry, unless the object changed since `seen` (then the next writer
    /// sees them again). Best effort: the entries are harmless meanwhile.
    /// An entry that says it leads is dropped only by a candidate that
    /// leads (`leading`): it is an older term's.
    async fn prune(&self, client: &mut Client, seen: &Lease, leading: bool) {
        let now = Stamp::now();
        let dead: Map<String, Value> = entries(seen)
            .into_iter()
            .filter(|(k, e)| *k != self.key && gone(e, self.ttl, now) && (e.t.is_none() || leading))
            .map(|(k, _)| (k, Value::Null))
            .collect();
        if dead.is_empty() {
            return;
        }
        let patch = json!({ "metadata": {
            "resourceVersion": seen.metadata.resource_version,
            "annotations": dead,
        } });
        if let Err(Failure::Other(e)) = client.merge(&self.object, &patch).await {
            tracing::debug!(error = %e, "could not drop the registry's lapsed entries");
        }
    }

    /// Every live record, writing nothing.
    pub(super) async fn candidates(&mut self, client: &mut Client) -> Result<Vec<Record>, Error> {
        let current = client.get(&self.object).await?;
        Ok(current.as_ref().map(live).unwrap_or_default())
    }

    /// Another candidate whose entry says it leads, and its term's token
    /// (the latest, if several): whatever its wall-clock expiry says.
    pub(super) async fn leading(
        &mut self,
        client: &mut Client,
    ) -> Result<Option<(String, u64)>, Error> {
        let current = client.get(&self.object).await?;
        Ok(current
            .as_ref()
            .map(entries)
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, _)| *k != self.key)
            .filter_map(|(_, e)| Some((e.r.id, e.t?)))
            .max_by_key(|(_, t)| *t))
    }
}

/// Whether `entry` is past its expiry by more than `slack`.
fn gone(entry: &Entry, slack: Duration, now: Stamp) -> bool {
    Stamp(entry.x).age(slack, now) == Age::Gone
}

/// Every record of the object whose expiry has not passed.
fn live(lease: &Lease) -> Vec<Record> {
    let now = Stamp::now();
    let texts: Vec<String> = entries(lease)
        .values()
        .filter(|e| Stamp(e.x).age(Duration::ZERO, now) == Age::Live)
        .filter_map(|e| serde_json::to_string(&e.r).ok())
        .collect();
    parse_all(texts.iter().map(String::as_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_annotation_key_holds_the_id_when_it_can_and_a_digest_when_not() {
        assert_eq!(key_of("pod-a_1.x"), "leaderd.io/candidate.pod-a_1.x");
        for id in ["web:0", "a b", &"x".repeat(60), "ends-", "ünï"] {
            let key = key_of(id);
            let name = key.strip_prefix("leaderd.io/").unwrap();
            assert!(
                name.starts_with("candidate.sha256-") && name.len() <= 63,
                "{key}"
            );
        }
        assert_ne!(key_of("web:0"), key_of("web:1"));
    }
}
