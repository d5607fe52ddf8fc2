//! TLS to PostgreSQL with libpq's `sslmode` meanings, on rustls (the same
//! crypto provider as the rest of leaderd): `prefer` and `require` encrypt
//! without verifying (as libpq does; `require` with `sslrootcert` verifies
//! the chain), `verify-ca` checks the chain, `verify-full` the chain and the
//! host name.

use super::url::{PgTls, SslMode};
use rustls::DigitallySignedStruct;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use std::sync::Arc;
use tokio_postgres_rustls::MakeRustlsConnect;

/// The connector for tokio-postgres, and the `sslmode` it maps to there.
pub fn connector(
    tls: &PgTls,
) -> Result<(MakeRustlsConnect, tokio_postgres::config::SslMode), String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let verifier: Arc<dyn ServerCertVerifier> = match tls.mode {
        SslMode::Disable | SslMode::Prefer | SslMode::Require => Arc::new(Unverified(provider)),
        SslMode::VerifyCa | SslMode::VerifyFull => {
            let roots = Arc::new(crate::client::pem::roots(
                tls.roots.as_deref(),
                "sslrootcert",
            )?);
            let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| format!("the root certificates: {e}"))?;
            if tls.mode == SslMode::VerifyCa {
                Arc::new(AnyName(webpki))
            } else {
                webpki
            }
        }
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match &tls.client {
        Some((cert, key)) => {
            let (chain, key) = crate::client::pem::identity(cert, key).map_err(|e| {
                e.replace("the client certificate", "sslcert")
                    .replace("the client key", "sslkey")
            })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("sslcert and sslkey: {e}"))?
        }
        None => builder.with_no_client_auth(),
    };
    let mode = match tls.mode {
        SslMode::Disable => tokio_postgres::config::SslMode::Disable,
        SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
        _ => tokio_postgres::config::SslMode::Require,
    };
    Ok((MakeRustlsConnect::new(config), mode))
}

/// What to do about a failed TLS handshake, or `None` if not about TLS.
pub fn hint(detail: &str) -> Option<&'static str> {
    let d = detail.to_lowercase().replace([' ', '_'], "");
    let says = |words: &[&str]| words.iter().any(|w| d.contains(w));
    Some(if says(&["unknownissuer"]) {
        "the server's certificate is not signed by a trusted CA: give its CA with sslrootcert=FILE in the URL"
    } else if says(&["notvalidforname"]) {
        "the server's certificate does not name the host in the URL: connect by a name it carries, or use sslmode=verify-ca"
    } else if says(&["expired", "notvalidyet"]) {
        "the server's certificate has expired or is not valid yet: renew it (and check the host's clock)"
    } else if says(&["serverdoesnotsupporttls", "tlsnotsupported"]) {
        "the server does not offer TLS: enable ssl on the server, or use sslmode=prefer or disable"
    } else if says(&["invalidcertificate", "badcertificate", "receivedfatalalert"]) {
        "the TLS handshake was refused: check sslrootcert, sslcert/sslkey and the server's TLS settings"
    } else {
        return None;
    })
}

/// `prefer` and `require`: any certificate, but the handshake's signatures
/// still checked (libpq's meaning of these modes: encryption, no identity).
#[derive(Debug)]
struct Unverified(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain must verify; the name in it may be any.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use rustls::{CertificateError, Error};
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
