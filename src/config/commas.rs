//! How a list option's values are separated by commas: one rule per
//! option, declared in its row (`Spec::commas`) and
//! applied to every form it is given in (flag, env var, TOML, URL file).

/// Where a comma separates two values of a list option. The option takes
/// several values by repetition (`--etcd A --etcd B`), as a TOML array, and
/// as one text holding commas, in every form: `--etcd A,B`,
/// `LEADERD_ETCD_ENDPOINTS=A,B`, `endpoints = ["A,B"]`.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Commas {
    /// No value can hold a comma: every comma separates two values.
    Separate,
    /// A value may hold commas (a Redis Sentinel or Cluster URL lists its
    /// hosts with them), so only a comma followed by a URL scheme
    /// (`redis://`) separates two values. The env var, which cannot be
    /// repeated, is split there; a flag or TOML value that holds two URLs
    /// is refused, saying to give one URL each: for Redis, one URL with
    /// commas means one server and several URLs mean Redlock, and a reader
    /// of a manifest should not have to count schemes to tell which.
    BeforeScheme,
    /// Commas are part of the values (a command's arguments).
    Kept,
}

impl Commas {
    /// The values one given text holds; `from_env`: it came from the
    /// environment variable (which cannot be repeated); `names`: the
    /// option's flag and TOML key, for the message. `Err` says why a text
    /// is refused, without the text (it may hold a password).
    pub fn split(
        self,
        text: &str,
        names: (Option<&str>, Option<&str>),
        from_env: bool,
    ) -> Result<Vec<String>, String> {
        let items: Vec<String> = match self {
            Commas::Kept => return Ok(vec![text.to_string()]),
            Commas::Separate => text.split(',').map(|s| s.trim().to_string()).collect(),
            Commas::BeforeScheme => split_before_schemes(text),
        };
        if items.iter().any(String::is_empty) && text.contains(',') {
            return Err("an empty value between commas".into());
        }
        if self == Commas::BeforeScheme && items.len() > 1 && !from_env {
            let flag = names.0.unwrap_or("the option");
            let key = names.1.unwrap_or("its TOML key");
            return Err(format!(
                "{} URLs in one value; give {flag} once per URL (for Redlock: {flag} URL1 {flag} URL2 {flag} URL3), or a TOML array `{key} = [\"URL1\", \"URL2\", \"URL3\"]`",
                items.len()
            ));
        }
        Ok(items)
    }
}

/// Splits at each comma that a URL scheme (`letters://`) follows.
fn split_before_schemes(text: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut start = 0;
    for (at, _) in text.match_indices(',') {
        let rest = &text[at + 1..];
        let rest = rest.trim_start();
        let scheme = rest.split("://").next().unwrap_or("");
        let is_scheme = rest.contains("://")
            && !scheme.is_empty()
            && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        if is_scheme {
            items.push(text[start..at].trim().to_string());
            start = at + 1;
        }
    }
    items.push(text[start..].trim().to_string());
    items
}
