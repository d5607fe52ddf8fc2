//! Writes to a lease's record from outside (issue #46), as an operator, a
//! restore or a peer makes them with the store's own tools: the record
//! deleted (`Scene::delete`), its holder cleared, re-pointed at another candidate, its
//! duration shortened, a copy saved earlier put back. One function pair
//! per store (save a copy, write); each scene says which writes its store
//! has (`Scene::outside`).

use super::Redis;
use std::cell::RefCell;
use std::time::Duration;

/// What is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// Every record naming the holder emptied or deleted: nobody holds it.
    Clear,
    /// The holder's id replaced by this one.
    Repoint(String),
    /// The record's expiry brought forward to a moment from now.
    Shorten,
    /// The copy saved at the last `Scene::save` put back.
    Restore,
}

/// What a write did to the election.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Done {
    /// The store has no such write (say why in the scene).
    No,
    /// The holder's record changed: its term must end.
    Ends,
    /// The holder may keep its term: only a label changed (a lock file's
    /// text; the lock is the kernel's), or the holder puts its lease back
    /// (Redlock, on masters that lost it). Nothing may start early.
    Kept,
}

impl Write {
    /// The nemesis's choice among the writes that are not a delete (it
    /// deletes as a fault of its own); re-pointed at candidate `c0`..`c2`.
    #[allow(dead_code)] // the nemesis only
    pub fn pick(pick: u64) -> Write {
        match (pick >> 8) % 4 {
            0 => Write::Clear,
            1 => Write::Repoint(format!("c{}", (pick >> 16) % 3)),
            2 => Write::Shorten,
            _ => Write::Restore,
        }
    }
}

/// How far a shortened record still reaches: less than any renew interval
/// the suites use, more than nothing, so the record is seen shortened
/// before it goes.
pub const SHORT: Duration = Duration::from_millis(300);

/// A saved copy of whatever a store keeps for one election.
pub struct Saved<T>(RefCell<Option<T>>);

impl<T: Clone> Saved<T> {
    pub fn new() -> Self {
        Saved(RefCell::new(None))
    }
    pub fn keep(&self, copy: T) {
        self.0.replace(Some(copy));
    }
    pub fn get(&self) -> Option<T> {
        self.0.borrow().clone()
    }
}

/// The Redis keys naming an election's holder: the lease and its term record.
fn redis_keys(key: &str) -> [String; 2] {
    [
        format!("leaderd:{{{key}}}:lease"),
        format!("leaderd:{{{key}}}:term"),
    ]
}

/// A Redis copy: each key's value and milliseconds left, as `DUMP` and
/// `PTTL` would keep them.
pub type RedisCopy = Vec<(String, String, i64)>;

pub fn redis_save(redis: &Redis, key: &str) -> RedisCopy {
    redis_keys(key)
        .into_iter()
        .filter_map(|k| Some((k.clone(), redis.get(&k)?, redis.pttl(&k))))
        .collect()
}

/// `write` on `redis`: `DEL` of both keys, `SET … KEEPTTL` of another id,
/// `PEXPIRE` of both, or the saved values `SET` back with what they had left.
pub fn redis_write(redis: &Redis, key: &str, write: &Write, saved: Option<RedisCopy>) -> Done {
    let [lease, term] = redis_keys(key);
    match write {
        Write::Clear => {
            redis.cmd(&["DEL", &lease, &term]);
        }
        Write::Repoint(id) => {
            let Some(now) = redis.get(&lease) else {
                return Done::No;
            };
            let mut value: serde_json::Value = serde_json::from_str(&now).expect("leaderd's JSON");
            value["id"] = id.as_str().into();
            value["owner"] = "an-operator".into();
            redis.cmd(&["SET", &lease, &value.to_string(), "KEEPTTL"]);
        }
        Write::Shorten => {
            let ms = SHORT.as_millis().to_string();
            redis.cmd(&["PEXPIRE", &lease, &ms]);
            redis.cmd(&["PEXPIRE", &term, &ms]);
        }
        Write::Restore => {
            let Some(copy) = saved.filter(|c| !c.is_empty()) else {
                return Done::No;
            };
            for (k, value, left) in copy {
                redis.cmd(&["SET", &k, &value, "PX", &left.max(1).to_string()]);
            }
        }
    }
    Done::Ends
}

/// A PostgreSQL copy: the lease row and its term record, by key, with
/// what each had left in ms.
pub type PgCopy = Vec<(String, String)>;

const PG_COLUMNS: &str = "coalesce(quote_literal(holder), 'NULL') || ',' || coalesce(quote_literal(owner), 'NULL') || ',' || fence || ',' || coalesce((extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint::text, 'NULL')";

pub fn pg_save(pg: &super::postgres::Postgres, key: &str) -> PgCopy {
    [key.to_string(), format!("{key}#term")]
        .into_iter()
        .filter_map(|k| {
            let row = pg.sql(&format!(
                "SELECT {PG_COLUMNS} FROM leaderd_lease WHERE key = '{k}'"
            ));
            (!row.trim().is_empty()).then(|| (k, row.trim().to_string()))
        })
        .collect()
}

/// `write` on the lease table, in one statement as `psql` would send it.
pub fn pg_write(
    pg: &super::postgres::Postgres,
    key: &str,
    write: &Write,
    saved: Option<PgCopy>,
) -> Done {
    let both = format!("key IN ('{key}', '{key}#term')");
    let sql = match write {
        Write::Clear => format!(
            "UPDATE leaderd_lease SET holder = NULL, owner = NULL, expires_at = NULL WHERE {both}"
        ),
        Write::Repoint(id) => format!(
            "UPDATE leaderd_lease SET holder = '{id}', owner = 'an-operator' WHERE key = '{key}' AND expires_at IS NOT NULL"
        ),
        // The lease row's: its term record's expiry is the holder's own
        // account of its renewals, and a waiter cannot tell one brought
        // forward from a holder gone silent (docs/backends.md says so).
        Write::Shorten => format!(
            "UPDATE leaderd_lease SET expires_at = clock_timestamp() + interval '{} milliseconds' WHERE key = '{key}' AND expires_at IS NOT NULL",
            SHORT.as_millis()
        ),
        Write::Restore => {
            let Some(copy) = saved.filter(|c| !c.is_empty()) else {
                return Done::No;
            };
            let rows: Vec<String> = copy
                .iter()
                .map(|(k, row)| {
                    let v: Vec<&str> = row.splitn(4, ',').collect();
                    let expires = match v[3] {
                        "NULL" => "NULL".to_string(),
                        ms => format!("clock_timestamp() + interval '{ms} milliseconds'"),
                    };
                    format!(
                        "INSERT INTO leaderd_lease (key, holder, owner, fence, expires_at) VALUES ('{k}', {}, {}, {}, {expires}) ON CONFLICT (key) DO UPDATE SET holder = excluded.holder, owner = excluded.owner, fence = excluded.fence, expires_at = excluded.expires_at",
                        v[0], v[1], v[2]
                    )
                })
                .collect();
            rows.join("; ")
        }
    };
    pg.sql(&sql);
    Done::Ends
}

/// etcd's leader key for `key`.
fn etcd_leader(key: &str) -> String {
    format!("leaderd/{key}/leader")
}

pub fn etcd_save(etcd: &super::etcd::Etcd, key: &str) -> Option<String> {
    let out = etcd.ctl(&["get", "--print-value-only", &etcd_leader(key)])?;
    let value = out.trim().to_string();
    (!value.is_empty()).then_some(value)
}

/// `write` on etcd with `etcdctl put --ignore-lease` (the key keeps its
/// lease): an empty value, another id, the saved value. An etcd lease's
/// TTL cannot be lowered: no shorten.
pub fn etcd_write(
    etcd: &super::etcd::Etcd,
    key: &str,
    write: &Write,
    saved: Option<String>,
) -> Done {
    let leader = etcd_leader(key);
    let value = match write {
        Write::Shorten => return Done::No,
        Write::Clear => String::new(),
        Write::Repoint(id) => serde_json::json!({ "id": id }).to_string(),
        Write::Restore => match saved {
            Some(old) => old,
            None => return Done::No,
        },
    };
    // Fails when the key is gone (nothing to keep the lease of).
    match etcd.ctl(&["put", "--ignore-lease", &leader, &value]) {
        Some(_) => Done::Ends,
        None => Done::No,
    }
}

/// ZooKeeper's lease node for `key`.
fn zk_leader(key: &str) -> String {
    format!("/leaderd/{key}/leader")
}

pub fn zk_save(zk: &super::zookeeper::ZooKeeper, key: &str) -> Option<Vec<u8>> {
    let path = zk_leader(key);
    zk.with(async |c| c.get_data(&path).await.ok().map(|(data, _)| data))
}

/// `write` on ZooKeeper with `set` of the lease node's data (the node stays
/// its holder's ephemeral): empty, another id, the saved data. A session's
/// timeout is fixed when it starts: no shorten.
pub fn zk_write(
    zk: &super::zookeeper::ZooKeeper,
    key: &str,
    write: &Write,
    saved: Option<Vec<u8>>,
) -> Done {
    let path = zk_leader(key);
    let data = match write {
        Write::Shorten => return Done::No,
        Write::Clear => Vec::new(),
        Write::Repoint(id) => serde_json::json!({ "id": id }).to_string().into_bytes(),
        Write::Restore => match saved {
            Some(old) => old,
            None => return Done::No,
        },
    };
    let done = zk.with(async |c| c.set_data(&path, &data, None).await.is_ok());
    if done { Done::Ends } else { Done::No }
}

/// `write` on a lock file, in place (the inode stays, and with it the
/// kernel's lock): truncated, another id written, the saved text written
/// back. The text is a label for readers; the lock is what elects. No
/// duration to shorten.
pub fn file_write(path: &std::path::Path, write: &Write, saved: Option<Vec<u8>>) -> Done {
    use std::io::Write as _;
    let text = match write {
        Write::Shorten => return Done::No,
        Write::Clear => Vec::new(),
        Write::Repoint(id) => format!("{}\n", serde_json::json!({ "id": id })).into_bytes(),
        Write::Restore => match saved {
            Some(old) => old,
            None => return Done::No,
        },
    };
    let Ok(mut file) = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
    else {
        return Done::No;
    };
    file.write_all(&text).expect("write the lock file");
    Done::Kept
}
