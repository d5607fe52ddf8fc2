//! Fencing in Redis: the guard `fence/redis.lua` (a function library,
//! Redis 7 and Valkey) and its `EVAL` form for older servers, generated
//! from the library here — one text of the guard's logic, two ways to call
//! it — loaded and looked at, and the fence (a key) raised by
//! `leaderd_fence_raise`.

use super::{Found, RedisTarget, newer_wrote};
use crate::client::Error;
use crate::client::redis::classify::classify;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisError, Value};
use std::time::Duration;

/// The shipped library, as `leaderd fence install redis` prints it.
pub const GUARD: &str = include_str!("../../fence/redis.lua");

/// The library's name in `FUNCTION LIST`.
const NAME: &str = "leaderd_fence";

/// Loading may wait behind a busy server; longer than a term's operations,
/// short enough for a person.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(10);

const EVAL_HEAD: &str = "\
-- leaderd's fence for Redis before 7 (EVAL / EVALSHA): the functions of
-- fence/redis.lua in one script, the operation named by the first argument.
-- Generated from fence/redis.lua by `leaderd fence install redis-eval`.
--
--   EVAL \"$(cat fence/redis-eval.lua)\" N FENCE KEY...  OPERATION TOKEN ARG...
--
-- OPERATION is set, hset, del, xadd, call, raise or token, and the keys
-- and the other arguments are those of the function of that name:
-- FCALL leaderd_fence_set 2 FENCE KEY TOKEN VALUE is
-- EVAL <script> 2 FENCE KEY set TOKEN VALUE. Load it once (SCRIPT LOAD)
-- and call EVALSHA; after a NOSCRIPT (a restart, a SCRIPT FLUSH) EVAL it.

local registered = {}
local function register(name, callback)
    if type(name) == 'table' then
        registered[name.function_name] = name.callback
    else
        registered[name] = callback
    end
end

";

const EVAL_TAIL: &str = "
local callback = registered['leaderd_fence_' .. tostring(ARGV[1])]
if not callback then
    return redis.error_reply('LDF02 leaderd fence: no operation ' .. tostring(ARGV[1])
        .. '; the first argument names one: set, hset, del, xadd, call, raise or token')
end
return callback(KEYS, { unpack(ARGV, 2) })
";

/// The library as one script for `EVAL`: its code without the `#!lua`
/// line and the header, each function registered in a table instead, and
/// a dispatch on the first argument.
pub fn eval_guard() -> String {
    let mut body = String::new();
    let mut header = true;
    for line in GUARD.lines().skip(1) {
        if header && (line.starts_with("--") || line.trim().is_empty()) {
            continue;
        }
        header = false;
        body.push_str(&line.replace("redis.register_function", "register"));
        body.push('\n');
    }
    format!("{EVAL_HEAD}{body}{EVAL_TAIL}")
}

impl RedisTarget {
    /// How reports and errors name it: the URL without its password.
    pub(super) fn shown(&self) -> String {
        format!("Redis {}", self.url.redacted())
    }

    async fn connect(&self, timeout: Duration) -> Result<MultiplexedConnection, Error> {
        let client = crate::client::redis::tls::client(&self.url, &self.tls).map_err(own_flags)?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout));
        let connecting = client.get_multiplexed_async_connection_with_config(&config);
        // The handshake and AUTH each take a round trip within the bound.
        match tokio::time::timeout(timeout * 2, connecting).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(own_flags(classify(e, &self.shown(), timeout))),
            Err(_) => Err(Error::Timeout {
                backend: self.shown(),
                timeout,
            }),
        }
    }

    pub(super) async fn raise(
        &self,
        key: &str,
        token: u64,
        timeout: Duration,
    ) -> Result<(), Error> {
        let mut conn = self.connect(timeout).await?;
        let mut fcall = redis::cmd("FCALL");
        fcall.arg("leaderd_fence_raise").arg(1).arg(key).arg(token);
        let answer = match fcall.query_async::<Value>(&mut conn).await {
            Err(e) if lacks_functions(&e) => {
                let mut eval = redis::cmd("EVAL");
                eval.arg(eval_guard())
                    .arg(1)
                    .arg(key)
                    .arg("raise")
                    .arg(token);
                eval.query_async::<Value>(&mut conn).await
            }
            other => other,
        };
        answer.map(drop).map_err(|e| self.refusal(e, timeout))
    }

    pub(super) async fn install(&self, timeout: Duration, eval: bool) -> Result<String, Error> {
        let timeout = timeout.max(INSTALL_TIMEOUT);
        let mut conn = self.connect(timeout).await?;
        let version = self.version(&mut conn, timeout).await?;
        let old = version
            .split('.')
            .next()
            .and_then(|m| m.parse::<u32>().ok())
            < Some(7);
        if eval || old {
            let sha: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(eval_guard())
                .query_async(&mut conn)
                .await
                .map_err(|e| self.refusal(e, timeout))?;
            let why = if eval {
                String::from("as asked")
            } else {
                format!("Redis {version} has no functions")
            };
            return Ok(format!(
                "loaded the EVAL form into the script cache ({why}): workers call EVALSHA {sha} N FENCE KEY... OPERATION TOKEN ARG..., and EVAL the script (fence/redis-eval.lua) after a NOSCRIPT: the cache does not survive a restart or a SCRIPT FLUSH"
            ));
        }
        let name: String = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(GUARD)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.refusal(e, timeout))?;
        Ok(format!(
            "loaded the function library {name} (Redis {version})"
        ))
    }

    pub(super) async fn inspect(&self, key: &str, timeout: Duration) -> Result<Found, Error> {
        let mut conn = self.connect(timeout).await?;
        let held: Option<String> = redis::cmd("GET")
            .arg(key)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.refusal(e, timeout))?;
        let token = match held.as_deref().map(str::parse::<u64>) {
            None => 0,
            Some(Ok(token)) => token,
            Some(Err(_)) => {
                return Ok(Found::Missing {
                    what: format!(
                        "the key {key} holds something that is not a fencing token; the fence's key must be the fence's alone (give another --fence-key)"
                    ),
                });
            }
        };
        let mut list = redis::cmd("FUNCTION");
        list.arg("LIST")
            .arg("LIBRARYNAME")
            .arg(NAME)
            .arg("WITHCODE");
        let listed = match list.query_async::<Value>(&mut conn).await {
            Ok(listed) => listed,
            Err(e) if lacks_functions(&e) => {
                let version = self.version(&mut conn, timeout).await?;
                return Ok(Found::Fenced {
                    token,
                    what: format!(
                        "Redis {version} has no functions: the workers send the EVAL form (fence/redis-eval.lua), nothing to install"
                    ),
                });
            }
            Err(e) => return Err(self.refusal(e, timeout)),
        };
        Ok(match library_code(&listed) {
            None => Found::Missing {
                what: format!("the function library {NAME} is not loaded"),
            },
            Some(code) if code == GUARD => Found::Fenced {
                token,
                what: format!("the function library {NAME}, as this leaderd ships it"),
            },
            Some(_) => Found::Differs {
                token,
                what: format!("the function library {NAME}, not as this leaderd ships it"),
            },
        })
    }

    async fn version(
        &self,
        conn: &mut MultiplexedConnection,
        timeout: Duration,
    ) -> Result<String, Error> {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(conn)
            .await
            .map_err(|e| self.refusal(e, timeout))?;
        Ok(info
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("of an unknown version")
            .trim()
            .to_string())
    }

    /// The server's refusal in the fence's terms.
    fn refusal(&self, e: RedisError, timeout: Duration) -> Error {
        let backend = self.shown();
        let text = e.to_string();
        if e.code() == Some("LDF01") {
            newer_wrote(backend, text)
        } else if text.contains("Function not found") {
            Error::NotSetUp {
                backend,
                detail: format!(
                    "the fence's function library is not loaded ({text}); load it once: leaderd fence install redis --apply --fence-redis URL (or redis-cli -x FUNCTION LOAD REPLACE < /usr/share/leaderd/fence/redis.lua)"
                ),
            }
        } else if e.code() == Some("READONLY") {
            Error::WrongKind {
                backend,
                detail: format!("{text}: the URL reached a replica; give the primary's"),
            }
        } else {
            own_flags(classify(e, &backend, timeout))
        }
    }
}

/// The Redis client's TLS hints name the lease's flags; a fenced Redis has
/// its own.
fn own_flags(e: Error) -> Error {
    match e {
        Error::Tls {
            backend,
            detail,
            hint,
        } => Error::Tls {
            backend,
            detail,
            hint: hint.replace("--redis-tls-", "--fence-redis-tls-"),
        },
        other => other,
    }
}

/// Redis before 7 answers `FCALL` and `FUNCTION` as unknown commands.
fn lacks_functions(e: &RedisError) -> bool {
    let text = e.to_string().to_lowercase();
    text.contains("unknown command") && (text.contains("fcall") || text.contains("function"))
}

/// The code of the library named [`NAME`] in `FUNCTION LIST … WITHCODE`'s
/// answer (RESP2 arrays of pairs, or RESP3 maps).
fn library_code(listed: &Value) -> Option<String> {
    let Value::Array(libraries) = listed else {
        return None;
    };
    libraries.iter().find_map(|library| {
        let fields = pairs(library);
        let named = fields
            .iter()
            .any(|(k, v)| k == "library_name" && text(v).as_deref() == Some(NAME));
        if !named {
            return None;
        }
        fields
            .iter()
            .find(|(k, _)| k == "library_code")
            .and_then(|(_, v)| text(v))
    })
}

fn pairs(v: &Value) -> Vec<(String, &Value)> {
    match v {
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|p| match p {
                [k, v] => Some((text(k)?, v)),
                _ => None,
            })
            .collect(),
        Value::Map(items) => items
            .iter()
            .filter_map(|(k, v)| Some((text(k)?, v)))
            .collect(),
        _ => Vec::new(),
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_eval_form_is_the_library_registered_in_a_table() {
        let eval = eval_guard();
        assert!(!eval.contains("#!lua"), "{eval}");
        assert!(!eval.contains("redis.register_function"), "{eval}");
        // Every function of the library is in it, once.
        for name in ["set", "hset", "del", "xadd", "call", "raise", "token"] {
            let function = format!("'leaderd_fence_{name}'");
            assert_eq!(GUARD.matches(&function).count(), 1, "{name}");
            assert_eq!(eval.matches(&function).count(), 1, "{name}");
        }
    }

    #[test]
    fn the_shipped_eval_form_is_the_generated_one() {
        let shipped = include_str!("../../fence/redis-eval.lua");
        assert!(
            shipped == eval_guard(),
            "fence/redis-eval.lua is stale: regenerate it with `cargo run -q -- fence install redis-eval > fence/redis-eval.lua`"
        );
    }

    #[test]
    fn the_library_is_found_in_either_protocols_answer() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let resp2 = Value::Array(vec![Value::Array(vec![
            bulk("library_name"),
            bulk(NAME),
            bulk("library_code"),
            bulk("code"),
        ])]);
        assert_eq!(library_code(&resp2).as_deref(), Some("code"));
        let resp3 = Value::Array(vec![Value::Map(vec![
            (bulk("library_name"), bulk("other")),
            (bulk("library_code"), bulk("x")),
        ])]);
        assert_eq!(library_code(&resp3), None);
    }
}
