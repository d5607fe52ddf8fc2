//! A real Prometheus server (Debian's `prometheus`) on a free loopback
//! port, scraping the targets a test names with the rules it gives, its
//! data in a scratch directory; killed on drop. Queried over its HTTP API.

use super::{Scratch, eventually, free_port, http_get};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Prometheus {
    pub port: u16,
    child: Child,
    _dir: Scratch,
}

/// One alert as `/api/v1/alerts` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alert {
    pub name: String,
    /// `pending` or `firing`.
    pub state: String,
    pub labels: serde_json::Value,
}

impl Prometheus {
    /// Scrapes `targets` (`127.0.0.1:PORT`, as job `job`) every `every`,
    /// and evaluates `rules` (a rules file's text) as often.
    pub fn start(job: &str, targets: &[String], rules: &str, every: &str) -> Prometheus {
        let dir = Scratch::new(&format!("prometheus-{job}"));
        std::fs::write(dir.join("rules.yml"), rules).expect("write rules");
        let targets = targets
            .iter()
            .map(|t| format!("\"{t}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let config = format!(
            "global:\n  scrape_interval: {every}\n  scrape_timeout: {every}\n  evaluation_interval: {every}\n\
             rule_files: [rules.yml]\n\
             scrape_configs:\n  - job_name: {job}\n    static_configs:\n      - targets: [{targets}]\n"
        );
        std::fs::write(dir.join("prometheus.yml"), config).expect("write config");
        let port = free_port();
        let log = std::fs::File::create(dir.join("prometheus.log")).expect("log file");
        let child = Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect(
                "prometheus runs (Debian: apt-get install prometheus; scripts/test installs it)",
            );
        let prometheus = Prometheus {
            port,
            child,
            _dir: dir,
        };
        eventually(Duration::from_secs(60), "Prometheus to be ready", || {
            http_get(port, "/-/ready").filter(|(code, _)| *code == 200)
        });
        prometheus
    }

    /// `GET /api/v1/PATH?QUERY` with `query`'s pairs encoded; the `data`.
    pub fn api(&self, path: &str, query: &[(&str, &str)]) -> Option<serde_json::Value> {
        let encoded: String = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(query)
            .finish();
        let (code, body) = http_get(self.port, &format!("/api/v1/{path}?{encoded}"))?;
        assert!(
            code == 200 && body["status"] == "success",
            "Prometheus refused {path} {query:?}: {code} {body}"
        );
        Some(body["data"].clone())
    }

    /// An instant query's series (empty: none).
    pub fn query(&self, expr: &str) -> Vec<serde_json::Value> {
        self.api("query", &[("query", expr)])
            .and_then(|d| d["result"].as_array().cloned())
            .unwrap_or_default()
    }

    /// The pending and firing alerts.
    pub fn alerts(&self) -> Vec<Alert> {
        let Some(data) = self.api("alerts", &[]) else {
            return Vec::new();
        };
        data["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| Alert {
                name: a["labels"]["alertname"].as_str().unwrap_or("").to_string(),
                state: a["state"].as_str().unwrap_or("").to_string(),
                labels: a["labels"].clone(),
            })
            .collect()
    }

    /// The state of alert `name` (`pending`, `firing`), `None` when it is
    /// neither (never active, or resolved).
    pub fn alert_state(&self, name: &str) -> Option<String> {
        self.alerts()
            .into_iter()
            .find(|a| a.name == name)
            .map(|a| a.state)
    }

    /// Waits until `done` holds of alert `name`'s state (`pending`,
    /// `firing`, or `None`: neither), and returns that state. Polled ten
    /// times a second, not a hundred: beside two CPU hogs, a test asking
    /// Prometheus's API that often takes from its scrapes and evaluations.
    /// On a timeout, fails with what Prometheus saw: each target's last
    /// scrape, the series the rules sum, and the alerts.
    pub fn wait_alert(
        &self,
        name: &str,
        what: &str,
        limit: Duration,
        done: impl Fn(Option<&str>) -> bool,
    ) -> Option<String> {
        let start = std::time::Instant::now();
        loop {
            let state = self.alert_state(name);
            if done(state.as_deref()) {
                return state;
            }
            if start.elapsed() >= limit {
                panic!(
                    "timed out after {limit:?} waiting for {name} {what}; Prometheus saw:\n{}",
                    self.seen()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Each target's health, last error and scrape time; every
    /// `leader_election_master_status` series; the alerts.
    fn seen(&self) -> String {
        let targets = self
            .api("targets", &[("state", "active")])
            .and_then(|d| d["activeTargets"].as_array().cloned())
            .unwrap_or_default();
        let mut lines: Vec<String> = targets
            .iter()
            .map(|t| {
                format!(
                    "target {} {} (last scrape {}s, error {:?})",
                    t["scrapeUrl"], t["health"], t["lastScrapeDuration"], t["lastError"]
                )
            })
            .collect();
        for series in self.query("leader_election_master_status") {
            lines.push(format!("series {} = {}", series["metric"], series["value"]));
        }
        lines.push(format!("alerts {:?}", self.alerts()));
        lines.join("\n")
    }

    /// Whether every target's last scrape succeeded.
    pub fn scraped(&self, target: &str) -> bool {
        self.api("targets", &[("state", "active")])
            .and_then(|d| d["activeTargets"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .any(|t| {
                t["scrapeUrl"].as_str().is_some_and(|u| u.contains(target)) && t["health"] == "up"
            })
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
