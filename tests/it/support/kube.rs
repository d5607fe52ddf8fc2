//! A real Kubernetes control plane on loopback, the way controller-runtime's
//! envtest starts one: etcd 3.6 and kube-apiserver built from their
//! published Go modules (`scripts/lib/ensure-kube.sh`, which exports
//! `LEADERD_KUBE_APISERVER` and `LEADERD_KUBE_ETCD`), a secure port with a CA
//! and certificates made at start, service-account keys, RBAC, and a static
//! token file for the test identities: an admin, a candidate bound to
//! leaderd's Role, and a stranger bound to nothing. The fixture's own
//! requests go through `curl` as the admin.

use super::etcd::Etcd;
use super::process::Process;
use super::tls::Pki;
use super::{eventually, free_port, path_str, temp_dir};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The namespace the tests' Leases live in.
pub const NAMESPACE: &str = "default";

/// The users of the static token file: `admin` is in `system:masters`;
/// `leaderd-candidate` is bound to the Role `leaderd` (leases: get, update, patch,
/// watch, create); the others are bound to nothing until a test binds them.
pub const USERS: &[&str] = &[
    ADMIN,
    CANDIDATE,
    "stranger",
    "no-update",
    "no-create",
    "no-watch",
];
pub const ADMIN: &str = "admin";

/// What [`Kube::outside`] writes.
#[derive(Debug, Clone)]
pub enum Outside {
    /// `holderIdentity` cleared (`kubectl patch`, a client-go elector's
    /// stale release).
    Clear,
    /// `holderIdentity` set to another candidate.
    Repoint(String),
    /// `leaseDurationSeconds` set to 1.
    Shorten,
    /// A saved copy of the Lease put back (Velero, an etcd restore).
    Restore(Value),
}
pub const CANDIDATE: &str = "leaderd-candidate";

/// The bearer token of `user` (none for a user not in [`USERS`]).
pub fn token(user: &str) -> String {
    format!("token-{user}-0123456789")
}

pub struct ApiServer {
    pub port: u16,
    process: Process,
    etcd_urls: String,
    dir: PathBuf,
}

pub struct Kube {
    pub etcd: Etcd,
    pub servers: Vec<ApiServer>,
    pki: Pki,
    dir: PathBuf,
}

fn binary(var: &str) -> PathBuf {
    let path = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        panic!("{var} is not set: run the tests through scripts/test, which builds kube-apiserver and etcd 3.6 (scripts/lib/ensure-kube.sh)")
    });
    assert!(
        path.exists(),
        "{var}={} does not exist: run scripts/lib/ensure-kube.sh",
        path.display()
    );
    path
}

impl Kube {
    /// etcd of `members` and one kube-apiserver, RBAC for the candidate
    /// applied, ready.
    pub fn start(members: usize) -> Kube {
        Kube::start_with(members, 1)
    }

    /// etcd of `members` and `servers` API servers on it.
    pub fn start_with(members: usize, servers: usize) -> Kube {
        let tag = super::os::below(1 << 30);
        let dir = temp_dir(&format!("kube-{tag}"));
        let pki = Pki::new(&format!("kube-{tag}"));
        let etcd = Etcd::start_with(members, binary("LEADERD_KUBE_ETCD"));
        let sa = rcgen::KeyPair::generate().expect("a service-account key");
        // kube-apiserver verifies with the public key and signs with the
        // private one (PKCS#8, which it reads only as a signing key).
        std::fs::write(dir.join("sa.key"), sa.serialize_pem()).expect("write the key");
        std::fs::write(dir.join("sa.pub"), sa.public_key_pem()).expect("write the key");
        let tokens: String = USERS
            .iter()
            .map(|user| {
                let group = if *user == ADMIN { "system:masters" } else { "" };
                format!("{},{user},uid-{user},\"{group}\"\n", token(user))
            })
            .collect();
        std::fs::write(dir.join("tokens.csv"), tokens).expect("write the tokens");
        pki.leaf("apiserver", &["127.0.0.1", "localhost"], false);
        let etcd_urls = etcd
            .members
            .iter()
            .map(|m| m.url())
            .collect::<Vec<_>>()
            .join(",");
        let mut kube = Kube {
            etcd,
            servers: Vec::new(),
            pki,
            dir,
        };
        for i in 0..servers {
            let mut server = ApiServer {
                port: free_port(),
                process: Process::new(kube.dir.join(format!("apiserver-{i}"))),
                etcd_urls: etcd_urls.clone(),
                dir: kube.dir.clone(),
            };
            server.launch(&kube.pki);
            kube.servers.push(server);
        }
        for i in 0..servers {
            kube.wait_ready(i);
        }
        kube.apply_rbac();
        kube
    }

    /// Polls `/readyz` of server `i` until it answers ok.
    pub fn wait_ready(&self, i: usize) {
        eventually(Duration::from_secs(90), "kube-apiserver /readyz", || {
            let (code, body) = self.raw_on(i, ADMIN, "GET", "/readyz", None);
            (code == 200 && body.trim() == "ok").then_some(())
        });
    }

    /// The Role and RoleBinding the contract suite's candidates run under:
    /// every verb leaderd uses on leases, on every name (the suite's keys
    /// vary; the RBAC tests apply the minimal one by resourceNames).
    fn apply_rbac(&self) {
        let rules = json!([{
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "update", "patch", "watch", "create"],
        }]);
        self.role("leaderd", &rules, CANDIDATE);
    }

    /// A Role `name` with `rules` in the test namespace, bound to `user`.
    pub fn role(&self, name: &str, rules: &Value, user: &str) {
        let base = format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}");
        let role = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": { "name": name }, "rules": rules,
        });
        self.ok("POST", &format!("{base}/roles"), Some(&role));
        let binding = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": { "name": format!("{name}-{user}") },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name },
            "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user }],
        });
        self.ok("POST", &format!("{base}/rolebindings"), Some(&binding));
    }

    /// The client-go elector (`tests/k8s/elector`, `LEADERD_KUBE_ELECTOR`)
    /// as the candidate identity on the first server, for the Lease
    /// `lease` in the test namespace, with its flags in `extra` (timing,
    /// `--log`), running `command`; its output dropped.
    pub fn elector(&self, lease: &str, id: &str, extra: &[&str], command: &[&str]) -> Command {
        let mut cmd = Command::new(binary("LEADERD_KUBE_ELECTOR"));
        cmd.arg("--kubeconfig")
            .arg(self.kubeconfig(CANDIDATE, 0))
            .args(["--namespace", NAMESPACE, "--lease", lease, "--id", id])
            .args(extra)
            .arg("--")
            .args(command)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    }

    /// The CA that signed the API servers' certificates.
    pub fn ca(&self) -> PathBuf {
        self.pki.ca()
    }

    /// The private key the API servers sign service-account tokens with.
    pub fn service_account_key(&self) -> PathBuf {
        self.dir.join("sa.key")
    }

    /// `kubectl ARGS` as the admin on the first server (the kubectl that
    /// `scripts/lib/ensure-kube.sh` built, `LEADERD_KUBECTL`): whether it
    /// succeeded, and its stdout and stderr.
    pub fn kubectl(&self, args: &[&str]) -> (bool, String) {
        let config = self.kubeconfig(ADMIN, 0);
        let out = Command::new(binary("LEADERD_KUBECTL"))
            .arg("--kubeconfig")
            .arg(&config)
            .args(args)
            .env_clear()
            .env("HOME", &self.dir)
            .stdin(Stdio::null())
            .output()
            .expect("kubectl runs");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    /// A kubeconfig for `user` on server `i` (its token, the test CA).
    pub fn kubeconfig(&self, user: &str, i: usize) -> PathBuf {
        self.kubeconfig_with(user, &token(user), i)
    }

    /// A kubeconfig for `user` with the bearer token `token`.
    pub fn kubeconfig_with(&self, user: &str, token: &str, i: usize) -> PathBuf {
        let path = self.dir.join(format!(
            "kubeconfig-{user}-{i}-{}",
            super::os::below(1 << 30)
        ));
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: https://127.0.0.1:{port}\n    certificate-authority: {ca}\nusers:\n- name: {user}\n  user:\n    token: {token}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: {user}\n    namespace: {NAMESPACE}\ncurrent-context: test\n",
            port = self.servers[i].port,
            ca = path_str(&self.pki.ca()),
            user = user,
            token = token,
        );
        std::fs::write(&path, text).expect("write a kubeconfig");
        path
    }

    /// `curl` to server `i` as `user`: the HTTP status and the body.
    pub fn raw_on(
        &self,
        i: usize,
        user: &str,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> (u16, String) {
        let url = format!("https://127.0.0.1:{}{path}", self.servers[i].port);
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "--max-time", "5", "-X", method])
            .args(["--cacert", path_str(&self.pki.ca())])
            .args(["-H", &format!("Authorization: Bearer {}", token(user))])
            .args(["-w", "\n%{http_code}"]);
        if let Some(body) = body {
            let kind = if method == "PATCH" {
                "application/merge-patch+json"
            } else {
                "application/json"
            };
            cmd.args(["-H", &format!("Content-Type: {kind}")])
                .args(["--data-binary", &body.to_string()]);
        }
        let Ok(out) = cmd.arg(url).stderr(Stdio::null()).output() else {
            return (0, String::new());
        };
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
        (code.trim().parse().unwrap_or(0), body.to_string())
    }

    /// As the admin, on the first running server, until it answers 2xx.
    pub fn ok(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        eventually(Duration::from_secs(30), &format!("{method} {path}"), || {
            let (code, text) = self.raw_on(0, ADMIN, method, path, body);
            (200..300)
                .contains(&code)
                .then(|| serde_json::from_str(&text).unwrap_or(Value::Null))
        })
    }

    fn lease_path(name: &str) -> String {
        format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{name}")
    }

    /// The Lease `name`, or `None` when absent (or the server is down).
    pub fn lease(&self, name: &str) -> Option<Value> {
        let (code, text) = self.raw_on(0, ADMIN, "GET", &Self::lease_path(name), None);
        (code == 200).then(|| serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// `kubectl delete lease NAME`.
    pub fn delete_lease(&self, name: &str) {
        let (code, _) = self.raw_on(0, ADMIN, "DELETE", &Self::lease_path(name), None);
        assert!(matches!(code, 200 | 404), "DELETE lease {name}: {code}");
    }

    /// A merge patch of the Lease `name`, as `kubectl patch` sends.
    pub fn patch_lease(&self, name: &str, patch: &Value) {
        self.ok("PATCH", &Self::lease_path(name), Some(patch));
    }

    /// A write to the Lease `name` from outside, as an operator, a restore
    /// or a client-go peer makes it (issue #46), in one request: `false`
    /// when the Lease is absent or changed under it.
    pub fn outside(&self, name: &str, write: &Outside) -> bool {
        let path = Self::lease_path(name);
        let (method, body) = match write {
            Outside::Clear => ("PATCH", json!({ "spec": { "holderIdentity": null } })),
            Outside::Repoint(id) => ("PATCH", json!({ "spec": { "holderIdentity": id } })),
            Outside::Shorten => ("PATCH", json!({ "spec": { "leaseDurationSeconds": 1 } })),
            Outside::Restore(old) => {
                // Its spec and annotations over whatever is there now.
                let Some(now) = self.lease(name) else {
                    return false;
                };
                let mut old = old.clone();
                old["metadata"]["resourceVersion"] = now["metadata"]["resourceVersion"].clone();
                ("PUT", old)
            }
        };
        let (code, _) = self.raw_on(0, ADMIN, method, &path, Some(&body));
        (200..300).contains(&code)
    }

    /// kill -9 of every API server and etcd member, data kept.
    pub fn crash(&mut self) {
        for s in &mut self.servers {
            s.process.kill();
        }
        for m in &mut self.etcd.members {
            m.kill();
        }
    }

    /// Starts what [`Kube::crash`] killed, on the same ports and data.
    pub fn recover(&mut self) {
        for m in &mut self.etcd.members {
            m.restart();
        }
        self.recover_servers();
    }

    /// Starts the API servers killed, on the same ports.
    pub fn recover_servers(&mut self) {
        for s in self.servers.iter_mut().filter(|s| !s.process.is_running()) {
            s.launch(&self.pki);
        }
        for i in 0..self.servers.len() {
            self.wait_ready(i);
        }
    }
}

impl Drop for Kube {
    fn drop(&mut self) {
        for s in &mut self.servers {
            s.process.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl ApiServer {
    fn launch(&mut self, pki: &Pki) {
        let cert = pki.dir.join("apiserver.pem");
        let key = pki.dir.join("apiserver.key");
        let sa = self.dir.join("sa.key");
        let log = std::fs::File::create(self.dir.join(format!("apiserver-{}.log", self.port)))
            .expect("a log file");
        std::fs::create_dir_all(self.process.dir()).expect("a directory");
        let child = Command::new(binary("LEADERD_KUBE_APISERVER"))
            .args(["--etcd-servers", &self.etcd_urls])
            .args(["--bind-address", "127.0.0.1"])
            .args(["--advertise-address", "127.0.0.1"])
            .args(["--secure-port", &self.port.to_string()])
            .args(["--tls-cert-file", path_str(&cert)])
            .args(["--tls-private-key-file", path_str(&key)])
            .args(["--cert-dir", path_str(self.process.dir())])
            .args(["--service-account-issuer", "https://kubernetes.default.svc"])
            .args([
                "--service-account-key-file",
                path_str(&self.dir.join("sa.pub")),
            ])
            .args(["--service-account-signing-key-file", path_str(&sa)])
            .args(["--token-auth-file", path_str(&self.dir.join("tokens.csv"))])
            .args(["--authorization-mode", "RBAC"])
            .args(["--service-cluster-ip-range", "10.0.0.0/24"])
            .args(["--disable-admission-plugins", "ServiceAccount"])
            .args(["--enable-priority-and-fairness=false"])
            .args(["--v", "0"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("kube-apiserver starts");
        self.process.started(child);
    }

    pub fn pause(&self) {
        self.process.pause();
    }

    pub fn resume(&self) {
        self.process.resume();
    }

    pub fn kill(&mut self) {
        self.process.kill();
    }
}
