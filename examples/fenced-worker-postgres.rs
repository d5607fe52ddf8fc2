//! A worker that writes to PostgreSQL through leaderd's fence
//! (docs/fencing.md), as leaderd's child — the Rust twin of
//! `examples/fenced-worker-psql.sh`:
//!
//!   WORKER_DATABASE_URL=postgres://... leaderd run --key jobs ... -- fenced-worker-postgres
//!
//! Every second, one transaction whose first statement is the fence check
//! with the term's token, then the write. What a worker must do with each
//! answer:
//! - `LDF01`: a newer term has written; this worker was deposed. Roll back
//!   and exit, and never retry with this token.
//! - `40001` (REPEATABLE READ or SERIALIZABLE): a concurrent transaction
//!   raised the fence; retry as usual, and the retry meets the fence.
//! - anything else: the database's trouble, not the fence's; try again
//!   later.
//!
//! Needs the fence installed (`leaderd fence install postgres --apply`) and
//! a table `results (term bigint, what text)`. The fence's name is
//! `LEADERD_FENCE_KEY` when leaderd raises the fence itself
//! (`--fence-postgres`), else the election key. Plain text for brevity:
//! a real worker connects with TLS (tokio-postgres-rustls, as leaderd does).

use std::time::Duration;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let need = |name: &str, why: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            eprintln!("fenced-worker-postgres: {name} is not set: {why}");
            std::process::exit(2)
        })
    };
    let url = need(
        "WORKER_DATABASE_URL",
        "set it to the database the work writes to",
    );
    let token: i64 = need(
        "LEADERD_FENCING_TOKEN",
        "run me as the child of leaderd run",
    )
    .parse()
    .unwrap_or_else(|_| {
        eprintln!("fenced-worker-postgres: LEADERD_FENCING_TOKEN is not a number");
        std::process::exit(2)
    });
    let key = std::env::var("LEADERD_FENCE_KEY")
        .or_else(|_| std::env::var("LEADERD_KEY"))
        .unwrap_or_else(|_| "jobs".into());
    let id = std::env::var("LEADERD_ID").unwrap_or_else(|_| "worker".into());

    let (client, connection) = match tokio_postgres::connect(&url, NoTls).await {
        Ok(pair) => pair,
        Err(e) => {
            eprintln!("worker {id}: cannot connect: {e}");
            std::process::exit(1)
        }
    };
    tokio::spawn(connection);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    let mut job = 0u64;
    loop {
        job += 1;
        let what = format!("job {job} by {id}");
        match store(&client, &key, token, &what).await {
            Ok(()) => println!("worker {id}: job {job} stored under fencing token {token}"),
            Err(e) if e.code() == Some(&SqlState::from_code("LDF01")) => {
                let message = e
                    .as_db_error()
                    .map_or(e.to_string(), |d| d.message().into());
                eprintln!("worker {id}: job {job} REFUSED under fencing token {token}: {message}");
                std::process::exit(1);
            }
            Err(e) if e.code() == Some(&SqlState::T_R_SERIALIZATION_FAILURE) => {
                println!("worker {id}: job {job} met a concurrent raise; retrying");
                continue;
            }
            Err(e) => eprintln!("worker {id}: job {job} failed: {e}"),
        }
        tokio::select! {
            _ = term.recv() => {
                println!("worker {id}: stopping after {job} jobs");
                return;
            }
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// One transaction: the fence check first, so the key's row lock orders
/// this term's writes against every other term's.
async fn store(
    client: &Client,
    key: &str,
    token: i64,
    what: &str,
) -> Result<(), tokio_postgres::Error> {
    client.batch_execute("BEGIN").await?;
    let written = async {
        client
            .query_one("SELECT leaderd_fence_check($1, $2)", &[&key, &token])
            .await?;
        client
            .execute(
                "INSERT INTO results (term, what) VALUES ($1, $2)",
                &[&token, &what],
            )
            .await?;
        client.batch_execute("COMMIT").await
    }
    .await;
    if written.is_err() {
        let _ = client.batch_execute("ROLLBACK").await;
    }
    written
}
