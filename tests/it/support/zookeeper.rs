//! Real ZooKeeper servers (Debian's `zookeeper`, on Java) on free loopback
//! ports: one standalone server, or an ensemble of three, each with its own
//! data directory; killed, paused, restarted for real. The fixture's own
//! requests go through the same client crate leaderd uses, on a runtime of
//! their own.

use super::process::Process;
use super::{eventually, free_port};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The fixture's tickTime: sessions between 2 and 60 ticks' worth are
/// granted, as set below, and a frozen leader is noticed in `SYNC_LIMIT` ticks.
const TICK_MS: u64 = 250;
const SYNC_LIMIT: u64 = 4;
/// The longest session the servers grant (`maxSessionTimeout`).
pub const MAX_SESSION: Duration = Duration::from_secs(60);

pub struct Server {
    pub client_port: u16,
    /// The TLS port (`secureClientPort`), beside the plain one.
    pub secure_port: Option<u16>,
    process: Process,
}

pub struct ZooKeeper {
    pub servers: Vec<Server>,
    /// Written into every zoo.cfg: the ensemble's members.
    members: String,
    /// Written into every zoo.cfg: TLS on the secure port.
    tls: String,
}

/// A server's TLS: its certificate and key, the CA it trusts for clients,
/// and whether clients must present a certificate.
pub struct Tls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
    pub clients_need_certs: bool,
}

impl ZooKeeper {
    /// `n` servers forming one ensemble (`n` = 1: standalone).
    pub fn start(n: usize) -> ZooKeeper {
        let tag = super::os::below(1 << 30);
        let ports: Vec<(u16, u16, u16)> = (0..n)
            .map(|_| (free_port(), free_port(), free_port()))
            .collect();
        let members = if n == 1 {
            String::new()
        } else {
            ports
                .iter()
                .enumerate()
                .map(|(i, (_, quorum, election))| {
                    format!("server.{}=127.0.0.1:{quorum}:{election}\n", i + 1)
                })
                .collect()
        };
        let mut zk = ZooKeeper {
            servers: ports
                .iter()
                .enumerate()
                .map(|(i, (client, _, _))| Server {
                    client_port: *client,
                    secure_port: None,
                    process: Process::new(
                        std::env::temp_dir().join(format!("leaderd-test-zk-{tag}-{i}")),
                    ),
                })
                .collect(),
            members,
            tls: String::new(),
        };
        for s in &zk.servers {
            let _ = std::fs::remove_dir_all(s.process.dir());
        }
        zk.launch_all();
        zk
    }

    /// One server with a TLS port beside its plain one (which the fixture
    /// itself uses).
    #[allow(dead_code)] // the zookeeper tests only
    pub fn start_tls(tls: &Tls) -> ZooKeeper {
        let secure = free_port();
        let dir =
            std::env::temp_dir().join(format!("leaderd-test-zk-tls-{}", super::os::below(1 << 30)));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a ZooKeeper directory");
        // ZooKeeper's PEM key store: the key, then the certificate.
        let store = dir.join("server-store.pem");
        let pem = |p: &PathBuf| std::fs::read_to_string(p).expect("a PEM file");
        std::fs::write(&store, pem(&tls.key) + &pem(&tls.cert)).expect("the key store");
        let mut zk = ZooKeeper {
            servers: vec![Server {
                client_port: free_port(),
                secure_port: Some(secure),
                process: Process::new(dir),
            }],
            members: String::new(),
            tls: format!(
                "secureClientPort={secure}\nsecureClientPortAddress=127.0.0.1\nserverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\nssl.keyStore.location={}\nssl.keyStore.type=PEM\nssl.trustStore.location={}\nssl.trustStore.type=PEM\nssl.clientAuth={}\n",
                super::path_str(&store),
                super::path_str(&tls.ca),
                if tls.clients_need_certs {
                    "need"
                } else {
                    "none"
                }
            ),
        };
        zk.launch_all();
        zk
    }

    /// The TLS connect string.
    #[allow(dead_code)] // the zookeeper tests only
    pub fn secure_connect(&self) -> String {
        self.servers
            .iter()
            .filter_map(|s| s.secure_port)
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn launch_all(&mut self) {
        for i in 0..self.servers.len() {
            self.configure(i);
            self.servers[i].launch();
        }
        self.wait_serving();
    }

    fn configure(&self, i: usize) {
        let s = &self.servers[i];
        let data = s.process.dir().join("data");
        std::fs::create_dir_all(&data).expect("a ZooKeeper data directory");
        std::fs::write(data.join("myid"), format!("{}\n", i + 1)).expect("myid");
        let cfg = format!(
            "tickTime={TICK_MS}\ninitLimit=20\nsyncLimit={SYNC_LIMIT}\ndataDir={}\nclientPort={}\nclientPortAddress=127.0.0.1\nminSessionTimeout={}\nmaxSessionTimeout={}\nadmin.enableServer=false\n4lw.commands.whitelist=srvr,ruok,mntr\nmaxClientCnxns=0\n{}{}",
            super::path_str(&data),
            s.client_port,
            2 * TICK_MS,
            MAX_SESSION.as_millis(),
            self.members,
            self.tls
        );
        std::fs::write(s.process.dir().join("zoo.cfg"), cfg).expect("zoo.cfg");
    }

    /// The connect string of every server, and `/chroot` when given.
    pub fn connect(&self) -> String {
        self.servers
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Every running server answers, and one of them leads (or stands alone).
    pub fn wait_serving(&self) {
        eventually(Duration::from_secs(60), "ZooKeeper to serve", || {
            let modes: Vec<String> = self
                .servers
                .iter()
                .filter(|s| s.process.is_running())
                .filter_map(Server::mode)
                .collect();
            let running = self
                .servers
                .iter()
                .filter(|s| s.process.is_running())
                .count();
            (modes.len() == running && modes.iter().any(|m| m == "leader" || m == "standalone"))
                .then_some(())
        });
    }

    /// The index of the server that leads the ensemble now.
    pub fn leader(&self) -> Option<usize> {
        self.servers
            .iter()
            .position(|s| s.process.is_running() && s.mode().as_deref() == Some("leader"))
    }

    /// Runs `f` with a session on the ensemble (the fixture's own).
    pub fn with<T>(&self, f: impl AsyncFnOnce(&zookeeper_client::Client) -> T) -> T {
        let connect = self.connect();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        rt.block_on(async move {
            let client = eventually_async(&connect).await;
            f(&client).await
        })
    }

    /// Deletes `path` and everything under it, if present.
    pub fn delete_all(&self, path: &str) {
        self.with(async |c| {
            let mut stack = vec![path.to_string()];
            let mut order = Vec::new();
            while let Some(p) = stack.pop() {
                if let Ok(children) = c.list_children(&p).await {
                    stack.extend(children.into_iter().map(|ch| format!("{p}/{ch}")));
                    order.push(p);
                }
            }
            for p in order.iter().rev() {
                let _ = c.delete(p, None).await;
            }
        });
    }

    /// Deletes one node, if present.
    pub fn delete(&self, path: &str) {
        self.with(async |c| {
            let _ = c.delete(path, None).await;
        });
    }

    /// Writes a persistent node at `path` (replacing what is there).
    pub fn put(&self, path: &str, data: &str) {
        self.with(async |c| {
            let _ = c.delete(path, None).await;
            let options = zookeeper_client::CreateMode::Persistent
                .with_acls(zookeeper_client::Acls::anyone_all());
            let _ = c.create(path, data.as_bytes(), &options).await;
        });
    }

    /// Replaces the node at `path` with an ephemeral one of a session of
    /// its own that nobody keeps alive: another holder, gone by itself once
    /// the servers expire that session (`ttl` after this returns).
    pub fn put_ephemeral(&self, path: &str, data: &str, ttl: Duration) {
        let connect = self.connect();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        rt.block_on(async move {
            let c = zookeeper_client::Client::connector()
                .with_session_timeout(ttl)
                .with_connection_timeout(Duration::from_secs(2))
                .connect(&connect)
                .await
                .expect("a thief's session");
            let _ = c.delete(path, None).await;
            let options = zookeeper_client::CreateMode::Ephemeral
                .with_acls(zookeeper_client::Acls::anyone_all());
            let _ = c.create(path, data.as_bytes(), &options).await;
            // Dropped with the runtime, unclosed: the session lives on the
            // servers until it expires.
            std::mem::forget(c);
        });
    }

    /// The children of `path`, sorted by name.
    #[allow(dead_code)] // the zookeeper tests only
    pub fn children(&self, path: &str) -> Vec<String> {
        self.with(async |c| {
            let mut children = c.list_children(path).await.unwrap_or_default();
            children.sort();
            children
        })
    }
}

/// A fixture session, retried while the ensemble elects.
async fn eventually_async(connect: &str) -> zookeeper_client::Client {
    let start = std::time::Instant::now();
    loop {
        let attempt = zookeeper_client::Client::connector()
            .with_session_timeout(Duration::from_secs(5))
            .with_connection_timeout(Duration::from_secs(2))
            .connect(connect);
        if let Ok(Ok(client)) = tokio::time::timeout(Duration::from_secs(5), attempt).await {
            return client;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no ZooKeeper session at {connect} in 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

impl Server {
    fn launch(&mut self) {
        let cfg = self.process.dir().join("zoo.cfg");
        let child = Command::new("java")
            .args(["-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
            .arg(format!(
                "-Dzookeeper.log.dir={}",
                super::path_str(self.process.dir())
            ))
            // Netty's codec, which the TLS port needs, is missing from the
            // jar's own class path in Debian's package.
            .args([
                "-cp",
                "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/netty-codec.jar",
            ])
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("java and ZooKeeper are installed (scripts/test installs zookeeper)");
        self.process.started(child);
    }

    /// A four-letter command's reply (`srvr`, `ruok`, `mntr`).
    pub fn command(&self, word: &str) -> Option<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.client_port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
        s.write_all(word.as_bytes()).ok()?;
        let mut reply = String::new();
        s.read_to_string(&mut reply).ok()?;
        Some(reply)
    }

    /// `srvr`'s Mode: leader, follower or standalone; `None` when not serving.
    pub fn mode(&self) -> Option<String> {
        self.command("srvr")?
            .lines()
            .find_map(|l| l.strip_prefix("Mode: "))
            .map(|m| m.trim().to_string())
    }

    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// kill -9 and start again on the same port and data.
    pub fn restart(&mut self) {
        self.process.kill();
        self.launch();
    }

    pub fn pause(&self) {
        self.process.pause();
    }

    pub fn resume(&self) {
        self.process.resume();
    }
}

/// How long the fixture's ensemble takes to replace a frozen leader:
/// followers give up on it after `SYNC_LIMIT` ticks, then elect.
pub fn failover() -> Duration {
    Duration::from_millis(TICK_MS * SYNC_LIMIT) + Duration::from_secs(2)
}
