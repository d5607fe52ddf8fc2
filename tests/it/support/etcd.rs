//! Real etcd members on free loopback ports: one, or a cluster of three,
//! each with its own data directory; killed, paused, restarted for real.
//! The fixture's own requests go through `etcdctl`.

use super::process::Process;
use super::{eventually, free_port};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

pub struct Member {
    pub name: String,
    pub client_port: u16,
    peer_port: u16,
    process: Process,
    initial_cluster: String,
    tls: Option<Tls>,
    /// Debian's `etcd`, or the etcd 3.6 built for kube-apiserver.
    binary: PathBuf,
}

/// A member serving its clients over TLS.
#[derive(Clone)]
pub struct Tls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Clients must present a certificate signed by the CA: this one.
    pub client: Option<(PathBuf, PathBuf)>,
}

pub struct Etcd {
    pub members: Vec<Member>,
}

impl Etcd {
    /// `n` members forming one cluster.
    pub fn start(n: usize) -> Etcd {
        Etcd::start_with(n, PathBuf::from("etcd"))
    }

    /// `n` members of the etcd `binary` forming one cluster.
    pub fn start_with(n: usize, binary: PathBuf) -> Etcd {
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let tag = super::os::below(1 << 30);
        let initial_cluster = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut members: Vec<Member> = ports
            .iter()
            .enumerate()
            .map(|(i, (client, peer))| Member {
                name: format!("m{i}"),
                client_port: *client,
                peer_port: *peer,
                process: Process::new(
                    std::env::temp_dir().join(format!("leaderd-test-etcd-{tag}-m{i}")),
                ),
                initial_cluster: initial_cluster.clone(),
                tls: None,
                binary: binary.clone(),
            })
            .collect();
        for m in &mut members {
            let _ = std::fs::remove_dir_all(m.process.dir());
            m.launch();
        }
        let etcd = Etcd { members };
        etcd.wait_healthy();
        etcd
    }

    /// One member serving its clients over TLS only.
    pub fn start_tls(tls: Tls) -> Etcd {
        let (client, peer) = (free_port(), free_port());
        let mut member = Member {
            name: "m0".into(),
            client_port: client,
            peer_port: peer,
            process: Process::new(std::env::temp_dir().join(format!(
                "leaderd-test-etcd-tls-{}",
                super::os::below(1 << 30)
            ))),
            initial_cluster: format!("m0=http://127.0.0.1:{peer}"),
            tls: Some(tls),
            binary: PathBuf::from("etcd"),
        };
        member.launch();
        let etcd = Etcd {
            members: vec![member],
        };
        etcd.wait_healthy();
        etcd
    }

    /// Every member's client URL, comma-separated (etcdctl's form).
    #[allow(dead_code)] // the benchmark's `etcdctl lock` only
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(Member::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `--etcd URL` for every member.
    pub fn args(&self) -> Vec<String> {
        self.members
            .iter()
            .flat_map(|m| ["--etcd".to_string(), m.url()])
            .collect()
    }

    /// `etcdctl` against the running members; stdout, or `None` on failure.
    pub fn ctl(&self, args: &[&str]) -> Option<String> {
        let endpoints: Vec<String> = self
            .members
            .iter()
            .filter(|m| m.process.is_running())
            .map(Member::url)
            .collect();
        let mut cmd = Command::new("etcdctl");
        cmd.env("ETCDCTL_API", "3").args([
            "--endpoints",
            &endpoints.join(","),
            "--command-timeout=3s",
        ]);
        if let Some(tls) = self.members.first().and_then(|m| m.tls.as_ref()) {
            cmd.arg(format!("--cacert={}", super::path_str(&tls.ca)));
            if let Some((cert, key)) = &tls.client {
                cmd.arg(format!("--cert={}", super::path_str(cert)));
                cmd.arg(format!("--key={}", super::path_str(key)));
            }
        }
        let out = cmd.args(args).stderr(Stdio::null()).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    fn wait_healthy(&self) {
        eventually(Duration::from_secs(30), "etcd to have a leader", || {
            self.leader().map(drop)
        });
    }

    /// The index of the member that is the raft leader now.
    pub fn leader(&self) -> Option<usize> {
        let json = self.ctl(&["endpoint", "status", "-w", "json"])?;
        let statuses: serde_json::Value = serde_json::from_str(&json).ok()?;
        let status = statuses.as_array()?.first()?;
        let leader = status["Status"]["leader"].as_u64()?;
        let all: Vec<serde_json::Value> = statuses.as_array()?.clone();
        all.iter()
            .find(|s| s["Status"]["header"]["member_id"].as_u64() == Some(leader))
            .and_then(|s| s["Endpoint"].as_str().map(str::to_string))
            .and_then(|url| self.members.iter().position(|m| m.url() == url))
    }

    /// Runs `etcdctl` until it works (the cluster may be electing).
    pub fn ctl_ok(&self, args: &[&str]) -> String {
        eventually(Duration::from_secs(20), "etcdctl to succeed", || {
            self.ctl(args)
        })
    }
}

impl Member {
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    fn launch(&mut self) {
        let state = if self.process.dir().exists() {
            "existing"
        } else {
            "new"
        };
        let mut cmd = Command::new(&self.binary);
        if let Some(tls) = &self.tls {
            cmd.args(["--cert-file", super::path_str(&tls.cert)])
                .args(["--key-file", super::path_str(&tls.key)]);
            if tls.client.is_some() {
                cmd.args([
                    "--client-cert-auth",
                    "--trusted-ca-file",
                    super::path_str(&tls.ca),
                ]);
            }
        }
        let child = cmd
            .args(["--name", &self.name])
            .args(["--data-dir", super::path_str(self.process.dir())])
            .args(["--listen-client-urls", &self.url()])
            .args(["--advertise-client-urls", &self.url()])
            .args([
                "--listen-peer-urls",
                &format!("http://127.0.0.1:{}", self.peer_port),
            ])
            .args([
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{}", self.peer_port),
            ])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-state", state])
            .args(["--initial-cluster-token", "leaderd-test"])
            // Fast elections on loopback.
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .args(["--logger", "zap", "--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {} ({e}); scripts/test installs etcd-server and builds etcd 3.6 for kube-apiserver",
                    self.binary.display()
                )
            });
        self.process.started(child);
    }

    pub fn kill(&mut self) {
        self.process.kill();
    }

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

/// How long the leader key of election `key` still has (its lease's TTL).
pub fn remaining(etcd: &Etcd, key: &str) -> Duration {
    let got = etcd.ctl_ok(&["get", &format!("leaderd/{key}/leader"), "-w", "json"]);
    let json: serde_json::Value = serde_json::from_str(&got).unwrap_or_default();
    let Some(lease) = json["kvs"][0]["lease"].as_i64() else {
        return Duration::ZERO;
    };
    let ttl = etcd.ctl_ok(&["lease", "timetolive", &format!("{lease:x}"), "-w", "json"]);
    let ttl: serde_json::Value = serde_json::from_str(&ttl).unwrap_or_default();
    // leaderd grants twice the TTL and counts the term over after the
    // first half (its logical expiry; the key stays, seen expired).
    let left = ttl["ttl"].as_i64().unwrap_or(0) - ttl["granted-ttl"].as_i64().unwrap_or(0) / 2;
    Duration::from_secs(left.max(0) as u64)
}

/// The lease the leader key of election `key` is bound to, in hex.
pub fn lease_of(etcd: &Etcd, key: &str) -> Option<String> {
    let got = etcd.ctl(&["get", &format!("leaderd/{key}/leader"), "-w", "json"])?;
    let json: serde_json::Value = serde_json::from_str(&got).ok()?;
    json["kvs"][0]["lease"].as_i64().map(|l| format!("{l:x}"))
}
