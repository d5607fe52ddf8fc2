//! `BENCH_ONLY=scale` (issue #47): what standbys cost the store as their
//! number K grows (3, 30, 100), counted by the store itself — Kubernetes:
//! the API server's `apiserver_request_total`, beside client-go's elector
//! (`tests/k8s/elector`) at the same K and lease; Redis: `INFO
//! commandstats` (commands clients sent, and with those scripts ran);
//! etcd: gRPC requests started; PostgreSQL: `pg_stat_statements` calls —
//! with graceful handover and crash takeover at each K, how many requests
//! a handover costs (the store's count over the second after the SIGTERM,
//! less the idle rate), and the largest RSS. Writes `docs/scale.svg`:
//! requests/s against K, leaderd per backend and client-go.

use super::support::{self, Leaderd, eventually};
use super::{Bench, bench_on, command_calls, etcd_requests, mono_ns, ms, rss_kib, starts_after};
use std::path::Path;
use std::time::Duration;

const KS: [usize; 3] = [3, 30, 100];
/// The idle window: several lease durations at every TTL used here.
const WINDOW: Duration = Duration::from_secs(30);

/// The store's cumulative request count, as the bench reads it.
fn requests(b: &Bench) -> f64 {
    if let Some((kube, _)) = &b.kube {
        return kube_total(kube);
    }
    if let Some(etcd) = &b.etcd {
        return etcd_requests(etcd);
    }
    if let Some((pg, _)) = &b.pg {
        return pg
            .sql("SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%'")
            .parse()
            .unwrap_or(f64::NAN);
    }
    command_calls(&b.redis).1
}

/// Redis only: commands clients sent (EVALSHA, BLPOP, SUBSCRIBE …),
/// without those their scripts ran.
fn sent(b: &Bench) -> Option<f64> {
    (b.kube.is_none() && b.etcd.is_none() && b.pg.is_none()).then(|| command_calls(&b.redis).0)
}

fn kube_total(kube: &support::kube::Kube) -> f64 {
    kube_by_verb(kube).iter().map(|(_, n)| n).sum()
}

/// The API server's requests so far, by verb and resource.
fn kube_by_verb(kube: &support::kube::Kube) -> Vec<(String, f64)> {
    let (_, body) = kube.raw_on(0, support::kube::ADMIN, "GET", "/metrics", None);
    let label = |l: &str, name: &str| {
        l.split(&format!("{name}=\""))
            .nth(1)?
            .split('"')
            .next()
            .map(str::to_string)
    };
    let mut out: Vec<(String, f64)> = Vec::new();
    for l in body
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let Some(n) = l.rsplit(' ').next().and_then(|n| n.parse::<f64>().ok()) else {
            continue;
        };
        let what = format!(
            "{} {}",
            label(l, "verb").unwrap_or_default(),
            label(l, "resource").unwrap_or_default()
        );
        match out.iter_mut().find(|(w, _)| *w == what) {
            Some((_, total)) => *total += n,
            None => out.push((what, n)),
        }
    }
    out
}

/// The store's own rate with nobody campaigning (the API server's own
/// identity Lease, the bench's scrapes): subtracted from every reading.
fn baseline(b: &Bench) -> f64 {
    let before = requests(b);
    std::thread::sleep(Duration::from_secs(20)); // the measurement window
    (requests(b) - before) / 20.0
}

/// One row: K candidates of `ttl` running the probe child.
struct Row {
    idle: f64,
    idle_sent: Option<f64>,
    handover_ms: f64,
    handover_requests: f64,
    crash_ms: f64,
    rss: f64,
}

fn measure(b: &mut Bench, k: usize, ttl: &str, base: f64) -> Row {
    let key = format!("scale-{k}");
    let file = b.dir.join(format!("{key}.probe"));
    let mut nodes: Vec<Leaderd> = (0..k)
        .map(|_| b.candidate(&key, ttl, Some(&file)))
        .collect();
    let leader = |b: &Bench, nodes: &[Leaderd]| {
        eventually(Duration::from_secs(120), "a leader with its child", || {
            let id = b.holder(&key)?;
            let i = nodes.iter().position(|n| n.id == id)?;
            starts_after(&file, 0).map(|_| i)
        })
    };
    leader(b, &nodes);
    // Past start-up: every first registration and look is done.
    std::thread::sleep(Duration::from_secs(5));
    let (before, sent_before) = (requests(b), sent(b));
    let verbs_before = b.kube.as_ref().map(|(kube, _)| kube_by_verb(kube));
    std::thread::sleep(WINDOW); // the measurement window itself
    if let (Some((kube, _)), Some(was)) = (&b.kube, verbs_before) {
        let now = kube_by_verb(kube);
        let moved: Vec<String> = now
            .iter()
            .map(|(w, n)| {
                (
                    w,
                    n - was.iter().find(|(v, _)| v == w).map_or(0.0, |(_, m)| *m),
                )
            })
            .filter(|(_, d)| *d > 0.0)
            .map(|(w, d)| format!("{w} {:.2}/s", d / WINDOW.as_secs_f64()))
            .collect();
        eprintln!(
            "K = {k}, by verb (the store's own included): {}",
            moved.join(", ")
        );
    }
    let per_s = |n: f64| n / WINDOW.as_secs_f64();
    let idle = per_s(requests(b) - before) - base;
    let idle_sent = sent(b).zip(sent_before).map(|(a, z)| per_s(a - z));
    let rss = nodes
        .iter()
        .map(|n| rss_kib(n.pid()) as f64 / 1024.0)
        .fold(0.0, f64::max);
    // Graceful handovers: SIGTERM → the next child runs; what the second
    // after the SIGTERM cost the store, beyond its idle rate (on Redis,
    // the commands clients sent: its scripts' inner commands would bury
    // the difference in the idle rate's noise).
    let counted_now = |b: &Bench| sent(b).unwrap_or_else(|| requests(b));
    let idle_rate = idle_sent.unwrap_or(idle + base);
    let (mut handover, mut cost) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let i = leader(b, &nodes);
        std::thread::sleep(Duration::from_millis(500));
        let counted = counted_now(b);
        let t0 = mono_ns();
        // SAFETY: a plain syscall to a process we started.
        unsafe { libc::kill(nodes[i].pid() as i32, libc::SIGTERM) };
        let next = eventually(Duration::from_secs(60), "the next child", || {
            starts_after(&file, t0)
        });
        handover.push(ms(next - t0));
        std::thread::sleep(
            Duration::from_secs(1).saturating_sub(Duration::from_nanos(mono_ns() - t0)),
        );
        cost.push(counted_now(b) - counted - idle_rate);
        nodes[i].wait_exit(Duration::from_secs(60));
        nodes[i] = b.candidate(&key, ttl, Some(&file));
    }
    // Crash takeover: SIGKILL → the next child runs.
    let mut crash = Vec::new();
    for _ in 0..2 {
        let i = leader(b, &nodes);
        std::thread::sleep(Duration::from_millis(500));
        let t0 = mono_ns();
        nodes[i].signal("KILL");
        let next = eventually(Duration::from_secs(120), "the next child", || {
            starts_after(&file, t0)
        });
        crash.push(ms(next - t0));
        nodes[i].wait_exit(Duration::from_secs(10));
        nodes[i] = b.candidate(&key, ttl, Some(&file));
    }
    let median = |v: Vec<f64>| super::stats(v).median;
    Row {
        idle,
        idle_sent,
        handover_ms: median(handover),
        handover_requests: median(cost),
        crash_ms: median(crash),
        rss,
    }
}

/// client-go's elector at K: API requests/s, idle.
fn client_go(kube: &support::kube::Kube, k: usize, base: f64) -> f64 {
    let lease = support::backends::lease_name(&format!("go-scale-{k}"));
    let mut electors: Vec<std::process::Child> = (0..k)
        .map(|i| {
            kube.elector(&lease, &format!("go-{k}-{i}"), &[], &["sleep", "infinity"])
                .spawn()
                .expect("the elector starts")
        })
        .collect();
    eventually(Duration::from_secs(120), "a client-go leader", || {
        let l = kube.lease(&lease)?;
        l["spec"]["holderIdentity"].as_str().map(drop)
    });
    std::thread::sleep(Duration::from_secs(5));
    let before = kube_total(kube);
    std::thread::sleep(WINDOW); // the measurement window itself
    let rate = (kube_total(kube) - before) / WINDOW.as_secs_f64() - base;
    for e in &mut electors {
        let _ = e.kill();
        let _ = e.wait();
    }
    rate
}

pub(super) fn rows(exe: &str, dir: &Path) {
    println!(
        "# what standbys cost the store, K = 3, 30, 100 ({} cores); idle requests/s over {} s, less the store's own rate",
        super::num_cpus(),
        WINDOW.as_secs()
    );
    println!();
    println!(
        "| backend | K | idle requests/s | handover, median (ms) | requests in the handover's second, beyond idle | crash takeover from the kill, median (ms) | max RSS per candidate |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut series: Vec<(String, Vec<f64>)> = Vec::new();
    let mut kube = bench_on(exe, dir, "s-kube", 9000);
    let control = support::kube::Kube::start(1);
    let kubeconfig = control.kubeconfig(support::kube::CANDIDATE, 0);
    kube.kube = Some((control, kubeconfig));
    let redis = bench_on(exe, dir, "s-redis", 9300);
    let mut etcd = bench_on(exe, dir, "s-etcd", 9600);
    etcd.etcd = Some(support::etcd::Etcd::start(1));
    let mut pg = bench_on(exe, dir, "s-pg", 9900);
    // Two sessions per candidate (the lease's and the listener's).
    let server = support::postgres::Postgres::start_with(&[
        "shared_preload_libraries=pg_stat_statements",
        "max_connections=300",
    ]);
    server.sql("CREATE EXTENSION pg_stat_statements");
    pg.pg = Some((server, ""));
    // `SCALE_ONLY=redis` (a part of the name, lower case): one backend.
    let only = std::env::var("SCALE_ONLY").unwrap_or_default();
    for (name, ttl, mut b) in [
        ("Kubernetes Lease", "15s", kube),
        ("Redis", "10s", redis),
        ("etcd", "10s", etcd),
        ("PostgreSQL", "10s", pg),
    ] {
        if !name.to_lowercase().contains(&only) {
            continue;
        }
        let base = baseline(&b);
        let mut rates = Vec::new();
        // `SCALE_K=100`: one K (no plot).
        let only_k: Option<usize> = std::env::var("SCALE_K").ok().and_then(|k| k.parse().ok());
        for k in KS {
            if only_k.is_some_and(|o| o != k) {
                continue;
            }
            let r = measure(&mut b, k, ttl, base);
            let sent = r
                .idle_sent
                .map_or(String::new(), |s| format!(" ({s:.2} sent)"));
            println!(
                "| {name}, ttl {ttl} | {k} | {:.2}{sent} | {:.1} | {:.0} | {:.0} | {:.1} MiB |",
                r.idle, r.handover_ms, r.handover_requests, r.crash_ms, r.rss
            );
            rates.push(r.idle);
        }
        if name.starts_with("Kubernetes") && only_k.is_none() {
            let (kube, _) = b.kube.as_ref().expect("the Kubernetes bench");
            let go: Vec<f64> = KS.iter().map(|&k| client_go(kube, k, base)).collect();
            for (k, rate) in KS.iter().zip(&go) {
                println!("| client-go LeaseLock, 15s / 10s / 2s | {k} | {rate:.2} | | | | |");
            }
            series.push(("client-go (Kubernetes)".into(), go));
        }
        series.push((format!("leaderd, {name}"), rates));
    }
    if !only.is_empty() || std::env::var("SCALE_K").is_ok() {
        return; // a part of the table: the plot needs every series
    }
    let svg = plot(&series);
    match std::fs::write("docs/scale.svg", svg) {
        Ok(()) => println!("\nwrote docs/scale.svg"),
        Err(e) => println!("\ncould not write docs/scale.svg: {e}"),
    }
}

/// Requests/s against K, one line per series, on linear axes.
fn plot(series: &[(String, Vec<f64>)]) -> String {
    let (w, h, left, bottom, top, right) = (640.0, 400.0, 60.0, 40.0, 20.0, 200.0);
    let ymax = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(1.0_f64, f64::max)
        .ceil();
    let x = |k: usize| left + (k as f64 / 100.0) * (w - left - right);
    let y = |v: f64| h - bottom - (v.max(0.0) / ymax) * (h - bottom - top);
    let colours = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e"];
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    out += &format!(
        "<line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n<line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{}\" stroke=\"black\"/>\n",
        h - bottom,
        w - right,
        h - bottom,
        h - bottom
    );
    for k in [0, 25, 50, 75, 100] {
        out += &format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{k}</text>\n",
            x(k),
            h - bottom + 16.0
        );
    }
    for i in 0..=4 {
        let v = ymax * f64::from(i) / 4.0;
        out += &format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{v:.1}</text>\n",
            left - 6.0,
            y(v) + 4.0
        );
    }
    out += &format!(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">candidates (K)</text>\n<text x=\"14\" y=\"{}\" transform=\"rotate(-90 14 {})\" text-anchor=\"middle\">requests/s, idle</text>\n",
        (left + w - right) / 2.0,
        h - 6.0,
        h / 2.0,
        h / 2.0
    );
    for (i, (name, values)) in series.iter().enumerate() {
        let colour = colours[i % colours.len()];
        let points: Vec<String> = KS
            .iter()
            .zip(values)
            .map(|(&k, &v)| format!("{:.1},{:.1}", x(k), y(v)))
            .collect();
        out += &format!(
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"/>\n",
            points.join(" ")
        );
        let ly = top + 16.0 * i as f64 + 8.0;
        out += &format!(
            "<line x1=\"{}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" stroke=\"{colour}\" stroke-width=\"2\"/><text x=\"{}\" y=\"{}\">{name}</text>\n",
            w - right + 10.0,
            w - right + 30.0,
            w - right + 35.0,
            ly + 4.0
        );
    }
    out + "</svg>\n"
}
