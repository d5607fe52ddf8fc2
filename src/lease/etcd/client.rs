//! etcd's v3 API through its JSON gateway (`POST /v3/...`), over the HTTP
//! client leaderd already has: no gRPC stack and no `protoc` in the build.
//! Keys and values travel base64-encoded, 64-bit numbers as strings. Owns
//! the endpoints (a request that cannot reach one moves on to the next),
//! the auth token (fetched with the user's password, fetched again when the
//! server says it expired) and the sorting of etcd's errors.

use super::config::EtcdConfig;
use crate::lease::contract::Error;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::time::Instant;

pub(super) struct Client {
    http: reqwest::Client,
    pub(super) config: EtcdConfig,
    /// The endpoint to try first: the last one that answered.
    current: usize,
    token: Option<String>,
    /// How logs show the cluster.
    pub(super) shown: String,
}

pub(super) fn b64(bytes: &[u8]) -> String {
    BASE64.encode(bytes)
}

pub(super) fn unb64(text: &str) -> Vec<u8> {
    BASE64.decode(text).unwrap_or_default()
}

/// A JSON field holding a 64-bit number (etcd sends them as strings).
pub(super) fn int(v: &Value, field: &str) -> i64 {
    match &v[field] {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

/// A JSON field holding an unsigned 64-bit id (members, leaders).
pub(super) fn uint(v: &Value, field: &str) -> u64 {
    match &v[field] {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_u64().unwrap_or(0),
        _ => 0,
    }
}

impl Client {
    pub(super) fn new(config: &EtcdConfig) -> Result<Client, Error> {
        let shown = format!(
            "etcd ({})",
            config
                .endpoints
                .iter()
                .map(|e| e.as_str().trim_end_matches('/'))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let mut builder = reqwest::Client::builder()
            .connect_timeout(config.timeout)
            .tcp_keepalive(Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("leaderd/", env!("CARGO_PKG_VERSION")));
        if config.endpoints.iter().any(|e| e.scheme() == "https") {
            let tls = tls_config(config).map_err(|detail| Error::Tls {
                backend: shown.clone(),
                detail,
                hint: "check --etcd-tls-ca, --etcd-tls-cert and --etcd-tls-key".into(),
            })?;
            builder = builder.tls_backend_preconfigured(tls);
        }
        let http = builder.build().map_err(|e| Error::Connection {
            backend: shown.clone(),
            detail: format!("cannot build the HTTP client: {e}"),
        })?;
        Ok(Client {
            http,
            config: config.clone(),
            current: 0,
            token: None,
            shown,
        })
    }

    /// `POST /v3/{path}` with `body`, on the first endpoint that answers
    /// within the timeout (all of them share it). Signs in first when a
    /// user is configured, and once more if the token expired.
    pub(super) async fn call(&mut self, path: &str, body: &Value) -> Result<Value, Error> {
        let deadline = Instant::now() + self.config.timeout;
        match self.call_until(path, body, deadline).await {
            Err(e) if e.to_string().contains("invalid auth token") && self.token.is_some() => {
                self.token = None;
                self.call_until(path, body, deadline).await
            }
            other => other,
        }
    }

    async fn call_until(
        &mut self,
        path: &str,
        body: &Value,
        deadline: Instant,
    ) -> Result<Value, Error> {
        let n = self.config.endpoints.len();
        let mut last = None;
        for tried in 0..n {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            // A member that is frozen or far away (silent, not refusing)
            // gets half of what is left while another could still answer:
            // one silent member of three must not cost a whole operation.
            let until = if tried + 1 < n {
                now + (deadline - now) / 2
            } else {
                deadline
            };
            let endpoint = self.config.endpoints[self.current].clone();
            match self.attempt(&endpoint, path, body, until).await {
                Ok(v) => return Ok(v),
                // The member answered: its answer stands.
                Err(Failure::Answered(e)) => return Err(e),
                Err(Failure::Unreachable(e)) => {
                    last = Some(e);
                    self.current = (self.current + 1) % n;
                }
            }
        }
        Err(last.unwrap_or(Error::Timeout {
            backend: self.shown.clone(),
            timeout: self.config.timeout,
        }))
    }

    async fn attempt(
        &mut self,
        endpoint: &url::Url,
        path: &str,
        body: &Value,
        deadline: Instant,
    ) -> Result<Value, Failure> {
        if self.token.is_none() && self.config.user.is_some() {
            self.token = Some(self.authenticate(endpoint, deadline).await?);
        }
        self.post(endpoint, path, body, deadline).await
    }

    async fn authenticate(
        &self,
        endpoint: &url::Url,
        deadline: Instant,
    ) -> Result<String, Failure> {
        let body = json!({
            "name": self.config.user.clone().unwrap_or_default(),
            "password": self.config.password.as_ref().map(|p| p.expose().to_string()).unwrap_or_default(),
        });
        let reply = self
            .post(endpoint, "auth/authenticate", &body, deadline)
            .await?;
        reply["token"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| Failure::Answered(self.unexpected("no token in the authenticate reply")))
    }

    /// One request, without failover or sign-in.
    pub(super) async fn post(
        &self,
        endpoint: &url::Url,
        path: &str,
        body: &Value,
        deadline: Instant,
    ) -> Result<Value, Failure> {
        let url = endpoint.join(&format!("v3/{path}")).expect("a valid path");
        let mut request = self
            .http
            .post(url)
            .header("Content-Type", "application/json")
            .body(body.to_string());
        if let Some(token) = &self.token {
            request = request.header("Authorization", token);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let response = match tokio::time::timeout(left, request.send()).await {
            Err(_) => return Err(Failure::Unreachable(self.timed_out())),
            Ok(Err(e)) => return Err(Failure::Unreachable(self.transport(&e, endpoint))),
            Ok(Ok(r)) => r,
        };
        let status = response.status();
        let bytes = match tokio::time::timeout(left, response.bytes()).await {
            Err(_) => return Err(Failure::Unreachable(self.timed_out())),
            Ok(Err(e)) => return Err(Failure::Unreachable(self.transport(&e, endpoint))),
            Ok(Ok(b)) => b,
        };
        let text = String::from_utf8_lossy(&bytes);
        let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if status.is_success() && value.get("error").is_none() {
            return Ok(value);
        }
        let message = value["message"]
            .as_str()
            .or(value["error"].as_str())
            .unwrap_or(text.trim())
            .to_string();
        Err(self.refusal(&message, status))
    }

    /// An error etcd answered with.
    fn refusal(&self, message: &str, status: reqwest::StatusCode) -> Failure {
        let backend = self.shown.clone();
        let error = if message.contains("authentication failed") {
            Error::Misconfigured {
                backend,
                detail: message.to_string(),
                hint: "check the user in the etcd URL and its password (LEADERD_ETCD_PASSWORD or --etcd-password-file)",
            }
        } else if message.contains("permission denied") {
            Error::NotSetUp {
                backend,
                detail: format!(
                    "{message}; leaderd's role needs readwrite on its prefix: etcdctl role grant-permission ROLE readwrite --prefix=true {}",
                    self.config.prefix
                ),
            }
        } else if message.contains("user name is empty") || message.contains("user name not found")
        {
            Error::Misconfigured {
                backend,
                detail: message.to_string(),
                hint: "the cluster has authentication enabled: give a user in the URL (http://USER@HOST:2379) and its password",
            }
        } else if status.is_server_error()
            || message.contains("no leader")
            || message.contains("timed out")
        {
            // A member without a quorum: try another.
            return Failure::Unreachable(Error::Connection {
                backend,
                detail: message.to_string(),
            });
        } else {
            Error::Unexpected {
                backend,
                detail: format!("{message} (HTTP {status})"),
            }
        };
        Failure::Answered(error)
    }

    fn transport(&self, e: &reqwest::Error, endpoint: &url::Url) -> Error {
        let mut detail = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(inner) = source {
            detail = format!("{detail}: {inner}");
            source = inner.source();
        }
        let lower = detail.to_lowercase().replace([' ', '_'], "");
        if lower.contains("unknownissuer")
            || lower.contains("notvalidforname")
            || lower.contains("invalidcertificate")
        {
            return Error::Tls {
                backend: self.shown.clone(),
                detail,
                hint: "give the cluster's CA with --etcd-tls-ca, and connect by a name the certificate carries".into(),
            };
        }
        Error::Connection {
            backend: self.shown.clone(),
            detail: format!("{}: {detail}", endpoint.as_str().trim_end_matches('/')),
        }
    }

    fn timed_out(&self) -> Error {
        Error::Timeout {
            backend: self.shown.clone(),
            timeout: self.config.timeout,
        }
    }

    pub(super) fn unexpected(&self, detail: &str) -> Error {
        Error::Unexpected {
            backend: self.shown.clone(),
            detail: detail.to_string(),
        }
    }

    /// For the watcher: an authorization header value, signing in if needed.
    pub(super) async fn auth_header(
        &mut self,
        endpoint: &url::Url,
    ) -> Result<Option<String>, Error> {
        if self.config.user.is_none() {
            return Ok(None);
        }
        if self.token.is_none() {
            let deadline = Instant::now() + self.config.timeout;
            self.token = Some(
                self.authenticate(endpoint, deadline)
                    .await
                    .map_err(Failure::into_error)?,
            );
        }
        Ok(self.token.clone())
    }

    pub(super) fn http(&self) -> &reqwest::Client {
        &self.http
    }

    pub(super) fn current_endpoint(&self) -> url::Url {
        self.config.endpoints[self.current].clone()
    }

    pub(super) fn next_endpoint(&mut self) {
        self.current = (self.current + 1) % self.config.endpoints.len();
    }
}

/// A request's failure: the member answered (final), or it could not be
/// asked (another member may answer).
pub(super) enum Failure {
    Answered(Error),
    Unreachable(Error),
}

impl Failure {
    pub(super) fn into_error(self) -> Error {
        match self {
            Failure::Answered(e) | Failure::Unreachable(e) => e,
        }
    }
}

fn tls_config(config: &EtcdConfig) -> Result<rustls::ClientConfig, String> {
    let roots = crate::client::pem::roots(config.ca.as_deref(), "the CA bundle")?;
    let mut tls = crate::client::pem::client_config(roots, config.client.as_ref())?;
    // etcd's gateway speaks HTTP/1.1 and HTTP/2; HTTP/1.1 keeps one request
    // per connection simple to time out.
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tls)
}
