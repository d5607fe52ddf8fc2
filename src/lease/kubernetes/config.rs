//! The Kubernetes Lease backend's options, declared once here and resolved
//! into [`KubernetesConfig`]: `--kubernetes-lease NAME` (which chooses the
//! backend), `--kubernetes-namespace`, `--kubeconfig` and the request
//! timeout; and the default inside a pod with no backend configured: a
//! Lease named after `--key` in the pod's own namespace.

use super::herald::options::{Announce, ROWS};
use crate::config::options::{BACKEND, Spec, spec};
use crate::config::{Backend, ConfigError, Declared, Origin, Resolving, Value};
use crate::lease::options::StoreOptions;
use std::path::PathBuf;
use std::time::Duration;

/// Where leaderd finds the API server and its credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A kubeconfig file, its current context (`--kubeconfig`, `KUBECONFIG`
    /// or `~/.kube/config`, as kubectl reads them; `None`: kubectl's default).
    Kubeconfig(Option<PathBuf>),
    /// The pod's service account: `KUBERNETES_SERVICE_HOST`/`_PORT` and the
    /// files under `/var/run/secrets/kubernetes.io/serviceaccount/`.
    InCluster,
}

#[derive(Debug, Clone)]
pub struct KubernetesConfig {
    /// The Lease's name.
    pub lease: String,
    /// `None`: the pod's own (in a pod) or the kubeconfig context's.
    pub namespace: Option<String>,
    pub source: Source,
    pub timeout: Duration,
    /// Chosen because leaderd runs in a pod and no backend was configured.
    pub implicit: bool,
    /// What the leader announces outside the Lease: its Service, Events.
    pub announce: Announce,
}

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

pub const KUBERNETES_LEASE: Spec = spec(
    "kubernetes_lease",
    "--kubernetes-lease",
    "LEADERD_KUBERNETES_LEASE",
    "kubernetes.lease",
)
.value("NAME")
.under(BACKEND)
.help("Elect with the coordination.k8s.io/v1 Lease NAME (created when absent), as client-go does")
.default("in a pod with no backend configured: the election key");

pub const KUBERNETES_NAMESPACE: Spec = spec(
    "kubernetes_namespace",
    "--kubernetes-namespace",
    "LEADERD_KUBERNETES_NAMESPACE",
    "kubernetes.namespace",
)
.value("NAMESPACE")
.under(BACKEND)
.help("The Lease's namespace")
.default("the pod's own, else the kubeconfig context's, else default");

pub const KUBECONFIG: Spec = spec(
    "kubeconfig",
    "--kubeconfig",
    "LEADERD_KUBECONFIG",
    "kubernetes.kubeconfig",
)
.value("FILE")
.under(BACKEND)
.help("Reach the API server as this kubeconfig file's current context says")
.default("in a pod: its service account; else $KUBECONFIG or ~/.kube/config, as kubectl");

pub const KUBERNETES_TIMEOUT: Spec = spec(
    "kubernetes_timeout",
    "--kubernetes-timeout",
    "LEADERD_KUBERNETES_TIMEOUT",
    "kubernetes.timeout",
)
.value("DUR")
.under(BACKEND)
.help("Timeout of every API request (connecting included)")
.default("500ms, at most half the renew interval");

/// The Kubernetes Lease backend as the configuration sees it.
pub const DECLARED: Declared = Declared {
    name: "a Kubernetes Lease",
    options: &[
        &KUBERNETES_LEASE,
        &KUBERNETES_NAMESPACE,
        &KUBECONFIG,
        &KUBERNETES_TIMEOUT,
        ROWS[0],
        ROWS[1],
        ROWS[2],
        ROWS[3],
    ],
    selectors: &[&KUBERNETES_LEASE],
    resolve,
    fallback: Some(fallback),
};

/// Inside a pod (`KUBERNETES_SERVICE_HOST` set).
fn in_pod(x: &Resolving<'_>) -> bool {
    (x.r.sources().env)("KUBERNETES_SERVICE_HOST").is_some_and(|v| !v.is_empty())
}

fn resolve(x: &mut Resolving<'_>) -> Result<Backend, ConfigError> {
    let lease =
        x.r.scalar(&KUBERNETES_LEASE, parse_name)?
            .expect("chosen by this option");
    settle(x, lease, false)
}

/// No backend configured: inside a pod, the Lease named after the key
/// (`None`: not in a pod; the next backend's default applies).
fn fallback(x: &mut Resolving<'_>) -> Option<Result<Backend, ConfigError>> {
    if !in_pod(x) {
        return None;
    }
    let lease = match name_from_key(x.key) {
        Ok(name) => Value {
            value: name,
            origin: Origin::Default("in a pod with no backend configured: named after the key"),
        },
        Err(e) => return Some(Err(ConfigError(e))),
    };
    Some(settle(x, lease, true))
}

fn settle(
    x: &mut Resolving<'_>,
    lease: Value<String>,
    implicit: bool,
) -> Result<Backend, ConfigError> {
    x.note(
        "kubernetes.lease",
        format!("{:?}", lease.value),
        &lease.origin,
    );
    let namespace = x.r.scalar(&KUBERNETES_NAMESPACE, parse_namespace)?;
    if let Some(ns) = &namespace {
        x.note(
            "kubernetes.namespace",
            format!("{:?}", ns.value),
            &ns.origin,
        );
    }
    let file = x.r.scalar(&KUBECONFIG, |p| {
        if p.trim().is_empty() {
            Err("is empty; give a kubeconfig file's path".to_string())
        } else {
            Ok(PathBuf::from(p))
        }
    })?;
    let source = match file {
        Some(file) => {
            let shown = format!("{:?}", file.value.display().to_string());
            x.note("kubernetes.kubeconfig", shown, &file.origin);
            Source::Kubeconfig(Some(file.value))
        }
        None if in_pod(x) => Source::InCluster,
        None => Source::Kubeconfig(None),
    };
    let timeout = x.store_timeout(&KUBERNETES_TIMEOUT)?;
    let announce = super::herald::options::resolve(x)?;
    Ok(Backend::new(KubernetesConfig {
        lease: lease.value,
        namespace: namespace.map(|n| n.value),
        source,
        timeout: timeout.value,
        implicit,
        announce,
    }))
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
