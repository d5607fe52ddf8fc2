//! A Redis Cluster on loopback: N primaries (and R replicas each), made
//! with `redis-cli --cluster create`, ready once every node reports
//! `cluster_state:ok` and every replica's link is up.

use super::{Redis, eventually};
use std::process::Command;
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(30);

pub struct ClusterRig {
    pub nodes: Vec<Redis>,
}

impl ClusterRig {
    pub fn start(primaries: usize, replicas: usize) -> ClusterRig {
        let nodes: Vec<Redis> = (0..primaries * (1 + replicas))
            .map(|_| {
                Redis::start_on(
                    super::free_cluster_port(),
                    &["--cluster-enabled", "yes", "--cluster-node-timeout", "1000"],
                )
            })
            .collect();
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port));
        }
        let out = create
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli is installed with redis-server");
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let rig = ClusterRig { nodes };
        rig.wait_ready();
        rig
    }

    pub fn wait_ready(&self) {
        eventually(PATIENCE, "the cluster to be ready", || {
            self.nodes
                .iter()
                .filter(|n| n.is_running())
                .all(|n| {
                    let cluster = n.info_cluster();
                    let replication = n.info("replication");
                    cluster.contains("cluster_state:ok")
                        && (replication.contains("role:master")
                            || replication.contains("master_link_status:up"))
                })
                .then_some(())
        });
    }

    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// The port of the primary that owns `key`'s slot, as the live nodes
    /// agree.
    pub fn owner_port(&self, key: &str) -> Option<u16> {
        let asker = self.nodes.iter().find(|n| n.is_running())?;
        let slot: i64 = redis::from_redis_value(asker.cmd(&["CLUSTER", "KEYSLOT", key])).ok()?;
        let reply = asker.cmd(&["CLUSTER", "SLOTS"]);
        let redis::Value::Array(ranges) = reply else {
            return None;
        };
        ranges.iter().find_map(|range| match range {
            redis::Value::Array(fields) => match fields.as_slice() {
                [
                    redis::Value::Int(a),
                    redis::Value::Int(b),
                    redis::Value::Array(primary),
                    ..,
                ] if (*a..=*b).contains(&slot) => match primary.get(1) {
                    Some(redis::Value::Int(port)) => u16::try_from(*port).ok(),
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        })
    }

    pub fn owner(&self, key: &str) -> &Redis {
        let port = self.owner_port(key).expect("an owner");
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .expect("a node of the rig")
    }

    /// The replica of `primary` (by port).
    pub fn replica_of(&self, primary: u16) -> &Redis {
        self.nodes
            .iter()
            .filter(|n| n.is_running())
            .find(|n| {
                n.info("replication")
                    .contains(&format!("master_port:{primary}"))
            })
            .expect("a replica")
    }
}
