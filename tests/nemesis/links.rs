//! Each candidate's own way to the store: every loopback address in the
//! backend's flags is replaced, per candidate, by a proxy of its own to it,
//! so one candidate can be cut off (a partition), slowed (latency) or have
//! its connections reset while the others are not. Addresses the store
//! hands out itself (Sentinel's master, a Cluster's redirects) are reached
//! directly: there the faults are partial, cutting the candidate off from
//! the sentinels or the seed nodes only, which is a fault worth having too.
//! The lock file has no address: these faults do not apply to it.

use crate::support::proxy::Proxy;
use std::collections::BTreeMap;
use std::time::Duration;

pub struct Links {
    /// Candidate `i`'s proxies.
    proxies: Vec<Vec<Proxy>>,
    /// Candidate `i`'s flags.
    pub args: Vec<Vec<String>>,
}

/// The loopback ports named in `args` (`127.0.0.1:PORT`, `localhost:PORT`).
fn ports(args: &[String]) -> Vec<u16> {
    let mut found = Vec::new();
    for arg in args {
        for host in ["127.0.0.1:", "localhost:"] {
            for (at, _) in arg.match_indices(host) {
                let digits: String = arg[at + host.len()..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                if let Ok(port) = digits.parse::<u16>()
                    && !found.contains(&port)
                {
                    found.push(port);
                }
            }
        }
    }
    found
}

/// `arg` with each `HOST:PORT` of `map` pointed at its proxy instead.
fn rewrite(arg: &str, map: &BTreeMap<u16, u16>) -> String {
    let mut out = String::new();
    let mut rest = arg;
    'scan: while !rest.is_empty() {
        for host in ["127.0.0.1:", "localhost:"] {
            if let Some(tail) = rest.strip_prefix(host) {
                let digits: String = tail.chars().take_while(char::is_ascii_digit).collect();
                let port = digits.parse::<u16>().ok().and_then(|p| map.get(&p));
                if let Some(proxy) = port {
                    out.push_str(&format!("{host}{proxy}"));
                    rest = &tail[digits.len()..];
                    continue 'scan;
                }
            }
        }
        let c = rest.chars().next().expect("not empty");
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

impl Links {
    /// Proxies for each of `k` candidates to every address in `args`.
    pub fn new(args: &[String], k: usize) -> Links {
        let targets = ports(args);
        let mut links = Links {
            proxies: Vec::new(),
            args: Vec::new(),
        };
        for _ in 0..k {
            let proxies: Vec<Proxy> = targets.iter().map(|&t| Proxy::start(t)).collect();
            let map: BTreeMap<u16, u16> = targets
                .iter()
                .zip(&proxies)
                .map(|(&t, p)| (t, p.port))
                .collect();
            links
                .args
                .push(args.iter().map(|a| rewrite(a, &map)).collect());
            links.proxies.push(proxies);
        }
        links
    }

    /// Whether candidate `i` has a way of its own to cut.
    pub fn has(&self, i: usize) -> bool {
        self.proxies.get(i).is_some_and(|p| !p.is_empty())
    }

    pub fn cut(&self, i: usize) {
        self.proxies[i].iter().for_each(Proxy::freeze);
    }

    pub fn slow(&self, i: usize, delay: Duration) {
        self.proxies[i].iter().for_each(|p| p.slow(delay));
    }

    pub fn reset(&self, i: usize) {
        self.proxies[i].iter().for_each(Proxy::reset);
    }

    /// Candidate `i`'s way back to normal.
    pub fn heal(&self, i: usize) {
        for p in &self.proxies[i] {
            p.slow(Duration::ZERO);
            p.thaw();
        }
    }
}

/// The rewriting, tested on its own (for `--sanity`).
pub fn self_test() -> Result<(), String> {
    let args = [
        "--redis".to_string(),
        "redis://127.0.0.1:7000,localhost:7001/0".to_string(),
        "--etcd".to_string(),
        "http://127.0.0.1:7000".to_string(),
        "--key".to_string(),
        "k:127".to_string(),
    ];
    if ports(&args) != [7000, 7001] {
        return Err(format!("ports found: {:?}", ports(&args)));
    }
    let map = BTreeMap::from([(7000, 9000), (7001, 9001)]);
    let got = rewrite(&args[1], &map);
    if got != "redis://127.0.0.1:9000,localhost:9001/0" {
        return Err(format!("rewritten: {got}"));
    }
    if rewrite("127.0.0.1:70001", &map) != "127.0.0.1:70001" {
        return Err("a longer number was taken for a port".into());
    }
    Ok(())
}
