//! The names of an election's keys, and the refusal for a lease key nobody
//! can take over: shared by the Redis backend and Redlock.

use crate::lease::contract::{Error, Holder};
use std::time::Duration;

/// The names of an election's keys and channel (PRODUCT §5).
pub struct Keys {
    pub lease: String,
    /// The term record: written and renewed with the lease, deleted only by
    /// its release, so a lease deleted from outside still shows its holder.
    pub term: String,
    /// The token counter: each term's fencing token comes from it. Its
    /// key ends in `:fence`, a name kept from the data layout; it is not
    /// a fence in a resource (`crate::fence`).
    pub counter: String,
    /// The token of the last term its holder released (no expiry): the
    /// announcement waiters take a missing lease at once on.
    pub ended: String,
    pub wake: String,
    pub channel: String,
    /// Where each term's start and renewals are published
    /// ([`super::renewals`]).
    pub renewed: String,
}

/// The hash tag keeps the keys in one Cluster slot so one script may touch
/// them together.
pub fn keys(key: &str) -> Keys {
    Keys {
        lease: format!("leaderd:{{{key}}}:lease"),
        term: format!("leaderd:{{{key}}}:term"),
        counter: format!("leaderd:{{{key}}}:fence"),
        ended: format!("leaderd:{{{key}}}:ended"),
        wake: format!("leaderd:{{{key}}}:wake"),
        channel: format!("leaderd:{{{key}}}:released"),
        renewed: format!("leaderd:{{{key}}}:renewed"),
    }
}

/// A lease nobody can take over: a value leaderd did not write, or one
/// without an expiry (leaderd always sets one; `PERSIST` removes it), which
/// never lapses if its holder is gone.
pub(crate) fn blocked(
    url: &str,
    key: &str,
    holder: &Option<Holder>,
    expires_in: Option<Duration>,
) -> Option<Error> {
    let holder = holder.as_ref()?;
    let what = match (&holder.id, expires_in) {
        // A vacancy held by the vacancy rule: a token, nobody's id.
        (None, Some(_)) if holder.fencing_token.is_some() => return None,
        (None, None) => {
            "it holds a value leaderd did not write, with no expiry, so it never lapses".to_string()
        }
        (None, Some(left)) => format!(
            "it holds a value leaderd did not write (it expires in {})",
            crate::config::show_duration(left)
        ),
        (Some(id), None) => format!(
            "it has no expiry (made permanent, e.g. by PERSIST), so it never lapses if its holder {id:?} is gone"
        ),
        (Some(_), Some(_)) => return None,
    };
    Some(blocked_error(url, key, what))
}

pub(crate) fn blocked_error(url: &str, key: &str, what: String) -> Error {
    Error::Blocked {
        backend: url.to_string(),
        key: key.to_string(),
        what,
        fix: format!(
            "Remove it with `DEL {key}` once you know what wrote it, or choose another --key"
        ),
    }
}
