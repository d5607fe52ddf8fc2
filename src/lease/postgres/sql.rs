//! The statements, one per lease operation, each judged by the server's
//! clock (`clock_timestamp()`) in one autocommit statement, so they work
//! through a transaction pooler and never depend on the candidates' clocks.
//!
//! A row per key: `holder` (the candidate id), `owner` (the SHA-256 of the
//! ownership token, hashed by the server: reading the table is not enough to
//! renew or release someone else's lease), `fence` (the last fencing token,
//! kept when the lease is released) and `expires_at` (NULL when free). The
//! table is logged: an `UNLOGGED` table is emptied by a crash, and the
//! fencing counter with it.

use crate::config::PgTable;

/// The lease table's definition: one statement, printed by `check`.
pub fn create_table(table: &PgTable) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {} (key text PRIMARY KEY, holder text, owner text, fence bigint NOT NULL DEFAULT 0, expires_at timestamptz)",
        table.quoted
    )
}

/// The server-side hash of the ownership token in parameter `$n`.
fn owner(n: u8) -> String {
    format!("encode(sha256(convert_to(${n}::text, 'UTF8')), 'hex')")
}

/// Who holds the row now, as the last columns of a result: holder, fence,
/// and milliseconds left (NULL or ≤ 0: free). Reads the snapshot taken
/// before the statement's own write.
fn current(table: &PgTable) -> String {
    format!(
        "(SELECT 1) AS one LEFT JOIN {t} AS cur ON cur.key = $1 AND cur.expires_at > clock_timestamp()",
        t = table.quoted
    )
}

const LEFT_MS: &str =
    "(extract(epoch FROM (cur.expires_at - clock_timestamp())) * 1000)::bigint AS left_ms";

/// `$1` key, `$2` holder id, `$3` ownership token, `$4` ttl in ms, `$5` the
/// highest fencing token this candidate has seen. The row is taken when it
/// is free, expired or already ours (a retry after an ambiguous timeout,
/// or a candidate that stepped down and could not release). Every
/// acquisition is a new term, with a new token:
/// `greatest(fence + 1, seen + 1, the server's clock in ms)`: the clock and
/// the candidate's floor keep tokens growing if the table is restored from
/// an old backup. Returns `won` (the fencing token, NULL if refused), then
/// the holder as it was.
pub fn acquire(table: &PgTable) -> String {
    format!(
        "WITH won AS (
  INSERT INTO {t} AS l (key, holder, owner, fence, expires_at)
  VALUES ($1, $2, {owner}, greatest($5::bigint + 1, (extract(epoch FROM clock_timestamp()) * 1000)::bigint),
          clock_timestamp() + $4::bigint * interval '1 millisecond')
  ON CONFLICT (key) DO UPDATE SET
    fence = greatest(l.fence + 1, excluded.fence),
    holder = excluded.holder, owner = excluded.owner, expires_at = excluded.expires_at
  WHERE l.owner = excluded.owner OR l.expires_at IS NULL OR l.expires_at <= clock_timestamp()
  RETURNING l.fence)
SELECT (SELECT fence FROM won) AS won, cur.holder, cur.fence, {LEFT_MS} FROM {current}",
        t = table.quoted,
        owner = owner(3),
        current = current(table),
    )
}

/// `$1` key, `$2` ownership token, `$3` ttl in ms. Extends the lease only
/// while it is ours and has not expired. Returns `renewed` (1 or 0), then
/// the holder as it was.
pub fn renew(table: &PgTable) -> String {
    format!(
        "WITH renewed AS (
  UPDATE {t} SET expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond'
  WHERE key = $1 AND owner = {owner} AND expires_at > clock_timestamp()
  RETURNING fence)
SELECT (SELECT count(*) FROM renewed) AS renewed, cur.holder, cur.fence, {LEFT_MS} FROM {current}",
        t = table.quoted,
        owner = owner(2),
        current = current(table),
    )
}

/// `$1` key, `$2` ownership token, `$3` the wake-up channel, `$4` our id.
/// Frees the row if it is ours (the fence stays) and, with it, notifies the
/// waiters (delivered when the statement commits). One row: released.
pub fn release(table: &PgTable) -> String {
    format!(
        "UPDATE {t} SET holder = NULL, owner = NULL, expires_at = NULL
WHERE key = $1 AND owner = {owner}
RETURNING pg_notify($3, $4)::text",
        t = table.quoted,
        owner = owner(2),
    )
}

/// `$1` key. The holder, fence and milliseconds left; no row when free.
pub fn peek(table: &PgTable) -> String {
    format!(
        "SELECT cur.holder, cur.fence, {LEFT_MS} FROM {current} WHERE cur.key IS NOT NULL",
        current = current(table),
    )
}

/// Whether the table exists and what the session may do with it: `$1` the
/// table's name as `to_regclass` reads it.
pub const PRIVILEGES: &str = "SELECT to_regclass($1) IS NOT NULL AS exists,
  CASE WHEN to_regclass($1) IS NULL THEN NULL ELSE has_table_privilege(to_regclass($1), 'SELECT') END,
  CASE WHEN to_regclass($1) IS NULL THEN NULL ELSE has_table_privilege(to_regclass($1), 'INSERT') END,
  CASE WHEN to_regclass($1) IS NULL THEN NULL ELSE has_table_privilege(to_regclass($1), 'UPDATE') END";

/// Whether the session's server is a standby.
pub const SERVER: &str = "SELECT pg_is_in_recovery()";
