//! The HTTP API (PRODUCT §7): `/leader`, `/leader/events`, `/healthz`,
//! `/readyz`, `/metrics`, and the Kubernetes leader-elector's `/` and
//! `/isLeader`. Handlers only read the published snapshot, so no request can
//! slow the renewal loop. Only GET and HEAD are routed; anything else is 405
//! with `Allow` (axum's method router).
//!
//! [`serve`] is hardened for a sidecar port (see `serve`). When the listener
//! is a loopback address, a request whose `Host` names anything but a
//! loopback name or address is refused (421): a web page cannot reach the
//! API through DNS rebinding.

mod events;
mod serve;

pub use serve::{HEADER_READ_TIMEOUT, MAX_CONNECTIONS, serve};

use crate::metrics::{Format, Metrics};
use crate::status::{Changes, Snapshot};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use std::sync::Arc;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// What the handlers read.
pub struct HttpContext {
    pub id: String,
    pub key: String,
    pub status: watch::Receiver<Snapshot>,
    pub changes: Changes,
    pub metrics: Arc<Metrics>,
    /// Cancelled when leaderd is done: event streams end.
    pub stop: CancellationToken,
    /// Only loopback `Host` headers are served.
    pub loopback_only: bool,
    /// What a worker fences its writes with in the store (`fence`).
    pub fence_exports: std::collections::BTreeMap<String, String>,
    /// The same for the current term only, shown while this candidate
    /// leads (`LeaseBackend::term_exports`).
    pub term_exports: watch::Receiver<Vec<(&'static str, String)>>,
}

/// The router, testable with `tower::ServiceExt::oneshot`.
pub fn router(ctx: HttpContext) -> Router {
    Router::new()
        .route("/leader", get(leader))
        .route("/leader/events", get(events::events))
        .route("/", get(compat_name))
        .route("/isLeader", get(compat_is_leader))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .layer(DefaultBodyLimit::max(1024))
        .layer(axum::middleware::from_fn_with_state(
            ctx.loopback_only,
            loopback_host,
        ))
        .with_state(Arc::new(ctx))
}

/// Refuses a request for another host on a loopback listener (421).
async fn loopback_host(
    State(loopback_only): State<bool>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .map(|h| h.to_str().unwrap_or("\u{0}"));
    match host {
        Some(host) if loopback_only && !is_loopback_host(host) => (
            StatusCode::MISDIRECTED_REQUEST,
            "leaderd listens on loopback and serves only loopback Host names (localhost, 127.0.0.1, [::1])\n",
        )
            .into_response(),
        _ => next.run(request).await,
    }
}

/// `localhost`, `*.localhost`, a loopback IPv4 or IPv6 address, each with an
/// optional port.
fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map_or("", |(addr, _)| addr),
        None => host.rsplit_once(':').map_or(host, |(name, port)| {
            if port.chars().all(|c| c.is_ascii_digit()) {
                name
            } else {
                host
            }
        }),
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

type Ctx = State<Arc<HttpContext>>;

pub(crate) fn view(s: &HttpContext) -> crate::status::LeaderView {
    let mut view = s.status.borrow().leader_view(&s.id, &s.key, Instant::now());
    view.backend_nodes = s.metrics.last_nodes();
    view.standby_reads = s.metrics.last_standby_reads();
    view.fence = s.fence_exports.clone();
    if view.is_leader {
        view.fence
            .extend(crate::status::fence_fields(&s.term_exports.borrow()));
    }
    view
}

async fn leader(State(s): Ctx) -> Response {
    let view = view(&s);
    let code = if view.is_leader {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(view)).into_response()
}

/// Kubernetes leader-elector compatible: `{"name": "<holder id>"}`.
async fn compat_name(State(s): Ctx) -> Response {
    let name = view(&s).leader.unwrap_or_default();
    Json(serde_json::json!({ "name": name })).into_response()
}

/// Kubernetes leader-elector compatible: `{"isLeader": bool}`.
async fn compat_is_leader(State(s): Ctx) -> Response {
    Json(serde_json::json!({ "isLeader": view(&s).is_leader })).into_response()
}

/// Alive while the control loop is: the runner holds the sending side.
async fn healthz(State(s): Ctx) -> Response {
    if s.status.has_changed().is_ok() {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "control loop stopped\n").into_response()
    }
}

/// Ready once started, not ready from the moment shutdown begins.
async fn readyz(State(s): Ctx) -> Response {
    let snap = s.status.borrow();
    if snap.shutting_down {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response()
    } else if snap.ready {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting\n").into_response()
    }
}

async fn metrics(State(s): Ctx, headers: axum::http::HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = Format::negotiate(accept);
    let body = s.metrics.render(&view(&s), format);
    ([(header::CONTENT_TYPE, format.content_type())], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::StateName;
    use crate::status::HeldLease;
    use axum::body::Body;
    use axum::http::{Method, Request};
    use std::time::Duration;
    use tower::ServiceExt;

    fn router(id: &str, key: &str, status: watch::Receiver<Snapshot>) -> Router {
        super::router(HttpContext {
            id: id.into(),
            key: key.into(),
            status,
            changes: Changes::new(),
            metrics: Arc::new(Metrics::new(key)),
            stop: CancellationToken::new(),
            loopback_only: true,
            fence_exports: crate::status::fence_fields(&[(
                "LEADERD_ETCD_LEADER_KEY",
                format!("leaderd/{key}/leader"),
            )]),
            // Never closed: a sender dropped keeps the last value.
            term_exports: watch::channel(vec![(
                "LEADERD_ZOOKEEPER_FENCE_NODE",
                format!("/leaderd/{key}/c-n-0000000007"),
            )])
            .1,
        })
    }

    async fn call(app: Router, method: Method, path: &str) -> (StatusCode, String, Option<String>) {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .body(Body::empty())
            .unwrap();
        let response = app.oneshot(request).await.unwrap();
        let status = response.status();
        let allow = response
            .headers()
            .get("allow")
            .map(|v| v.to_str().unwrap().to_string());
        let body = axum::body::to_bytes(response.into_body(), 64 * 1024)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap(), allow)
    }

    fn leading() -> Snapshot {
        let mut s = Snapshot::new();
        s.state = StateName::Working;
        s.ready = true;
        s.lease = Some(HeldLease {
            fencing_token: 42,
            valid_until: Instant::now() + Duration::from_secs(5),
        });
        s
    }

    #[tokio::test]
    async fn leader_is_200_with_the_body_of_the_contract() {
        let (_tx, rx) = watch::channel(leading());
        let (code, body, _) = call(router("me", "jobs", rx), Method::GET, "/leader").await;
        assert_eq!(code, StatusCode::OK);
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        for field in [
            "is_leader",
            "id",
            "key",
            "leader",
            "fencing_token",
            "state",
            "state_since",
            "lease_remaining_ms",
            "leader_observed_ms_ago",
        ] {
            assert!(json.get(field).is_some(), "missing {field}: {body}");
        }
        assert_eq!(
            (
                json["leader"].as_str(),
                json["fencing_token"].as_u64(),
                json["state"].as_str()
            ),
            (Some("me"), Some(42), Some("working"))
        );
        // What the worker compares its token with, named as in its env.
        assert_eq!(
            json["fence"]["etcd_leader_key"].as_str(),
            Some("leaderd/jobs/leader")
        );
        // The term's own, shown while leading.
        assert_eq!(
            json["fence"]["zookeeper_fence_node"].as_str(),
            Some("/leaderd/jobs/c-n-0000000007")
        );
    }

    #[tokio::test]
    async fn standby_is_503() {
        let (_tx, rx) = watch::channel(Snapshot::new());
        let (code, body, _) = call(router("me", "jobs", rx), Method::GET, "/leader").await;
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            body.contains("\"is_leader\":false") && body.contains("\"leader\":null"),
            "{body}"
        );
        // A term's exports are not a standby's.
        assert!(!body.contains("zookeeper_fence_node"), "{body}");
    }

    #[tokio::test]
    async fn other_methods_are_405_with_allow() {
        let (_tx, rx) = watch::channel(leading());
        for method in [Method::POST, Method::PUT, Method::DELETE] {
            let (code, _, allow) =
                call(router("me", "jobs", rx.clone()), method.clone(), "/leader").await;
            assert_eq!(code, StatusCode::METHOD_NOT_ALLOWED, "{method}");
            assert!(allow.is_some_and(|a| a.contains("GET")), "{method}");
        }
        let (code, _, _) = call(router("me", "jobs", rx), Method::HEAD, "/leader").await;
        assert_eq!(code, StatusCode::OK);
    }

    #[tokio::test]
    async fn readiness_ends_with_shutdown_and_health_with_the_loop() {
        let (tx, rx) = watch::channel(leading());
        let app = router("me", "jobs", rx);
        assert_eq!(
            call(app.clone(), Method::GET, "/readyz").await.0,
            StatusCode::OK
        );
        tx.send_modify(|s| s.shutting_down = true);
        assert_eq!(
            call(app.clone(), Method::GET, "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            call(app.clone(), Method::GET, "/healthz").await.0,
            StatusCode::OK
        );
        drop(tx);
        assert_eq!(
            call(app, Method::GET, "/healthz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
    }

    #[tokio::test]
    async fn leader_elector_compatible_endpoints() {
        let (_tx, rx) = watch::channel(leading());
        let app = router("me", "jobs", rx);
        let (code, body, _) = call(app.clone(), Method::GET, "/").await;
        assert_eq!((code, body.as_str()), (StatusCode::OK, r#"{"name":"me"}"#));
        let (code, body, _) = call(app, Method::GET, "/isLeader").await;
        assert_eq!(
            (code, body.as_str()),
            (StatusCode::OK, r#"{"isLeader":true}"#)
        );
        let (_tx, rx) = watch::channel(Snapshot::new());
        let standby = router("me", "jobs", rx);
        assert_eq!(
            call(standby.clone(), Method::GET, "/").await.1,
            r#"{"name":""}"#
        );
        assert_eq!(
            call(standby, Method::GET, "/isLeader").await.1,
            r#"{"isLeader":false}"#
        );
    }

    #[tokio::test]
    async fn metrics_agree_with_leader() {
        let (_tx, rx) = watch::channel(leading());
        let (code, body, _) = call(router("me", "jobs", rx), Method::GET, "/metrics").await;
        assert_eq!(code, StatusCode::OK);
        for line in [
            "leaderd_is_leader 1",
            "leaderd_fencing_token 42",
            "leader_election_master_status{name=\"jobs\"} 1",
            "leaderd_state{state=\"idle\"} 1",
        ] {
            assert!(body.contains(line), "missing {line:?} in\n{body}");
        }
    }

    #[tokio::test]
    async fn events_stream_starts_with_the_current_state() {
        let (_tx, rx) = watch::channel(leading());
        let request = Request::builder()
            .uri("/leader/events")
            .body(Body::empty())
            .unwrap();
        let response = router("me", "jobs", rx).oneshot(request).await.unwrap();
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        let mut body = response.into_body().into_data_stream();
        let first = futures_util::StreamExt::next(&mut body)
            .await
            .unwrap()
            .unwrap();
        let text = String::from_utf8(first.to_vec()).unwrap();
        assert!(
            text.starts_with("event: state\ndata: {") && text.contains("\"state\":\"working\""),
            "{text}"
        );
    }
}
