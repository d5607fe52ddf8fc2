//! PEM material for the backends' TLS clients (Redis, PostgreSQL, etcd):
//! the roots to trust and a client's identity, read the same way for all,
//! with messages that say which file was wrong.

use crate::config::Secret;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

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
