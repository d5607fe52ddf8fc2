//! The API server, through `kube`'s client: built on first use from the
//! kubeconfig or the pod's service account (`kube` reads both as kubectl
//! does, and re-reads a projected service-account token once a minute as
//! the kubelet rotates it; a 401 makes leaderd read it again at once), with
//! `kube`'s own retry layer off, since leaderd's renew
//! deadline is the only clock that decides; every request bounded by the
//! configured timeout. Owns the sorting of the API server's answers into
//! what the lease needs to branch on (a conflict, an absent object) and
//! [`Error`]s that say what to fix.

use super::config::{KubernetesConfig, Source};
use crate::lease::contract::Error;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::future::Future;

/// The hint of a 403: what leaderd's identity needs.
const RBAC_HINT: &str = "give leaderd's identity the Role in docs/kubernetes.md (get, update, patch and watch on the Lease and its NAME-candidates Lease by resourceNames, create on leases)";
/// The hint of a 401.
const AUTH_HINT: &str = "the API server does not accept leaderd's credentials: check the token or client certificate of the kubeconfig context (--kubeconfig), or the pod's service account token";

/// Why a request did not do what it asked, where the caller branches.
#[derive(Debug)]
pub(super) enum Failure {
    /// 409: the object changed since it was read (or exists already).
    Conflict,
    /// 404: the object is not there.
    Missing,
    Other(Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Other(e)
    }
}

pub(super) struct Client {
    pub(super) config: KubernetesConfig,
    /// The client, once built.
    built: Option<kube::Client>,
    /// The Lease's namespace, decided at start as kubectl decides it.
    pub(super) namespace: String,
    /// How logs show the API server and the Lease.
    pub(super) shown: String,
}

impl Client {
    pub(super) fn new(config: &KubernetesConfig) -> Client {
        let namespace = namespace_of(config);
        let via = match &config.source {
            Source::InCluster => "the pod's service account".to_string(),
            Source::Kubeconfig(Some(path)) => format!("kubeconfig {}", path.display()),
            Source::Kubeconfig(None) => "the current kubeconfig context".to_string(),
        };
        Client {
            shown: format!("Kubernetes Lease {namespace}/{} (via {via})", config.lease),
            config: config.clone(),
            built: None,
            namespace,
        }
    }

    fn backend(&self) -> String {
        "the Kubernetes API server".to_string()
    }

    /// The leases of the Lease's namespace, the client built on first use.
    pub(super) async fn leases(&mut self) -> Result<Api<Lease>, Error> {
        Ok(Api::namespaced(self.kube().await?, &self.namespace))
    }

    /// The client, built on first use.
    pub(super) async fn kube(&mut self) -> Result<kube::Client, Error> {
        if let Some(client) = &self.built {
            return Ok(client.clone());
        }
        let mut config = self.kube_config().await?;
        config.default_retry = false;
        config.connect_timeout = Some(self.config.timeout);
        let client = kube::Client::try_from(config).map_err(|e| Error::Misconfigured {
            backend: self.backend(),
            detail: format!("cannot build a client: {e}"),
            hint: "check the kubeconfig's server, certificates and credentials",
        })?;
        self.built = Some(client.clone());
        Ok(client)
    }

    async fn kube_config(&self) -> Result<kube::Config, Error> {
        let refused = |detail: String, hint: &'static str| Error::Misconfigured {
            backend: self.shown.clone(),
            detail,
            hint,
        };
        let options = kube::config::KubeConfigOptions::default();
        match &self.config.source {
            Source::InCluster => kube::Config::incluster().map_err(|e| {
                refused(
                    format!("cannot use the pod's service account: {e}"),
                    "check that the pod mounts its service account token (automountServiceAccountToken), or give --kubeconfig",
                )
            }),
            Source::Kubeconfig(Some(path)) => {
                let file = kube::config::Kubeconfig::read_from(path).map_err(|e| {
                    refused(
                        format!("cannot read the kubeconfig {}: {e}", path.display()),
                        "check the file named by --kubeconfig",
                    )
                })?;
                kube::Config::from_custom_kubeconfig(file, &options)
                    .await
                    .map_err(|e| {
                        refused(
                            format!("the kubeconfig {}: {e}", path.display()),
                            "check its current context, cluster and user",
                        )
                    })
            }
            Source::Kubeconfig(None) => kube::Config::from_kubeconfig(&options)
                .await
                .map_err(|e| {
                    refused(
                        format!("no usable kubeconfig ($KUBECONFIG or ~/.kube/config): {e}"),
                        "give --kubeconfig FILE, or run leaderd in a pod with a service account",
                    )
                }),
        }
    }

    /// A failure where the caller does not branch on it, as an error.
    pub(super) fn sorted(&self, f: Failure) -> Error {
        match f {
            Failure::Other(e) => e,
            Failure::Conflict | Failure::Missing => Error::Unexpected {
                backend: self.backend(),
                detail: format!("{f:?} where none was expected"),
            },
        }
    }

    /// One request, bounded by the timeout, its failure sorted.
    pub(super) async fn call<T>(
        &self,
        request: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, Failure> {
        self.bounded(request).await?.map_err(|e| self.sort(e))
    }

    /// One request, bounded by the timeout; the API server's answer as is.
    async fn bounded<T>(
        &self,
        request: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<Result<T, kube::Error>, Failure> {
        tokio::time::timeout(self.config.timeout, request)
            .await
            .map_err(|_| {
                Failure::Other(Error::Timeout {
                    backend: self.backend(),
                    timeout: self.config.timeout,
                })
            })
    }

    /// A kube error as the lease branches on it.
    pub(super) fn sort(&self, e: kube::Error) -> Failure {
        let backend = self.backend();
        match e {
            kube::Error::Api(status) => match status.code {
                409 => Failure::Conflict,
                404 => Failure::Missing,
                401 => Failure::Other(Error::Misconfigured {
                    backend,
                    detail: format!("401 {}: {}", status.reason, status.message),
                    hint: AUTH_HINT,
                }),
                403 => Failure::Other(Error::Misconfigured {
                    backend,
                    detail: format!("403 {}", status.message),
                    hint: RBAC_HINT,
                }),
                code if code >= 500 || code == 429 => Failure::Other(Error::Connection {
                    backend,
                    detail: format!("{code} {}: {}", status.reason, status.message),
                }),
                code => Failure::Other(Error::Unexpected {
                    backend,
                    detail: format!("{code} {}: {}", status.reason, status.message),
                }),
            },
            kube::Error::Auth(e) => Failure::Other(Error::Misconfigured {
                backend,
                detail: format!("cannot authenticate: {e}"),
                hint: AUTH_HINT,
            }),
            e @ (kube::Error::SerdeError(_) | kube::Error::BuildRequest(_)) => {
                Failure::Other(Error::Unexpected {
                    backend,
                    detail: e.to_string(),
                })
            }
            e => Failure::Other(Error::Connection {
                backend,
                detail: tls_or_plain(&e),
            }),
        }
    }

    /// One request on the namespace's Leases, bounded and sorted. After a
    /// 401 the client is built again, which reads the token file (and the
    /// kubeconfig) afresh, and the request goes once more: the kubelet may
    /// have rotated the pod's token, or the API server invalidated the old
    /// one, since `kube` last read the file (it does so once a minute).
    async fn request<T, F, Fut>(&mut self, send: F) -> Result<T, Failure>
    where
        F: Fn(Api<Lease>) -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        self.request_in(send).await
    }

    /// [`Client::request`] on any kind of the Lease's namespace (the
    /// herald's EndpointSlices and Events).
    pub(super) async fn request_in<K, T, F, Fut>(&mut self, send: F) -> Result<T, Failure>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
        F: Fn(Api<K>) -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        let api = Api::namespaced(self.kube().await?, &self.namespace);
        match self.bounded(send(api)).await? {
            Err(kube::Error::Api(status)) if status.code == 401 => {
                tracing::info!(
                    lease = %self.shown,
                    "the API server refused leaderd's credentials (401): reading them again"
                );
                self.built = None;
                let api = Api::namespaced(self.kube().await?, &self.namespace);
                self.call(send(api)).await
            }
            answer => answer.map_err(|e| self.sort(e)),
        }
    }

    /// The Lease `name`, or `None`.
    pub(super) async fn get(&mut self, name: &str) -> Result<Option<Lease>, Error> {
        let read = self
            .request(|api| {
                let name = name.to_string();
                async move { api.get(&name).await }
            })
            .await;
        match read {
            Ok(lease) => Ok(Some(lease)),
            Err(Failure::Missing) => Ok(None),
            Err(Failure::Conflict) => Err(Error::Unexpected {
                backend: self.backend(),
                detail: "409 on a read".into(),
            }),
            Err(Failure::Other(e)) => Err(e),
        }
    }

    /// Creates `lease`; `Conflict` when it exists already.
    pub(super) async fn create(&mut self, lease: &Lease) -> Result<Lease, Failure> {
        self.request(|api| {
            let lease = lease.clone();
            async move { api.create(&PostParams::default(), &lease).await }
        })
        .await
    }

    /// A JSON merge patch of the Lease `name`: `Missing` when it is not
    /// there, `Conflict` when the patch names a `resourceVersion` that is
    /// no longer the object's.
    pub(super) async fn merge(
        &mut self,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<Lease, Failure> {
        self.request(|api| {
            let (name, patch) = (name.to_string(), patch.clone());
            async move {
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
            }
        })
        .await
    }

    /// Replaces `lease` if it is still at its `resourceVersion` (a
    /// compare-and-swap): `Conflict` when it changed, `Missing` when gone.
    pub(super) async fn replace(&mut self, lease: &Lease) -> Result<Lease, Failure> {
        let name = lease.metadata.name.clone().unwrap_or_default();
        self.request(|api| {
            let (name, lease) = (name.clone(), lease.clone());
            async move { api.replace(&name, &PostParams::default(), &lease).await }
        })
        .await
    }
}

/// Where the Lease lives, as kubectl decides: the option, else the pod's
/// own namespace (in a pod), else the kubeconfig context's, else `default`.
fn namespace_of(config: &KubernetesConfig) -> String {
    const POD_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
    if let Some(ns) = &config.namespace {
        return ns.clone();
    }
    let found = match &config.source {
        Source::InCluster => std::fs::read_to_string(POD_NAMESPACE)
            .ok()
            .map(|t| t.trim().to_string()),
        Source::Kubeconfig(path) => {
            let file = match path {
                Some(p) => kube::config::Kubeconfig::read_from(p).ok(),
                None => kube::config::Kubeconfig::read().ok(),
            };
            file.and_then(|k| {
                let current = k.current_context.clone()?;
                let named = k.contexts.into_iter().find(|c| c.name == current)?;
                named.context?.namespace
            })
        }
    };
    found
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| "default".to_string())
}

/// The error's chain in one line (hyper and rustls nest the cause).
fn tls_or_plain(e: &kube::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        source = s.source();
    }
    text
}
