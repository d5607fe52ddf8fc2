//! `leaderd check` for replicated Redis: the sentinels' view, the node's
//! role and replicas, whether `WAIT` can be satisfied, a cluster's state.

use super::Error;
use crate::client::redis::classify::{classify, connected_replicas};
use crate::client::redis::link::Link;
use crate::client::redis::route::Route;
use crate::client::redis::urls::WaitReplicas;
use redis::Value;
use tokio::time::Instant;

impl Link {
    /// `check`: the sentinels' view (under Sentinel), the node's role and
    /// connected replicas, and whether `WAIT` can be satisfied.
    pub(crate) async fn report(&mut self) -> Result<Vec<String>, Error> {
        let deadline = Instant::now() + self.timeout;
        let mut lines = Vec::new();
        if let Route::Sentinel(sentinels, _) = &mut self.route {
            lines.extend(sentinels.report(deadline).await?.1);
        }
        self.follow(deadline).await?;
        let mut conn = match self.conn.clone() {
            Some(conn) => conn,
            None => self.connect(deadline).await?,
        };
        let role_cmd = redis::cmd("ROLE");
        let role = match tokio::time::timeout_at(deadline, role_cmd.query_async::<Value>(&mut conn))
            .await
        {
            Ok(Ok(role)) => role,
            Ok(Err(e)) => return Err(classify(e, &self.url, self.timeout)),
            Err(_) => return Err(self.timed_out()),
        };
        let Some(replicas) = connected_replicas(&role) else {
            return Err(Error::Misconfigured {
                backend: self.url.clone(),
                detail: format!("the node is not a primary (ROLE: {role:?})"),
                hint: "point leaderd at the primary (or at the sentinels, with redis+sentinel://)",
            });
        };
        lines.push(format!(
            "{}: ROLE master, {replicas} connected replica(s)",
            self.url
        ));
        if self.route.is_cluster() {
            let mut info_cmd = redis::cmd("CLUSTER");
            info_cmd.arg("INFO");
            let info =
                tokio::time::timeout_at(deadline, info_cmd.query_async::<String>(&mut conn)).await;
            let state = match info {
                Ok(Ok(info)) => info
                    .lines()
                    .find_map(|l| l.strip_prefix("cluster_state:"))
                    .unwrap_or("unknown")
                    .trim()
                    .to_string(),
                Ok(Err(e)) => return Err(classify(e, &self.url, self.timeout)),
                Err(_) => return Err(self.timed_out()),
            };
            if state != "ok" {
                return Err(Error::Connection {
                    backend: self.url.clone(),
                    detail: format!("cluster_state is {state}, not ok"),
                });
            }
            lines.push(
                "the cluster's state is ok; the election's slot lives on the primary above".into(),
            );
        }
        match self.wait {
            WaitReplicas::Count(0) => {}
            WaitReplicas::Count(n) if n > replicas => {
                return Err(Error::UnderReplicated {
                    backend: self.url.clone(),
                    asked: n,
                    acknowledged: replicas,
                });
            }
            WaitReplicas::Count(n) => lines.push(format!(
                "--redis-wait-replicas {n}: each acquire and renewal waits for {n} of {replicas} replica(s)"
            )),
            WaitReplicas::Auto => lines.push(format!(
                "--redis-wait-replicas auto: each acquire and renewal waits for {} replica(s) now",
                replicas.min(1)
            )),
        }
        Ok(lines)
    }
}
