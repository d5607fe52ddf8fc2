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
//!
//! Beside each key's row, its term record: the row `KEY#term` (`#` is not
//! allowed in keys, so no election can own that name), written with every
//! acquisition, renewed in the same statement as the lease while the lease
//! row is ours, and cleared only by the release. A lease row deleted from
//! outside while its term record lives is held like a lease, by that
//! record's holder, until the record expires: its holder may still be
//! working, until its next renewal finds the row gone (the contract's
//! vacancy rule). The row `KEY#ended` holds the token of the last term its
//! holder released: the announcement that lets a waiter take the lease at
//! once.

use super::config::PgTable;

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
/// and milliseconds left (NULL or ≤ 0: free); without a live lease row, a
/// live term record. Reads the snapshot taken before the statement's own
/// write.
fn current(table: &PgTable) -> String {
    format!(
        "(SELECT 1) AS one LEFT JOIN LATERAL (
  SELECT key, holder, fence, expires_at FROM {t}
  WHERE key IN ($1, $1 || '#term') AND expires_at > clock_timestamp()
  ORDER BY key = $1 DESC LIMIT 1) AS cur ON true",
        t = table.quoted
    )
}

const LEFT_MS: &str =
    "(extract(epoch FROM (cur.expires_at - clock_timestamp())) * 1000)::bigint AS left_ms";

/// `$1` key, `$2` holder id, `$3` ownership token, `$4` ttl in ms, `$5` the
/// highest fencing token this candidate has seen. The row is taken when it
/// is already ours (a retry after an ambiguous timeout, or a candidate that
/// stepped down and could not release), was never written, or is free by
/// the contract's vacancy rule: expired or emptied, and either its term's
/// record is still there past its expiry (its holder stopped renewing) or
/// its release was announced (`KEY#ended` holds its token). Any other
/// vacancy (the rows emptied, or an older term's put back, from outside) is
/// held for `$4` from the first look that finds it: the term record is
/// written vacant (no holder, no owner) until then. Every acquisition is a
/// new term, with a new token:
/// `greatest(fence + 1, seen + 1, the server's clock in ms)`: the clock and
/// the candidate's floor keep tokens growing if the table is restored from
/// an old backup. Nothing is taken while another candidate's term record
/// lives. Returns `won` (the fencing token, NULL if refused), then the
/// holder as it was.
pub fn acquire(table: &PgTable) -> String {
    format!(
        "WITH prior AS (SELECT fence, expires_at, owner FROM {t} WHERE key = $1),
proof AS (SELECT 1 FROM prior WHERE
  EXISTS (SELECT 1 FROM {t} WHERE key = $1 || '#term' AND fence >= prior.fence
          AND expires_at IS NOT NULL AND expires_at <= clock_timestamp())
  OR EXISTS (SELECT 1 FROM {t} WHERE key = $1 || '#ended' AND fence >= prior.fence)),
won AS (
  INSERT INTO {t} AS l (key, holder, owner, fence, expires_at)
  SELECT $1, $2, {owner}, greatest($5::bigint + 1, (extract(epoch FROM clock_timestamp()) * 1000)::bigint),
         clock_timestamp() + $4::bigint * interval '1 millisecond'
  WHERE NOT EXISTS (SELECT 1 FROM {t} WHERE key = $1 || '#term'
                    AND expires_at > clock_timestamp() AND owner IS DISTINCT FROM {owner})
  ON CONFLICT (key) DO UPDATE SET
    fence = greatest(l.fence + 1, excluded.fence),
    holder = excluded.holder, owner = excluded.owner, expires_at = excluded.expires_at
  WHERE l.owner = excluded.owner OR ((l.expires_at IS NULL OR l.expires_at <= clock_timestamp())
                                     AND EXISTS (SELECT 1 FROM proof))
  RETURNING l.fence, l.expires_at),
term AS (
  INSERT INTO {t} AS m (key, holder, owner, fence, expires_at)
  SELECT $1 || '#term', $2, {owner}, fence, expires_at FROM won
  ON CONFLICT (key) DO UPDATE SET holder = excluded.holder, owner = excluded.owner,
    fence = excluded.fence, expires_at = excluded.expires_at),
hold AS (
  INSERT INTO {t} AS h (key, holder, owner, fence, expires_at)
  SELECT $1 || '#term', NULL, NULL, prior.fence, clock_timestamp() + $4::bigint * interval '1 millisecond'
  FROM prior
  WHERE NOT EXISTS (SELECT 1 FROM won) AND NOT EXISTS (SELECT 1 FROM proof)
    AND (prior.expires_at IS NULL OR prior.expires_at <= clock_timestamp())
    AND prior.owner IS DISTINCT FROM {owner}
    AND NOT EXISTS (SELECT 1 FROM {t} WHERE key = $1 || '#term' AND expires_at > clock_timestamp())
  ON CONFLICT (key) DO UPDATE SET holder = NULL, owner = NULL,
    fence = excluded.fence, expires_at = excluded.expires_at)
SELECT (SELECT fence FROM won) AS won, cur.holder, cur.fence, {LEFT_MS} FROM {current}",
        t = table.quoted,
        owner = owner(3),
        current = current(table),
    )
}

/// `$1` key, `$2` ownership token, `$3` ttl in ms, `$4` the channel
/// renewals are announced on. Extends the lease only while it is ours, has
/// not expired, and its expiry is still the one its term record carries:
/// both are written together by this statement, so a lease row whose
/// expiry was brought forward from outside (an operator's UPDATE) ends the
/// term at once, whether or not it has expired yet, as Redis's renew.lua
/// does (100 ms of room, as there). Announces a renewal as `TOKEN TTL_MS
/// ID_JSON` (delivered when the statement commits; standbys answer their
/// timed looks from it, `crate::lease::heard`). Returns `renewed` (1 or
/// 0), then the holder as it was.
pub fn renew(table: &PgTable) -> String {
    format!(
        "WITH renewed AS (
  UPDATE {t} SET expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond'
  WHERE key = $1 AND owner = {owner} AND expires_at > clock_timestamp()
    AND expires_at + interval '100 milliseconds' >= (SELECT expires_at FROM {t}
      WHERE key = $1 || '#term' AND owner = {owner})
  RETURNING expires_at, fence, holder),
term AS (
  UPDATE {t} SET expires_at = (SELECT expires_at FROM renewed)
  WHERE key = $1 || '#term' AND owner = {owner} AND EXISTS (SELECT 1 FROM renewed)),
told AS (
  SELECT pg_notify($4, fence::text || ' ' || $3::bigint::text || ' ' || to_json(holder)::text) FROM renewed)
SELECT (SELECT count(*) FROM told) AS renewed, cur.holder, cur.fence, {LEFT_MS} FROM {current}",
        t = table.quoted,
        owner = owner(2),
        current = current(table),
    )
}

/// `$1` key, `$2` ownership token, `$3` the wake-up channel, `$4` our id.
/// Frees the row if it is ours (the fence stays), ends our term record,
/// records the term's token in `KEY#ended` (the announcement: a waiter
/// takes the lease at once), and notifies the waiters (delivered when the
/// statement commits). One row: released.
pub fn release(table: &PgTable) -> String {
    format!(
        "WITH ended AS (
  UPDATE {t} SET holder = NULL, owner = NULL, expires_at = NULL
  WHERE key = $1 || '#term' AND owner = {owner} RETURNING fence),
freed AS (
  UPDATE {t} SET holder = NULL, owner = NULL, expires_at = NULL
  WHERE key = $1 AND owner = {owner} RETURNING fence),
mark AS (
  INSERT INTO {t} AS e (key, fence)
  SELECT $1 || '#ended', max(fence) FROM (SELECT fence FROM ended UNION ALL SELECT fence FROM freed) AS f
  HAVING count(*) > 0
  ON CONFLICT (key) DO UPDATE SET fence = greatest(e.fence, excluded.fence))
SELECT pg_notify($3, $4)::text FROM freed",
        t = table.quoted,
        owner = owner(2),
    )
}

/// `$1` key. The holder, fence and milliseconds left (of the lease, or of
/// a term record still live without it); no row when free.
pub fn peek(table: &PgTable) -> String {
    format!(
        "SELECT cur.holder, cur.fence, {LEFT_MS} FROM {current} WHERE cur.key IS NOT NULL",
        current = current(table),
    )
}

/// The server's clock in ms, as the registry's expiries count it.
const NOW_MS: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// The candidates registry: the row `KEY#candidates`, whose `holder` is a
/// JSON object of every candidate's record and expiry on the server's clock
/// (`{"id": {"r": record, "x": ms}}`), rewritten under the row's lock by
/// each registration, so two candidates registering at once both land.
/// `$1` key, `$2` our id, `$3` our record's JSON (NULL removes it), `$4`
/// ttl in ms. Returns the live records, ours included, one per row.
pub fn register(table: &PgTable) -> String {
    format!(
        "WITH mine AS (
  SELECT CASE WHEN $3::text IS NULL THEN '{{}}'::jsonb
    ELSE jsonb_build_object($2::text, jsonb_build_object('r', $3::text, 'x', {NOW_MS} + $4::bigint)) END AS e),
written AS (
  INSERT INTO {t} AS c (key, holder) VALUES ($1 || '#candidates', (SELECT e FROM mine)::text)
  ON CONFLICT (key) DO UPDATE SET holder = (
    SELECT (coalesce(jsonb_object_agg(j.k, j.v), '{{}}'::jsonb) || (SELECT e FROM mine))::text
    FROM jsonb_each(coalesce(c.holder, '{{}}')::jsonb) AS j(k, v)
    WHERE (j.v->>'x')::bigint > {NOW_MS} AND j.k <> $2::text)
  RETURNING holder)
SELECT j.v->>'r' FROM written, jsonb_each(written.holder::jsonb) AS j(k, v)",
        t = table.quoted,
    )
}

/// `$1` key. The live records of the registry (see [`register`]).
pub fn candidates(table: &PgTable) -> String {
    format!(
        "SELECT j.v->>'r' FROM {t},
  jsonb_each(CASE WHEN key = $1 || '#candidates' THEN coalesce(holder, '{{}}')::jsonb ELSE '{{}}'::jsonb END) AS j(k, v)
WHERE key = $1 || '#candidates' AND (j.v->>'x')::bigint > {NOW_MS}",
        t = table.quoted,
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

/// The records in the rows of [`register`] or [`candidates`]: one JSON text
/// per row; what does not parse is skipped.
pub fn records(rows: &[tokio_postgres::Row]) -> Vec<crate::lease::registry::Record> {
    let texts: Vec<String> = rows
        .iter()
        .filter_map(|row| row.try_get::<_, Option<String>>(0).ok().flatten())
        .collect();
    crate::lease::registry::parse_all(texts.iter().map(String::as_bytes))
}
