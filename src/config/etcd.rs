//! etcd's options: `--etcd URL` (repeatable; `LEADERD_ETCD_ENDPOINTS`
//! comma-separated; `etcd.endpoints`), the user and password (in the URL,
//! or the password from `LEADERD_ETCD_PASSWORD` or a file), TLS files, the
//! key prefix and the request timeout.

use super::options;
use super::resolve::{Origin, Resolver, Value, or_default, positive, show};
use super::values::{self, Secret};
use super::{BackendConfig, ConfigError, Sources};
use std::path::PathBuf;
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
    let shown = values::redact_url(text.trim());
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

/// The endpoints, if etcd is configured.
pub(super) fn endpoints(r: &Resolver<'_>) -> Result<Option<Value<Vec<EtcdUrl>>>, ConfigError> {
    r.list(&options::ETCD, parse_etcd_url)
}

/// The rest of etcd's options, given the endpoints.
pub(super) fn resolve(
    r: &Resolver<'_>,
    s: &Sources<'_>,
    urls: Value<Vec<EtcdUrl>>,
    renew_interval: &Value<Duration>,
    warnings: &mut Vec<String>,
    note: &mut impl FnMut(&'static str, String, &Origin),
) -> Result<BackendConfig, ConfigError> {
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
        warnings.push(format!(
            "--etcd: the URL's password is visible to every user of this host in `ps`; give it in {} or a file named by --etcd-password-file",
            options::ETCD_PASSWORD.env.expect("declared")
        ));
    }
    let from_env = r
        .env(options::ETCD_PASSWORD.env.expect("declared"))?
        .map(Secret::new);
    let file = r.scalar(&options::ETCD_PASSWORD_FILE, |p| Ok(PathBuf::from(p)))?;
    let given = match (from_env, file) {
        (Some(_), Some(f)) => {
            return Err(ConfigError(format!(
                "both {} and an etcd password file ({}) are set; choose one",
                options::ETCD_PASSWORD.env.expect("declared"),
                f.origin
            )));
        }
        (Some(p), None) => Some(p),
        (None, Some(f)) => {
            let (text, mode) = (s.read_secret)(&f.value).map_err(|e| {
                ConfigError(format!(
                    "{}: cannot read {}: {e}",
                    f.origin,
                    f.value.display()
                ))
            })?;
            warnings.extend(super::loose_secret_file(&f.origin, &f.value, mode));
            Some(Secret::new(text.trim_end_matches(['\n', '\r'])))
        }
        (None, None) => None,
    };
    if given.is_some() {
        if password.is_some() {
            return Err(ConfigError(format!(
                "{origin}: the etcd password is given both in the URL and separately; choose one"
            )));
        }
        password = given;
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
    note("etcd.endpoints", format!("[{}]", shown.join(", ")), &origin);
    let plain = endpoints.iter().find(|e| e.scheme() != "https").map(|e| {
        format!("TLS files apply to https:// endpoints, but `{e}` is http://; use https://")
    });
    let specs = [
        &options::ETCD_TLS_CA,
        &options::ETCD_TLS_CERT,
        &options::ETCD_TLS_KEY,
    ];
    let tls = super::backend::tls_files(r, s, specs, plain, warnings, note)?;
    let prefix = r.scalar(&options::ETCD_PREFIX, parse_prefix)?;
    let prefix = or_default(prefix, "leaderd/".to_string(), "");
    note("etcd.prefix", format!("{:?}", prefix.value), &prefix.origin);
    let timeout = r.scalar(&options::ETCD_TIMEOUT, positive(values::parse_duration))?;
    let timeout = or_default(timeout, Duration::from_millis(500), "");
    note(
        "etcd.timeout",
        format!("{:?}", show(timeout.value)),
        &timeout.origin,
    );
    if timeout.value >= renew_interval.value {
        return Err(ConfigError(format!(
            "etcd.timeout = {} ({}) must be shorter than lease.renew_interval = {} ({}): a renewal has to be able to time out and be retried before the next one is due",
            show(timeout.value),
            timeout.origin,
            show(renew_interval.value),
            renew_interval.origin
        )));
    }
    Ok(BackendConfig::Etcd(Box::new(EtcdConfig {
        endpoints,
        user,
        password,
        ca: tls.ca,
        client: tls.client,
        prefix: prefix.value,
        timeout: timeout.value,
    })))
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
