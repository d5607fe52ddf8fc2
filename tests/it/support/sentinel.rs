//! A Redis Sentinel deployment on loopback: a master, a replica and three
//! sentinels (quorum 2, `down-after-milliseconds 3000`), each on a free
//! port, ready once every sentinel sees the master, the replica and enough
//! other sentinels to authorise a failover (`SENTINEL CKQUORUM`).

use super::{Redis, Scratch, eventually, free_port, path_str};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const SERVICE: &str = "leaderd-svc";
const PATIENCE: Duration = Duration::from_secs(30);
/// How long a failover may take: the sentinels elect one of them to lead
/// it, and an election whose votes split (more likely on a loaded machine,
/// where their timers fire late; seen with two CPU hogs beside the suite)
/// is tried again only after twice `failover-timeout`, 8 s here; and a
/// sentinel whose timer fired 2 s late enters TILT mode and acts on nothing
/// for 30 s (seen once in 60 s under the same load). A TILT and several
/// rounds fit.
const FAILOVER_PATIENCE: Duration = Duration::from_secs(90);
/// How long a sentinel waits for a server's reply before judging it down
/// (`down-after-milliseconds`). A replica judged down is no good for a
/// failover (`-failover-abort-no-good-slave`), and the deployment is not
/// ready while one is: at 1 s, a replica or a sentinel starved for a
/// second by two CPU hogs beside the suite was, again and again, for over
/// 90 s. 3 s rides that out, and costs each failover test 2 s.
const DOWN_AFTER_MS: u64 = 3000;

pub struct Sentinel {
    pub port: u16,
    child: Child,
    /// The sentinels' own password, when they have one.
    password: Option<String>,
    /// Its log file (`logfile`).
    log: std::path::PathBuf,
}

impl Sentinel {
    fn start(
        dir: &std::path::Path,
        n: usize,
        master_port: u16,
        password: Option<&str>,
    ) -> Sentinel {
        let port = free_port();
        let conf = dir.join(format!("sentinel-{n}.conf"));
        let work = dir.join(format!("sentinel-{n}"));
        std::fs::create_dir_all(&work).expect("sentinel dir");
        let text = format!(
            "port {port}\nbind 127.0.0.1\ndir {}\nlogfile {}\n\
             sentinel monitor {SERVICE} 127.0.0.1 {master_port} 2\n\
             sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n\
             sentinel failover-timeout {SERVICE} 4000\n\
             sentinel parallel-syncs {SERVICE} 1\n{}",
            path_str(&work),
            path_str(&work.join("sentinel.log")),
            // Sentinels with a password of their own authenticate to each
            // other with it too.
            password.map_or(String::new(), |p| format!(
                "requirepass {p}\nsentinel sentinel-user default\nsentinel sentinel-pass {p}\n"
            ))
        );
        std::fs::write(&conf, text).expect("sentinel config");
        let child = Command::new("redis-server")
            .args([path_str(&conf), "--sentinel"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (as a sentinel)");
        Sentinel {
            port,
            child,
            password: password.map(str::to_string),
            log: work.join("sentinel.log"),
        }
    }

    /// The end of this sentinel's log: what it did about a failover.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        // What made a replica no good (`+sdown slave`, a TILT) can come
        // well before the last tries: the lines about the replicas and the
        // TILTs, then the end.
        let lines: Vec<&str> = log.lines().collect();
        let mut shown: Vec<&str> = lines
            .iter()
            .filter(|l| l.contains("slave") || l.contains("tilt"))
            .copied()
            .collect();
        shown.push("...");
        shown.extend(&lines[lines.len().saturating_sub(15)..]);
        shown.join("\n")
    }

    pub fn cmd(&self, args: &[&str]) -> Result<redis::Value, redis::RedisError> {
        let auth = self
            .password
            .as_ref()
            .map_or(String::new(), |p| format!("default:{p}@"));
        let client = redis::Client::open(format!("redis://{auth}127.0.0.1:{}", self.port))?;
        let mut conn = client.get_connection_with_timeout(Duration::from_secs(2))?;
        conn.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        cmd.query(&mut conn)
    }

    /// The master's address as this sentinel names it.
    pub fn master(&self) -> Option<(String, u16)> {
        let reply = self
            .cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE])
            .ok()?;
        let (host, port): (String, String) = redis::from_redis_value(reply).ok()?;
        Some((host, port.parse().ok()?))
    }

    pub fn pause(&self) {
        super::send_signal(self.child.id(), "STOP");
    }

    pub fn resume(&self) {
        super::send_signal(self.child.id(), "CONT");
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        super::send_signal(self.child.id(), "CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct Rig {
    /// The nodes by their original roles; after a failover `replica` may be
    /// the master: ask [`Rig::master_node`].
    pub nodes: Vec<Redis>,
    pub sentinels: Vec<Sentinel>,
    _dir: Scratch,
}

impl Rig {
    pub fn start() -> Rig {
        Rig::start_with(None)
    }

    /// With sentinels that require `password` (`requirepass`).
    pub fn start_with(password: Option<&str>) -> Rig {
        let dir = Scratch::new(&format!("sentinel-{}", free_port()));
        let master = Redis::start();
        let port = master.port.to_string();
        let replica = Redis::start_with(&["--replicaof", "127.0.0.1", &port]);
        let sentinels = (0..3)
            .map(|n| Sentinel::start(&dir, n, master.port, password))
            .collect();
        let rig = Rig {
            nodes: vec![master, replica],
            sentinels,
            _dir: dir,
        };
        rig.wait_ready();
        rig
    }

    /// Every sentinel sees the master, its replica online, and a quorum.
    pub fn wait_ready(&self) {
        eventually(PATIENCE, "the Sentinel deployment to be ready", || {
            let master = self.master_node();
            let online = master.info("replication").contains("state=online");
            let ready = self.sentinels.iter().all(|s| {
                let quorum = s.cmd(&["SENTINEL", "CKQUORUM", SERVICE]).is_ok();
                let replicas = s
                    .cmd(&["SENTINEL", "REPLICAS", SERVICE])
                    .map(|v| format!("{v:?}"))
                    .unwrap_or_default();
                quorum && replicas.contains("slave") && !replicas.contains("s_down")
            });
            (online && ready).then_some(())
        });
    }

    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis+sentinel://{}/{SERVICE}", hosts.join(","))
    }

    /// The node the sentinels' majority names now.
    pub fn master_node(&self) -> &Redis {
        let port = self.agreed_master().map(|(_, p)| p);
        self.nodes
            .iter()
            .find(|n| Some(n.port) == port)
            .unwrap_or(&self.nodes[0])
    }

    /// The address at least two sentinels name.
    pub fn agreed_master(&self) -> Option<(String, u16)> {
        let named: Vec<_> = self.sentinels.iter().filter_map(Sentinel::master).collect();
        named
            .iter()
            .find(|a| named.iter().filter(|b| b == a).count() >= 2)
            .cloned()
    }

    /// `SENTINEL FAILOVER`, then waits until a majority of the sentinels
    /// name a new master; returns it.
    pub fn failover(&self) -> (String, u16) {
        let old = self.agreed_master().expect("a master");
        // A sentinel that last heard from the replica too long ago (it, or
        // the sentinel, starved on a loaded machine) answers NOGOODSLAVE
        // until it hears again: asked again, within the failover's bound.
        let began = std::time::Instant::now();
        while let Err(e) = self.sentinels[0].cmd(&["SENTINEL", "FAILOVER", SERVICE]) {
            let not_yet = e.to_string().contains("NOGOODSLAVE");
            if !not_yet || began.elapsed() > FAILOVER_PATIENCE {
                panic!("SENTINEL FAILOVER: {e}\n{}", self.sentinels[0].log_tail());
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        self.await_new_master(&old)
    }

    /// Waits until a majority of the sentinels name a master other than
    /// `old`: the master leaderd follows (it asks them all and follows a
    /// majority), whatever a third one lagging behind says.
    /// On a timeout, the sentinels' logs say why (a TILT, no good replica,
    /// votes that split).
    pub fn await_new_master(&self, old: &(String, u16)) -> (String, u16) {
        let began = std::time::Instant::now();
        loop {
            if let Some(new) = self.agreed_master().filter(|agreed| agreed != old) {
                return new;
            }
            if began.elapsed() > FAILOVER_PATIENCE {
                let logs: Vec<String> = self
                    .sentinels
                    .iter()
                    .map(|s| format!("sentinel :{}\n{}", s.port, s.log_tail()))
                    .collect();
                panic!(
                    "no majority of the sentinels named a new master within {FAILOVER_PATIENCE:?}:\n{}",
                    logs.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
