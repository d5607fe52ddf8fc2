//! The listener loop: accept with a backoff on errors, one task per
//! connection, and the limits that keep a sidecar port answering.
//!
//! - A client must send its request headers within [`HEADER_READ_TIMEOUT`]
//!   of connecting, or of its previous response (hyper's header-read timer
//!   runs while a keep-alive connection waits): idle connections go.
//! - At most [`MAX_CONNECTIONS`] at once. When a new one would exceed it, the
//!   oldest connection that has not sent a request yet is closed to make
//!   room, so a crowd of idle connections cannot starve the probes; only when
//!   every connection is busy (SSE streams, say) is the new one refused.

use axum::Router;
use axum::body::Body;
use hyper::body::Incoming;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower_service::Service;

/// A client must send its request headers within this long.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Request line plus headers; leaderd's API needs a fraction of this.
const MAX_HEADER_BYTES: usize = 16 * 1024;
/// Open connections at once (SSE subscribers included).
pub const MAX_CONNECTIONS: usize = 256;
/// On shutdown, how long open connections get to finish their response.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// A connection as the accept loop sees it.
struct Open {
    /// Set by the first request: from then on it is not evicted.
    used: Arc<AtomicBool>,
    close: CancellationToken,
}

/// Open connections by accept order (the key), for eviction.
#[derive(Default, Clone)]
struct Registry(Arc<Mutex<BTreeMap<u64, Open>>>);

impl Registry {
    fn len(&self) -> usize {
        self.0.lock().expect("registry lock").len()
    }

    /// Closes the oldest connection that has sent nothing; false if none.
    fn evict_oldest_unused(&self) -> bool {
        let map = self.0.lock().expect("registry lock");
        let idle = map
            .values()
            .find(|c| !c.used.load(Ordering::Relaxed) && !c.close.is_cancelled());
        idle.inspect(|open| open.close.cancel()).is_some()
    }

    fn insert(&self, n: u64, open: Open) {
        self.0.lock().expect("registry lock").insert(n, open);
    }

    fn remove(&self, n: u64) {
        self.0.lock().expect("registry lock").remove(&n);
    }
}

/// The router, marking its connection used at the first request.
#[derive(Clone)]
struct Marked {
    app: Router,
    used: Arc<AtomicBool>,
}

impl hyper::service::Service<hyper::Request<Incoming>> for Marked {
    type Response = axum::response::Response;
    type Error = Infallible;
    type Future = <Router as Service<hyper::Request<Body>>>::Future;

    fn call(&self, request: hyper::Request<Incoming>) -> Self::Future {
        self.used.store(true, Ordering::Relaxed);
        self.app.clone().call(request.map(Body::new))
    }
}

/// Serves `app` on `listener` until `stop`, with the limits above.
pub async fn serve(listener: TcpListener, app: Router, stop: CancellationToken) {
    let registry = Registry::default();
    let mut backoff = AcceptBackoff::default();
    let mut connections = JoinSet::new();
    let mut accepted_count: u64 = 0;
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
        if registry.len() >= MAX_CONNECTIONS && !registry.evict_oldest_unused() {
            tracing::warn!(
                limit = MAX_CONNECTIONS,
                "HTTP connection limit reached with every connection busy; closing a new connection"
            );
            continue;
        }
        accepted_count += 1;
        let n = accepted_count;
        let used = Arc::new(AtomicBool::new(false));
        let close = CancellationToken::new();
        registry.insert(
            n,
            Open {
                used: used.clone(),
                close: close.clone(),
            },
        );
        let service = Marked {
            app: app.clone(),
            used,
        };
        let (stop, registry) = (stop.clone(), registry.clone());
        connections.spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .max_buf_size(MAX_HEADER_BYTES)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = close.cancelled() => {}
                _ = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(CLOSE_GRACE, conn).await;
                }
            }
            registry.remove(n);
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

    #[test]
    fn eviction_takes_the_oldest_connection_that_sent_nothing() {
        let registry = Registry::default();
        let mut tokens = Vec::new();
        for (n, used) in [(1, true), (2, false), (3, false)] {
            let close = CancellationToken::new();
            tokens.push(close.clone());
            registry.insert(
                n,
                Open {
                    used: Arc::new(AtomicBool::new(used)),
                    close,
                },
            );
        }
        let closed = || tokens.iter().map(|t| t.is_cancelled()).collect::<Vec<_>>();
        assert!(registry.evict_oldest_unused());
        assert_eq!(closed(), [false, true, false]);
        // One already closing is not counted twice; a busy one is never closed.
        assert!(registry.evict_oldest_unused());
        assert_eq!(closed(), [false, true, true]);
        assert!(!registry.evict_oldest_unused());
    }

    #[test]
    fn accept_errors_back_off_to_a_second() {
        let mut backoff = AcceptBackoff::default();
        let e = std::io::Error::from_raw_os_error(libc::EMFILE);
        let pauses: Vec<Duration> = (0..9).map(|_| backoff.failed(&e)).collect();
        assert_eq!(pauses[0], ACCEPT_PAUSE_FIRST);
        assert_eq!(pauses[8], ACCEPT_PAUSE_MAX);
        backoff.recovered();
        assert_eq!(backoff.failed(&e), ACCEPT_PAUSE_FIRST);
    }
}
