//! The Lua scripts every operation is (one round trip, atomic on the
//! server), how a call to one is written, and how their replies are read.

use crate::lease::contract::Error;
use crate::lease::contract::Holder;
use redis::{Cmd, Script, Value};
use std::time::Duration;

const HOLDER: &str = include_str!("lua/holder.lua");

pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) renew: Script,
    pub(crate) release: Script,
    pub(crate) peek: Script,
    /// Redlock's: phase two of an acquire, and a renewal that re-creates
    /// a lease a node lost.
    pub(crate) commit: Script,
    pub(crate) reclaim: Script,
    /// The candidates registry: write ours and read all, or only read.
    pub(crate) register: Script,
    pub(crate) candidates: Script,
    /// Every script's source, loaded on each new connection.
    pub(crate) sources: Vec<String>,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        let sources: Vec<String> = [
            include_str!("lua/acquire.lua"),
            include_str!("lua/renew.lua"),
            include_str!("lua/release.lua"),
            include_str!("lua/peek.lua"),
            include_str!("lua/commit.lua"),
            include_str!("lua/reclaim.lua"),
            include_str!("lua/register.lua"),
            include_str!("lua/candidates.lua"),
        ]
        .iter()
        .map(|body| format!("{HOLDER}\n{body}"))
        .collect();
        Scripts {
            acquire: Script::new(&sources[0]),
            renew: Script::new(&sources[1]),
            release: Script::new(&sources[2]),
            peek: Script::new(&sources[3]),
            commit: Script::new(&sources[4]),
            reclaim: Script::new(&sources[5]),
            register: Script::new(&sources[6]),
            candidates: Script::new(&sources[7]),
            sources,
        }
    }
}

/// `EVALSHA` of `script` with `keys` and `args`: a plain command, so it can
/// share a pipeline with `WAIT`. After `NOSCRIPT` the link loads every
/// script and sends it again.
pub(crate) fn eval(script: &Script, keys: &[&str], args: &[&dyn std::fmt::Display]) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys.len()).arg(keys);
    for arg in args {
        cmd.arg(arg.to_string());
    }
    cmd
}

pub(crate) enum Reply {
    Ours(u64),
    Held(Option<Holder>, Option<Duration>),
}

pub(crate) fn unexpected(url: &str, value: &Value) -> Error {
    Error::Unexpected {
        backend: url.to_string(),
        detail: format!("{value:?}"),
    }
}

/// `{1, fencing}` / `{1}` mean ours; `{0, id, fencing, pttl}` someone else's
/// (pttl −2: vacant, −1: no expiry). Anything else is an error, never success.
pub(crate) fn parse_reply(value: &Value, url: &str) -> Result<Reply, Error> {
    let bad = || unexpected(url, value);
    let Value::Array(items) = value else {
        return Err(bad());
    };
    match items.as_slice() {
        [Value::Int(1)] => Ok(Reply::Ours(0)),
        [Value::Int(1), Value::Int(f)] if *f > 0 => Ok(Reply::Ours(*f as u64)),
        [Value::Int(0), id, fencing, Value::Int(pttl)] => {
            let id = match id {
                Value::Nil => None,
                Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
                _ => return Err(bad()),
            };
            let fencing_token = match fencing {
                Value::Nil => None,
                Value::Int(n) if *n > 0 => Some(*n as u64),
                _ => return Err(bad()),
            };
            let expires_in = (*pttl >= 0).then(|| Duration::from_millis(*pttl as u64));
            let holder = (*pttl != -2).then_some(Holder { id, fencing_token });
            Ok(Reply::Held(holder, expires_in))
        }
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_replies_are_errors_never_success() {
        let b = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        for odd in [
            Value::Int(1),
            Value::Nil,
            Value::Array(vec![]),
            Value::Array(vec![Value::Int(1), b("7")]),
            Value::Array(vec![Value::Int(2)]),
            Value::Array(vec![
                Value::Int(0),
                Value::Int(3),
                Value::Nil,
                Value::Int(5),
            ]),
            Value::Array(vec![Value::Int(1), Value::Int(-4)]),
        ] {
            assert!(parse_reply(&odd, "redis://x").is_err(), "{odd:?}");
        }
        let held = Value::Array(vec![Value::Int(0), b("a"), Value::Int(9), Value::Int(1500)]);
        let Ok(Reply::Held(Some(h), Some(left))) = parse_reply(&held, "r") else {
            panic!()
        };
        assert_eq!(
            (h.id.as_deref(), h.fencing_token, left),
            (Some("a"), Some(9), Duration::from_millis(1500))
        );
        let vacant = Value::Array(vec![Value::Int(0), Value::Nil, Value::Nil, Value::Int(-2)]);
        assert!(matches!(
            parse_reply(&vacant, "r"),
            Ok(Reply::Held(None, None))
        ));
    }
}
