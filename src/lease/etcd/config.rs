//! etcd's options, declared once here and resolved into [`EtcdConfig`]: `--etcd URL` (repeatable; `LEADERD_ETCD_ENDPOINTS`
//! comma-separated; `etcd.endpoints`), the user and password (in the URL,
//! or the password from `LEADERD_ETCD_PASSWORD` or a file), TLS files, the
//! key prefix and the request timeout.

use crate::config::options::{BACKEND, Spec, spec};
use crate::config::{Backend, ConfigError, Declared, Origin, Resolving, Secret, or_default};
use crate::lease::options::StoreOptions;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct EtcdConfig {
    /// `http://host:port` or `https://host:port`, without credentials.
    pub endpoints: Vec<url::Url>,
    pub user: Option<String>,
    pub password: Option<Secret>,
    /// PEM roots (`None`: the system's) and client certificate and key.
    pub ca: Option<Vec<u8>>,
    pub client: Option<(Vec<u8>, Secret)>,
    /// Keys live under `PREFIX` + election key + `/`.
    pub prefix: String,
    pub timeout: Duration,
}

/// An endpoint URL, its credentials taken out.
#[derive(Debug, Clone)]
pub struct EtcdUrl {
    pub endpoint: url::Url,
    pub user: Option<String>,
    pub password: Option<Secret>,
}

pub fn parse_etcd_url(text: &str) -> Result<EtcdUrl, String> {
    let shown = crate::config::redact_url(text.trim());
    let mut url = url::Url::parse(text.trim()).map_err(|e| {
        format!(
            "`{shown}` is not an etcd URL ({e}); expected http://HOST:2379 or https://HOST:2379"
        )
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "`{shown}` is not an etcd URL; expected http://HOST:2379 or https://HOST:2379 (etcd's client URL)"
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("`{shown}` names no host"));
    }
    if !(url.path().is_empty() || url.path() == "/") || url.query().is_some() {
        return Err(format!(
            "`{shown}`: an etcd endpoint is scheme, host and port only"
        ));
    }
    let decode = |s: &str| {
        url::form_urlencoded::parse(format!("x={s}").as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default()
    };
    let user = (!url.username().is_empty()).then(|| decode(url.username()));
    let password = url.password().map(|p| Secret::new(decode(p)));
    let _ = url.set_username("");
    let _ = url.set_password(None);
    Ok(EtcdUrl {
        endpoint: url,
        user,
        password,
    })
}

fn parse_prefix(text: &str) -> Result<String, String> {
    if text.is_empty() || text.chars().any(char::is_control) {
        return Err("the etcd key prefix must be non-empty, without control characters".into());
    }
    Ok(text.to_string())
}

pub const ETCD: Spec = spec("etcd", "--etcd", "LEADERD_ETCD_ENDPOINTS", "etcd.endpoints")
    .value("URL")
    .under(BACKEND)
    .help("etcd endpoint, http[s]://[user[:pass]@]host:2379; repeat for every member")
    .list();

pub const ETCD_PASSWORD_FILE: Spec = spec(
    "etcd_password_file",
    "--etcd-password-file",
    "LEADERD_ETCD_PASSWORD_FILE",
    "etcd.password_file",
)
.value("FILE")
.under(BACKEND)
.help("A file holding the etcd user's password (the user: in the URL)");

pub const ETCD_PASSWORD: Spec = spec("etcd_password", "", "LEADERD_ETCD_PASSWORD", "")
    .no_flag()
    .no_key()
    .value("PASSWORD")
    .under(BACKEND)
    .secret()
    .help("The etcd user's password itself (instead of the file)");

pub const ETCD_TLS_CA: Spec = spec(
    "etcd_tls_ca",
    "--etcd-tls-ca",
    "LEADERD_ETCD_TLS_CA",
    "etcd.tls_ca_file",
)
.value("FILE")
.under(BACKEND)
.help("For https:// endpoints: trust only this PEM CA bundle (etcdctl's --cacert)")
.default("the system's roots");

pub const ETCD_TLS_CERT: Spec = spec(
    "etcd_tls_cert",
    "--etcd-tls-cert",
    "LEADERD_ETCD_TLS_CERT",
    "etcd.tls_cert_file",
)
.value("FILE")
.under(BACKEND)
.help("For https:// with client certificates: the certificate (PEM), with --etcd-tls-key (etcdctl's --cert)");

pub const ETCD_TLS_KEY: Spec = spec(
    "etcd_tls_key",
    "--etcd-tls-key",
    "LEADERD_ETCD_TLS_KEY",
    "etcd.tls_key_file",
)
.value("FILE")
.under(BACKEND)
.help("For https:// with client certificates: the private key (PEM) (etcdctl's --key)");

pub const ETCD_PREFIX: Spec = spec(
    "etcd_prefix",
    "--etcd-prefix",
    "LEADERD_ETCD_PREFIX",
    "etcd.prefix",
)
.value("PREFIX")
.under(BACKEND)
.help("Where leaderd's keys live: PREFIX + KEY + /leader")
.default("leaderd/");

pub const ETCD_TIMEOUT: Spec = spec(
    "etcd_timeout",
    "--etcd-timeout",
    "LEADERD_ETCD_TIMEOUT",
    "etcd.timeout",
)
.value("DUR")
.under(BACKEND)
.help("Timeout of every etcd request (connecting included)")
.default("500ms, at most half the renew interval");

/// etcd as the configuration sees it.
pub const DECLARED: Declared = Declared {
    name: "etcd",
    options: &[
        &ETCD,
        &ETCD_PASSWORD_FILE,
        &ETCD_PASSWORD,
        &ETCD_TLS_CA,
        &ETCD_TLS_CERT,
        &ETCD_TLS_KEY,
        &ETCD_PREFIX,
        &ETCD_TIMEOUT,
    ],
    selectors: &[&ETCD],
    resolve,
    fallback: None,
};

/// The endpoints, then the rest of etcd's options.
fn resolve(x: &mut Resolving<'_>) -> Result<Backend, ConfigError> {
    let urls =
        x.r.list(&ETCD, parse_etcd_url)?
            .expect("chosen by this option");
    let origin = urls.origin.clone();
    if urls.value.is_empty() {
        return Err(ConfigError(format!("{origin}: no etcd endpoint given")));
    }
    let mut user = None;
    let mut password = None;
    for u in &urls.value {
        if u.user.is_some() && user.is_some() && u.user != user {
            return Err(ConfigError(format!(
                "{origin}: the etcd endpoints name different users; one user signs in to the cluster"
            )));
        }
        user = user.or(u.user.clone());
        password = password.or(u.password.clone());
    }
    if password.is_some() && matches!(origin, Origin::Flag(_)) {
        x.warnings.push(format!(
            "--etcd: the URL's password is visible to every user of this host in `ps`; give it in {} or a file named by --etcd-password-file",
            ETCD_PASSWORD.env.expect("declared")
        ));
    }
    let given = x.secret(&ETCD_PASSWORD, &ETCD_PASSWORD_FILE, "an etcd password file")?;
    if let Some(given) = given {
        if password.is_some() {
            return Err(ConfigError(format!(
                "{origin}: the etcd password is given both in the URL and separately; choose one"
            )));
        }
        password = Some(given.value);
    }
    if password.is_some() && user.is_none() {
        return Err(ConfigError(format!(
            "{origin}: an etcd password without a user; give the user in the URL: http://USER@HOST:2379"
        )));
    }
    let endpoints: Vec<url::Url> = urls.value.into_iter().map(|u| u.endpoint).collect();
    let shown: Vec<String> = endpoints
        .iter()
        .map(|e| format!("{:?}", e.as_str()))
        .collect();
    x.note("etcd.endpoints", format!("[{}]", shown.join(", ")), &origin);
    let plain = endpoints.iter().find(|e| e.scheme() != "https").map(|e| {
        format!("TLS files apply to https:// endpoints, but `{e}` is http://; use https://")
    });
    let tls = crate::client::pem::files(x, [&ETCD_TLS_CA, &ETCD_TLS_CERT, &ETCD_TLS_KEY], plain)?;
    let prefix = x.r.scalar(&ETCD_PREFIX, parse_prefix)?;
    let prefix = or_default(prefix, "leaderd/".to_string(), "");
    x.note("etcd.prefix", format!("{:?}", prefix.value), &prefix.origin);
    let timeout = x.store_timeout(&ETCD_TIMEOUT)?;
    Ok(Backend::new(EtcdConfig {
        endpoints,
        user,
        password,
        ca: tls.ca,
        client: tls.client,
        prefix: prefix.value,
        timeout: timeout.value,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_lose_their_credentials_and_bad_ones_say_why() {
        let u = parse_etcd_url("https://app:s3cr%40t@10.0.0.5:2379").unwrap();
        assert_eq!(u.endpoint.as_str(), "https://10.0.0.5:2379/");
        assert_eq!(u.user.as_deref(), Some("app"));
        assert_eq!(u.password.as_ref().map(Secret::expose), Some("s3cr@t"));
        for (bad, says) in [
            ("redis://h:6379", "not an etcd URL"),
            ("http://h:2379/v3", "scheme, host and port only"),
            ("h:2379", "not an etcd URL"),
        ] {
            let e = parse_etcd_url(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let e = parse_etcd_url("ftp://u:pw@h").unwrap_err();
        assert!(!e.contains("pw"), "{e}");
    }
}
