//! A pod's identity, for leaderd run as if in a pod: the files the kubelet
//! projects into `/var/run/secrets/kubernetes.io/serviceaccount` (written
//! the way its atomic writer does: a timestamped directory, a `..data`
//! symlink swapped in one rename, and `token` → `..data/token`), tokens the
//! real API server mints with TokenRequest, and a private mount namespace
//! (`unshare --mount`) in which that directory is the one the test wrote,
//! so leaderd reads the very paths it reads in a pod. An expired token is
//! signed here with the API server's own service-account key, since
//! TokenRequest refuses lifetimes under ten minutes.

use super::kube::Kube;
use super::path_str;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rcgen::SigningKey;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

const MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// A TokenRequest for `account` in `namespace`: the token the kubelet
/// would project, valid for an hour and, with `bound`, only while that
/// Secret exists (deleting it invalidates the token, as deleting a pod
/// invalidates its pod's).
pub fn token_request(kube: &Kube, namespace: &str, account: &str, bound: Option<&str>) -> String {
    let mut spec = json!({ "expirationSeconds": 3600 });
    if let Some(secret) = bound {
        let object = kube.ok(
            "GET",
            &format!("/api/v1/namespaces/{namespace}/secrets/{secret}"),
            None,
        );
        spec["boundObjectRef"] = json!({
            "apiVersion": "v1", "kind": "Secret", "name": secret,
            "uid": object["metadata"]["uid"],
        });
    }
    let body =
        json!({ "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec });
    let answer = kube.ok(
        "POST",
        &format!("/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token"),
        Some(&body),
    );
    answer["status"]["token"]
        .as_str()
        .expect("a token in the TokenRequest's status")
        .to_string()
}

/// A token for `account` exactly like the API server's own, but whose
/// `exp` passed a minute ago: signed with the API server's key, so the only
/// thing wrong with it is that it has expired.
pub fn expired_token(kube: &Kube, namespace: &str, account: &str) -> String {
    let sa = kube.ok(
        "GET",
        &format!("/api/v1/namespaces/{namespace}/serviceaccounts/{account}"),
        None,
    );
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let issuer = "https://kubernetes.default.svc";
    let claims = json!({
        "aud": [issuer], "iss": issuer,
        "iat": now - 3660, "nbf": now - 3660, "exp": now - 60,
        "sub": format!("system:serviceaccount:{namespace}:{account}"),
        "kubernetes.io": {
            "namespace": namespace,
            "serviceaccount": { "name": account, "uid": sa["metadata"]["uid"] },
        },
    });
    let pem = std::fs::read_to_string(kube.service_account_key()).expect("the key");
    let key = rcgen::KeyPair::from_pem(&pem).expect("an ECDSA P-256 key");
    let header = URL_SAFE_NO_PAD.encode(json!({ "alg": "ES256", "typ": "JWT" }).to_string());
    let payload = URL_SAFE_NO_PAD.encode(claims.to_string());
    let input = format!("{header}.{payload}");
    let der = key.sign(input.as_bytes()).expect("signed");
    format!("{input}.{}", URL_SAFE_NO_PAD.encode(raw_signature(&der)))
}

/// An ASN.1 ECDSA signature (SEQUENCE of INTEGER r, INTEGER s) as JWS wants
/// it: r and s, 32 bytes each.
fn raw_signature(der: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    let mut at = 2; // SEQUENCE, length (< 128 for P-256)
    for _ in 0..2 {
        assert_eq!(der[at], 0x02, "an INTEGER");
        let len = der[at + 1] as usize;
        let int = &der[at + 2..at + 2 + len];
        let int = &int[int.len().saturating_sub(32)..];
        out.extend(std::iter::repeat_n(0, 32 - int.len()));
        out.extend_from_slice(int);
        at += 2 + len;
    }
    out
}

/// The projected volume of one pod, in a directory of the test's.
pub struct Projected {
    pub dir: PathBuf,
    generation: u32,
}

impl Projected {
    /// The files of a pod in `namespace` with `token`.
    pub fn new(dir: &Path, kube: &Kube, namespace: &str, token: &str) -> Projected {
        std::fs::create_dir_all(dir).expect("a directory");
        let mut projected = Projected {
            dir: dir.to_path_buf(),
            generation: 0,
        };
        let ca = std::fs::read(kube.ca()).expect("the CA");
        projected.write(&[("ca.crt", &ca), ("namespace", namespace.as_bytes())]);
        projected.rotate(token);
        for name in ["token", "ca.crt", "namespace"] {
            std::os::unix::fs::symlink(format!("..data/{name}"), dir.join(name))
                .expect("a symlink");
        }
        projected
    }

    /// The kubelet's rotation: every file written into a new directory,
    /// then `..data` pointed at it in one rename.
    pub fn rotate(&mut self, token: &str) {
        let keep: Vec<(String, Vec<u8>)> = ["ca.crt", "namespace"]
            .iter()
            .filter_map(|n| {
                let current = self.dir.join("..data").join(n);
                Some((n.to_string(), std::fs::read(current).ok()?))
            })
            .collect();
        let mut files: Vec<(&str, &[u8])> = keep
            .iter()
            .map(|(n, b)| (n.as_str(), b.as_slice()))
            .collect();
        files.push(("token", token.as_bytes()));
        self.write(&files);
    }

    fn write(&mut self, files: &[(&str, &[u8])]) {
        self.generation += 1;
        let stamp = format!(
            "..2026_11_27_00_00_{:02}.{}",
            self.generation,
            std::process::id()
        );
        let target = self.dir.join(&stamp);
        std::fs::create_dir_all(&target).expect("a directory");
        for (name, bytes) in files {
            std::fs::write(target.join(name), bytes).expect("a file");
        }
        let link = self.dir.join("..data_tmp");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&stamp, &link).expect("a symlink");
        std::fs::rename(&link, self.dir.join("..data")).expect("the swap");
    }

    /// `unshare` and a shell that mount this directory over the pod's
    /// path, in a mount namespace of their own, then exec the command that
    /// follows: `Err` says why this machine cannot.
    pub fn wrapper(&self) -> Result<Vec<String>, String> {
        let run = std::fs::canonicalize("/var/run").unwrap_or_else(|_| "/var/run".into());
        let script = format!(
            "mount -t tmpfs tmpfs {run} && mkdir -p {MOUNT} && mount --bind \"$0\" {MOUNT} && exec \"$@\"",
            run = path_str(&run)
        );
        let mut tried = Vec::new();
        for flags in [
            &["--mount"][..],
            &["--user", "--map-root-user", "--mount"][..],
        ] {
            let mut args: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
            args.extend(["--propagation", "private", "sh", "-c", &script].map(String::from));
            args.push(path_str(&self.dir).to_string());
            let probe = Command::new("unshare")
                .args(&args)
                .args(["test", "-L", &format!("{MOUNT}/token")])
                .output()
                .map_err(|e| format!("unshare: {e}"))?;
            if probe.status.success() {
                let mut wrapper = vec!["unshare".to_string()];
                wrapper.extend(args);
                return Ok(wrapper);
            }
            tried.push(String::from_utf8_lossy(&probe.stderr).trim().to_string());
        }
        Err(tried.join("; "))
    }
}

/// A SubjectAccessReview for `account` in `namespace`: may it `verb` the
/// `resource` (`group`), named `name` if given?
pub fn may(kube: &Kube, namespace: &str, account: &str, attributes: Value) -> bool {
    let mut attributes = attributes;
    attributes["namespace"] = json!(namespace);
    let review = json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {
            "user": format!("system:serviceaccount:{namespace}:{account}"),
            "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{namespace}"), "system:authenticated"],
            "resourceAttributes": attributes,
        },
    });
    let answer = kube.ok(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        Some(&review),
    );
    answer["status"]["allowed"].as_bool().unwrap_or(false)
}
