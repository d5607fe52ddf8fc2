//! The names Kubernetes objects take, checked before any request: a
//! Lease's (a DNS subdomain, with room for its registry's `-candidates`),
//! a namespace's, a Service's and a port's (DNS labels), and the Lease name
//! the in-pod default makes of the election key.

/// The longest Lease name leaderd takes: its registry's object,
/// `NAME-candidates`, must be a valid name too (253 characters).
const MAX_NAME: usize = 253 - "-candidates".len();

/// A Lease's name: a DNS subdomain (RFC 1123), as the API server requires.
pub fn parse_name(text: &str) -> Result<String, String> {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if text.is_empty() || text.len() > MAX_NAME {
        return Err(format!(
            "`{text}` is not a Lease name: it must have 1 to {MAX_NAME} characters"
        ));
    }
    if !text.chars().all(ok_char) || !alnum(text.chars().next()) || !alnum(text.chars().last()) {
        return Err(format!(
            "`{text}` is not a Lease name: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit (a DNS subdomain)"
        ));
    }
    Ok(text.to_string())
}

/// A namespace's name: a DNS label (RFC 1123).
pub fn parse_namespace(text: &str) -> Result<String, String> {
    parse_label("namespace", text)
}

/// A DNS label (RFC 1123), as namespaces, Services and port names are;
/// `what` names it in the error.
pub fn parse_label(what: &str, text: &str) -> Result<String, String> {
    let ok = !text.is_empty()
        && text.len() <= 63
        && text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !text.starts_with('-')
        && !text.ends_with('-');
    if !ok {
        return Err(format!(
            "`{text}` is not a {what}: 1 to 63 lower-case letters, digits and '-', starting and ending with a letter or digit"
        ));
    }
    Ok(text.to_string())
}

/// The Lease name the in-pod default takes from the election key: lower
/// case, every other character a '-', trimmed to a valid name.
pub fn name_from_key(key: &str) -> Result<String, String> {
    let mapped: String = key
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '-' | '.') => c,
            _ => '-',
        })
        .collect();
    let trimmed = mapped.trim_matches(|c: char| c == '-' || c == '.');
    let cut: String = trimmed.chars().take(MAX_NAME).collect();
    parse_name(cut.trim_end_matches(['-', '.'])).map_err(|e| {
        format!("the election key `{key}` gives no Lease name ({e}); give --kubernetes-lease NAME")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_dns_subdomains_and_keys_map_to_one() {
        assert_eq!(parse_name("my-job.leader").unwrap(), "my-job.leader");
        for bad in ["", "My-Job", "-a", "a-", "a_b", &"a".repeat(243)] {
            assert!(parse_name(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            name_from_key("Billing/Nightly_Job").unwrap(),
            "billing-nightly-job"
        );
        assert_eq!(name_from_key("__x__").unwrap(), "x");
        let e = name_from_key("///").unwrap_err();
        assert!(e.contains("--kubernetes-lease"), "{e}");
        assert!(parse_namespace("team-a").is_ok());
        assert!(parse_namespace("team.a").is_err());
    }
}
