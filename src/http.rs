//! The HTTP API (PRODUCT §7): `/leader`, `/leader/events`, `/healthz`,
//! `/readyz`, `/metrics`, and the Kubernetes leader-elector's `/` and
//! `/isLeader`. Handlers only read the published snapshot, so no request can
//! slow the renewal loop. Only GET and HEAD are routed; anything else is 405
//! with `Allow` (axum's method router).
//!
//! [`serve`] is hardened for a sidecar port: a header-read timeout (a client
//! that sends nothing is dropped), a cap on header size, and a cap on open
//! connections.

use crate::metrics::{Format, Metrics};
use crate::status::{Change, Snapshot};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use futures_util::{Stream, StreamExt, stream};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, broadcast, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A client must send its request headers within this long of connecting.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Request line plus headers; leaderd's API needs a fraction of this.
const MAX_HEADER_BYTES: usize = 16 * 1024;
/// Open connections at once (SSE subscribers included); more are closed at once.
const MAX_CONNECTIONS: usize = 256;
/// On shutdown, how long open connections (SSE streams) get to finish.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// What the handlers read.
pub struct HttpContext {
    pub id: String,
    pub key: String,
    pub status: watch::Receiver<Snapshot>,
    pub changes: broadcast::Sender<Change>,
    pub metrics: Arc<Metrics>,
}

/// The router, testable with `tower::ServiceExt::oneshot`.
pub fn router(ctx: HttpContext) -> Router {
    Router::new()
        .route("/leader", get(leader))
        .route("/leader/events", get(events))
        .route("/", get(compat_name))
        .route("/isLeader", get(compat_is_leader))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .layer(DefaultBodyLimit::max(1024))
        .with_state(Arc::new(ctx))
}

type Ctx = State<Arc<HttpContext>>;

fn view(s: &HttpContext) -> crate::status::LeaderView {
    s.status.borrow().leader_view(&s.id, &s.key, Instant::now())
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

/// Server-Sent Events: the current state first (`event: state`), then one
/// `event: transition` per state change.
async fn events(State(s): Ctx) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let changes = s.changes.subscribe();
    let initial = Change::now(&view(&s), None, None);
    let first = stream::once(async move { Ok(sse_event("state", &initial)) });
    let rest = stream::unfold(changes, |mut changes| async move {
        loop {
            match changes.recv().await {
                Ok(change) => return Some((Ok(sse_event("transition", &change)), changes)),
                // A slow reader missed some; carry on with the next.
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    Sse::new(first.chain(rest)).keep_alive(KeepAlive::default())
}

fn sse_event(name: &str, change: &Change) -> SseEvent {
    SseEvent::default()
        .event(name)
        .data(serde_json::to_string(change).expect("plain struct serialises"))
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

/// Serves `app` on `listener` until `stop`, with the limits above.
pub async fn serve(listener: TcpListener, app: Router, stop: CancellationToken) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut backoff = AcceptBackoff::default();
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let stream = match accepted {
            Ok((stream, _)) => {
                backoff.recovered();
                stream
            }
            Err(e) => {
                // EMFILE and friends leave the connection queued: accepting
                // again at once spins a core. Back off; the control loop,
                // renewals and the child go on meanwhile.
                let pause = backoff.failed(&e);
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(pause) => continue,
                }
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!(
                limit = MAX_CONNECTIONS,
                "HTTP connection limit reached; closing a new connection"
            );
            continue;
        };
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let stop = stop.clone();
        connections.spawn(async move {
            let _slot = slot;
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .max_buf_size(MAX_HEADER_BYTES)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(CLOSE_GRACE, conn).await;
                }
            }
        });
    }
    let _ = tokio::time::timeout(CLOSE_GRACE * 2, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    connections.abort_all();
}

/// Accept errors: a pause that doubles from 10 ms to 1 s while they go on,
/// and one log line per 10 s (with how many were not logged).
#[derive(Default)]
struct AcceptBackoff {
    pause: Option<Duration>,
    failures: u64,
    logged_at: Option<Instant>,
}

const ACCEPT_PAUSE_FIRST: Duration = Duration::from_millis(10);
const ACCEPT_PAUSE_MAX: Duration = Duration::from_secs(1);
const ACCEPT_LOG_EVERY: Duration = Duration::from_secs(10);

impl AcceptBackoff {
    fn failed(&mut self, error: &std::io::Error) -> Duration {
        let pause = self
            .pause
            .map_or(ACCEPT_PAUSE_FIRST, |p| (p * 2).min(ACCEPT_PAUSE_MAX));
        self.pause = Some(pause);
        self.failures += 1;
        if self
            .logged_at
            .is_none_or(|t| t.elapsed() >= ACCEPT_LOG_EVERY)
        {
            tracing::warn!(
                error = %error,
                failures = self.failures,
                "HTTP API cannot accept connections; retrying with a backoff (the election and the child are not affected). If this is EMFILE, raise the open-file limit or find what holds the connections"
            );
            self.logged_at = Some(Instant::now());
            self.failures = 0;
        }
        pause
    }

    fn recovered(&mut self) {
        if self.pause.take().is_some() {
            tracing::info!("HTTP API accepting connections again");
        }
    }
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
            changes: broadcast::channel(8).0,
            metrics: Arc::new(Metrics::new(key)),
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
