//! The candidates registry on Kubernetes: one more Lease, `NAME-candidates`
//! (so the Role names both by `resourceNames` and needs no `list`), whose
//! `leaderd.io/candidates` annotation maps each candidate's id to its
//! record, its expiry in ms on the writer's clock, and, while it leads, its
//! term's token (what a candidate that never saw a deleted Lease's holder
//! learns the vacancy rule from). Each registration is a read and a
//! compare-and-swap, again after a conflict; entries expired by more than a
//! TTL (the slack absorbs clocks that disagree) are dropped by the writer.

use super::client::{Client, Failure};
use crate::lease::contract::Error;
use crate::lease::registry::{Record, parse_all};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const CANDIDATES: &str = "leaderd.io/candidates";
/// Conflicts a registration rides out before it reports one.
const ROUNDS: usize = 8;

pub(super) struct Registry {
    object: String,
    mine: String,
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

type Entries = BTreeMap<String, Entry>;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn entries(lease: &Lease) -> Entries {
    lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CANDIDATES))
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default()
}

impl Registry {
    pub(super) fn new(lease: &str, id: &str, ttl: Duration) -> Registry {
        Registry {
            object: format!("{lease}-candidates"),
            mine: id.to_string(),
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
        for _ in 0..ROUNDS {
            let current = client.get(&self.object).await?;
            let mut all = current.as_ref().map(entries).unwrap_or_default();
            let now = now_ms();
            let slack = self.ttl.as_millis() as u64;
            all.retain(|id, e| *id == self.mine || e.x + slack >= now);
            match me {
                Some(record) => {
                    let entry = Entry {
                        r: record.clone(),
                        x: now + self.ttl.as_millis() as u64,
                        t: leads,
                    };
                    all.insert(self.mine.clone(), entry);
                }
                None => {
                    if current.is_none() || all.remove(&self.mine).is_none() {
                        return Ok(live(&all));
                    }
                }
            }
            let text = serde_json::to_string(&all).expect("entries always serialise");
            let written = match current {
                Some(mut lease) => {
                    let notes = lease.metadata.annotations.get_or_insert_with(BTreeMap::new);
                    notes.insert(CANDIDATES.to_string(), text);
                    client.replace(&lease).await
                }
                None => {
                    let lease = Lease {
                        metadata: ObjectMeta {
                            name: Some(self.object.clone()),
                            annotations: Some(BTreeMap::from([(CANDIDATES.to_string(), text)])),
                            ..ObjectMeta::default()
                        },
                        spec: None,
                    };
                    client.create(&lease).await
                }
            };
            match written {
                Ok(_) => return Ok(live(&all)),
                Err(Failure::Conflict | Failure::Missing) => continue,
                Err(Failure::Other(e)) => return Err(e),
            }
        }
        Err(Error::Connection {
            backend: "the Kubernetes API server".into(),
            detail: format!(
                "the Lease {} changed under {ROUNDS} registrations in a row",
                self.object
            ),
        })
    }

    /// Every live record, writing nothing.
    pub(super) async fn candidates(&mut self, client: &mut Client) -> Result<Vec<Record>, Error> {
        let current = client.get(&self.object).await?;
        Ok(live(&current.as_ref().map(entries).unwrap_or_default()))
    }

    /// Another live candidate that says it leads, and its term's token.
    pub(super) async fn leading(
        &mut self,
        client: &mut Client,
    ) -> Result<Option<(String, u64)>, Error> {
        let current = client.get(&self.object).await?;
        let now = now_ms();
        Ok(current
            .as_ref()
            .map(entries)
            .unwrap_or_default()
            .into_iter()
            .filter(|(id, e)| e.x > now && *id != self.mine)
            .find_map(|(id, e)| Some((id, e.t?))))
    }
}

fn live(all: &Entries) -> Vec<Record> {
    let now = now_ms();
    let texts: Vec<String> = all
        .values()
        .filter(|e| e.x > now)
        .filter_map(|e| serde_json::to_string(&e.r).ok())
        .collect();
    parse_all(texts.iter().map(String::as_bytes))
}
