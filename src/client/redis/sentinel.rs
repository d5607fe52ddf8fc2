//! Redis Sentinel: which node is the master, decided by a majority of the
//! configured sentinels, asked again before every lease operation.
//!
//! redis-rs's own Sentinel support takes the first sentinel that answers
//! and never looks again on an open connection; after a failover the old
//! master keeps accepting writes on existing connections for seconds
//! (measured: 11.4 s of `ROLE` = master after the sentinels had named the
//! new one). So leaderd asks every sentinel, concurrently, within the
//! operation's timeout, and follows an address only when more than half of
//! the *configured* sentinels name it. No majority: the operation fails
//! (a leader then steps down at its renew deadline), and nothing is
//! released on a node the sentinels no longer name.
//!
//! The answer is taken as soon as a majority agrees, and each sentinel gets
//! at most half of what is left of the operation's deadline: one sentinel
//! that is frozen or black-holed (silent, not refusing) must not spend the
//! whole operation, or one silent sentinel of three would stop every
//! election while two still answer.

use super::urls::SentinelUrl;
use crate::client::Error;
use crate::config::Secret;
use futures_util::StreamExt;
use futures_util::future::join_all;
use futures_util::stream::FuturesUnordered;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Value};
use std::collections::BTreeMap;
use tokio::time::Instant;

/// What one sentinel says of the service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Named {
    pub(crate) addr: (String, u16),
    pub(crate) config_epoch: u64,
}

/// The sentinels of one service, each with a connection kept open.
pub(crate) struct Sentinels {
    pub(crate) url: SentinelUrl,
    clients: Vec<redis::Client>,
    conns: Vec<Option<MultiplexedConnection>>,
    /// For messages: `sentinel://h1:p1,h2:p2/SERVICE`.
    pub(crate) shown: String,
}

impl Sentinels {
    /// Clients for every sentinel, with the sentinels' own credentials
    /// when the URL names a `sentinel_user` or a password is given (never
    /// the data nodes': a sentinel without a password refuses `AUTH`).
    pub(crate) fn new(
        url: SentinelUrl,
        tls: &super::tls::RedisTls,
        password: Option<&Secret>,
    ) -> Result<Self, Error> {
        let shown = format!(
            "sentinel://{}/{}",
            url.sentinels
                .iter()
                .map(|(h, p)| format!("{h}:{p}"))
                .collect::<Vec<_>>()
                .join(","),
            url.service
        );
        let bad = |detail: String| Error::Unexpected {
            backend: shown.clone(),
            detail,
        };
        let mut clients = Vec::new();
        for (host, port) in &url.sentinels {
            let scheme = if url.tls { "rediss" } else { "redis" };
            let host = if host.contains(':') {
                format!("[{host}]")
            } else {
                host.clone()
            };
            let mut text = url::Url::parse(&format!("{scheme}://{host}:{port}"))
                .map_err(|e| bad(e.to_string()))?;
            if let Some(user) = &url.sentinel_user {
                text.set_username(user)
                    .map_err(|()| bad("the sentinel user cannot go in a URL".into()))?;
            }
            if let Some(password) = password {
                text.set_password(Some(password.expose()))
                    .map_err(|()| bad("the sentinel password cannot go in a URL".into()))?;
            }
            let node = super::urls::parse_redis_url(text.as_str()).map_err(bad)?;
            clients.push(super::tls::client(&node, tls)?);
        }
        Ok(Sentinels {
            conns: vec![None; clients.len()],
            clients,
            url,
            shown,
        })
    }

    /// The master a majority of the configured sentinels names now.
    pub(crate) async fn master(&mut self, deadline: Instant) -> Result<Named, Error> {
        let configured = self.url.sentinels.len();
        let now = Instant::now();
        let ask_by = now + deadline.saturating_duration_since(now) / 2;
        let service = self.url.service.clone();
        let mut pending: FuturesUnordered<_> = self
            .clients
            .iter()
            .zip(self.conns.iter_mut())
            .enumerate()
            .map(|(i, (client, conn))| {
                let service = &service;
                async move { (i, ask(client, conn, service, ask_by).await) }
            })
            .collect();
        let mut answers: Vec<Result<Named, String>> =
            vec![Err("not asked to the end: a majority had answered".into()); configured];
        while let Some((i, answer)) = pending.next().await {
            answers[i] = answer;
            if let Some(named) = majority(configured, &answers) {
                return Ok(named);
            }
        }
        drop(pending);
        decide(
            &self.shown,
            &self.url.service,
            self.url.sentinels.len(),
            &answers,
        )
    }

    /// `check`: what each sentinel says, and the master a majority names.
    /// Sentinels that name different masters are a misconfiguration (one
    /// of them watches another deployment, or names a replica).
    pub(crate) async fn report(
        &mut self,
        deadline: Instant,
    ) -> Result<(Named, Vec<String>), Error> {
        let answers = self.ask_all(deadline).await;
        let mut lines = Vec::new();
        for ((host, port), answer) in self.url.sentinels.iter().zip(&answers) {
            lines.push(match answer {
                Ok(n) => format!(
                    "sentinel {host}:{port} names {}:{} as the master of {:?} (config epoch {})",
                    n.addr.0, n.addr.1, self.url.service, n.config_epoch
                ),
                Err(e) => format!("sentinel {host}:{port} did not answer: {e}"),
            });
        }
        let named = decide(
            &self.shown,
            &self.url.service,
            self.url.sentinels.len(),
            &answers,
        )?;
        if let Some(other) = answers.iter().flatten().find(|n| n.addr != named.addr) {
            return Err(Error::Misconfigured {
                backend: self.shown.clone(),
                detail: format!(
                    "the sentinels disagree: a majority names {}:{}, another names {}:{}",
                    named.addr.0, named.addr.1, other.addr.0, other.addr.1
                ),
                hint: "list the sentinels of one deployment only, all of them, and check that they monitor the same master (SENTINEL MASTER SERVICE on each)",
            });
        }
        Ok((named, lines))
    }

    /// Every sentinel's answer (or why there is none), in configured order.
    pub(crate) async fn ask_all(&mut self, deadline: Instant) -> Vec<Result<Named, String>> {
        let service = self.url.service.clone();
        let asks = self
            .clients
            .iter()
            .zip(self.conns.iter_mut())
            .map(|(client, conn)| ask(client, conn, &service, deadline));
        join_all(asks).await
    }
}

async fn ask(
    client: &redis::Client,
    slot: &mut Option<MultiplexedConnection>,
    service: &str,
    deadline: Instant,
) -> Result<Named, String> {
    let timed = |what: &str| format!("no answer in time ({what})");
    let mut conn = match slot.clone() {
        Some(conn) => conn,
        None => {
            let left = deadline.saturating_duration_since(Instant::now());
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(left))
                .set_response_timeout(None);
            let connecting = client.get_multiplexed_async_connection_with_config(&config);
            let conn = tokio::time::timeout_at(deadline, connecting)
                .await
                .map_err(|_| timed("connect"))?
                .map_err(|e| e.to_string())?;
            slot.insert(conn).clone()
        }
    };
    let mut cmd = redis::cmd("SENTINEL");
    cmd.arg("MASTER").arg(service);
    let reply = match tokio::time::timeout_at(deadline, cmd.query_async::<Value>(&mut conn)).await {
        Ok(Ok(reply)) => reply,
        Ok(Err(e)) => {
            if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
                *slot = None;
            }
            return Err(e.to_string());
        }
        Err(_) => {
            // A frozen sentinel: start afresh next time.
            *slot = None;
            return Err(timed("SENTINEL MASTER"));
        }
    };
    parse_master(&reply).ok_or_else(|| format!("unexpected reply to SENTINEL MASTER: {reply:?}"))
}

/// `SENTINEL MASTER`'s flat field/value list: ip, port, config-epoch.
fn parse_master(reply: &Value) -> Option<Named> {
    let fields: BTreeMap<String, String> = match reply {
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|pair| match pair {
                [Value::BulkString(k), Value::BulkString(v)] => Some((
                    String::from_utf8_lossy(k).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                )),
                _ => None,
            })
            .collect(),
        Value::Map(pairs) => pairs
            .iter()
            .filter_map(|(k, v)| match (k, v) {
                (Value::BulkString(k), Value::BulkString(v)) => Some((
                    String::from_utf8_lossy(k).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                )),
                _ => None,
            })
            .collect(),
        _ => return None,
    };
    Some(Named {
        addr: (fields.get("ip")?.clone(), fields.get("port")?.parse().ok()?),
        config_epoch: fields
            .get("config-epoch")
            .and_then(|e| e.parse().ok())
            .unwrap_or(0),
    })
}

/// The address more than half of the `configured` sentinels name. Among
/// answers for that address the highest config epoch is reported.
/// The master more than half of the `configured` sentinels name, if any
/// (with the highest config epoch among them).
fn majority(configured: usize, answers: &[Result<Named, String>]) -> Option<Named> {
    let mut votes: BTreeMap<&(String, u16), (usize, u64)> = BTreeMap::new();
    for named in answers.iter().flatten() {
        let vote = votes.entry(&named.addr).or_default();
        vote.0 += 1;
        vote.1 = vote.1.max(named.config_epoch);
    }
    votes
        .into_iter()
        .find(|(_, (n, _))| *n > configured / 2)
        .map(|(addr, (_, epoch))| Named {
            addr: addr.clone(),
            config_epoch: epoch,
        })
}

pub(crate) fn decide(
    shown: &str,
    service: &str,
    configured: usize,
    answers: &[Result<Named, String>],
) -> Result<Named, Error> {
    if let Some(named) = majority(configured, answers) {
        return Ok(named);
    }
    let majority = configured / 2 + 1;
    let unknown = answers
        .iter()
        .filter_map(|a| a.as_ref().err())
        .filter(|e| e.contains("No such master"))
        .count();
    if unknown >= majority {
        return Err(Error::Misconfigured {
            backend: shown.to_string(),
            detail: format!("the sentinels do not monitor a service named {service:?}"),
            hint: "check the service name in the URL (sentinel monitor NAME …) and the sentinels' addresses",
        });
    }
    let said: Vec<String> = answers
        .iter()
        .map(|a| match a {
            Ok(n) => format!("{}:{} (epoch {})", n.addr.0, n.addr.1, n.config_epoch),
            Err(e) => e.clone(),
        })
        .collect();
    Err(Error::Connection {
        backend: shown.to_string(),
        detail: format!(
            "no master named by a majority ({majority} of {configured}) of the sentinels: {}",
            said.join("; ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(ip: &str, port: u16, epoch: u64) -> Result<Named, String> {
        Ok(Named {
            addr: (ip.into(), port),
            config_epoch: epoch,
        })
    }

    #[test]
    fn a_majority_of_the_configured_sentinels_decides() {
        let a = named("10.0.0.1", 6379, 1);
        let b = named("10.0.0.2", 6379, 2);
        let down = Err::<Named, String>("no answer in time (connect)".into());
        let pick = |answers: &[Result<Named, String>]| decide("s", "svc", 3, answers);
        assert_eq!(
            pick(&[a.clone(), a.clone(), b.clone()]).unwrap().addr.0,
            "10.0.0.1"
        );
        // Two of three agree on the new master: it is followed, at its epoch.
        let new = pick(&[a.clone(), b.clone(), b.clone()]).unwrap();
        assert_eq!((new.addr.0.as_str(), new.config_epoch), ("10.0.0.2", 2));
        // One answer is not a majority of three, whoever is down.
        assert!(matches!(
            pick(&[a.clone(), down.clone(), down.clone()]),
            Err(Error::Connection { .. })
        ));
        assert!(matches!(pick(&[a, b, down]), Err(Error::Connection { .. })));
        let unknown = Err::<Named, String>("ERR No such master with that name".into());
        assert!(matches!(
            pick(&[unknown.clone(), unknown.clone(), unknown]),
            Err(Error::Misconfigured { .. })
        ));
    }

    #[test]
    fn sentinel_master_replies_are_read_by_field() {
        let b = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let reply = Value::Array(vec![
            b("name"),
            b("svc"),
            b("ip"),
            b("127.0.0.1"),
            b("port"),
            b("6380"),
            b("flags"),
            b("master"),
            b("config-epoch"),
            b("3"),
        ]);
        assert_eq!(
            parse_master(&reply),
            Some(Named {
                addr: ("127.0.0.1".into(), 6380),
                config_epoch: 3
            })
        );
        assert_eq!(parse_master(&Value::Nil), None);
    }
}
