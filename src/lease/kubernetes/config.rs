//! The Kubernetes Lease backend's options, declared once here and resolved
//! into [`KubernetesConfig`]: `--kubernetes-lease NAME` (which chooses the
//! backend), `--kubernetes-namespace`, `--kubeconfig` and the request
//! timeout; and the default inside a pod with no backend configured: a
//! Lease named after `--key` in the pod's own namespace.

use super::herald::options::{Announce, ROWS};
use super::names::{name_from_key, parse_name, parse_namespace};
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
