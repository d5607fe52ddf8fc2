//! Webhooks (PRODUCT §6): `POST` of `{"event","id","key","fencing_token",
//! "reason","at"}` on `elected` and `demoted`, signed as Standard Webhooks
//! when a secret is set. Deliveries run on their own tasks with a bounded
//! timeout and retries, so they never delay renewal or stopping.

pub mod options;

pub use options::{FEATURE, WebhookConfig};

use crate::metrics::Metrics;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

/// Per attempt: long enough for a slow receiver, short enough that a hung
/// one is given up on well within a lease term.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
const ATTEMPTS: u32 = 4;
const FIRST_RETRY: Duration = Duration::from_millis(500);

pub struct WebhookSpec {
    pub urls: Vec<url::Url>,
    /// The signing key (already decoded from `whsec_…` when given so).
    pub secret: Option<Vec<u8>>,
    pub id: String,
    pub key: String,
}

#[derive(serde::Serialize)]
struct Payload<'a> {
    event: &'static str,
    id: &'a str,
    key: &'a str,
    fencing_token: u64,
    reason: &'a str,
    at: String,
}

struct Notice {
    event: &'static str,
    fencing_token: u64,
    reason: String,
    at: SystemTime,
}

pub struct Webhooks {
    notices: mpsc::UnboundedSender<Notice>,
    dispatcher: JoinHandle<()>,
}

/// Decodes a Standard Webhooks secret: `whsec_<base64>`, or the raw bytes.
pub fn decode_secret(text: &str) -> Result<Vec<u8>, String> {
    let text = text.trim();
    match text.strip_prefix("whsec_") {
        Some(encoded) => BASE64
            .decode(encoded)
            .map_err(|e| format!("the whsec_ secret is not valid base64 ({e})")),
        None if text.is_empty() => Err("the webhook secret is empty".into()),
        None => Ok(text.as_bytes().to_vec()),
    }
}

/// `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`.
pub fn sign(secret: &[u8], msg_id: &str, timestamp: u64, body: &[u8]) -> String {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(format!("{msg_id}.{timestamp}.").as_bytes());
    mac.update(body);
    format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()))
}

impl Webhooks {
    pub fn new(spec: WebhookSpec, metrics: Arc<Metrics>) -> Result<Self, String> {
        // reqwest is built without a default TLS crypto provider (its default,
        // aws-lc, needs a C toolchain and cmake); use ring. Err means one is
        // already installed, which is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .timeout(ATTEMPT_TIMEOUT)
            .connect_timeout(ATTEMPT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("leaderd/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("cannot build the webhook HTTP client: {e}"))?;
        let (notices, rx) = mpsc::unbounded_channel();
        let dispatcher = tokio::spawn(dispatch(Arc::new(spec), client, rx, metrics));
        Ok(Webhooks {
            notices,
            dispatcher,
        })
    }

    pub fn notify(&self, event: &'static str, fencing_token: u64, reason: &str) {
        let notice = Notice {
            event,
            fencing_token,
            reason: reason.to_string(),
            at: SystemTime::now(),
        };
        let _ = self.notices.send(notice);
    }

    /// Lets deliveries in flight finish for up to `grace`, then drops them.
    pub async fn finish(self, grace: Duration) {
        drop(self.notices);
        let mut dispatcher = self.dispatcher;
        if tokio::time::timeout(grace, &mut dispatcher).await.is_err() {
            tracing::warn!(grace = ?grace, "webhook deliveries still pending at exit; abandoned");
            dispatcher.abort();
        }
    }
}

async fn dispatch(
    spec: Arc<WebhookSpec>,
    client: reqwest::Client,
    mut notices: mpsc::UnboundedReceiver<Notice>,
    metrics: Arc<Metrics>,
) {
    let mut deliveries = JoinSet::new();
    loop {
        tokio::select! {
            notice = notices.recv() => match notice {
                Some(notice) => {
                    let payload = Payload {
                        event: notice.event,
                        id: &spec.id,
                        key: &spec.key,
                        fencing_token: notice.fencing_token,
                        reason: &notice.reason,
                        at: humantime::format_rfc3339_millis(notice.at).to_string(),
                    };
                    let body: Arc<[u8]> = serde_json::to_vec(&payload).expect("plain struct serialises").into();
                    let msg_id = format!("msg_{}", crate::lease::new_token());
                    for url in spec.urls.clone() {
                        deliveries.spawn(deliver(spec.clone(), client.clone(), url, notice.event, msg_id.clone(), body.clone(), metrics.clone()));
                    }
                }
                None => break,
            },
            Some(_) = deliveries.join_next(), if !deliveries.is_empty() => {}
        }
    }
    while deliveries.join_next().await.is_some() {}
}

async fn deliver(
    spec: Arc<WebhookSpec>,
    client: reqwest::Client,
    url: url::Url,
    event: &'static str,
    msg_id: String,
    body: Arc<[u8]>,
    metrics: Arc<Metrics>,
) {
    let shown = crate::config::redact_url(url.as_str());
    let mut delay = FIRST_RETRY;
    for attempt in 1..=ATTEMPTS {
        let timestamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut request = client
            .post(url.clone())
            .header("content-type", "application/json")
            .header("webhook-id", &msg_id)
            .header("webhook-timestamp", timestamp.to_string())
            .body(body.to_vec());
        if let Some(secret) = &spec.secret {
            request = request.header("webhook-signature", sign(secret, &msg_id, timestamp, &body));
        }
        let outcome = match request.send().await {
            Ok(r) if r.status().is_success() => Ok(()),
            Ok(r) if r.status().is_server_error() || r.status().as_u16() == 429 => {
                Err((true, format!("HTTP {}", r.status())))
            }
            Ok(r) => Err((false, format!("HTTP {}", r.status()))),
            Err(e) => Err((true, e.without_url().to_string())),
        };
        match outcome {
            Ok(()) => {
                tracing::info!(event, url = %shown, attempt, "webhook delivered");
                metrics.webhook(event, "delivered");
                return;
            }
            Err((retry, why)) if retry && attempt < ATTEMPTS => {
                tracing::debug!(event, url = %shown, attempt, error = %why, "webhook failed; retrying");
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            Err((_, why)) => {
                tracing::warn!(event, url = %shown, attempts = attempt, error = %why, "webhook not delivered");
                metrics.webhook(event, "failed");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_matches_the_standard_webhooks_example() {
        // The example from the Standard Webhooks specification.
        let secret = decode_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        let sig = sign(&secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body);
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn secrets_decode_or_refuse() {
        assert_eq!(decode_secret("plain-secret\n").unwrap(), b"plain-secret");
        assert!(decode_secret("whsec_***").is_err());
        assert!(decode_secret("  ").is_err());
    }
}
