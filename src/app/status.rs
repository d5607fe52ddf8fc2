//! `leaderd status`: who holds the lease, its fencing token and time left,
//! and the registered candidates in the order they would lead.

use super::{Failure, backend};
use crate::config::{Config, show_duration};
use crate::lease::registry::{Record, in_order};
use crate::lease::{self, LeaseBackend, Peek};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(serde::Serialize, Debug, Clone, PartialEq)]
pub(super) struct StatusView {
    pub key: String,
    pub backend: String,
    pub held: bool,
    pub leader: Option<String>,
    pub fencing_token: Option<u64>,
    pub expires_in_ms: Option<u64>,
    /// Redlock: no holder on a majority of masters, and no majority free.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub contested: bool,
    /// Every registered candidate, in the order they would lead.
    pub candidates: Vec<Record>,
    /// The registry could not be read, so `candidates` is empty: why. (A
    /// JSON reader must tell "nobody registered" from "no answer".)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registry_error: Option<String>,
}

/// One look at the election.
#[derive(Debug, Clone)]
pub(super) struct Look {
    pub view: StatusView,
    pub peek: Peek,
}

/// One look at the election: the lease, then the registry.
pub(super) async fn look(backend: &mut dyn LeaseBackend, key: &str) -> Result<Look, lease::Error> {
    let peek = backend.peek().await?;
    let holder = peek.holder.clone();
    let leader = holder.as_ref().and_then(|h| h.id.clone());
    let (candidates, registry_error) = match backend.candidates().await {
        Ok(records) => (in_order(records, leader.as_deref()), None),
        Err(e) => (
            Vec::new(),
            Some(format!("cannot read the candidates registry: {e}")),
        ),
    };
    let view = StatusView {
        key: key.to_string(),
        backend: backend.describe(),
        held: holder.is_some(),
        leader,
        fencing_token: holder.as_ref().and_then(|h| h.fencing_token),
        expires_in_ms: peek.expires_in.map(|d| d.as_millis() as u64),
        contested: peek.contested,
        candidates,
        registry_error,
    };
    Ok(Look { view, peek })
}

/// `leaderd status`: exit 0 when held, 3 when vacant, 1 when unreachable.
pub async fn status(config: Config, json: bool) -> Result<ExitCode, Failure> {
    let mut backend = backend(&config)?;
    let Look { view, peek } = look(backend.as_mut(), &config.key)
        .await
        .map_err(Failure::Backend)?;
    if let Some(warning) = &view.registry_error {
        eprintln!("warning: {warning}");
    }
    if json {
        println!(
            "{}",
            serde_json::to_string(&view).expect("plain struct serialises")
        );
    } else {
        println!("{}", describe_peek(&config.key, &peek));
        print!(
            "{}",
            describe_candidates(&view.candidates, view.leader.as_deref())
        );
    }
    Ok(if view.held {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}

/// One line per candidate, in order: `  c2  leader  priority 1.14.2  worker
/// healthy  leaderd 0.1.0  up 3m12s`.
pub fn describe_candidates(records: &[Record], leader: Option<&str>) -> String {
    if records.is_empty() {
        return "no candidates registered\n".to_string();
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let width = records.iter().map(|r| r.id.len()).max().unwrap_or(0);
    let mut out = format!(
        "{} candidate(s), in the order they would lead:\n",
        records.len()
    );
    for r in records {
        let role = if Some(r.id.as_str()) == leader {
            "leader "
        } else {
            "standby"
        };
        let health = match r.healthy {
            Some(true) => "  worker healthy",
            Some(false) => "  worker UNHEALTHY",
            None => "",
        };
        let up = Duration::from_secs(now.saturating_sub(r.since_ms) / 1000);
        let up = if up.is_zero() {
            "<1s".to_string()
        } else {
            show_duration(up)
        };
        out.push_str(&format!(
            "  {:width$}  {role}  priority {}{health}  leaderd {}  up {up}\n",
            r.id, r.priority, r.version,
        ));
    }
    out
}

pub(super) fn describe_peek(key: &str, peek: &Peek) -> String {
    let Some(holder) = &peek.holder else {
        if peek.contested {
            let left = peek.expires_in.map_or(String::new(), |d| {
                format!("; the first lapses in {}", crate::config::show_duration(d))
            });
            return format!(
                "{key}: contested: no holder on a majority of the masters, and no majority free (an acquire in progress, or the leftovers of failed ones){left}"
            );
        }
        return format!("{key}: vacant");
    };
    let who = holder
        .id
        .as_deref()
        .unwrap_or("<a value leaderd did not write>");
    let token = holder
        .fencing_token
        .map_or("unknown".to_string(), |t| t.to_string());
    let left = match peek.expires_in {
        Some(d) => format!("expires in {}", crate::config::show_duration(d)),
        None => "no expiry known".to_string(),
    };
    format!("{key}: held by {who}, fencing token {token}, {left}")
}
