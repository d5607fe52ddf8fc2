//! `leaderd check` for etcd: every endpoint's status, the members and their
//! quorum, the sign-in, and a real acquire, renew and release on a scratch
//! key.

use super::EtcdLease;
use super::client::{Client, int, uint};
use crate::lease::contract::Error;
use crate::lease::scratch::exercise;
use serde_json::json;
use tokio::time::Instant;

impl EtcdLease {
    pub(super) async fn report(&mut self) -> Result<Vec<String>, Error> {
        let mut lines = Vec::new();
        let endpoints = self.client.config.endpoints.clone();
        let mut reached = 0;
        let mut leaders = Vec::new();
        for endpoint in &endpoints {
            let shown = endpoint.as_str().trim_end_matches('/').to_string();
            let deadline = Instant::now() + self.client.config.timeout;
            let status = self
                .client
                .post(endpoint, "maintenance/status", &json!({}), deadline)
                .await;
            match status {
                Ok(s) => {
                    reached += 1;
                    let leader = uint(&s, "leader");
                    leaders.push(leader);
                    lines.push(format!(
                        "{shown}: etcd {}, member {:x}, {}",
                        s["version"].as_str().unwrap_or("?"),
                        uint(&s["header"], "member_id"),
                        if leader == 0 {
                            "no leader".to_string()
                        } else {
                            format!("leader {leader:x}, raft term {}", int(&s, "raftTerm"))
                        }
                    ));
                }
                Err(e) => lines.push(format!("{shown}: unreachable ({})", e.into_error())),
            }
        }
        if reached == 0 {
            return Err(Error::Connection {
                backend: self.client.shown.clone(),
                detail: "no endpoint answered".into(),
            });
        }
        if leaders.iter().all(|l| *l == 0) {
            return Err(Error::Connection {
                backend: self.client.shown.clone(),
                detail: "the cluster has no leader (no quorum of members)".into(),
            });
        }
        let members = self.client.call("cluster/member/list", &json!({})).await?;
        let n = members["members"].as_array().map_or(0, Vec::len);
        lines.push(format!(
            "{n} member(s), quorum {}: leaderd keeps leading while {} of them can fail",
            n / 2 + 1,
            n.saturating_sub(n / 2 + 1)
        ));
        if let Some(user) = &self.client.config.user {
            lines.push(format!("signed in as {user}"));
        }
        lines.push(self.scratch().await?);
        Ok(lines)
    }

    /// Acquire, renew and release on `KEY.check/leader`, as the configured user.
    async fn scratch(&mut self) -> Result<String, Error> {
        let base = self.keys.leader.trim_end_matches("/leader");
        let mut scratch = EtcdLease::on(
            Client::new(&self.client.config)?,
            &format!("{base}.check"),
            &self.id,
            self.timing,
        );
        let place = format!("the scratch key {}", scratch.keys.leader);
        let verbs = ["acquire", "renew", "release"];
        let outcome = exercise(&mut scratch).await?;
        Ok(outcome.line(verbs, &place, |t| {
            format!("fencing token {t}, its revision")
        }))
    }
}
