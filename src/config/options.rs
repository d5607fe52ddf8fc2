//! Every option, declared once: its flag, environment variable, TOML key,
//! default (as documented) and help. The command line ([`crate::cli`]), the
//! config file's schema (`file`), resolution and `check`'s printout
//! (`resolve`) all read these rows; tests check the manual's option table
//! and the example config against them. Adding an option is one row here
//! plus its parsing and validation where it is resolved.

/// One option's names and documentation.
#[derive(Debug, PartialEq, Eq)]
pub struct Spec {
    /// The clap id (also how [`crate::cli::ConfigArgs`] stores its values).
    pub id: &'static str,
    /// `--flag`; `None` for options given only by env var or file.
    pub flag: Option<&'static str>,
    pub short: Option<char>,
    pub env: Option<&'static str>,
    /// Dotted TOML key; `None` when the option cannot be set in the file.
    pub key: Option<&'static str>,
    pub value_name: &'static str,
    pub heading: &'static str,
    pub help: &'static str,
    /// The default as documented (`None`: no default).
    pub default: Option<&'static str>,
    /// Repeatable flag, comma-separated env var, TOML array.
    pub list: bool,
    /// The values completions offer (the configuration still checks them).
    pub choices: &'static [&'static str],
    /// A switch: `--flag` alone means `true` (`--flag=false` is allowed),
    /// and the TOML key takes a boolean.
    pub switch: bool,
}

const fn spec(id: &'static str, flag: &'static str, env: &'static str, key: &'static str) -> Spec {
    Spec {
        id,
        flag: Some(flag),
        short: None,
        env: Some(env),
        key: Some(key),
        value_name: "VALUE",
        heading: "",
        help: "",
        default: None,
        list: false,
        choices: &[],
        switch: false,
    }
}

impl Spec {
    const fn value(mut self, name: &'static str) -> Self {
        self.value_name = name;
        self
    }
    const fn under(mut self, heading: &'static str) -> Self {
        self.heading = heading;
        self
    }
    const fn help(mut self, help: &'static str) -> Self {
        self.help = help;
        self
    }
    const fn default(mut self, default: &'static str) -> Self {
        self.default = Some(default);
        self
    }
    const fn choices(mut self, choices: &'static [&'static str]) -> Self {
        self.choices = choices;
        self
    }
    const fn switch(mut self) -> Self {
        self.switch = true;
        self
    }
    const fn list(mut self) -> Self {
        self.list = true;
        self
    }
    const fn no_flag(mut self) -> Self {
        self.flag = None;
        self
    }
    const fn no_key(mut self) -> Self {
        self.key = None;
        self
    }
    const fn no_env(mut self) -> Self {
        self.env = None;
        self
    }

    /// The help line `--help` shows: the text, then where else it is read
    /// from and its default.
    pub fn help_line(&self) -> String {
        let mut line = self.help.to_string();
        if let Some(env) = self.env {
            let how = if self.list { ", comma-separated" } else { "" };
            line.push_str(&format!(" [env: {env}{how}]"));
        }
        if let Some(key) = self.key {
            line.push_str(&format!(" [TOML: {key}]"));
        }
        if let Some(default) = self.default {
            line.push_str(&format!(" [default: {default}]"));
        }
        line
    }
}

const ELECTION: &str = "Election";
const BACKEND: &str = "Backend";
const TIMING: &str = "Timing";
const WORK: &str = "Work";

pub const CONFIG: Spec = Spec {
    short: Some('c'),
    ..spec("config", "--config", "LEADERD_CONFIG", "")
        .no_key()
        .value("FILE")
        .under(ELECTION)
        .help("TOML configuration file")
};
pub const KEY: Spec = spec("key", "--key", "LEADERD_KEY", "key")
    .value("NAME")
    .under(ELECTION)
    .help("Election name: candidates with the same key contend for the same lease")
    .default("leaderd");
pub const ID: Spec = spec("id", "--id", "LEADERD_ID", "id")
    .value("ID")
    .under(ELECTION)
    .help("This candidate's id, shown to others as the holder")
    .default("$POD_NAME, else the host name");
pub const REDIS: Spec = spec("redis", "--redis", "LEADERD_REDIS_URL", "redis.urls")
    .value("URL")
    .under(BACKEND)
    .help("Redis URL, redis://[user:pass@]host:port/db or rediss:// for TLS; three or more independent masters for Redlock (or in a file: LEADERD_REDIS_URL_FILE, redis.url_file)")
    .list();
pub const REDIS_URL_FILE: Spec = spec(
    "redis_url_file",
    "",
    "LEADERD_REDIS_URL_FILE",
    "redis.url_file",
)
.no_flag()
.value("FILE")
.under(BACKEND)
.help("A file holding the Redis URL(s), one per line, read at start-up");
pub const REDIS_SENTINEL_PASSWORD_FILE: Spec = spec(
    "redis_sentinel_password_file",
    "--redis-sentinel-password-file",
    "LEADERD_REDIS_SENTINEL_PASSWORD_FILE",
    "redis.sentinel_password_file",
)
.value("FILE")
.under(BACKEND)
.help("Sentinel only, when the sentinels have credentials of their own: a file holding their password (the user: ?sentinel_user= in the URL)");
pub const REDIS_SENTINEL_PASSWORD: Spec = spec(
    "redis_sentinel_password",
    "",
    "LEADERD_REDIS_SENTINEL_PASSWORD",
    "",
)
.no_flag()
.no_key()
.value("PASSWORD")
.under(BACKEND)
.help("The sentinels' password itself (instead of the file)");
pub const POSTGRES: Spec = spec(
    "postgres",
    "--postgres",
    "LEADERD_POSTGRES_URL",
    "postgres.url",
)
.value("URL")
.under(BACKEND)
.help("PostgreSQL URL, postgres://user:pass@host[,host2][:port]/db?sslmode=…&target_session_attrs=read-write (?mode=advisory for session advisory locks; or in a file: LEADERD_POSTGRES_URL_FILE, postgres.url_file)");
pub const POSTGRES_URL_FILE: Spec = spec(
    "postgres_url_file",
    "",
    "LEADERD_POSTGRES_URL_FILE",
    "postgres.url_file",
)
.no_flag()
.value("FILE")
.under(BACKEND)
.help("A file holding the PostgreSQL URL, read at start-up");
pub const POSTGRES_TABLE: Spec = spec(
    "postgres_table",
    "--postgres-table",
    "LEADERD_POSTGRES_TABLE",
    "postgres.table",
)
.value("NAME")
.under(BACKEND)
.help("The lease table, [schema.]name (used as written, quoted)")
.default("leaderd_lease");
pub const POSTGRES_TIMEOUT: Spec = spec(
    "postgres_timeout",
    "--postgres-timeout",
    "LEADERD_POSTGRES_TIMEOUT",
    "postgres.timeout",
)
.value("DUR")
.under(BACKEND)
.help("Timeout of connecting and of every statement")
.default("500ms");
pub const POSTGRES_MODE: Spec = spec(
    "postgres_mode",
    "--postgres-mode",
    "LEADERD_POSTGRES_MODE",
    "postgres.mode",
)
.value("MODE")
.under(BACKEND)
.help("table: a lease row judged by the server's clock (works through transaction poolers); advisory: the row plus a session advisory lock held by a dedicated session (refused behind a transaction pooler); also ?mode= in the URL")
.choices(&["table", "advisory"])
.default("table");
pub const POSTGRES_CREATE_TABLE: Spec = spec(
    "postgres_create_table",
    "--postgres-create-table",
    "LEADERD_POSTGRES_CREATE_TABLE",
    "postgres.create_table",
)
.value("BOOL")
.under(BACKEND)
.help("Create the lease table at start-up when it is missing (needs CREATE on the schema); without it, a missing table is an error that prints the statement")
.switch()
.default("false");
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
.default("500ms");
pub const LOCK_FILE: Spec = spec("lock_file", "--lock-file", "LEADERD_LOCK_FILE", "lock_file")
    .value("PATH")
    .under(BACKEND)
    .help("Lock file for the single-host backend")
    .default("$XDG_RUNTIME_DIR/leaderd-KEY.lock, else $TMPDIR or /tmp, in leaderd-UID/ (0700)");
pub const REDIS_TLS_CA: Spec = spec(
    "redis_tls_ca",
    "--redis-tls-ca",
    "LEADERD_REDIS_TLS_CA",
    "redis.tls_ca_file",
)
.value("FILE")
.under(BACKEND)
.help("For rediss://: trust only this PEM CA bundle")
.default("the system's roots");
pub const REDIS_TLS_CERT: Spec = spec(
    "redis_tls_cert",
    "--redis-tls-cert",
    "LEADERD_REDIS_TLS_CERT",
    "redis.tls_cert_file",
)
.value("FILE")
.under(BACKEND)
.help("For rediss:// with mutual TLS: the client certificate (PEM), with --redis-tls-key");
pub const REDIS_TLS_KEY: Spec = spec(
    "redis_tls_key",
    "--redis-tls-key",
    "LEADERD_REDIS_TLS_KEY",
    "redis.tls_key_file",
)
.value("FILE")
.under(BACKEND)
.help("For rediss:// with mutual TLS: the client's private key (PEM)");
pub const REDIS_TIMEOUT: Spec = spec(
    "redis_timeout",
    "--redis-timeout",
    "LEADERD_REDIS_TIMEOUT",
    "redis.timeout",
)
.value("DUR")
.under(BACKEND)
.help("Timeout of every Redis command, TLS handshake included")
.default("500ms");
pub const REDIS_NODE_TIMEOUT: Spec = spec(
    "redis_node_timeout",
    "--redis-node-timeout",
    "LEADERD_REDIS_NODE_TIMEOUT",
    "redis.node_timeout",
)
.value("DUR")
.under(BACKEND)
.help("Redlock (3+ URLs): how long each node has to answer one lease operation, small against the TTL (at most ttl/10); connecting is bounded by --redis-timeout")
.default("ttl/100, at least 20ms");
pub const REDIS_WAIT_REPLICAS: Spec = spec(
    "redis_wait_replicas",
    "--redis-wait-replicas",
    "LEADERD_REDIS_WAIT_REPLICAS",
    "redis.wait_replicas",
)
.value("N|auto")
.under(BACKEND)
.help("After each acquire and renewal, WAIT until N replicas acknowledged the write (auto: 1 when the primary has a connected replica); fewer → the attempt fails")
.choices(&["0", "1", "2", "auto"])
.default("0 (Sentinel, Cluster: auto)");
pub const TTL: Spec = spec("ttl", "--ttl", "LEADERD_TTL", "lease.ttl")
    .value("DUR")
    .under(TIMING)
    .help("Lease time to live")
    .default("10s");
pub const RENEW_INTERVAL: Spec = spec(
    "renew_interval",
    "--renew-interval",
    "LEADERD_RENEW_INTERVAL",
    "lease.renew_interval",
)
.value("DUR")
.under(TIMING)
.help("How often the leader renews")
.default("ttl / 3");
pub const RENEW_DEADLINE: Spec = spec(
    "renew_deadline",
    "--renew-deadline",
    "LEADERD_RENEW_DEADLINE",
    "lease.renew_deadline",
)
.value("DUR")
.under(TIMING)
.help("Step down when no renewal succeeded for this long")
.default("ttl × 2/3");
pub const RETRY_INTERVAL: Spec = spec(
    "retry_interval",
    "--retry-interval",
    "LEADERD_RETRY_INTERVAL",
    "lease.retry_interval",
)
.value("DUR")
.under(TIMING)
.help("Wait after backend errors, jittered")
.default("2s");
pub const HTTP: Spec = spec("http", "--http", "LEADERD_HTTP", "http.listen")
    .value("ADDR")
    .under("HTTP")
    .help("HTTP listen address, or `off`")
    .default("127.0.0.1:4040");
pub const STOP_SIGNAL: Spec = spec(
    "stop_signal",
    "--stop-signal",
    "LEADERD_STOP_SIGNAL",
    "child.stop_signal",
)
.value("SIG")
.under(WORK)
.help("Signal sent to the child's process group to stop it")
.choices(&[
    "SIGTERM", "SIGINT", "SIGQUIT", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGKILL",
])
.default("SIGTERM");
pub const STOP_TIMEOUT: Spec = spec(
    "stop_timeout",
    "--stop-timeout",
    "LEADERD_STOP_TIMEOUT",
    "child.stop_timeout",
)
.value("DUR")
.under(WORK)
.help("Grace before SIGKILL when stopping the child")
.default("10s");
pub const ON_CHILD_EXIT: Spec = spec(
    "on_child_exit",
    "--on-child-exit",
    "LEADERD_ON_CHILD_EXIT",
    "child.on_exit",
)
.value("POLICY")
.under(WORK)
.help("What to do when the child exits: restart, release or exit")
.choices(&["restart", "release", "exit"])
.default("release");
pub const CHILD_COMMAND: Spec = spec("command", "", "", "child.command")
    .no_flag()
    .no_env()
    .value("COMMAND")
    .under(WORK)
    .help("The command to run while leader (on the command line: after `--`)")
    .list();
pub const RESTART_LIMIT: Spec = spec(
    "restart_limit",
    "--restart-limit",
    "LEADERD_RESTART_LIMIT",
    "child.restart_limit",
)
.value("N/DUR")
.under(WORK)
.help("With --on-child-exit restart: after N restarts within DUR, release the lease and hold off (a crash loop), or `off`")
.default("5/1m");
pub const WAIT: Spec = spec("wait", "--wait", "LEADERD_WAIT", "child.wait")
    .value("DUR")
    .under(WORK)
    .help("Run the command once: campaign for at most DUR (0: one try); not leader by then → exit 75 without running it; leader → run it, release, exit with its code");
pub const WEBHOOK: Spec = spec(
    "webhook",
    "--webhook",
    "LEADERD_WEBHOOK_URL",
    "webhook.urls",
)
.value("URL")
.under(WORK)
.help("Webhook to POST elected/demoted events to; repeatable")
.list();
pub const WEBHOOK_SECRET_FILE: Spec = spec(
    "webhook_secret_file",
    "--webhook-secret-file",
    "LEADERD_WEBHOOK_SECRET_FILE",
    "webhook.secret_file",
)
.value("FILE")
.under(WORK)
.help("File holding the webhook signing secret (or LEADERD_WEBHOOK_SECRET: the secret itself)");
pub const WEBHOOK_SECRET: Spec = spec("webhook_secret", "", "LEADERD_WEBHOOK_SECRET", "")
    .no_flag()
    .no_key()
    .value("SECRET")
    .under(WORK)
    .help("The webhook signing secret itself (base64 or whsec_…; only from the environment)");
pub const ADMIN_SOCKET: Spec = spec(
    "admin_socket",
    "--admin-socket",
    "LEADERD_ADMIN_SOCKET",
    "admin.socket",
)
.value("PATH")
.under("Admin")
.help("Unix socket for `leaderd step-down` (mode 0600; off unless set)");
pub const STEP_DOWN_HOLD: Spec = spec(
    "step_down_hold",
    "--step-down-hold",
    "LEADERD_STEP_DOWN_HOLD",
    "admin.step_down_hold",
)
.value("DUR")
.under("Admin")
.help("After a step-down or a crash loop, how long this candidate stays out of the election")
.default("30s");
pub const LOG_FORMAT: Spec = spec(
    "log_format",
    "--log-format",
    "LEADERD_LOG_FORMAT",
    "log.format",
)
.value("FORMAT")
.under("Logging")
.help("Log format: text or json")
.choices(&["text", "json"])
.default("text");
pub const LOG_LEVEL: Spec = spec("log_level", "--log-level", "RUST_LOG", "log.level")
    .value("LEVEL")
    .under("Logging")
    .help("Log level or tracing filter, e.g. info or leaderd=debug")
    .choices(&["error", "warn", "info", "debug", "trace", "off"])
    .default("info");

/// Every option, in the order of `--help`, `check` and the docs.
pub const ALL: [&Spec; 46] = [
    &CONFIG,
    &KEY,
    &ID,
    &REDIS,
    &REDIS_URL_FILE,
    &REDIS_SENTINEL_PASSWORD_FILE,
    &REDIS_SENTINEL_PASSWORD,
    &POSTGRES,
    &POSTGRES_URL_FILE,
    &POSTGRES_TABLE,
    &POSTGRES_TIMEOUT,
    &POSTGRES_MODE,
    &POSTGRES_CREATE_TABLE,
    &ETCD,
    &ETCD_PASSWORD_FILE,
    &ETCD_PASSWORD,
    &ETCD_TLS_CA,
    &ETCD_TLS_CERT,
    &ETCD_TLS_KEY,
    &ETCD_PREFIX,
    &ETCD_TIMEOUT,
    &LOCK_FILE,
    &REDIS_TLS_CA,
    &REDIS_TLS_CERT,
    &REDIS_TLS_KEY,
    &REDIS_TIMEOUT,
    &REDIS_NODE_TIMEOUT,
    &REDIS_WAIT_REPLICAS,
    &TTL,
    &RENEW_INTERVAL,
    &RENEW_DEADLINE,
    &RETRY_INTERVAL,
    &HTTP,
    &STOP_SIGNAL,
    &STOP_TIMEOUT,
    &ON_CHILD_EXIT,
    &RESTART_LIMIT,
    &WAIT,
    &CHILD_COMMAND,
    &WEBHOOK,
    &WEBHOOK_SECRET_FILE,
    &WEBHOOK_SECRET,
    &ADMIN_SOCKET,
    &STEP_DOWN_HOLD,
    &LOG_FORMAT,
    &LOG_LEVEL,
];

/// The option with TOML key `key`.
pub fn by_key(key: &str) -> Option<&'static Spec> {
    ALL.into_iter().find(|s| s.key == Some(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_well_formed() {
        for (i, a) in ALL.iter().enumerate() {
            for b in &ALL[i + 1..] {
                assert_ne!(a.id, b.id);
                assert!(a.flag.is_none() || a.flag != b.flag, "{}", a.id);
                assert!(a.env.is_none() || a.env != b.env, "{}", a.id);
                assert!(a.key.is_none() || a.key != b.key, "{}", a.id);
            }
            assert!(a.flag.is_none_or(|f| f.starts_with("--")), "{}", a.id);
            assert!(!a.help.is_empty() && !a.heading.is_empty(), "{}", a.id);
            assert!(
                a.flag.is_some() || a.env.is_some() || a.key.is_some(),
                "{}",
                a.id
            );
        }
    }
}
