//! Certificates minted for the TLS tests (rcgen): a CA, server and client
//! certificates signed by it, written as PEM files in a temp dir, and a
//! `redis-server` that listens only on a TLS port.

use super::{Redis, temp_dir};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, date_time_ymd,
};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

pub struct Pki {
    pub dir: PathBuf,
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    /// A fresh CA named `name`; its certificate is `ca.pem`.
    pub fn new(name: &str) -> Pki {
        let dir = temp_dir(&format!("pki-{name}"));
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("leaderd test CA {name}"));
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key"))
            .expect("self-signed CA");
        std::fs::write(dir.join("ca.pem"), issuer.pem()).expect("write CA");
        Pki { dir, issuer }
    }

    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A certificate for `names` (host names or IP addresses), signed by this
    /// CA, as `FILE.pem` and `FILE.key` (mode 0600); expired in 2021 when asked.
    pub fn leaf(&self, file: &str, names: &[&str], expired: bool) -> (PathBuf, PathBuf) {
        let ends = expired.then_some((2021, 1, 1));
        self.leaf_until(file, names, ends)
    }

    /// Like [`Pki::leaf`], valid until the given day (`None`: for ever).
    pub fn leaf_until(
        &self,
        file: &str,
        names: &[&str],
        until: Option<(i32, u8, u8)>,
    ) -> (PathBuf, PathBuf) {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(names).expect("params");
        params.distinguished_name.push(DnType::CommonName, file);
        if let Some((y, m, d)) = until {
            params.not_before = date_time_ymd(2020, 1, 1);
            params.not_after = date_time_ymd(y, m, d);
        }
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        let (cert_path, key_path) = (
            self.dir.join(format!("{file}.pem")),
            self.dir.join(format!("{file}.key")),
        );
        std::fs::write(&cert_path, cert.pem()).expect("write cert");
        std::fs::write(&key_path, key.serialize_pem()).expect("write key");
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600))
            .expect("chmod key");
        (cert_path, key_path)
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `date_time_ymd` arguments for `days` from today (UTC), for certificates
/// that expire soon.
pub fn days_from_now(days: i64) -> (i32, u8, u8) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs() as i64;
    // Howard Hinnant's civil_from_days.
    let z = now / 86400 + days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    let year = (yoe + era * 400 + i64::from(month <= 2)) as i32;
    (year, month, day)
}

/// A `redis-server` listening only on a TLS port, with `server` as its
/// certificate; `clients_need_certs` sets `tls-auth-clients`. Its `url()`
/// is `rediss://127.0.0.1:PORT` and the fixture's own commands go over TLS
/// with `pki`'s CA and a client certificate.
pub fn redis(pki: &Pki, server: &(PathBuf, PathBuf), clients_need_certs: bool) -> Redis {
    let s = |p: &PathBuf| p.to_str().expect("utf-8").to_string();
    let client = pki.leaf("fixture-client", &["fixture"], false);
    Redis::start_tls(
        vec![
            "--tls-cert-file".into(),
            s(&server.0),
            "--tls-key-file".into(),
            s(&server.1),
            "--tls-ca-cert-file".into(),
            s(&pki.ca()),
            "--tls-auth-clients".into(),
            if clients_need_certs { "yes" } else { "no" }.into(),
        ],
        super::TlsClient {
            ca: std::fs::read(pki.ca()).expect("CA"),
            cert: std::fs::read(&client.0).expect("cert"),
            key: std::fs::read(&client.1).expect("key"),
        },
    )
}
