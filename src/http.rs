//! The HTTP API (PRODUCT §7): `/leader`, `/healthz`, `/readyz`. Handlers only
//! read the published snapshot, so no request can slow the renewal loop.
//! Methods other than GET/HEAD get 405 with an `Allow` header (axum's method
//! router does that).

use crate::status::Snapshot;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use std::sync::Arc;
use tokio::sync::watch;
use tokio::time::Instant;

struct Shared {
    id: String,
    key: String,
    status: watch::Receiver<Snapshot>,
}

/// The router, testable with `tower::ServiceExt::oneshot`.
pub fn router(id: &str, key: &str, status: watch::Receiver<Snapshot>) -> Router {
    let shared = Arc::new(Shared {
        id: id.to_string(),
        key: key.to_string(),
        status,
    });
    Router::new()
        .route("/leader", get(leader))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(shared)
}

async fn leader(State(s): State<Arc<Shared>>) -> Response {
    let view = s.status.borrow().leader_view(&s.id, &s.key, Instant::now());
    let code = if view.is_leader {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(view)).into_response()
}

/// Alive while the control loop is: the runner holds the sending side.
async fn healthz(State(s): State<Arc<Shared>>) -> Response {
    if s.status.has_changed().is_ok() {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "control loop stopped\n").into_response()
    }
}

/// Ready once started, not ready from the moment shutdown begins.
async fn readyz(State(s): State<Arc<Shared>>) -> Response {
    let snap = s.status.borrow();
    if snap.shutting_down {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response()
    } else if snap.ready {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting\n").into_response()
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
}
