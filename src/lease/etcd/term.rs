//! What one read under the election's prefix tells: the leader key, the
//! term record and the release record. The term record (`BASE/term`, no
//! lease) is written in the same transaction as every acquisition, so its
//! mod revision is the latest term's fencing token; the release record
//! (`BASE/released`) is written in the same transaction as a release, after
//! its holder stopped its work. A leader key that is gone while the release
//! record is older than the term record went some other way (revoked,
//! deleted, expired), and the contract's vacancy rule applies.

use super::client::{int, unb64};
use crate::lease::contract::Holder;
use serde_json::Value;

/// The leader key as read: who holds it, the etcd lease it is bound to, and
/// its mod revision (the term's fencing token).
#[derive(Debug, Clone)]
pub(super) struct Current {
    pub holder: Holder,
    pub lease: i64,
    pub revision: i64,
}

/// The latest term, from its record: its token, its holder's etcd lease and
/// id, and whether its holder announced the release.
#[derive(Debug, Clone)]
pub(super) struct Term {
    pub token: i64,
    pub lease: i64,
    pub id: Option<String>,
    pub released: bool,
}

/// One read of the election: the leader key and the latest term, when present.
#[derive(Debug, Clone, Default)]
pub(super) struct Look {
    pub current: Option<Current>,
    pub term: Option<Term>,
}

/// The names of the election's keys under `base` (`PREFIX` + KEY).
pub(super) struct Keys {
    pub leader: String,
    pub term: String,
    pub released: String,
    /// Where the holder announces each renewal (`TOKEN TTL_MS ID_JSON`,
    /// on its etcd lease): standbys watching the range hear it
    /// ([`crate::lease::heard`], issue #47).
    pub renewed: String,
    /// The range holding all four: `base/` up to `base0`.
    pub from: String,
    pub to: String,
}

impl Keys {
    pub(super) fn new(base: &str) -> Keys {
        Keys {
            leader: format!("{base}/leader"),
            term: format!("{base}/term"),
            released: format!("{base}/released"),
            renewed: format!("{base}/renewed"),
            from: format!("{base}/"),
            to: format!("{base}0"),
        }
    }

    /// Sorts a range reply's key-values into a [`Look`].
    pub(super) fn look(&self, kvs: &[Value]) -> Look {
        let named = |name: &str| {
            kvs.iter()
                .find(|kv| unb64(kv["key"].as_str().unwrap_or("")) == name.as_bytes())
        };
        let released = named(&self.released).map_or(0, |kv| int(kv, "mod_revision"));
        let term = named(&self.term).map(|kv| {
            let (id, lease) = id_and_lease(kv);
            let token = int(kv, "mod_revision");
            Term {
                token,
                lease,
                id,
                released: released >= token,
            }
        });
        Look {
            current: named(&self.leader).map(current),
            term,
        }
    }
}

/// The holder a leader key names, its etcd lease and its revision.
pub(super) fn current(kv: &Value) -> Current {
    let (id, _) = id_and_lease(kv);
    let revision = int(kv, "mod_revision");
    Current {
        holder: Holder {
            id,
            fencing_token: Some(revision.max(0) as u64),
        },
        lease: int(kv, "lease"),
        revision,
    }
}

/// The `id` in a record's JSON value (or the whole value, for a key leaderd
/// did not write), and the etcd lease: the key's own, or the one the term
/// record names.
fn id_and_lease(kv: &Value) -> (Option<String>, i64) {
    let value = unb64(kv["value"].as_str().unwrap_or(""));
    let json = serde_json::from_slice::<Value>(&value).ok();
    let id = json
        .as_ref()
        .and_then(|v| v["id"].as_str().map(str::to_string))
        .or_else(|| String::from_utf8(value).ok().filter(|s| !s.is_empty()));
    let named = json.as_ref().map_or(0, |v| int(v, "lease"));
    let lease = match int(kv, "lease") {
        0 => named,
        own => own,
    };
    (id, lease)
}
