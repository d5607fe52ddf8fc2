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
