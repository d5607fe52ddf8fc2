//! A small example worker for the compose demo and the Kubernetes example:
//! it does one "job" a second while it is the leader, and shows how to use
//! the fencing token so that a stale leader's writes are refused.
//!
//! Two ways to learn about leadership, as in README "Running the work":
//! - as leaderd's child (`leaderd run -- worker`): leaderd starts it when it
//!   wins and stops it (SIGTERM, then SIGKILL) before the lease can pass on.
//!   The token arrives in `LEADERD_FENCING_TOKEN`.
//! - beside leaderd (`worker --follow http://127.0.0.1:4040`, the Kubernetes
//!   sidecar layout): it asks `GET /leader` every second and works only while
//!   the answer says it leads *and* the lease it reported has time left, so
//!   it also stops when leaderd stops answering.
//!
//! With `WORKER_REDIS_URL` set, every job writes its result to Redis through
//! the fence leaderd ships (`fence/redis.lua`, loaded if the server lacks
//! it; docs/fencing.md): a write carrying a lower token than one already
//! written is refused by Redis itself, which is what makes a paused,
//! deposed leader harmless. The refusal goes to stderr.
//!
//! Build: `cargo build --release --example worker`.

use std::time::Duration;
use tokio::signal::unix::{SignalKind, signal};

/// The fence library, loaded when the server does not have it yet.
const FENCE: &str = include_str!("../fence/redis.lua");

/// A job never starts with less lease left than this.
const SAFETY_MARGIN: Duration = Duration::from_millis(1500);

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let id = ["LEADERD_ID", "POD_NAME", "HOSTNAME"]
        .iter()
        .find_map(|name| std::env::var(name).ok())
        .unwrap_or_else(|| "worker".into());
    let store = match std::env::var("WORKER_REDIS_URL") {
        Ok(url) => Some(Store::connect(&url).await),
        Err(_) => None,
    };
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler installs");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler installs");
    let follow = match args.as_slice() {
        [] => None,
        [flag, url] if flag == "--follow" => Some(url.trim_end_matches('/').to_string()),
        _ => {
            eprintln!("usage: worker [--follow http://127.0.0.1:4040]");
            std::process::exit(2);
        }
    };
    let mut leader = Leadership::new(follow);
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    let mut job = 0u64;
    println!("worker {id}: started");
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = ticker.tick() => {}
        }
        let Some(token) = leader.token(&id).await else {
            continue;
        };
        job += 1;
        let result = format!("job {job} by {id}");
        match &store {
            Some(store) => match store.fenced_write(token, &result).await {
                Ok(true) => println!("worker {id}: {result}, fencing token {token}: stored"),
                Ok(false) => eprintln!(
                    "worker {id}: {result}, fencing token {token}: REFUSED, a newer leader has written"
                ),
                Err(e) => println!("worker {id}: {result}: redis: {e}"),
            },
            None => println!("worker {id}: {result}, fencing token {token}"),
        }
    }
    println!("worker {id}: stopping after {job} jobs");
}

/// Where the worker learns whether it may work, and under which token.
struct Leadership {
    follow: Option<(String, reqwest::Client)>,
    was_leading: bool,
}

impl Leadership {
    fn new(follow: Option<String>) -> Self {
        let follow = follow.map(|url| {
            // The same TLS provider leaderd uses; the demo asks over plain HTTP.
            let _ = rustls::crypto::ring::default_provider().install_default();
            let client = reqwest::Client::builder()
                .timeout(Duration::from_millis(800))
                .build()
                .expect("a plain HTTP client builds");
            (url, client)
        });
        Leadership {
            follow,
            was_leading: false,
        }
    }

    /// The fencing token to work under now, or `None` when not leading.
    async fn token(&mut self, id: &str) -> Option<u64> {
        let Some((url, client)) = &self.follow else {
            // As leaderd's child: running at all means leading.
            return std::env::var("LEADERD_FENCING_TOKEN").ok()?.parse().ok();
        };
        // Asked afresh before every job: a job starts only with an answer
        // less than a second old that leaves a safety margin of lease.
        let token = match ask(client, url).await {
            Ok((true, Some(token), remaining)) if remaining > SAFETY_MARGIN => Some(token),
            Ok(_) => None,
            Err(e) => {
                if self.was_leading {
                    println!("worker {id}: cannot ask leaderd ({e}); pausing the work");
                }
                None
            }
        };
        if token.is_some() != self.was_leading {
            self.was_leading = token.is_some();
            let now = if self.was_leading {
                "leading"
            } else {
                "standing by"
            };
            println!("worker {id}: {now}");
        }
        token
    }
}

/// `GET /leader` → (is_leader, fencing_token, lease_remaining).
async fn ask(client: &reqwest::Client, url: &str) -> Result<(bool, Option<u64>, Duration), String> {
    let response = client
        .get(format!("{url}/leader"))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let bytes = response.bytes().await.map_err(|e| e.to_string())?;
    let body: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    let remaining = body["lease_remaining_ms"].as_u64().unwrap_or(0);
    Ok((
        body["is_leader"].as_bool() == Some(true),
        body["fencing_token"].as_u64(),
        Duration::from_millis(remaining),
    ))
}

struct Store {
    connection: redis::aio::MultiplexedConnection,
    /// The fence's key: leaderd's when it raises the fence itself
    /// (`--fence-redis`, `LEADERD_FENCE_KEY`), else the demo's. In a
    /// cluster it must share the data key's hash tag.
    fence: String,
}

impl Store {
    async fn connect(url: &str) -> Store {
        let connect = async {
            let client = redis::Client::open(url)?;
            client.get_multiplexed_async_connection().await
        };
        match connect.await {
            Ok(connection) => Store {
                connection,
                fence: std::env::var("LEADERD_FENCE_KEY")
                    .unwrap_or_else(|_| "demo:{results}:fence".into()),
            },
            Err(e) => {
                eprintln!("worker: cannot connect to WORKER_REDIS_URL: {e}");
                std::process::exit(1);
            }
        }
    }

    /// `FCALL leaderd_fence_set`: stored, or refused as stale (LDF01).
    async fn fenced_write(&self, token: u64, result: &str) -> Result<bool, redis::RedisError> {
        let mut connection = self.connection.clone();
        let mut call = redis::cmd("FCALL");
        call.arg("leaderd_fence_set")
            .arg(2)
            .arg(&self.fence)
            .arg("demo:{results}:last")
            .arg(token)
            .arg(result);
        let mut answer = call.query_async::<redis::Value>(&mut connection).await;
        if answer
            .as_ref()
            .is_err_and(|e| e.to_string().contains("Function not found"))
        {
            redis::cmd("FUNCTION")
                .arg("LOAD")
                .arg("REPLACE")
                .arg(FENCE)
                .query_async::<redis::Value>(&mut connection)
                .await?;
            answer = call.query_async(&mut connection).await;
        }
        match answer {
            Ok(_) => Ok(true),
            Err(e) if e.code() == Some("LDF01") => Ok(false),
            Err(e) => Err(e),
        }
    }
}
