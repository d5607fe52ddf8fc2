//! The candidates registry on etcd: one key per candidate,
//! `BASE#candidates/ID.INSTANCE` (outside the election's `BASE/` range, which the
//! lease reads whole), holding the record and its expiry in ms on the
//! writer's clock. One transaction per registration writes ours and reads
//! them all, and deletes those a reader saw expired by more than a TTL
//! (the slack absorbs clocks that disagree), so the registry of an election
//! whose pods come and go does not grow.

use super::client::{Client, b64, unb64};
use crate::lease::contract::Error;
use crate::lease::registry::{Age, Record, Stamp, parse_all};
use serde_json::{Value, json};
use std::time::Duration;

pub(super) struct Registry {
    prefix: String,
    mine: String,
    ttl: Duration,
    /// Other candidates' keys seen long expired: deleted with the next write.
    stale: Vec<String>,
}

/// One stored entry: the record's JSON and its expiry.
#[derive(serde::Serialize, serde::Deserialize)]
struct Entry {
    r: String,
    x: u64,
}

impl Registry {
    pub(super) fn new(base: &str, id: &str, ttl: Duration) -> Registry {
        let prefix = format!("{base}#candidates/");
        Registry {
            mine: format!("{prefix}{id}"),
            prefix,
            ttl,
            stale: Vec::new(),
        }
    }

    fn range(&self) -> Value {
        let mut end = self.prefix.clone().into_bytes();
        *end.last_mut().expect("the prefix ends with /") += 1;
        json!({ "key": b64(self.prefix.as_bytes()), "range_end": b64(&end) })
    }

    /// Writes (or removes) ours and reads all, in one transaction.
    pub(super) async fn register(
        &mut self,
        client: &mut Client,
        me: Option<&Record>,
    ) -> Result<Vec<Record>, Error> {
        let mut ops: Vec<Value> = self
            .stale
            .iter()
            .map(|k| json!({ "request_delete_range": { "key": b64(k.as_bytes()) } }))
            .collect();
        let key = b64(self.mine.as_bytes());
        ops.push(match me {
            Some(record) => {
                let entry = Entry {
                    r: serde_json::to_string(record).expect("a record always serialises"),
                    x: Stamp::now().plus(self.ttl).0,
                };
                let value = serde_json::to_string(&entry).expect("an entry always serialises");
                json!({ "request_put": { "key": key, "value": b64(value.as_bytes()) } })
            }
            None => json!({ "request_delete_range": { "key": key } }),
        });
        ops.push(json!({ "request_range": self.range() }));
        let reply = client.call("kv/txn", &json!({ "success": ops })).await?;
        let kvs = reply["responses"]
            .as_array()
            .and_then(|r| r.last())
            .map(|r| r["response_range"]["kvs"].clone())
            .unwrap_or(Value::Null);
        Ok(self.live(&kvs))
    }

    /// Reads all, writing nothing.
    pub(super) async fn candidates(&mut self, client: &mut Client) -> Result<Vec<Record>, Error> {
        let reply = client.call("kv/range", &self.range()).await?;
        Ok(self.live(&reply["kvs"]))
    }

    /// The live records among `kvs`; remembers the long-expired others.
    fn live(&mut self, kvs: &Value) -> Vec<Record> {
        let now = Stamp::now();
        self.stale.clear();
        let mut texts = Vec::new();
        for kv in kvs.as_array().into_iter().flatten() {
            let key =
                String::from_utf8_lossy(&unb64(kv["key"].as_str().unwrap_or(""))).into_owned();
            let value = unb64(kv["value"].as_str().unwrap_or(""));
            let Ok(e) = serde_json::from_slice::<Entry>(&value) else {
                continue;
            };
            match Stamp(e.x).age(self.ttl, now) {
                Age::Live => texts.push(e.r),
                Age::Gone if key != self.mine => self.stale.push(key),
                _ => {}
            }
        }
        parse_all(texts.iter().map(String::as_bytes))
    }
}
