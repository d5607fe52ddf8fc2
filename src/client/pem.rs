//! PEM material for the backends' TLS clients (Redis, PostgreSQL, etcd):
//! the files named by a backend's TLS options, read at start-up, and the
//! roots to trust and a client's identity made of them, the same way for
//! all, with messages that say which file was wrong.

use crate::config::options::Spec;
use crate::config::{ConfigError, Resolving, Secret, Value, loose_secret_file};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::PathBuf;

/// The roots in the PEM bundle `pem` (`what` names it in messages), or the
/// system's roots when there is none.
pub(crate) fn roots(pem: Option<&[u8]>, what: &str) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    match pem {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| format!("{what}: {e}"))?;
                roots.add(cert).map_err(|e| format!("{what}: {e}"))?;
            }
        }
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
        }
    }
    Ok(roots)
}

/// A client certificate chain and its key, from PEM.
pub(crate) fn identity(
    cert: &[u8],
    key: &Secret,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    let chain = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the client certificate: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(key.expose().as_bytes())
        .map_err(|_| "the client key is not a PEM private key".to_string())?;
    Ok((chain, key))
}

/// A client configuration on leaderd's crypto provider (ring) trusting
/// `roots`, with `client` as its identity when given.
pub(crate) fn client_config(
    roots: rustls::RootCertStore,
    client: Option<&(Vec<u8>, Secret)>,
) -> Result<rustls::ClientConfig, String> {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    match client {
        Some((cert, key)) => {
            let (chain, key) = identity(cert, key)?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("the client certificate and key: {e}"))
        }
        None => Ok(builder.with_no_client_auth()),
    }
}

/// TLS material read at start-up. Empty: the system's roots, no client
/// certificate.
#[derive(Debug, Clone, Default)]
pub struct TlsFiles {
    /// PEM bundle to trust instead of the system's roots.
    pub ca: Option<Vec<u8>>,
    /// PEM certificate chain and private key for mutual TLS.
    pub client: Option<(Vec<u8>, Secret)>,
}

/// TLS files named by three options (a CA bundle; a client certificate
/// and its key, both or neither), read now so a wrong path fails at
/// start-up. `plain`: what to say if any is given although a URL is
/// not TLS.
pub(crate) fn files(
    x: &mut Resolving<'_>,
    [ca_spec, cert_spec, key_spec]: [&'static Spec; 3],
    plain: Option<String>,
) -> Result<TlsFiles, ConfigError> {
    let path = |p: &str| {
        if p.trim().is_empty() {
            Err("is empty; give a file path".to_string())
        } else {
            Ok(PathBuf::from(p))
        }
    };
    let ca = x.r.scalar(ca_spec, path)?;
    let cert = x.r.scalar(cert_spec, path)?;
    let key = x.r.scalar(key_spec, path)?;
    if let Some(first) = [&ca, &cert, &key].into_iter().flatten().next()
        && let Some(plain) = plain
    {
        return Err(ConfigError(format!("{}: {plain}", first.origin)));
    }
    let shown = |spec: &Spec, v: &Value<PathBuf>| {
        (
            spec.key.expect("declared"),
            format!("{:?}", v.value.display().to_string()),
            v.origin.clone(),
        )
    };
    let ca = match &ca {
        Some(v) => {
            let (k, text, o) = shown(ca_spec, v);
            x.note(k, text, &o);
            Some(x.read(&v.value, &v.origin)?.0.into_bytes())
        }
        None => None,
    };
    let client = match (&cert, &key) {
        (Some(cert), Some(key)) => {
            for (spec, v) in [(cert_spec, cert), (key_spec, key)] {
                let (k, text, o) = shown(spec, v);
                x.note(k, text, &o);
            }
            let (key_pem, mode) = x.read(&key.value, &key.origin)?;
            x.warnings
                .extend(loose_secret_file(&key.origin, &key.value, mode));
            let cert_pem = x.read(&cert.value, &cert.origin)?.0.into_bytes();
            Some((cert_pem, Secret::new(key_pem)))
        }
        (None, None) => None,
        (Some(one), None) | (None, Some(one)) => {
            return Err(ConfigError(format!(
                "{}: a client certificate needs both {} and {} (or their env vars or TOML keys); give both or neither",
                one.origin,
                cert_spec.flag.expect("declared"),
                key_spec.flag.expect("declared")
            )));
        }
    };
    Ok(TlsFiles { ca, client })
}
