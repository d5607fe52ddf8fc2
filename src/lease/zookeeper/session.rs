//! One ZooKeeper session and what every request through it shares: the
//! connection (with the session timeout the TTL asks for, refused when the
//! servers negotiate another), digest authentication, the ACL of the nodes
//! leaderd creates, a timeout on every request, and ZooKeeper's errors
//! turned into the contract's.

use super::config::ZkConfig;
use crate::lease::contract::Error;
use std::future::Future;
use std::time::Duration;
use zookeeper_client::{Acl, Acls, Client, CreateMode, CreateOptions, Permission, SessionState};

/// The backend's name in errors.
pub(super) const ZK: &str = "ZooKeeper";

/// The nodes a signed-in leaderd creates: all rights for its own identity,
/// reading for anyone (`status` from elsewhere; the data is only an id).
static SIGNED_IN: [Acl; 2] = [
    Acl::new_const(Permission::ALL, "auth", ""),
    Acl::new_const(Permission::READ, "world", "anyone"),
];

/// A connected session.
#[derive(Clone)]
pub(super) struct Session {
    pub client: Client,
    timeout: Duration,
    signed_in: bool,
}

impl Session {
    /// Opens a session whose timeout is `ttl`: the servers expire it (and
    /// delete its nodes) no sooner than `ttl` after they last heard from it,
    /// which is no sooner than the leader's own validity ends. Refused when
    /// the servers negotiate another timeout: a shorter one could hand the
    /// lease on while the leader still works, a longer one holds a dead
    /// leader's election longer than the TTL promised.
    pub(super) async fn open(config: &ZkConfig, ttl: Duration) -> Result<Session, Error> {
        // The client pings an idle connection every 3/8 of this, and gives
        // a silent one up (for the next server) after it: 2/5 of the TTL
        // pings every 0.15 TTL and moves on in time for the leader to renew
        // through another server before its renew deadline (2/3 TTL). A
        // request timeout here would ping several times a second.
        let mut connector = Client::connector()
            .with_session_timeout(ttl)
            .with_connection_timeout(ttl * 2 / 5)
            .with_fail_eagerly();
        if let Some((user, password)) = &config.user {
            let auth = format!("{user}:{}", password.expose());
            connector = connector.with_auth("digest", auth.as_bytes());
        }
        if let Some(tls) = &config.tls {
            connector = connector.with_tls(tls_options(tls)?);
        }
        let text = config.connect.text();
        let connecting = async {
            if config.tls.is_some() {
                connector.secure_connect(&text).await
            } else {
                connector.connect(&text).await
            }
        };
        // Time for two servers' connection timeouts.
        let limit = ttl * 4 / 5 + config.timeout;
        let client = match tokio::time::timeout(limit, connecting).await {
            Ok(Ok(client)) => client,
            Ok(Err(zookeeper_client::Error::AuthFailed)) => {
                return Err(connect_error(zookeeper_client::Error::AuthFailed, config));
            }
            failed => {
                if let Some(why) = handshake_refused(config).await {
                    return Err(tls_refused(config, why));
                }
                return Err(match failed {
                    Ok(Err(e)) => connect_error(e, config),
                    _ => Error::Timeout {
                        backend: ZK.into(),
                        timeout: limit,
                    },
                });
            }
        };
        let negotiated = client.session_timeout();
        if negotiated != ttl {
            return Err(Error::Misconfigured {
                backend: ZK.into(),
                detail: format!(
                    "the servers negotiated a session timeout of {} ms for the TTL of {} ms; they grant only timeouts between their minSessionTimeout and maxSessionTimeout (by default 2 and 20 × tickTime)",
                    negotiated.as_millis(),
                    ttl.as_millis()
                ),
                hint: if negotiated > ttl {
                    "raise --ttl to at least the servers' minimum, or lower minSessionTimeout (or tickTime) in zoo.cfg: with a longer session a dead leader would hold the election longer than the TTL"
                } else {
                    "lower --ttl to at most the servers' maximum, or raise maxSessionTimeout in zoo.cfg: with a shorter session the servers could hand the lease on while the leader still works"
                },
            });
        }
        Ok(Session {
            client,
            timeout: config.timeout,
            signed_in: config.user.is_some(),
        })
    }

    /// The session is over for good (expired, closed, refused): a new one is
    /// needed, and everything the old one created is gone or going.
    pub(super) fn is_over(&self) -> bool {
        matches!(
            self.client.state(),
            SessionState::Expired | SessionState::Closed | SessionState::AuthFailed
        )
    }

    pub(super) fn id(&self) -> i64 {
        self.client.session_id().0
    }

    /// The options of a node this session creates.
    pub(super) fn options(&self, mode: CreateMode) -> CreateOptions<'static> {
        let acls = if self.signed_in {
            Acls::new(&SIGNED_IN)
        } else {
            Acls::anyone_all()
        };
        mode.with_acls(acls)
    }

    /// `request` within the request timeout, its error turned into the
    /// contract's (`path` names the node in a refusal).
    pub(super) async fn call<T>(
        &self,
        path: &str,
        request: impl Future<Output = Result<T, zookeeper_client::Error>>,
    ) -> Result<T, Failure> {
        match tokio::time::timeout(self.timeout, request).await {
            Err(_) => Err(Failure::Other(Error::Timeout {
                backend: ZK.into(),
                timeout: self.timeout,
            })),
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(Failure::from(e, path)),
        }
    }

    /// Creates the persistent parents of `path` that are missing.
    pub(super) async fn parents(&self, path: &str) -> Result<(), Error> {
        let mut at = String::new();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            at.push('/');
            at.push_str(part);
            let options = self.options(CreateMode::Persistent);
            match self.call(&at, self.client.create(&at, b"", &options)).await {
                Ok(_) | Err(Failure::NodeExists) => {}
                // Only a missing chroot leaves no parent to create in.
                Err(Failure::NoNode) => {
                    return Err(Error::NotSetUp {
                        backend: ZK.into(),
                        detail: "the chroot of the connect string does not exist; create it (zkCli.sh create /CHROOT) or fix --zookeeper".into(),
                    });
                }
                Err(other) => return Err(other.into_error()),
            }
        }
        Ok(())
    }
}

/// The outcomes callers branch on, beside every other failure.
#[derive(Debug)]
pub(super) enum Failure {
    NoNode,
    NodeExists,
    BadVersion,
    /// The session is gone: whatever it held is lost.
    Expired,
    Other(Error),
}

impl Failure {
    fn from(e: zookeeper_client::Error, path: &str) -> Failure {
        use zookeeper_client::Error as Z;
        match e {
            Z::NoNode => Failure::NoNode,
            Z::NodeExists => Failure::NodeExists,
            Z::BadVersion => Failure::BadVersion,
            Z::SessionExpired | Z::ClientClosed => Failure::Expired,
            Z::NoAuth => Failure::Other(Error::Misconfigured {
                backend: ZK.into(),
                detail: format!("no permission on {path}"),
                hint: "grant leaderd's user create, delete, read and write on the election's path (setAcl), or name another with --zookeeper-prefix; `leaderd check` shows the ACL",
            }),
            Z::AuthFailed => Failure::Other(Error::Misconfigured {
                backend: ZK.into(),
                detail: "digest authentication failed".into(),
                hint: "check --zookeeper-user and its password",
            }),
            Z::ConnectionLoss | Z::Timeout | Z::NoHosts | Z::SessionMoved => {
                Failure::Other(Error::Connection {
                    backend: ZK.into(),
                    detail: e.to_string(),
                })
            }
            other => Failure::Other(Error::Unexpected {
                backend: ZK.into(),
                detail: format!("{other} (on {path})"),
            }),
        }
    }

    /// The failure as the contract's error (the branchable ones described).
    pub(super) fn into_error(self) -> Error {
        match self {
            Failure::Other(e) => e,
            Failure::Expired => Error::Connection {
                backend: ZK.into(),
                detail: "the session expired".into(),
            },
            other => Error::Unexpected {
                backend: ZK.into(),
                detail: format!("{other:?}"),
            },
        }
    }
}

impl From<Failure> for Error {
    fn from(f: Failure) -> Error {
        f.into_error()
    }
}

fn connect_error(e: zookeeper_client::Error, config: &ZkConfig) -> Error {
    use zookeeper_client::Error as Z;
    match e {
        Z::AuthFailed => Error::Misconfigured {
            backend: ZK.into(),
            detail: format!(
                "digest authentication as {:?} failed",
                config.user.as_ref().map_or("", |(u, _)| u.as_str())
            ),
            hint: "check --zookeeper-user and its password (LEADERD_ZOOKEEPER_PASSWORD or --zookeeper-password-file)",
        },
        Z::NoNode => Error::NotSetUp {
            backend: ZK.into(),
            detail: format!(
                "the chroot {} does not exist; create it (zkCli.sh create {}) or fix the connect string",
                config.connect.chroot.as_deref().unwrap_or("/"),
                config.connect.chroot.as_deref().unwrap_or("/")
            ),
        },
        Z::NoHosts => Error::Connection {
            backend: ZK.into(),
            detail: format!(
                "no server of {} opened a session (connection refused, unreachable, or no quorum); check the hosts and ports of --zookeeper and that the ensemble is up (`echo srvr | nc HOST PORT`)",
                config.connect.text()
            ),
        },
        other => Error::Connection {
            backend: ZK.into(),
            detail: format!("{other} (at {})", config.connect.text()),
        },
    }
}

/// The client's TLS settings from the PEM files.
fn tls_options(tls: &super::config::ZkTls) -> Result<zookeeper_client::TlsOptions, Error> {
    let bad = |what: &str, e: zookeeper_client::Error| {
        Error::Tls {
        backend: ZK.into(),
        detail: format!("{what}: {e}"),
        hint: "give PEM files: --zookeeper-tls-ca a CA bundle, --zookeeper-tls-cert a certificate chain, --zookeeper-tls-key its private key".into(),
    }
    };
    let options = zookeeper_client::TlsOptions::new()
        .with_pem_ca(&tls.ca)
        .map_err(|e| bad("the CA bundle", e))?;
    match &tls.client {
        Some((cert, key)) => options
            .with_pem_identity(cert, key.expose())
            .map_err(|e| bad("the client certificate or key", e)),
        None => Ok(options),
    }
}

/// With TLS: why a handshake with the first server that takes a TCP
/// connection fails (read on a little after it, since a server refusing
/// the client's certificate says so only then), or `None` when it works or
/// no server answers: a session that failed for that reason is one no
/// retry fixes.
async fn handshake_refused(config: &ZkConfig) -> Option<String> {
    let tls = config.tls.as_ref()?;
    let roots = crate::client::pem::roots(Some(tls.ca.as_bytes()), "the CA bundle").ok()?;
    let client = tls
        .client
        .as_ref()
        .map(|(cert, key)| (cert.clone().into_bytes(), key.clone()));
    let tls_config = crate::client::pem::client_config(roots, client.as_ref()).ok()?;
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(tls_config));
    for (host, port) in &config.connect.hosts {
        let connect = tokio::net::TcpStream::connect((host.as_str(), *port));
        let Ok(Ok(tcp)) = tokio::time::timeout(config.timeout, connect).await else {
            continue;
        };
        let name = rustls::pki_types::ServerName::try_from(host.clone()).ok()?;
        let attempt = async {
            let mut stream = connector.connect(name, tcp).await?;
            let mut byte = [0u8; 1];
            tokio::io::AsyncReadExt::read(&mut stream, &mut byte).await
        };
        return match tokio::time::timeout(config.timeout, attempt).await {
            Ok(Err(e))
                if e.kind() == std::io::ErrorKind::InvalidData
                    || e.to_string().contains("alert") =>
            {
                Some(e.to_string())
            }
            _ => None,
        };
    }
    None
}

fn tls_refused(config: &ZkConfig, why: String) -> Error {
    Error::Tls {
        backend: ZK.into(),
        detail: format!(
            "the TLS handshake with {} failed: {why}",
            config.connect.text()
        ),
        hint: format!(
            "check that the connect string names the servers' secureClientPort and that --zookeeper-tls-ca is the CA that signed their certificates (whose names must include the host you wrote){}",
            if config.tls.as_ref().is_some_and(|t| t.client.is_none()) {
                "; give --zookeeper-tls-cert and --zookeeper-tls-key if they require client certificates (ssl.clientAuth=need)"
            } else {
                "; they must trust your client certificate's CA"
            }
        ),
    }
}
