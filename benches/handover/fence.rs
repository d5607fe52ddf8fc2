//! What the fence costs a write (`fence/`, docs/fencing.md): on one
//! connection, one round trip per write either way, a plain write against
//! the same write behind the fence. PostgreSQL: `BEGIN; INSERT; COMMIT`
//! against `BEGIN; SELECT leaderd_fence_check(..); INSERT; COMMIT`, as one
//! simple-query batch. Redis: `SET` against `FCALL leaderd_fence_set`.
//! And what leaderd's own raise (`--fence-redis`, `--fence-postgres`) adds
//! to a graceful handover. `BENCH_ONLY=fence`.

use super::support;
use std::time::Instant;

const SQL: &str = include_str!("../../fence/postgres.sql");
const LUA: &str = include_str!("../../fence/redis.lua");

/// Median and 99th percentile, in µs.
fn spread(mut us: Vec<f64>) -> (f64, f64) {
    us.sort_by(f64::total_cmp);
    (us[us.len() / 2], us[us.len() * 99 / 100])
}

fn timed(n: usize, mut once: impl FnMut(usize)) -> (f64, f64) {
    for i in 0..n / 10 {
        once(i); // warm-up
    }
    let mut us = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        once(i);
        us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    spread(us)
}

fn postgres(n: usize) -> ((f64, f64), (f64, f64)) {
    let pg = support::postgres::Postgres::start();
    pg.sql(SQL);
    pg.sql(
        "CREATE TABLE results (id bigserial PRIMARY KEY, term bigint NOT NULL, what text NOT NULL)",
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let client = runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(&pg.url(""), tokio_postgres::NoTls)
            .await
            .expect("a connection");
        tokio::spawn(connection);
        client
    });
    let run = |sql: String| {
        runtime
            .block_on(client.batch_execute(&sql))
            .expect("the batch")
    };
    let plain = timed(n, |i| {
        run(format!(
            "BEGIN; INSERT INTO results (term, what) VALUES (7, 'job {i}'); COMMIT"
        ))
    });
    let fenced = timed(n, |i| {
        run(format!(
            "BEGIN; SELECT leaderd_fence_check('jobs', 7); INSERT INTO results (term, what) VALUES (7, 'job {i}'); COMMIT"
        ))
    });
    (plain, fenced)
}

fn redis(n: usize) -> ((f64, f64), (f64, f64)) {
    let server = support::Redis::start();
    server.cmd(&["FUNCTION", "LOAD", LUA]);
    let mut conn = server.conn();
    let plain = timed(n, |i| {
        let _: () = redis::cmd("SET")
            .arg("{jobs}:result")
            .arg(format!("job {i}"))
            .query(&mut conn)
            .expect("SET");
    });
    let fenced = timed(n, |i| {
        let _: redis::Value = redis::cmd("FCALL")
            .arg("leaderd_fence_set")
            .arg(2)
            .arg("{jobs}:fence")
            .arg("{jobs}:result")
            .arg(7)
            .arg(format!("job {i}"))
            .query(&mut conn)
            .expect("FCALL");
    });
    (plain, fenced)
}

/// Graceful handovers among three candidates on Redis, without a fence and
/// with leaderd raising one in Redis (the lease's server) or PostgreSQL.
fn handovers(exe: &str, dir: &std::path::Path) {
    println!();
    println!(
        "| graceful handover, K = 3 on Redis (SIGTERM → next child running) | median | max | n |"
    );
    println!("|---|---|---|---|");
    let pg = support::postgres::Postgres::start();
    pg.sql(SQL);
    let pg_url = pg.url("");
    for (i, fence) in ["none", "--fence-redis", "--fence-postgres"]
        .into_iter()
        .enumerate()
    {
        let mut bench = super::Bench {
            redis: support::Redis::start(),
            more: Vec::new(),
            silent: Vec::new(),
            exe: exe.to_string(),
            dir: dir.to_path_buf(),
            next_id: 5000 + i * 100,
            extra: Vec::new(),
            pg: None,
            etcd: None,
            zk: None,
            kube: None,
        };
        bench.redis.cmd(&["FUNCTION", "LOAD", LUA]);
        bench.extra = match fence {
            "--fence-redis" => vec![fence.into(), bench.redis.url()],
            "--fence-postgres" => vec![fence.into(), pg_url.clone()],
            _ => Vec::new(),
        };
        let (s, overlap) = bench.handovers_on(&format!("fenced-{i}"), 3, 15);
        assert!(overlap <= 1, "{overlap} children alive at once");
        super::row(&format!("fence raised by leaderd: {fence}"), &s);
    }
}

pub(super) fn rows(exe: &str, dir: &std::path::Path) {
    println!(
        "# what the fence costs a write, one connection, one round trip per write ({} cores)",
        super::num_cpus()
    );
    println!();
    println!(
        "| resource | plain write, median / p99 | fenced write, median / p99 | the check costs (median) |"
    );
    println!("|---|---|---|---|");
    let rows = [
        ("PostgreSQL: a transaction of one INSERT", postgres(2000)),
        ("Redis: SET", redis(20000)),
    ];
    for (name, ((p50, p99), (f50, f99))) in rows {
        println!(
            "| {name} | {p50:.0} / {p99:.0} µs | {f50:.0} / {f99:.0} µs | {:.0} µs |",
            f50 - p50
        );
    }
    handovers(exe, dir);
}
