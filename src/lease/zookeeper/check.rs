//! `leaderd check` for ZooKeeper: every server's version and mode (its
//! `srvr` command, on by default), the session and its negotiated timeout,
//! the ACL on the election's path, who holds the lease and who is in line,
//! and a real acquire, renew and release on a scratch election as the
//! configured user.

use super::ZkLease;
use super::election::{id_in, sorted};
use super::session::{Failure, Session, ZK};
use crate::lease::contract::{Common, Error, LeaseBackend};
use crate::lease::scratch::exercise;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

impl ZkLease {
    pub(super) async fn report(&mut self) -> Result<Vec<String>, Error> {
        let mut lines = Vec::new();
        let mut reached = 0;
        for (host, port) in self.config.connect.hosts.clone() {
            if self.config.tls.is_some() {
                // `srvr` is plain text; the session below shows TLS works.
                reached += 1;
                lines.push(format!(
                    "{host}:{port}: over TLS{} (its mode is not asked: srvr is plain text)",
                    if self.config.tls.as_ref().is_some_and(|t| t.client.is_some()) {
                        ", with a client certificate"
                    } else {
                        ""
                    }
                ));
                continue;
            }
            match srvr(&host, port, self.config.timeout).await {
                Ok((version, mode)) => {
                    reached += 1;
                    lines.push(format!("{host}:{port}: ZooKeeper {version}, {mode}"));
                }
                Err(e) => lines.push(format!("{host}:{port}: {e}")),
            }
        }
        let s = self.session().await?;
        let hosts = self.config.connect.hosts.len();
        if reached == 0 {
            lines.push(
                "no server answered `srvr` (not in 4lw.commands.whitelist?), but a session opened"
                    .into(),
            );
        }
        lines.push(format!(
            "session {:#x}, timeout {} ms negotiated for the TTL (a dead leader's election is free at most this long after it last spoke)",
            s.id(),
            s.client.session_timeout().as_millis()
        ));
        lines.push(format!(
            "{hosts} server(s) in the connect string: leaderd keeps leading while {} of them can fail (a quorum of the ensemble must stay)",
            hosts.saturating_sub(hosts / 2 + 1)
        ));
        match &self.config.user {
            Some((user, _)) => lines.push(format!(
                "signed in as {user} (digest); the nodes leaderd creates are writable by {user} only, readable by anyone"
            )),
            None => lines.push(
                "not signed in: the nodes leaderd creates are open to anyone (world:anyone); give --zookeeper-user to protect them".into(),
            ),
        }
        s.parents(&self.base).await?;
        match s.call(&self.base, s.client.get_acl(&self.base)).await {
            Ok((acls, _)) => {
                let shown: Vec<String> = acls
                    .iter()
                    .map(|a| format!("{}:{}:{}", a.scheme(), a.id(), a.permission()))
                    .collect();
                lines.push(format!("ACL on {}: {}", self.base, shown.join(", ")));
            }
            Err(f) => return Err(f.into_error()),
        }
        lines.push(self.line_up(&s).await?);
        lines.push(self.scratch().await?);
        Ok(lines)
    }

    /// Who holds the lease and who is in line, in order. The holder is first
    /// in line but for a moment at the end of its term; one that stays out
    /// of first place had its queue node deleted from outside.
    async fn line_up(&self, s: &Session) -> Result<String, Error> {
        let children = match s.call(&self.base, s.client.list_children(&self.base)).await {
            Ok(children) => children,
            Err(Failure::NoNode) => Vec::new(),
            Err(f) => return Err(f.into_error()),
        };
        // (candidate id, session) for each queue node still there.
        let mut line = Vec::new();
        for name in sorted(&children) {
            let path = format!("{}/{name}", self.base);
            match s.call(&path, s.client.get_data(&path)).await {
                Ok((data, stat)) => line.push((id_in(&data), stat.ephemeral_owner)),
                Err(Failure::NoNode) => {}
                Err(f) => return Err(f.into_error()),
            }
        }
        let in_line = if line.is_empty() {
            "nobody in line".to_string()
        } else {
            let ids: Vec<&str> = line
                .iter()
                .map(|(id, _)| id.as_deref().unwrap_or("?"))
                .collect();
            format!("in line: {}", ids.join(", "))
        };
        let lease = match s.call(&self.leader, s.client.get_data(&self.leader)).await {
            Ok(lease) => Some(lease),
            Err(Failure::NoNode) => None,
            Err(f) => return Err(f.into_error()),
        };
        let Some((data, stat)) = lease else {
            return Ok(format!(
                "election {}: the lease is free; {in_line}",
                self.base
            ));
        };
        let first = line
            .first()
            .is_some_and(|(_, owner)| *owner == stat.ephemeral_owner);
        Ok(format!(
            "election {}: the lease is held by {} (fencing token {:#x}), {}; {in_line}",
            self.base,
            id_in(&data).as_deref().unwrap_or("another program"),
            stat.mzxid,
            if first {
                "first in line"
            } else {
                "not first in line (its term is ending, or its queue node was deleted from outside)"
            }
        ))
    }

    /// Acquire, renew and release on `KEY.check`, as the configured user.
    async fn scratch(&mut self) -> Result<String, Error> {
        let key = self
            .base
            .rsplit('/')
            .next()
            .unwrap_or("leaderd")
            .to_string();
        let common = Common {
            key,
            id: self.id.clone(),
            timing: self.timing,
        };
        let mut scratch = ZkLease::open(&self.config, &common.scratch());
        let base = scratch.base.clone();
        let outcome = exercise(&mut scratch).await;
        scratch.close().await;
        let verbs = ["create", "renew", "delete"];
        let place = format!("the scratch election {base}");
        Ok(outcome?.line(verbs, &place, |t| format!("fencing token {t:#x}, a zxid")))
    }
}

/// A server's version and mode from its `srvr` command.
async fn srvr(
    host: &str,
    port: u16,
    timeout: std::time::Duration,
) -> Result<(String, String), String> {
    let ask = async {
        let mut stream = tokio::net::TcpStream::connect((host, port)).await?;
        stream.write_all(b"srvr").await?;
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await?;
        Ok::<_, std::io::Error>(reply)
    };
    let reply = match tokio::time::timeout(timeout, ask).await {
        Err(_) => return Err(format!("unreachable (no answer within {timeout:?})")),
        Ok(Err(e)) => return Err(format!("unreachable ({e})")),
        Ok(Ok(reply)) => reply,
    };
    let field = |name: &str| {
        reply
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_string())
    };
    match (field("Zookeeper version:"), field("Mode:")) {
        (Some(version), Some(mode)) => Ok((
            version
                .split(['-', ','])
                .next()
                .unwrap_or(&version)
                .to_string(),
            mode,
        )),
        _ if reply.contains("not in the whitelist") => Err(
            "reached; `srvr` is not in its 4lw.commands.whitelist, so its mode is unknown".into(),
        ),
        _ => Err(format!(
            "reached, but `srvr` answered {:?} ({ZK}?)",
            reply.trim()
        )),
    }
}
