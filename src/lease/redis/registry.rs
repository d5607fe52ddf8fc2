//! The candidates registry on Redis: one key per election,
//! `leaderd:{KEY}:candidates`, a JSON object of every candidate's record and
//! its expiry on the server's clock, read, pruned and written by one script
//! (`lua/register.lua`) in the round trip of a registration. In the lease's
//! Cluster slot (the hash tag), and written with the commands leaderd's ACL
//! already allows. Redlock keeps one on every master and reads their union.

use super::script::{Scripts, eval, unexpected};
use crate::lease::contract::Error;
use crate::lease::registry::{Record, parse_all};
use redis::{Cmd, Value};

/// The registry's key for election `key`.
pub fn key(key: &str) -> String {
    format!("leaderd:{{{key}}}:candidates")
}

/// Writes (or, with `None`, removes) our record and returns the live ones.
pub(crate) fn register(
    scripts: &Scripts,
    registry: &str,
    id: &str,
    me: Option<&Record>,
    ttl_ms: u64,
) -> Cmd {
    let json = me.map_or(String::new(), |r| {
        serde_json::to_string(r).expect("a record always serialises")
    });
    eval(&scripts.register, &[registry], &[&id, &json, &ttl_ms])
}

/// Reads the live records, writing nothing.
pub(crate) fn candidates(scripts: &Scripts, registry: &str) -> Cmd {
    eval(&scripts.candidates, &[registry], &[])
}

/// The records in a script's reply.
pub(crate) fn records(reply: &Value, url: &str) -> Result<Vec<Record>, Error> {
    let Value::Array(items) = reply else {
        return Err(unexpected(url, reply));
    };
    let raw: Vec<&[u8]> = items
        .iter()
        .filter_map(|v| match v {
            Value::BulkString(b) => Some(b.as_slice()),
            _ => None,
        })
        .collect();
    Ok(parse_all(raw))
}

/// Redlock: the union of what the masters that answered hold (a record
/// lives on every master its candidate could reach); an error only when
/// none answered.
pub(crate) fn union(
    replies: Vec<Result<Value, Error>>,
    urls: &[&str],
) -> Result<Vec<Record>, Error> {
    let mut all: Vec<Record> = Vec::new();
    let mut first_error = None;
    let mut answered = false;
    for (reply, url) in replies.into_iter().zip(urls) {
        match reply.and_then(|v| records(&v, url)) {
            Ok(records) => {
                answered = true;
                for r in records {
                    if !all
                        .iter()
                        .any(|seen| seen.id == r.id && seen.instance == r.instance)
                    {
                        all.push(r);
                    }
                }
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match (answered, first_error) {
        (false, Some(e)) => Err(e),
        _ => Ok(all),
    }
}
