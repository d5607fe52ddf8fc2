//! TLS for `rediss://`: the client built with the configured trust and client
//! certificate (rustls, through redis-rs), the hints for a failed handshake,
//! and `check`'s look at the server's certificate.
//!
//! Verification is never turned off: `#insecure` URLs are refused by the
//! configuration. The handshake happens inside the connect timeout.

use crate::client::Error;

use super::urls::RedisUrl;

/// The TLS files a Redis connection uses: a CA bundle and a client's
/// identity, read at start-up.
pub type RedisTls = crate::client::pem::TlsFiles;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// A certificate that expires sooner than this is worth a warning in `check`.
const EXPIRY_WARNING: Duration = Duration::from_secs(14 * 24 * 3600);

/// The redis-rs client for `url`, with `tls` applied to a `rediss://` URL.
pub(crate) fn client(url: &RedisUrl, tls: &RedisTls) -> Result<redis::Client, Error> {
    let built = if url.is_tls() && (tls.ca.is_some() || tls.client.is_some()) {
        let certificates = redis::TlsCertificates {
            client_tls: tls
                .client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.expose().as_bytes().to_vec(),
                }),
            root_cert: tls.ca.clone(),
        };
        redis::Client::build_with_tls(url.expose(), certificates)
    } else {
        redis::Client::open(url.expose())
    };
    built.map_err(|e| Error::Tls {
        backend: url.redacted().to_string(),
        detail: e.to_string(),
        hint: "check the PEM files given with --redis-tls-ca, --redis-tls-cert and --redis-tls-key"
            .into(),
    })
}

/// What to do about a failed handshake, from rustls's reason; `None` when
/// the error is not about TLS.
pub(crate) fn hint(detail: &str) -> Option<String> {
    // rustls's Debug and Display forms differ ("UnknownIssuer", "unknown
    // issuer"): compare without case and spaces.
    let d = detail.to_lowercase().replace([' ', '_'], "");
    let says = |words: &[&str]| words.iter().any(|w| d.contains(w));
    let hint = if says(&["unknownissuer"]) {
        "the server's certificate is not signed by a trusted CA: give its CA bundle with --redis-tls-ca (a managed Redis documents where to download it)"
    } else if says(&["notvalidforname"]) {
        "the server's certificate does not name the host in the URL: connect by a name (or address) the certificate carries"
    } else if says(&["expired", "notvalidyet"]) {
        "the server's certificate has expired or is not valid yet: renew it (and check the host's clock)"
    } else if says(&["certificaterequired"]) {
        "the server requires a client certificate: give --redis-tls-cert and --redis-tls-key"
    } else if says(&[
        "invalidpeercertificate",
        "invalidcertificate",
        "badcertificate",
        "receivedfatalalert",
    ]) {
        "the TLS handshake was refused: check the CA, the client certificate and the server's TLS settings"
    } else if says(&["invalidcontenttype", "corruptmessage"]) {
        "the server did not answer in TLS: is this a plain redis:// port?"
    } else {
        return None;
    };
    Some(hint.to_string())
}

/// `check`: a handshake of its own with the same trust and client
/// certificate, reporting the server certificate's subject and expiry.
pub(crate) async fn report(
    url: &RedisUrl,
    tls: &RedisTls,
    timeout: Duration,
) -> Result<Vec<String>, Error> {
    let backend = url.redacted().to_string();
    let fail = |detail: String| Error::Tls {
        backend: backend.clone(),
        hint: hint(&detail).unwrap_or_else(|| "check the TLS settings".into()),
        detail,
    };
    let parsed = url::Url::parse(url.expose()).map_err(|e| fail(e.to_string()))?;
    let host = parsed
        .host_str()
        .unwrap_or_default()
        .trim_matches(['[', ']'])
        .to_string();
    let port = parsed.port().unwrap_or(6379);
    let config = client_config(tls).map_err(fail)?;
    let name = rustls::pki_types::ServerName::try_from(host.clone())
        .map_err(|e| fail(format!("`{host}` cannot be a TLS server name: {e}")))?;
    let handshake = async {
        let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
        tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
    };
    let stream = tokio::time::timeout(timeout, handshake)
        .await
        .map_err(|_| fail(format!("no TLS handshake within {timeout:?}")))?
        .map_err(|e| fail(e.to_string()))?;
    let (_, session) = stream.get_ref();
    let version = session
        .protocol_version()
        .map_or("TLS".to_string(), |v| format!("{v:?}"));
    let Some(leaf) = session.peer_certificates().and_then(|c| c.first()) else {
        return Ok(vec![format!(
            "TLS handshake with {host}:{port} ({version})"
        )]);
    };
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref())
        .map_err(|e| fail(format!("cannot read the server certificate: {e}")))?;
    let subject = cert.subject().to_string();
    let not_after = cert.validity().not_after;
    let left = Duration::from_secs(
        (not_after.timestamp()
            - SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64))
        .max(0) as u64,
    );
    let mut lines = vec![format!(
        "TLS handshake with {host}:{port} ({version}); server certificate {subject}, valid until {not_after} ({} days left)",
        left.as_secs() / 86400
    )];
    if left < EXPIRY_WARNING {
        lines.push(format!(
            "warning: the server certificate expires in less than 14 days ({not_after}); renew it before leaderd's connections start failing"
        ));
    }
    Ok(lines)
}

/// The same trust and client identity redis-rs uses for the lease.
fn client_config(tls: &RedisTls) -> Result<rustls::ClientConfig, String> {
    let roots = crate::client::pem::roots(tls.ca.as_deref(), "the CA bundle")?;
    crate::client::pem::client_config(roots, tls.client.as_ref())
}
