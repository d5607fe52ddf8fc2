//! Each candidate's own way to the store: every loopback address in the
//! backend's flags, and in the files they name (a kubeconfig's server), is
//! replaced, per candidate, by a proxy of its own to it (a file by a copy
//! of its own),
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

/// The text of the file `arg` names, when it names a small one.
fn named_file(arg: &str) -> Option<String> {
    let path = std::path::Path::new(arg);
    let small = std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() < 1 << 16);
    small.then(|| std::fs::read_to_string(path).ok()).flatten()
}

/// The loopback ports named in `args` (`127.0.0.1:PORT`, `localhost:PORT`),
/// or in the files they name.
fn ports(args: &[String]) -> Vec<u16> {
    let mut found = Vec::new();
    let files: Vec<String> = args.iter().filter_map(|a| named_file(a)).collect();
    for arg in args.iter().chain(&files) {
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
    /// Proxies for each candidate to every address in its own flags.
    pub fn each(per: &[Vec<String>]) -> Links {
        let mut links = Links {
            proxies: Vec::new(),
            args: Vec::new(),
        };
        for args in per {
            let targets = ports(args);
            let proxies: Vec<Proxy> = targets.iter().map(|&t| Proxy::start(t)).collect();
            let map: BTreeMap<u16, u16> = targets
                .iter()
                .zip(&proxies)
                .map(|(&t, p)| (t, p.port))
                .collect();
            let i = links.args.len();
            let mine = args.iter().map(|a| match named_file(a) {
                Some(text) if !ports(std::slice::from_ref(&text)).is_empty() => {
                    let copy = format!("{a}.link{i}");
                    std::fs::write(&copy, rewrite(&text, &map)).expect("a file's copy");
                    copy
                }
                _ => rewrite(a, &map),
            });
            links.args.push(mine.collect());
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
    let file = std::env::temp_dir().join(format!("leaderd-links-{}", std::process::id()));
    std::fs::write(&file, "server: https://127.0.0.1:7000\n").map_err(|e| e.to_string())?;
    let named = [
        "--kubeconfig".to_string(),
        file.to_str().expect("utf-8").to_string(),
    ];
    let found = ports(&named);
    let _ = std::fs::remove_file(&file);
    if found != [7000] {
        return Err(format!("ports in a named file: {found:?}"));
    }
    Ok(())
}
