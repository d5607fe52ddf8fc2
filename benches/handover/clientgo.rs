//! leaderd beside the elector users would otherwise write: client-go's
//! `leaderelection` on a `LeaseLock` (`tests/k8s/elector`, defaults 15 s /
//! 10 s / 2 s, `ReleaseOnCancel`), both on one kube-apiserver in one run,
//! at the same lease duration (15 s), running the same probe child:
//! graceful handover (SIGTERM → the next child runs), crash takeover
//! (SIGKILL → the next child runs) and the API requests three idle
//! candidates cost. `BENCH_ONLY=clientgo`.

use super::support::{self, Leaderd, eventually};
use super::{PROBE, Stats, kube_requests, max_overlap, mono_ns, ms, rss_kib, starts_after, stats};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

/// client-go's default lease duration, and leaderd's TTL here.
const LEASE: &str = "15s";

enum Candidate {
    Leaderd(Leaderd),
    ClientGo(Child),
}

impl Candidate {
    fn pid(&self) -> u32 {
        match self {
            Candidate::Leaderd(l) => l.pid(),
            Candidate::ClientGo(c) => c.id(),
        }
    }

    fn wait(&mut self) {
        match self {
            Candidate::Leaderd(l) => drop(l.wait_exit(Duration::from_secs(60))),
            Candidate::ClientGo(c) => drop(c.wait()),
        }
    }
}

impl Drop for Candidate {
    fn drop(&mut self) {
        if let Candidate::ClientGo(c) = self {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

struct Side<'a> {
    go: bool,
    kube: &'a support::kube::Kube,
    exe: String,
    kubeconfig: PathBuf,
    next: usize,
}

impl Side<'_> {
    /// A new candidate for the Lease `key`, its id, running the probe when
    /// `probe` is given (an idle candidate elects only).
    fn candidate(&mut self, key: &str, probe: Option<&Path>) -> (String, Candidate) {
        self.next += 1;
        let id = format!("{}{}", if self.go { "go-" } else { "rs-" }, self.next);
        let lease = support::backends::lease_name(key);
        let config = self.kubeconfig.to_str().expect("utf-8").to_string();
        let mut child: Vec<String> = Vec::new();
        if let Some(file) = probe {
            child = vec![
                self.exe.clone(),
                PROBE.into(),
                file.to_str().unwrap().into(),
            ];
        } else if self.go {
            // The elector always runs a command: one that waits.
            child = vec!["sleep".into(), "infinity".into()];
        }
        if self.go {
            // client-go's defaults: no timing flags.
            let command: Vec<&str> = child.iter().map(String::as_str).collect();
            let process = self
                .kube
                .elector(&lease, &id, &[], &command)
                .spawn()
                .expect("the elector starts");
            return (id, Candidate::ClientGo(process));
        }
        let mut args = vec!["--kubernetes-lease", &lease, "--kubeconfig", &config];
        args.extend(["--key", key, "--ttl", LEASE, "--log-level", "warn"]);
        if !child.is_empty() {
            args.push("--");
            args.extend(child.iter().map(String::as_str));
        }
        (id.clone(), Candidate::Leaderd(Leaderd::run(&id, &args)))
    }
}

fn holder(kube: &support::kube::Kube, key: &str) -> Option<String> {
    let lease = kube.lease(&support::backends::lease_name(key))?;
    lease["spec"]["holderIdentity"]
        .as_str()
        .filter(|h| !h.is_empty())
        .map(str::to_string)
}

/// `signal` to the holder among three, `rounds` times: the time until the
/// next child runs, and the most children alive at once.
fn takeovers(
    side: &mut Side,
    kube: &support::kube::Kube,
    dir: &Path,
    signal: i32,
    rounds: usize,
) -> (Stats, i32) {
    let key = format!("{}-{signal}", if side.go { "go" } else { "rs" });
    let file = dir.join(format!("{key}.probe"));
    let mut nodes: Vec<(String, Candidate)> =
        (0..3).map(|_| side.candidate(&key, Some(&file))).collect();
    let mut times = Vec::new();
    for _ in 0..rounds {
        let leader = eventually(Duration::from_secs(60), "a leader with its child", || {
            let id = holder(kube, &key)?;
            let i = nodes.iter().position(|(n, _)| *n == id)?;
            starts_after(&file, 0).map(|_| i)
        });
        // The standbys settle into waiting.
        std::thread::sleep(Duration::from_millis(500));
        let t0 = mono_ns();
        // SAFETY: a plain syscall to a process we started.
        unsafe { libc::kill(nodes[leader].1.pid() as i32, signal) };
        let next = eventually(Duration::from_secs(60), "the next child", || {
            starts_after(&file, t0)
        });
        times.push(ms(next - t0));
        nodes[leader].1.wait();
        nodes[leader] = side.candidate(&key, Some(&file));
    }
    let overlap = if signal == libc::SIGTERM {
        max_overlap(&file)
    } else {
        0 // a SIGKILLed candidate's child dies unrecorded
    };
    (stats(times), overlap)
}

/// Three idle candidates: API requests/s and the largest RSS.
fn idle(side: &mut Side, kube: &support::kube::Kube, window: Duration) -> (f64, f64) {
    let key = format!("{}-idle", if side.go { "go" } else { "rs" });
    let baseline = kube_requests(kube, window);
    let nodes: Vec<(String, Candidate)> = (0..3).map(|_| side.candidate(&key, None)).collect();
    eventually(Duration::from_secs(60), "a leader", || holder(kube, &key));
    std::thread::sleep(Duration::from_secs(3)); // past start-up
    let requests = kube_requests(kube, window) - baseline;
    let rss = nodes
        .iter()
        .map(|(_, c)| rss_kib(c.pid()) as f64 / 1024.0)
        .fold(0.0, f64::max);
    (requests / window.as_secs_f64(), rss)
}

pub(super) fn rows(exe: &str, dir: &Path) {
    let kube = support::kube::Kube::start(1);
    let kubeconfig = kube.kubeconfig(support::kube::CANDIDATE, 0);
    println!(
        "# leaderd beside client-go's leaderelection, one kube-apiserver, lease {LEASE} ({} cores)",
        super::num_cpus()
    );
    println!();
    println!(
        "| elector | graceful handover, SIGTERM → next child, median / max (ms) | crash takeover, SIGKILL → next child, median / max (ms) | idle, 3 candidates: API requests/s | max RSS per candidate |"
    );
    println!("|---|---|---|---|---|");
    let mut overlaps = 0;
    for go in [false, true] {
        let mut side = Side {
            go,
            kube: &kube,
            exe: exe.to_string(),
            kubeconfig: kubeconfig.clone(),
            next: 0,
        };
        let (graceful, overlap) = takeovers(&mut side, &kube, dir, libc::SIGTERM, 10);
        overlaps = overlaps.max(overlap);
        let (crash, _) = takeovers(&mut side, &kube, dir, libc::SIGKILL, 5);
        let (requests, rss) = idle(&mut side, &kube, Duration::from_secs(30));
        let name = if go {
            "client-go LeaseLock, 15s / 10s / 2s, ReleaseOnCancel"
        } else {
            "leaderd, --ttl 15s (renew every 5s, deadline 10s)"
        };
        println!(
            "| {name} | {:.1} / {:.1} | {:.0} / {:.0} | {requests:.2} | {rss:.1} MiB |",
            graceful.median, graceful.max, crash.median, crash.max
        );
    }
    println!("most probe children alive at once in the graceful handovers: {overlaps}");
}
