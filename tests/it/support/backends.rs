//! One scene per lease backend for the contract suite (`tests/it/contract.rs`):
//! how to point candidates at it, and the faults it can be put through.

use super::outside::{self, Done, Saved, Write};
use super::{Redis, temp_dir};
use std::path::PathBuf;
use std::time::Duration;

/// `args` with every store timeout long enough for one try on a new
/// connection on a loaded machine, and a TTL that allows them (a timeout
/// must stay under the renew interval, a Redlock node's within a tenth of
/// the TTL). For every `status` or `check` a test reads.
pub fn patient(mut args: Vec<String>) -> Vec<String> {
    for i in 1..args.len() {
        args[i] = match args[i - 1].as_str() {
            "--redis-node-timeout" => "3s".into(),
            flag if flag.starts_with("--") && flag.ends_with("-timeout") => "9s".into(),
            _ => continue,
        };
    }
    args.extend(["--ttl", "30s"].map(String::from));
    args
}

/// A running backend and what the contract suite can do to it.
pub trait Scene {
    /// The name in `leaderd::lease::names()`.
    fn name(&self) -> &'static str;
    /// The flags that select this backend for `key` (`run`, `status`, `check`).
    fn args(&self, key: &str) -> Vec<String>;
    /// The flags of the nemesis's candidate `i`: [`Scene::args`], unless
    /// the scene gives some candidates another way in (on Kubernetes the
    /// first has a Role without `watch`, so it learns of changes only on
    /// its timer).
    fn candidate_args(&self, key: &str, _i: usize) -> Vec<String> {
        self.args(key)
    }
    /// The flags for a one-shot report on `key` (`status`, `check`):
    /// [`Scene::args`] with the store given seconds to answer. A report
    /// makes one try, on a new connection (TLS and SCRAM included), where
    /// a candidate's short timeout bounds only a try it makes again; beside
    /// two CPU hogs PostgreSQL took over 200 ms to accept a connection.
    fn report_args(&self, key: &str) -> Vec<String> {
        patient(self.args(key))
    }
    /// How long the lease may still stand after its holder was SIGKILLed:
    /// `None` when the backend frees it at once (the kernel drops a lock).
    fn remaining(&self, key: &str) -> Option<Duration>;
    /// Forgets every lease and counter, as a restart without persistence.
    fn lose_data(&mut self, key: &str);
    /// Whether the store promises one leader at a time even when it loses
    /// its data ([`Scene::lose_data`]): not a single Redis (nor Sentinel's
    /// master, nor a Cluster's slot owner) without persistence, nor a
    /// PostgreSQL table truncated, which are documented limits.
    #[allow(dead_code)] // the nemesis only
    fn survives_data_loss(&self) -> bool {
        true
    }
    /// Takes the lease away from its holder behind its back.
    fn steal(&self, key: &str);
    /// Makes the backend unreachable; `false` when that cannot happen to it.
    fn cut(&mut self) -> bool;
    fn heal(&mut self);
    /// Deletes (or revokes) the lease from outside, as an operator or a
    /// cleanup would: nobody announced a release.
    fn delete(&self, key: &str);
    /// Freezes (SIGSTOP) one node of a store built to survive losing one,
    /// the one that matters most for `key`, and returns the store's own
    /// failover time; `None` for a store of one node.
    fn freeze_one(&mut self, _key: &str) -> Option<Duration> {
        None
    }
    fn thaw_one(&mut self) {}
    /// Freezes (SIGSTOP) one node whose loss the store rides out without
    /// moving the lease's own server: a Redlock master, a sentinel, an etcd
    /// or ZooKeeper follower, a Cluster replica of a primary that does not
    /// own the key's slot. `false` for a store of one node.
    fn freeze_tolerated(&mut self, _key: &str) -> bool {
        false
    }
    fn thaw_tolerated(&mut self) {}
    /// The loopback port of one node a candidate may reach through a proxy,
    /// with the store still answering when that path is slow (`args` names
    /// it as `127.0.0.1:PORT`); `None` where no such path exists.
    fn tolerated_port(&self) -> Option<u16> {
        None
    }
    /// Keeps a copy of the lease's record, for [`Write::Restore`] to put back.
    fn save(&self, _key: &str) {}
    /// Writes the lease's record from outside, as an operator, a restore or
    /// a peer would ([`Write`]); [`Done::No`] where the store has no such
    /// write.
    fn outside(&self, _key: &str, _write: &Write) -> Done {
        Done::No
    }
    /// kill -9 of every server process, keeping what the store persists;
    /// `false` when the store has no process (a local file).
    fn crash(&mut self) -> bool {
        false
    }
    /// Starts what [`Scene::crash`] killed, on the same ports and data.
    fn recover(&mut self) {}
    /// kill -9 and restart of node `which` (modulo the node count) of a store
    /// of several nodes, with its data where it keeps any; `false` for a
    /// store of one node.
    #[allow(dead_code)] // the nemesis only
    fn restart_one(&mut self, _which: usize) -> bool {
        false
    }
}

/// The lease key deleted on `redis`.
fn delete_on(redis: &Redis, key: &str) {
    redis.cmd(&["DEL", &format!("leaderd:{{{key}}}:lease")]);
}

/// The lease's remaining time on `redis`.
fn remaining_on(redis: &Redis, key: &str) -> Option<Duration> {
    let pttl = redis.pttl(&format!("leaderd:{{{key}}}:lease"));
    Some(Duration::from_millis(pttl.max(0) as u64))
}

/// Another holder's lease written over ours on `redis`.
/// How long a thief's lease lasts where the store lets it expire: longer
/// than any overwrite the nemesis plans (2 TTLs), short enough that a thief
/// a failover or a restart brings back after its deletion (a replica that
/// missed the DEL, promoted) expires soon; the nemesis counts an overwrite
/// as in force until then.
pub const THIEF_TTL: Duration = Duration::from_secs(5);

fn steal_on(redis: &Redis, key: &str) {
    let value = r#"{"id":"thief","fencing_token":1,"owner":"not-yours"}"#;
    let lease = format!("leaderd:{{{key}}}:lease");
    let ttl = THIEF_TTL.as_millis().to_string();
    redis.cmd(&["SET", &lease, value, "PX", &ttl]);
}

pub struct RedisScene {
    redis: Redis,
    /// Extra flags for TLS (`--redis-tls-ca`).
    tls_args: Vec<String>,
    /// Keeps the certificates' directory while the scene lives.
    _pki: Option<super::tls::Pki>,
    saved: Saved<outside::RedisCopy>,
}

impl RedisScene {
    pub fn start() -> Box<dyn Scene> {
        Box::new(RedisScene {
            redis: Redis::start(),
            tls_args: Vec::new(),
            _pki: None,
            saved: Saved::new(),
        })
    }

    /// Redis listening only on TLS, trusted through `--redis-tls-ca`.
    pub fn start_tls() -> Box<dyn Scene> {
        let pki = super::tls::Pki::new(&format!("scene-{}", super::os::below(1 << 30)));
        let server = pki.leaf("server", &["127.0.0.1", "localhost"], false);
        let redis = super::tls::redis(&pki, &server, false);
        let ca = pki.ca().to_str().expect("utf-8").to_string();
        Box::new(RedisScene {
            redis,
            tls_args: vec!["--redis-tls-ca".into(), ca],
            _pki: Some(pki),
            saved: Saved::new(),
        })
    }
}

impl Scene for RedisScene {
    fn name(&self) -> &'static str {
        "redis"
    }
    fn args(&self, key: &str) -> Vec<String> {
        [
            "--redis",
            &self.redis.url(),
            "--key",
            key,
            "--redis-timeout",
            "200ms",
        ]
        .map(String::from)
        .into_iter()
        .chain(self.tls_args.iter().cloned())
        .collect()
    }
    fn remaining(&self, key: &str) -> Option<Duration> {
        remaining_on(&self.redis, key)
    }
    fn lose_data(&mut self, _key: &str) {
        self.redis.restart();
    }
    fn steal(&self, key: &str) {
        steal_on(&self.redis, key);
    }
    fn cut(&mut self) -> bool {
        self.redis.pause();
        true
    }
    fn delete(&self, key: &str) {
        delete_on(&self.redis, key);
    }
    fn save(&self, key: &str) {
        self.saved.keep(outside::redis_save(&self.redis, key));
    }
    fn outside(&self, key: &str, write: &Write) -> Done {
        outside::redis_write(&self.redis, key, write, self.saved.get())
    }
    fn survives_data_loss(&self) -> bool {
        false
    }
    fn heal(&mut self) {
        self.redis.resume();
    }
}

pub struct LockFileScene {
    dir: PathBuf,
    saved: Saved<Vec<u8>>,
}

impl LockFileScene {
    pub fn start() -> Box<dyn Scene> {
        Box::new(LockFileScene {
            dir: temp_dir(&format!("contract-lock-{}", super::os::below(1 << 30))),
            saved: Saved::new(),
        })
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.lock"))
    }
}

impl Scene for LockFileScene {
    fn name(&self) -> &'static str {
        "lock-file"
    }
    fn args(&self, key: &str) -> Vec<String> {
        let path = self.path(key).to_str().expect("utf-8 path").to_string();
        vec!["--lock-file".into(), path, "--key".into(), key.into()]
    }
    fn remaining(&self, _key: &str) -> Option<Duration> {
        None
    }
    fn lose_data(&mut self, key: &str) {
        let _ = std::fs::remove_file(self.path(key));
    }
    /// A new file at the path: another candidate could lock it, so the
    /// holder of the old one must count its lease as lost.
    fn steal(&self, key: &str) {
        std::fs::remove_file(self.path(key)).expect("the lock file exists while held");
    }
    fn cut(&mut self) -> bool {
        false
    }
    fn heal(&mut self) {}
    fn delete(&self, key: &str) {
        // Absent between two holders is fine: nothing to delete.
        let _ = std::fs::remove_file(self.path(key));
    }
    fn save(&self, key: &str) {
        if let Ok(text) = std::fs::read(self.path(key)) {
            self.saved.keep(text);
        }
    }
    fn outside(&self, key: &str, write: &Write) -> Done {
        outside::file_write(&self.path(key), write, self.saved.get())
    }
}

impl Drop for LockFileScene {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Redis behind three sentinels: the lease on the master they agree on.
pub struct SentinelScene {
    rig: super::sentinel::Rig,
    saved: Saved<outside::RedisCopy>,
}

impl SentinelScene {
    pub fn start() -> Box<dyn Scene> {
        Box::new(SentinelScene {
            rig: super::sentinel::Rig::start(),
            saved: Saved::new(),
        })
    }
}

impl Scene for SentinelScene {
    fn name(&self) -> &'static str {
        "redis"
    }
    fn args(&self, key: &str) -> Vec<String> {
        [
            "--redis",
            &self.rig.url(),
            "--key",
            key,
            "--redis-timeout",
            "300ms",
        ]
        .map(String::from)
        .to_vec()
    }
    fn remaining(&self, key: &str) -> Option<Duration> {
        remaining_on(self.rig.master_node(), key)
    }
    fn lose_data(&mut self, _key: &str) {
        // The master and, by replication, its replica forget everything.
        self.rig.master_node().cmd(&["FLUSHALL"]);
    }
    fn survives_data_loss(&self) -> bool {
        false
    }
    fn steal(&self, key: &str) {
        steal_on(self.rig.master_node(), key);
    }
    fn cut(&mut self) -> bool {
        // No majority of sentinels: no master anyone may use.
        for sentinel in &self.rig.sentinels {
            sentinel.pause();
        }
        true
    }
    fn heal(&mut self) {
        for sentinel in &self.rig.sentinels {
            sentinel.resume();
        }
    }
    fn delete(&self, key: &str) {
        delete_on(self.rig.master_node(), key);
    }
    fn save(&self, key: &str) {
        self.saved
            .keep(outside::redis_save(self.rig.master_node(), key));
    }
    fn outside(&self, key: &str, write: &Write) -> Done {
        outside::redis_write(self.rig.master_node(), key, write, self.saved.get())
    }
    /// One sentinel of three: the other two are a majority.
    fn freeze_one(&mut self, _key: &str) -> Option<Duration> {
        self.rig.sentinels[0].pause();
        Some(Duration::ZERO)
    }
    fn thaw_one(&mut self) {
        self.rig.sentinels[0].resume();
    }
    fn freeze_tolerated(&mut self, key: &str) -> bool {
        self.freeze_one(key).is_some()
    }
    fn thaw_tolerated(&mut self) {
        self.thaw_one();
    }
    fn tolerated_port(&self) -> Option<u16> {
        Some(self.rig.sentinels[0].port)
    }
}

/// Redis Cluster of three primaries, a replica each: the lease on the
/// slot's owner.
pub struct ClusterScene {
    rig: super::cluster::ClusterRig,
    frozen: Option<u16>,
    saved: Saved<outside::RedisCopy>,
}

impl ClusterScene {
    pub fn start() -> Box<dyn Scene> {
        Box::new(ClusterScene {
            rig: super::cluster::ClusterRig::start(3, 1),
            frozen: None,
            saved: Saved::new(),
        })
    }

    fn owner(&self, key: &str) -> &Redis {
        self.rig.owner(&format!("leaderd:{{{key}}}:lease"))
    }
}

impl Scene for ClusterScene {
    fn name(&self) -> &'static str {
        "redis"
    }
    /// The slot's owner listed first: the worst case when it freezes (a
    /// client that asks the seeds in order asks it first).
    fn args(&self, key: &str) -> Vec<String> {
        let owner = self.owner(key).port;
        let mut seeds = vec![format!("127.0.0.1:{owner}")];
        seeds.extend(
            self.rig
                .nodes
                .iter()
                .filter(|n| n.port != owner)
                .map(|n| format!("127.0.0.1:{}", n.port)),
        );
        let url = format!("redis+cluster://{}", seeds.join(","));
        ["--redis", &url, "--key", key, "--redis-timeout", "300ms"]
            .map(String::from)
            .to_vec()
    }
    fn remaining(&self, key: &str) -> Option<Duration> {
        remaining_on(self.owner(key), key)
    }
    fn lose_data(&mut self, key: &str) {
        self.owner(key).cmd(&["FLUSHALL"]);
    }
    fn survives_data_loss(&self) -> bool {
        false
    }
    fn steal(&self, key: &str) {
        steal_on(self.owner(key), key);
    }
    fn cut(&mut self) -> bool {
        for node in &self.rig.nodes {
            node.pause();
        }
        true
    }
    fn heal(&mut self) {
        for node in &self.rig.nodes {
            node.resume();
        }
    }
    fn delete(&self, key: &str) {
        delete_on(self.owner(key), key);
    }
    fn save(&self, key: &str) {
        self.saved.keep(outside::redis_save(self.owner(key), key));
    }
    fn outside(&self, key: &str, write: &Write) -> Done {
        outside::redis_write(self.owner(key), key, write, self.saved.get())
    }
    /// The slot's owner: its replica is promoted after the cluster's node
    /// timeout (1 s), noticed a little later.
    fn freeze_one(&mut self, key: &str) -> Option<Duration> {
        let owner = self.owner(key);
        owner.pause();
        self.frozen = Some(owner.port);
        Some(Duration::from_secs(3))
    }
    fn thaw_one(&mut self) {
        if let Some(port) = self.frozen.take() {
            for node in self.rig.nodes.iter().filter(|n| n.port == port) {
                node.resume();
            }
        }
    }
    /// A replica of another primary: the slot's owner and its replica
    /// untouched, and every slot still served. (A frozen primary, any of
    /// them, takes the whole cluster down until its replica is promoted:
    /// `cluster-require-full-coverage`, Redis's default.)
    fn freeze_tolerated(&mut self, key: &str) -> bool {
        let owner = self.owner(key).port;
        let replica = self.rig.replica_of(owner).port;
        let Some(other) = self.rig.nodes.iter().find(|n| {
            n.port != owner && n.port != replica && n.info("replication").contains("role:slave")
        }) else {
            return false;
        };
        other.pause();
        self.frozen = Some(other.port);
        true
    }
    fn thaw_tolerated(&mut self) {
        self.thaw_one();
    }
}

/// Redlock over independent masters: the lease on a majority of them.
pub struct RedlockScene {
    masters: super::redlock::Masters,
    /// A copy per master.
    saved: Saved<Vec<outside::RedisCopy>>,
}

impl RedlockScene {
    pub fn start3() -> Box<dyn Scene> {
        Box::new(RedlockScene {
            masters: super::redlock::Masters::start(3),
            saved: Saved::new(),
        })
    }

    pub fn start5() -> Box<dyn Scene> {
        Box::new(RedlockScene {
            masters: super::redlock::Masters::start(5),
            saved: Saved::new(),
        })
    }
}

impl Scene for RedlockScene {
    fn name(&self) -> &'static str {
        "redlock"
    }
    fn args(&self, key: &str) -> Vec<String> {
        self.masters.args(key)
    }
    /// Held while a majority holds it: the quorum-th longest remaining time.
    fn remaining(&self, key: &str) -> Option<Duration> {
        let mut left: Vec<Duration> = self
            .masters
            .nodes
            .iter()
            .filter_map(|node| remaining_on(node, key))
            .collect();
        left.sort_by(|a, b| b.cmp(a));
        left.get(self.masters.quorum() - 1).copied()
    }
    /// Every master restarts empty: the tokens rest on the masters' clocks.
    fn lose_data(&mut self, _key: &str) {
        for node in &mut self.masters.nodes {
            node.restart();
        }
    }
    fn steal(&self, key: &str) {
        for node in &self.masters.nodes {
            steal_on(node, key);
        }
    }
    /// A majority frozen: the minority still answers, which is not enough.
    fn cut(&mut self) -> bool {
        for node in &self.masters.nodes[..self.masters.quorum()] {
            node.pause();
        }
        true
    }
    fn heal(&mut self) {
        for node in &self.masters.nodes[..self.masters.quorum()] {
            node.resume();
        }
    }
    fn delete(&self, key: &str) {
        for node in &self.masters.nodes {
            delete_on(node, key);
        }
    }
    fn save(&self, key: &str) {
        let copies = self.masters.nodes.iter();
        self.saved
            .keep(copies.map(|n| outside::redis_save(n, key)).collect());
    }
    /// On every master, as a script run on each would.
    fn outside(&self, key: &str, write: &Write) -> Done {
        let copies = self.saved.get().unwrap_or_default();
        let done: Vec<Done> = self
            .masters
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| outside::redis_write(n, key, write, copies.get(i).cloned()))
            .collect();
        // Its holder renews (or re-creates) the lease on every master that
        // lost it while its term still stands there: Redlock's way through
        // a master restarted empty, which a write from outside looks like.
        if done.contains(&Done::Ends) {
            Done::Kept
        } else {
            Done::No
        }
    }
    /// One master: the others are a majority.
    fn freeze_one(&mut self, _key: &str) -> Option<Duration> {
        self.masters.nodes[0].pause();
        Some(Duration::ZERO)
    }
    fn thaw_one(&mut self) {
        self.masters.nodes[0].resume();
    }
    fn freeze_tolerated(&mut self, key: &str) -> bool {
        self.freeze_one(key).is_some()
    }
    fn thaw_tolerated(&mut self) {
        self.thaw_one();
    }
    fn tolerated_port(&self) -> Option<u16> {
        Some(self.masters.nodes[0].port)
    }
    /// Restarted empty (no persistence).
    #[allow(dead_code)] // the nemesis only
    fn restart_one(&mut self, which: usize) -> bool {
        let n = self.masters.nodes.len();
        self.masters.nodes[which % n].restart();
        true
    }
}

/// PostgreSQL, reached through a loopback proxy that can partition it.
pub struct PgScene {
    pg: super::postgres::Postgres,
    proxy: super::proxy::Proxy,
    query: &'static str,
    name: &'static str,
    saved: Saved<outside::PgCopy>,
}

impl PgScene {
    pub fn table() -> Box<dyn Scene> {
        PgScene::start("postgres-table", "")
    }

    pub fn advisory() -> Box<dyn Scene> {
        PgScene::start("postgres-advisory", "mode=advisory")
    }

    fn start(name: &'static str, query: &'static str) -> Box<dyn Scene> {
        let pg = super::postgres::Postgres::start();
        let proxy = super::proxy::Proxy::start(pg.port);
        Box::new(PgScene {
            pg,
            proxy,
            query,
            name,
            saved: Saved::new(),
        })
    }
}

impl Scene for PgScene {
    fn name(&self) -> &'static str {
        self.name
    }
    fn args(&self, key: &str) -> Vec<String> {
        let url = self.pg.url(self.query).replace(
            &format!(":{}/", self.pg.port),
            &format!(":{}/", self.proxy.port),
        );
        [
            "--postgres",
            &url,
            "--key",
            key,
            "--postgres-timeout",
            "200ms",
        ]
        .map(String::from)
        .to_vec()
    }
    fn remaining(&self, key: &str) -> Option<Duration> {
        let ms = self.pg.sql(&format!(
            "SELECT coalesce(greatest(0, (extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint), 0) FROM leaderd_lease WHERE key = '{key}'"
        ));
        Some(Duration::from_millis(ms.parse().unwrap_or(0)))
    }
    /// A table restored empty (the fence counter with it).
    fn lose_data(&mut self, _key: &str) {
        self.pg.sql("TRUNCATE leaderd_lease");
    }
    fn survives_data_loss(&self) -> bool {
        false
    }
    fn steal(&self, key: &str) {
        self.pg.sql(&format!(
            "UPDATE leaderd_lease SET holder = 'thief', owner = 'not-yours', fence = 1, expires_at = clock_timestamp() + interval '{} milliseconds' WHERE key = '{key}'",
            THIEF_TTL.as_millis()
        ));
    }
    fn cut(&mut self) -> bool {
        self.proxy.freeze();
        true
    }
    fn heal(&mut self) {
        self.proxy.thaw();
    }
    fn delete(&self, key: &str) {
        self.pg
            .sql(&format!("DELETE FROM leaderd_lease WHERE key = '{key}'"));
    }
    fn save(&self, key: &str) {
        self.saved.keep(outside::pg_save(&self.pg, key));
    }
    /// The lease row and its term record as `psql` edits them; in advisory
    /// mode the lock is the session's, and the row beside it is what a
    /// waiter reads.
    fn outside(&self, key: &str, write: &Write) -> Done {
        outside::pg_write(&self.pg, key, write, self.saved.get())
    }
    /// `pg_ctl stop -m immediate`: its data stays.
    fn crash(&mut self) -> bool {
        self.pg.stop_immediate();
        true
    }
    fn recover(&mut self) {
        self.pg.restart();
    }
}

/// etcd: one member, or a cluster of three.
pub struct EtcdScene {
    etcd: super::etcd::Etcd,
    frozen: Option<usize>,
    saved: Saved<String>,
}

impl EtcdScene {
    pub fn one() -> Box<dyn Scene> {
        Box::new(EtcdScene {
            etcd: super::etcd::Etcd::start(1),
            frozen: None,
            saved: Saved::new(),
        })
    }

    pub fn three() -> Box<dyn Scene> {
        Box::new(EtcdScene {
            etcd: super::etcd::Etcd::start(3),
            frozen: None,
            saved: Saved::new(),
        })
    }
}

impl Scene for EtcdScene {
    fn name(&self) -> &'static str {
        "etcd"
    }
    fn args(&self, key: &str) -> Vec<String> {
        let mut args = self.etcd.args();
        args.extend(["--key", key, "--etcd-timeout", "300ms"].map(String::from));
        args
    }
    fn remaining(&self, key: &str) -> Option<Duration> {
        Some(super::etcd::remaining(&self.etcd, key))
    }
    /// etcd cannot forget what it committed; the nearest is the key gone.
    fn lose_data(&mut self, key: &str) {
        self.etcd.ctl_ok(&["del", &format!("leaderd/{key}/leader")]);
    }
    fn steal(&self, key: &str) {
        self.etcd
            .ctl_ok(&["put", &format!("leaderd/{key}/leader"), r#"{"id":"thief"}"#]);
    }
    fn cut(&mut self) -> bool {
        for m in &self.etcd.members {
            m.pause();
        }
        true
    }
    fn heal(&mut self) {
        for m in &self.etcd.members {
            m.resume();
        }
    }
    fn delete(&self, key: &str) {
        self.etcd.ctl_ok(&["del", &format!("leaderd/{key}/leader")]);
    }
    fn save(&self, key: &str) {
        if let Some(value) = outside::etcd_save(&self.etcd, key) {
            self.saved.keep(value);
        }
    }
    fn outside(&self, key: &str, write: &Write) -> Done {
        outside::etcd_write(&self.etcd, key, write, self.saved.get())
    }
    /// The etcd leader: the others elect a new one within the election
    /// timeout (500 ms in the fixtures).
    fn freeze_one(&mut self, _key: &str) -> Option<Duration> {
        if self.etcd.members.len() < 3 {
            return None;
        }
        let leader = self.etcd.leader().unwrap_or(0);
        self.etcd.members[leader].pause();
        self.frozen = Some(leader);
        Some(Duration::from_secs(1))
    }
    fn thaw_one(&mut self) {
        if let Some(i) = self.frozen.take() {
            self.etcd.members[i].resume();
        }
    }
    /// A follower: no election inside etcd, a quorum still there.
    fn freeze_tolerated(&mut self, _key: &str) -> bool {
        if self.etcd.members.len() < 3 {
            return false;
        }
        let follower = (self.etcd.leader().unwrap_or(0) + 1) % self.etcd.members.len();
        self.etcd.members[follower].pause();
        self.frozen = Some(follower);
        true
    }
    fn thaw_tolerated(&mut self) {
        self.thaw_one();
    }
    fn tolerated_port(&self) -> Option<u16> {
        (self.etcd.members.len() >= 3).then(|| self.etcd.members[0].client_port)
    }
    /// Every member killed; they come back with their data directories.
    fn crash(&mut self) -> bool {
        for m in &mut self.etcd.members {
            m.kill();
        }
        true
    }
    fn recover(&mut self) {
        for m in &mut self.etcd.members {
            m.restart();
        }
    }
    #[allow(dead_code)] // the nemesis only
    fn restart_one(&mut self, which: usize) -> bool {
        let n = self.etcd.members.len();
        if n < 3 {
            return false;
        }
        self.etcd.members[which % n].restart();
        true
    }
}

/// ZooKeeper: one standalone server, or an ensemble of three.
pub struct ZkScene {
    zk: super::zookeeper::ZooKeeper,
    frozen: Option<usize>,
    saved: Saved<Vec<u8>>,
}

impl ZkScene {
    pub fn one() -> Box<dyn Scene> {
        Box::new(ZkScene {
            zk: super::zookeeper::ZooKeeper::start(1),
            frozen: None,
            saved: Saved::new(),
        })
    }

    pub fn three() -> Box<dyn Scene> {
        Box::new(ZkScene {
            zk: super::zookeeper::ZooKeeper::start(3),
            frozen: None,
            saved: Saved::new(),
        })
    }

    fn leader_node(key: &str) -> String {
        format!("/leaderd/{key}/leader")
    }
}

impl Scene for ZkScene {
    fn name(&self) -> &'static str {
        "zookeeper"
    }
    fn args(&self, key: &str) -> Vec<String> {
        ["--zookeeper", &self.zk.connect(), "--key", key]
            .map(String::from)
            .to_vec()
    }
    /// Candidates keep ZooKeeper's default request timeout (500 ms); a
    /// report's dozen requests on a new session get seconds.
    fn report_args(&self, key: &str) -> Vec<String> {
        let mut args = self.args(key);
        args.extend(["--zookeeper-timeout", "9s"].map(String::from));
        patient(args)
    }
    /// The holder's session outlives it by the session timeout (the TTL)
    /// counted from when the servers last heard from it: at most a renew
    /// interval (a third of it) before the kill. For the suite's 2 s TTL.
    fn remaining(&self, _key: &str) -> Option<Duration> {
        Some(Duration::from_millis(1300))
    }
    /// ZooKeeper cannot forget what a quorum committed; the nearest is the
    /// election gone.
    fn lose_data(&mut self, key: &str) {
        self.zk.delete_all(&format!("/leaderd/{key}"));
    }
    /// The election deleted under a working leader, lease node and queue
    /// at once, is the documented way to two leaders on ZooKeeper (as
    /// `rm PATH*` is for the lock file): the next in line cannot know the
    /// leader still works.
    fn survives_data_loss(&self) -> bool {
        false
    }
    /// Another session's lease node written over the holder's; that session
    /// expires [`THIEF_TTL`] later.
    fn steal(&self, key: &str) {
        self.zk
            .put_ephemeral(&Self::leader_node(key), r#"{"id":"thief"}"#, THIEF_TTL);
    }
    fn cut(&mut self) -> bool {
        for s in &self.zk.servers {
            s.pause();
        }
        true
    }
    fn heal(&mut self) {
        for s in &self.zk.servers {
            s.resume();
        }
    }
    fn delete(&self, key: &str) {
        self.zk.delete(&Self::leader_node(key));
    }
    fn save(&self, key: &str) {
        if let Some(data) = outside::zk_save(&self.zk, key) {
            self.saved.keep(data);
        }
    }
    fn outside(&self, key: &str, write: &Write) -> Done {
        outside::zk_write(&self.zk, key, write, self.saved.get())
    }
    /// The ensemble's leader: the others elect a new one.
    fn freeze_one(&mut self, _key: &str) -> Option<Duration> {
        if self.zk.servers.len() < 3 {
            return None;
        }
        let leader = self.zk.leader().unwrap_or(0);
        self.zk.servers[leader].pause();
        self.frozen = Some(leader);
        Some(super::zookeeper::failover())
    }
    fn thaw_one(&mut self) {
        if let Some(i) = self.frozen.take() {
            self.zk.servers[i].resume();
        }
    }
    /// None for now. A frozen follower is ridden out by the ensemble, but
    /// not always by the leader whose session it holds: the client gives the
    /// silent server up after 2/5 of the TTL and may try it again before
    /// another, so the renewal can miss the renew deadline (2/3 of the TTL)
    /// and the term ends, safely, with the child stopped first. Seen once
    /// in a clean-clone CI run; the contract's "one node frozen past the
    /// TTL" (a leader again, never two) still freezes a ZooKeeper server.
    fn freeze_tolerated(&mut self, _key: &str) -> bool {
        false
    }
    fn thaw_tolerated(&mut self) {
        self.thaw_one();
    }
    /// None for now, for the same reason as [`Scene::freeze_tolerated`]: a
    /// slow server still answers its pings, so the client keeps the
    /// session there while every renewal times out (600 ms round trips
    /// against a 333 ms request timeout at a 2 s TTL). It passed only when
    /// the leader's session happened to be on another server.
    fn tolerated_port(&self) -> Option<u16> {
        None
    }
    /// Every server killed; they come back with their data directories.
    fn crash(&mut self) -> bool {
        for s in &mut self.zk.servers {
            s.kill();
        }
        true
    }
    fn recover(&mut self) {
        for s in &mut self.zk.servers {
            s.restart();
        }
        self.zk.wait_serving();
    }
    #[allow(dead_code)] // the nemesis only
    fn restart_one(&mut self, which: usize) -> bool {
        let n = self.zk.servers.len();
        if n < 3 {
            return false;
        }
        self.zk.servers[which % n].restart();
        true
    }
}

/// A Kubernetes Lease on a real kube-apiserver and etcd 3.6.
pub struct KubeScene {
    kube: super::kube::Kube,
    /// The candidates' kubeconfig (user `leaderd-candidate`, leaderd's Role).
    kubeconfig: PathBuf,
    frozen: Option<usize>,
    /// A copy of the Lease, saved at the last [`Scene::save`], to put back.
    saved: Saved<serde_json::Value>,
}

/// The Lease a test key elects with (the key as a Lease name).
pub fn lease_name(key: &str) -> String {
    leaderd::lease::kubernetes::names::name_from_key(key).expect("a test key maps to a name")
}

impl KubeScene {
    fn with(members: usize) -> Box<dyn Scene> {
        let kube = super::kube::Kube::start(members);
        let kubeconfig = kube.kubeconfig(super::kube::CANDIDATE, 0);
        // leaderd's Role without `watch`, on every Lease: a candidate that
        // learns of changes only on its timer (`candidate_args`).
        let blind = serde_json::json!([{
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "update", "patch", "create"],
        }]);
        kube.role("no-watch", &blind, "no-watch");
        Box::new(KubeScene {
            kube,
            kubeconfig,
            frozen: None,
            saved: Saved::new(),
        })
    }

    pub fn one() -> Box<dyn Scene> {
        KubeScene::with(1)
    }

    /// kube-apiserver on an etcd of three members.
    pub fn three() -> Box<dyn Scene> {
        KubeScene::with(3)
    }
}

impl Scene for KubeScene {
    fn name(&self) -> &'static str {
        "kubernetes"
    }
    fn args(&self, key: &str) -> Vec<String> {
        let config = super::path_str(&self.kubeconfig).to_string();
        [
            "--kubernetes-lease",
            &lease_name(key),
            "--kubeconfig",
            &config,
            "--key",
            key,
            "--kubernetes-timeout",
            "300ms",
        ]
        .map(String::from)
        .to_vec()
    }
    /// A waiter counts the lease's duration from when it saw the last
    /// renewal: up to the whole of it.
    /// What is left of the lease: `leaseDurationSeconds` from its last
    /// renewal (a waiter counts from when it saw that renewal, which is no
    /// earlier), not from now: a waiter may rightly take over up to a
    /// renew interval less than a whole duration after the holder's kill.
    fn remaining(&self, key: &str) -> Option<Duration> {
        let lease = self.kube.lease(&lease_name(key))?;
        let secs = lease["spec"]["leaseDurationSeconds"].as_u64().unwrap_or(0);
        let renewed = humantime::parse_rfc3339(lease["spec"]["renewTime"].as_str()?).ok()?;
        let since = std::time::SystemTime::now()
            .duration_since(renewed)
            .unwrap_or_default();
        Some(Duration::from_secs(secs).saturating_sub(since))
    }
    /// The API server cannot forget what etcd committed; the nearest is
    /// the Lease gone.
    fn lose_data(&mut self, key: &str) {
        self.kube.delete_lease(&lease_name(key));
    }
    fn steal(&self, key: &str) {
        let now = "2026-01-01T00:00:00.000000Z";
        let patch = serde_json::json!({
            "metadata": { "annotations": { "leaderd.io/owner": "not-yours" } },
            "spec": {
                "holderIdentity": "thief",
                "leaseDurationSeconds": THIEF_TTL.as_secs(),
                "acquireTime": now,
                "renewTime": now,
            },
        });
        self.kube.patch_lease(&lease_name(key), &patch);
    }
    fn cut(&mut self) -> bool {
        for s in &self.kube.servers {
            s.pause();
        }
        true
    }
    fn heal(&mut self) {
        for s in &self.kube.servers {
            s.resume();
        }
    }
    fn delete(&self, key: &str) {
        self.kube.delete_lease(&lease_name(key));
    }
    fn candidate_args(&self, key: &str, i: usize) -> Vec<String> {
        let mut args = self.args(key);
        if i == 0 {
            let blind = self.kube.kubeconfig("no-watch", 0);
            args[3] = super::path_str(&blind).to_string();
        }
        args
    }
    fn save(&self, key: &str) {
        if let Some(lease) = self.kube.lease(&lease_name(key)) {
            self.saved.keep(lease);
        }
    }
    fn outside(&self, key: &str, write: &Write) -> Done {
        use super::kube::Outside;
        let name = lease_name(key);
        let write = match write {
            Write::Clear => Outside::Clear,
            Write::Repoint(id) => Outside::Repoint(id.clone()),
            Write::Shorten => Outside::Shorten,
            Write::Restore => match self.saved.get() {
                Some(old) => Outside::Restore(old),
                None => return Done::No,
            },
        };
        if self.kube.outside(&name, &write) {
            Done::Ends
        } else {
            Done::No
        }
    }
    /// An etcd follower *killed*, not frozen: kube-apiserver's etcd client
    /// keeps sending every third request to a member that holds its
    /// connection open and never answers, until its gRPC keep-alive gives
    /// it up (40 s), so a frozen member is a fault the API server does not
    /// ride out at a 2 s TTL (docs/backends.md); a dead one it does.
    fn freeze_tolerated(&mut self, _key: &str) -> bool {
        let etcd = &mut self.kube.etcd;
        if etcd.members.len() < 3 {
            return false;
        }
        let follower = (etcd.leader().unwrap_or(0) + 1) % etcd.members.len();
        etcd.members[follower].kill();
        self.frozen = Some(follower);
        true
    }
    fn thaw_tolerated(&mut self) {
        if let Some(i) = self.frozen.take() {
            self.kube.etcd.members[i].restart();
        }
    }
    fn crash(&mut self) -> bool {
        self.kube.crash();
        true
    }
    fn recover(&mut self) {
        self.kube.recover();
    }
    fn restart_one(&mut self, which: usize) -> bool {
        let n = self.kube.etcd.members.len();
        if n < 3 {
            return false;
        }
        self.kube.etcd.members[which % n].restart();
        true
    }
}
