//! ZooKeeper's options, declared once here and resolved into
//! [`ZkConfig`]: `--zookeeper CONNECT` (the connect string users already
//! write, `host1:2181,host2:2181[/chroot]`; `LEADERD_ZOOKEEPER`;
//! `zookeeper.connect`), the digest user and its password (from
//! `LEADERD_ZOOKEEPER_PASSWORD` or a file), the election's prefix and the
//! request timeout.

use crate::config::options::{BACKEND, Spec, spec};
use crate::config::{Backend, ConfigError, Declared, Resolving, Secret, or_default};
use crate::lease::options::StoreOptions;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct ZkConfig {
    /// The connect string as the client takes it: `host:port,...[/chroot]`.
    pub connect: Connect,
    /// Digest authentication: the user and its password.
    pub user: Option<(String, Secret)>,
    /// The election lives under `PREFIX/KEY` inside the chroot.
    pub prefix: String,
    pub timeout: Duration,
    /// TLS to the servers' secure client port: the CA (PEM) to trust, and
    /// a client certificate and key when the servers ask for one.
    pub tls: Option<ZkTls>,
}

#[derive(Debug, Clone)]
pub struct ZkTls {
    pub ca: String,
    pub client: Option<(String, Secret)>,
}

/// A parsed connect string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connect {
    pub hosts: Vec<(String, u16)>,
    /// `/app`, or `None` for the root.
    pub chroot: Option<String>,
}

impl Connect {
    /// The connect string again, as ZooKeeper's clients write it.
    pub fn text(&self) -> String {
        let hosts: Vec<String> = self
            .hosts
            .iter()
            .map(|(h, p)| {
                if h.contains(':') {
                    format!("[{h}]:{p}")
                } else {
                    format!("{h}:{p}")
                }
            })
            .collect();
        format!(
            "{}{}",
            hosts.join(","),
            self.chroot.as_deref().unwrap_or("")
        )
    }
}

/// `host:port[,host:port...][/chroot]`. A port is required: a connect
/// string without one would silently mean 2181, which is rarely what a
/// fleet of loopback or non-default servers listens on.
pub fn parse_connect(text: &str) -> Result<Connect, String> {
    let text = text.trim();
    let example = "expected HOST:PORT[,HOST:PORT...][/CHROOT], e.g. zk1:2181,zk2:2181,zk3:2181/app";
    if text.is_empty() {
        return Err(format!("an empty ZooKeeper connect string; {example}"));
    }
    if text.contains("://") {
        return Err(format!(
            "`{text}` is a URL, not a ZooKeeper connect string; {example}"
        ));
    }
    let (hosts, chroot) = match text.find('/') {
        Some(at) => (&text[..at], Some(&text[at..])),
        None => (text, None),
    };
    if let Some(chroot) = chroot {
        check_path(chroot).map_err(|e| format!("`{text}`: the chroot {e}"))?;
    }
    let mut parsed = Vec::new();
    for host in hosts.split(',') {
        let host = host.trim();
        let (name, port) = match host.rsplit_once(':') {
            Some((name, port)) if !name.is_empty() => (name, port),
            _ => {
                return Err(format!(
                    "`{host}` in `{text}` has no port; {example} (ZooKeeper's client port is usually 2181)"
                ));
            }
        };
        let name = name.trim_start_matches('[').trim_end_matches(']');
        let port: u16 =
            port.parse().ok().filter(|p| *p != 0).ok_or_else(|| {
                format!("`{host}` in `{text}`: `{port}` is not a port; {example}")
            })?;
        parsed.push((name.to_string(), port));
    }
    Ok(Connect {
        hosts: parsed,
        chroot: chroot.map(str::to_string),
    })
}

/// A ZooKeeper path: `/a/b`, no empty part, no trailing `/`, no `.` or `..`.
fn check_path(path: &str) -> Result<(), String> {
    if path == "/" {
        return Err("`/` is empty; name a path such as /app, or leave it out".into());
    }
    if !path.starts_with('/') || path.ends_with('/') || path.contains("//") {
        return Err(format!(
            "`{path}` is not a ZooKeeper path (it starts with /, has no empty part and no trailing /)"
        ));
    }
    if path
        .split('/')
        .skip(1)
        .any(|p| p == "." || p == ".." || p.chars().any(char::is_control))
    {
        return Err(format!(
            "`{path}` is not a ZooKeeper path (no . or .. parts, no control characters)"
        ));
    }
    Ok(())
}

fn parse_prefix(text: &str) -> Result<String, String> {
    check_path(text).map_err(|e| format!("the ZooKeeper prefix {e}"))?;
    Ok(text.to_string())
}

fn parse_user(text: &str) -> Result<String, String> {
    if text.is_empty() || text.contains(':') || text.chars().any(char::is_control) {
        return Err(
            "a ZooKeeper digest user is non-empty, without `:` or control characters".into(),
        );
    }
    Ok(text.to_string())
}

pub const ZOOKEEPER: Spec = spec(
    "zookeeper",
    "--zookeeper",
    "LEADERD_ZOOKEEPER",
    "zookeeper.connect",
)
.value("CONNECT")
.under(BACKEND)
.help("ZooKeeper connect string, host1:2181,host2:2181,host3:2181[/chroot]");

pub const ZOOKEEPER_PREFIX: Spec = spec(
    "zookeeper_prefix",
    "--zookeeper-prefix",
    "LEADERD_ZOOKEEPER_PREFIX",
    "zookeeper.prefix",
)
.value("PATH")
.under(BACKEND)
.help("Where the election lives inside the chroot: PATH/KEY")
.default("/leaderd");

pub const ZOOKEEPER_USER: Spec = spec(
    "zookeeper_user",
    "--zookeeper-user",
    "LEADERD_ZOOKEEPER_USER",
    "zookeeper.user",
)
.value("USER")
.under(BACKEND)
.help("Digest authentication as USER; the nodes leaderd creates are then writable by USER only");

pub const ZOOKEEPER_PASSWORD_FILE: Spec = spec(
    "zookeeper_password_file",
    "--zookeeper-password-file",
    "LEADERD_ZOOKEEPER_PASSWORD_FILE",
    "zookeeper.password_file",
)
.value("FILE")
.under(BACKEND)
.help("A file holding the digest user's password");

pub const ZOOKEEPER_PASSWORD: Spec =
    spec("zookeeper_password", "", "LEADERD_ZOOKEEPER_PASSWORD", "")
        .no_flag()
        .no_key()
        .value("PASSWORD")
        .under(BACKEND)
        .secret()
        .help("The digest user's password itself (instead of the file)");

pub const ZOOKEEPER_TIMEOUT: Spec = spec(
    "zookeeper_timeout",
    "--zookeeper-timeout",
    "LEADERD_ZOOKEEPER_TIMEOUT",
    "zookeeper.timeout",
)
.value("DUR")
.under(BACKEND)
.help("Timeout of every ZooKeeper request (opening a session: 4/5 of the TTL more)")
.default("500ms, at most half the renew interval");

pub const ZOOKEEPER_TLS_CA: Spec = spec(
    "zookeeper_tls_ca",
    "--zookeeper-tls-ca",
    "LEADERD_ZOOKEEPER_TLS_CA",
    "zookeeper.tls_ca_file",
)
.value("FILE")
.under(BACKEND)
.help("TLS to the servers' secureClientPort, trusting this PEM CA bundle");

pub const ZOOKEEPER_TLS_CERT: Spec = spec(
    "zookeeper_tls_cert",
    "--zookeeper-tls-cert",
    "LEADERD_ZOOKEEPER_TLS_CERT",
    "zookeeper.tls_cert_file",
)
.value("FILE")
.under(BACKEND)
.help("With TLS, when the servers ask for client certificates (ssl.clientAuth): the certificate (PEM), with --zookeeper-tls-key");

pub const ZOOKEEPER_TLS_KEY: Spec = spec(
    "zookeeper_tls_key",
    "--zookeeper-tls-key",
    "LEADERD_ZOOKEEPER_TLS_KEY",
    "zookeeper.tls_key_file",
)
.value("FILE")
.under(BACKEND)
.help("With TLS and a client certificate: its private key (PEM)");

/// ZooKeeper as the configuration sees it.
pub const DECLARED: Declared = Declared {
    name: "ZooKeeper",
    options: &[
        &ZOOKEEPER,
        &ZOOKEEPER_PREFIX,
        &ZOOKEEPER_USER,
        &ZOOKEEPER_PASSWORD_FILE,
        &ZOOKEEPER_PASSWORD,
        &ZOOKEEPER_TIMEOUT,
        &ZOOKEEPER_TLS_CA,
        &ZOOKEEPER_TLS_CERT,
        &ZOOKEEPER_TLS_KEY,
    ],
    selectors: &[&ZOOKEEPER],
    resolve,
    fallback: None,
};

/// The connect string, then the rest of ZooKeeper's options.
fn resolve(x: &mut Resolving<'_>) -> Result<Backend, ConfigError> {
    let connect =
        x.r.scalar(&ZOOKEEPER, parse_connect)?
            .expect("chosen by this option");
    x.note(
        "zookeeper.connect",
        format!("{:?}", connect.value.text()),
        &connect.origin,
    );
    let prefix = x.r.scalar(&ZOOKEEPER_PREFIX, parse_prefix)?;
    let prefix = or_default(prefix, "/leaderd".to_string(), "");
    x.note(
        "zookeeper.prefix",
        format!("{:?}", prefix.value),
        &prefix.origin,
    );
    let user = x.r.scalar(&ZOOKEEPER_USER, parse_user)?;
    let password = x.secret(
        &ZOOKEEPER_PASSWORD,
        &ZOOKEEPER_PASSWORD_FILE,
        "a ZooKeeper password file",
    )?;
    let user = match (user, password) {
        (Some(user), Some(password)) => {
            x.note("zookeeper.user", format!("{:?}", user.value), &user.origin);
            Some((user.value, password.value))
        }
        (Some(user), None) => {
            return Err(ConfigError(format!(
                "{}: a ZooKeeper user without a password; give it in {} or a file named by --zookeeper-password-file",
                user.origin,
                ZOOKEEPER_PASSWORD.env.expect("declared")
            )));
        }
        (None, Some(password)) => {
            return Err(ConfigError(format!(
                "{}: a ZooKeeper password without a user; name it with --zookeeper-user",
                password.origin
            )));
        }
        (None, None) => None,
    };
    let timeout = x.store_timeout(&ZOOKEEPER_TIMEOUT)?;
    let files = crate::client::pem::files(
        x,
        [&ZOOKEEPER_TLS_CA, &ZOOKEEPER_TLS_CERT, &ZOOKEEPER_TLS_KEY],
        None,
    )?;
    let text = |pem: Vec<u8>| String::from_utf8_lossy(&pem).into_owned();
    let tls = match (files.ca, files.client) {
        (Some(ca), client) => Some(ZkTls {
            ca: text(ca),
            client: client.map(|(cert, key)| (text(cert), key)),
        }),
        (None, None) => None,
        (None, Some(_)) => {
            return Err(ConfigError(format!(
                "{}: a client certificate, but no --zookeeper-tls-ca: TLS to ZooKeeper trusts the CA you name (ZooKeeper's TLS is a private CA almost everywhere); give it",
                x.r.given(&[&ZOOKEEPER_TLS_CERT, &ZOOKEEPER_TLS_KEY])
                    .map_or("--zookeeper-tls-cert".to_string(), |o| o.to_string())
            )));
        }
    };
    Ok(Backend::new(ZkConfig {
        connect: connect.value,
        user,
        prefix: prefix.value,
        timeout: timeout.value,
        tls,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_strings_parse_and_bad_ones_say_why() {
        let c = parse_connect("zk1:2181,zk2:2182,[::1]:2183/app/x").unwrap();
        assert_eq!(
            c.hosts,
            vec![
                ("zk1".to_string(), 2181),
                ("zk2".to_string(), 2182),
                ("::1".to_string(), 2183)
            ]
        );
        assert_eq!(c.chroot.as_deref(), Some("/app/x"));
        assert_eq!(c.text(), "zk1:2181,zk2:2182,[::1]:2183/app/x");
        assert_eq!(parse_connect("127.0.0.1:2181").unwrap().chroot, None);
        for (bad, says) in [
            ("zk1", "has no port"),
            ("zk1:2181,zk2", "`zk2` in"),
            ("zk1:abc", "is not a port"),
            ("zk1:2181/", "`/` is empty"),
            ("zk1:2181/app/", "not a ZooKeeper path"),
            ("zk1:2181/a//b", "not a ZooKeeper path"),
            ("zk1:2181/a/../b", "no . or .."),
            ("zookeeper://zk1:2181", "is a URL"),
            ("", "empty"),
        ] {
            let e = parse_connect(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn prefixes_and_users_are_checked() {
        assert_eq!(parse_prefix("/leaderd").unwrap(), "/leaderd");
        assert!(parse_prefix("leaderd").is_err());
        assert!(parse_prefix("/").is_err());
        assert!(parse_user("app:x").is_err());
        assert!(parse_user("").is_err());
        assert_eq!(parse_user("app").unwrap(), "app");
    }
}
