//! Several independent `redis-server`s for Redlock: each on its own free
//! loopback port, with no persistence (a restart forgets everything).

use super::Redis;

pub struct Masters {
    pub nodes: Vec<Redis>,
}

impl Masters {
    pub fn start(n: usize) -> Masters {
        Masters {
            nodes: (0..n).map(|_| Redis::start()).collect(),
        }
    }

    /// ⌊N/2⌋ + 1.
    pub fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// `--redis URL` for every master, and a node timeout for a 2 s TTL on
    /// a loaded machine: each master has 100 ms to answer (ttl/20).
    /// Connecting keeps the default `--redis-timeout` (500 ms), as users
    /// run it: with a frozen master that bound must cost no operation
    /// anything (issue #36).
    pub fn args(&self, key: &str) -> Vec<String> {
        let urls: Vec<String> = self.nodes.iter().map(|n| n.url()).collect();
        Self::args_for(&urls, key)
    }

    /// [`Masters::args`] with the masters reached at `urls` (proxies in
    /// front of some, say).
    pub fn args_for(urls: &[String], key: &str) -> Vec<String> {
        let mut args = Vec::new();
        for url in urls {
            args.push("--redis".to_string());
            args.push(url.clone());
        }
        args.extend(["--key", key, "--redis-node-timeout", "100ms"].map(String::from));
        args
    }

    pub fn lease_key(key: &str) -> String {
        format!("leaderd:{{{key}}}:lease")
    }

    /// The lease's value on master `i`, if any.
    pub fn lease_on(&self, i: usize, key: &str) -> Option<serde_json::Value> {
        let raw = self.nodes[i].get(&Self::lease_key(key))?;
        serde_json::from_str(&raw).ok()
    }

    /// `(id, fencing_token)` of the lease on each running master.
    pub fn holders(&self, key: &str) -> Vec<Option<(String, u64)>> {
        (0..self.nodes.len())
            .map(|i| {
                if !self.nodes[i].is_running() {
                    return None;
                }
                let lease = self.lease_on(i, key)?;
                Some((
                    lease["id"].as_str()?.to_string(),
                    lease["fencing_token"].as_u64()?,
                ))
            })
            .collect()
    }
}
