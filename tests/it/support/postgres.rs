//! A real PostgreSQL server per test: `initdb` in a temporary directory and
//! `postgres -p PORT -k DIR` on a free loopback port (run as the `postgres`
//! user when the tests run as root, since the server refuses root). TCP
//! connections need the password (`scram-sha-256`); the fixture's own
//! `psql` uses the Unix socket in the data directory's parent.

use super::{eventually, free_port};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The superuser's password over TCP.
pub const PASSWORD: &str = "leaderd-test-pw";

pub struct Postgres {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
    /// Extra `-c name=value` settings, kept for restarts.
    settings: Vec<String>,
    /// Where a TLS server's certificate and key were copied.
    tls_dir: Option<PathBuf>,
}

/// A server program: on `PATH`, else the newest under /usr/lib/postgresql.
pub fn bin(name: &str) -> PathBuf {
    let on_path = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    if let Some(path) = on_path {
        return path;
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.flatten()
                .map(|e| e.path().join("bin").join(name))
                .collect()
        })
        .unwrap_or_default();
    versions.retain(|p| p.exists());
    versions.sort();
    versions
        .pop()
        .unwrap_or_else(|| panic!("{name} is not installed (scripts/test installs postgresql)"))
}

/// As whom the server runs: the `postgres` user when we are root.
fn server_user() -> Option<(u32, u32)> {
    // SAFETY: plain syscall.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let id = |flag: &str| -> u32 {
        let out = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .expect("id");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("a postgres user exists (the postgresql package creates it)")
    };
    Some((id("-u"), id("-g")))
}

fn as_server_user(cmd: &mut Command) -> &mut Command {
    if let Some((uid, gid)) = server_user() {
        cmd.uid(uid).gid(gid);
    }
    cmd
}

impl Postgres {
    pub fn start() -> Postgres {
        Postgres::start_with(&[])
    }

    /// With extra server settings (`name=value`).
    pub fn start_with(settings: &[&str]) -> Postgres {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("leaderd-test-pg-{port}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("postgres dir");
        let pwfile = dir.join("pw");
        std::fs::write(&pwfile, PASSWORD).expect("password file");
        if let Some((uid, gid)) = server_user() {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).expect("chown");
            std::os::unix::fs::chown(&pwfile, Some(uid), Some(gid)).expect("chown");
        }
        let out = as_server_user(&mut Command::new(bin("initdb")))
            .args(["-D", super::path_str(&dir.join("data"))])
            .args(["-U", "postgres", "-E", "UTF8", "--no-sync"])
            .args(["--auth-local=trust", "--auth-host=scram-sha-256"])
            .arg(format!("--pwfile={}", super::path_str(&pwfile)))
            .current_dir(&dir)
            .output()
            .expect("initdb runs");
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut pg = Postgres {
            port,
            dir,
            child: None,
            settings: settings.iter().map(|s| s.to_string()).collect(),
            tls_dir: None,
        };
        pg.launch();
        pg.sql(&leaderd::lease::postgres::create_table_statement("leaderd_lease").expect("valid"));
        pg
    }

    /// Speaking TLS too (`ssl=on`) with this certificate and key (copied
    /// where the server may read them, the key private to it).
    pub fn start_tls(cert: &std::path::Path, key: &std::path::Path) -> Postgres {
        let dir =
            std::env::temp_dir().join(format!("leaderd-test-pg-tls-{}", super::os::below(1 << 30)));
        std::fs::create_dir_all(&dir).expect("tls dir");
        let (cert_at, key_at) = (dir.join("server.crt"), dir.join("server.key"));
        std::fs::copy(cert, &cert_at).expect("copy the certificate");
        std::fs::copy(key, &key_at).expect("copy the key");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key_at, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        if let Some((uid, gid)) = server_user() {
            for f in [&cert_at, &key_at] {
                std::os::unix::fs::chown(f, Some(uid), Some(gid)).expect("chown");
            }
        }
        let mut pg = Postgres::start_with(&[
            "ssl=on",
            &format!("ssl_cert_file={}", super::path_str(&cert_at)),
            &format!("ssl_key_file={}", super::path_str(&key_at)),
        ]);
        pg.tls_dir = Some(dir);
        pg
    }

    /// A hot standby of `primary` (`pg_basebackup -R`), streaming from it.
    pub fn standby_of(primary: &Postgres) -> Postgres {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("leaderd-test-pg-{port}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("postgres dir");
        if let Some((uid, gid)) = server_user() {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).expect("chown");
        }
        let out = as_server_user(&mut Command::new(bin("pg_basebackup")))
            .args(["-D", super::path_str(&dir.join("data")), "-R"])
            .args(["-h", super::path_str(&primary.dir)])
            .args(["-p", &primary.port.to_string(), "-U", "postgres"])
            .current_dir(&dir)
            .output()
            .expect("pg_basebackup runs");
        assert!(
            out.status.success(),
            "pg_basebackup failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut pg = Postgres {
            port,
            dir,
            child: None,
            settings: vec!["hot_standby=on".into()],
            tls_dir: None,
        };
        pg.launch();
        pg
    }

    /// The directory of the server's Unix socket.
    pub fn socket_dir(&self) -> &std::path::Path {
        &self.dir
    }

    fn launch(&mut self) {
        let mut cmd = Command::new(bin("postgres"));
        as_server_user(&mut cmd)
            .args(["-D", super::path_str(&self.dir.join("data"))])
            .args(["-p", &self.port.to_string()])
            .args(["-k", super::path_str(&self.dir)])
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .args(["-c", "max_connections=200"]);
        for s in &self.settings {
            cmd.args(["-c", s]);
        }
        let child = cmd
            .current_dir(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("postgres starts");
        self.child = Some(child);
        eventually(
            Duration::from_secs(30),
            "postgres to accept connections",
            || self.try_sql("SELECT 1").filter(|o| o == "1").map(drop),
        );
    }

    /// `postgres://postgres:PASSWORD@127.0.0.1:PORT/postgres`, plus `query`.
    pub fn url(&self, query: &str) -> String {
        let q = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        format!(
            "postgres://postgres:{PASSWORD}@127.0.0.1:{}/postgres{q}",
            self.port
        )
    }

    /// A statement through `psql` on the Unix socket, as the superuser;
    /// `None` if it failed.
    pub fn try_sql(&self, sql: &str) -> Option<String> {
        let out = Command::new(bin("psql"))
            .args(["-h", super::path_str(&self.dir)])
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                "postgres",
            ])
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    pub fn sql(&self, sql: &str) -> String {
        self.try_sql(sql)
            .unwrap_or_else(|| panic!("psql failed on port {}: {sql}", self.port))
    }

    /// `pg_ctl stop -m immediate`: SIGQUIT to the postmaster, no checkpoint.
    pub fn stop_immediate(&mut self) {
        if let Some(mut child) = self.child.take() {
            super::os::kill(child.id(), libc::SIGQUIT);
            let _ = child.wait();
        }
    }

    /// Starts again on the same port and data (crash recovery runs).
    pub fn restart(&mut self) {
        self.stop_immediate();
        self.launch();
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.stop_immediate();
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some(dir) = &self.tls_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// PgBouncer in front of `pg`, on a free loopback port, in `pool_mode`
/// (`transaction` or `session`); clients are trusted, the server is
/// reached over its Unix socket.
pub struct PgBouncer {
    pub port: u16,
    dir: PathBuf,
    child: Child,
}

impl PgBouncer {
    pub fn start(pg: &Postgres, pool_mode: &str) -> PgBouncer {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("leaderd-test-pgbouncer-{port}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("pgbouncer dir");
        std::fs::write(dir.join("users.txt"), "\"postgres\" \"\"\n").expect("auth file");
        let ini = format!(
            "[databases]\npostgres = host={socket} port={pg_port} user=postgres dbname=postgres\n\
             [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
             auth_type = trust\nauth_file = {dir}/users.txt\npool_mode = {pool_mode}\n\
             default_pool_size = 4\nmax_client_conn = 200\n\
             ignore_startup_parameters = extra_float_digits,options\nlogfile = {dir}/log\n",
            socket = super::path_str(pg.socket_dir()),
            pg_port = pg.port,
            dir = super::path_str(&dir),
        );
        std::fs::write(dir.join("pgbouncer.ini"), ini).expect("pgbouncer.ini");
        if let Some((uid, gid)) = server_user() {
            for f in ["", "users.txt", "pgbouncer.ini"] {
                std::os::unix::fs::chown(dir.join(f), Some(uid), Some(gid)).expect("chown");
            }
        }
        let program = ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .unwrap_or_else(|| PathBuf::from("pgbouncer"));
        let child = as_server_user(&mut Command::new(program))
            .arg(dir.join("pgbouncer.ini"))
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pgbouncer is installed (scripts/test installs it)");
        eventually(Duration::from_secs(10), "pgbouncer to listen", || {
            std::net::TcpStream::connect(("127.0.0.1", port))
                .ok()
                .map(drop)
        });
        PgBouncer { port, dir, child }
    }

    /// The URL through the pooler (the password is not checked by it).
    pub fn url(&self, query: &str) -> String {
        let q = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        format!("postgres://postgres@127.0.0.1:{}/postgres{q}", self.port)
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
