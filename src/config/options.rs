//! Every option, declared once: its flag, environment variable, TOML key,
//! default (as documented) and help. The common options are rows here; each
//! backend declares its own rows in its folder under `lease/` and hands them
//! over through its [`super::Declared`](super::Declared), each feature in its
//! module through its [`super::Feature`](super::Feature). The command line (`cli`), the
//! config file's schema (`file`), resolution and `check`'s printout all
//! read these rows; tests check the manual's option table and the example
//! config against them. Adding an option is one row plus its parsing and
//! validation where it is resolved.

pub use super::commas::Commas;

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
    /// How a list option's values are separated by commas (the same rule
    /// for the flag, the env var, the TOML array and a URL file).
    pub commas: Commas,
    /// The values completions offer (the configuration still checks them).
    pub choices: &'static [&'static str],
    /// A switch: `--flag` alone means `true` (`--flag=false` is allowed),
    /// and the TOML key takes a boolean.
    pub switch: bool,
    /// The value is a credential or may carry one (a password, a URL with
    /// a password in it): its environment variable is taken out of the
    /// child's environment, and `check` never prints it. Files named by
    /// `*-file` options are not secret rows: their path is no secret, and
    /// who may read them is the operator's business.
    pub secret: bool,
}

/// A row with a flag, an environment variable and a TOML key (an empty
/// name is filled in and taken away with `no_flag`, `no_env`, `no_key`).
pub const fn spec(
    id: &'static str,
    flag: &'static str,
    env: &'static str,
    key: &'static str,
) -> Spec {
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
        commas: Commas::Separate,
        choices: &[],
        switch: false,
        secret: false,
    }
}

impl Spec {
    /// The values one given text holds, by this option's comma rule.
    pub fn split(&self, text: &str, from_env: bool) -> Result<Vec<String>, String> {
        self.commas.split(text, (self.flag, self.key), from_env)
    }

    pub const fn value(mut self, name: &'static str) -> Self {
        self.value_name = name;
        self
    }
    pub const fn under(mut self, heading: &'static str) -> Self {
        self.heading = heading;
        self
    }
    pub const fn help(mut self, help: &'static str) -> Self {
        self.help = help;
        self
    }
    pub const fn default(mut self, default: &'static str) -> Self {
        self.default = Some(default);
        self
    }
    pub const fn choices(mut self, choices: &'static [&'static str]) -> Self {
        self.choices = choices;
        self
    }
    pub const fn switch(mut self) -> Self {
        self.switch = true;
        self
    }
    pub const fn secret(mut self) -> Self {
        self.secret = true;
        self
    }
    pub const fn list(mut self) -> Self {
        self.list = true;
        self
    }
    pub const fn commas(mut self, commas: Commas) -> Self {
        self.commas = commas;
        self
    }
    pub const fn no_flag(mut self) -> Self {
        self.flag = None;
        self
    }
    pub const fn no_key(mut self) -> Self {
        self.key = None;
        self
    }
    pub const fn no_env(mut self) -> Self {
        self.env = None;
        self
    }

    /// The help line `--help` shows: the text, then where else it is read
    /// from and its default.
    pub fn help_line(&self) -> String {
        let mut line = self.help.to_string();
        if let Some(env) = self.env {
            let how = match (self.list, self.commas) {
                (false, _) | (true, Commas::Kept) => "",
                (true, Commas::Separate) => ", comma-separated",
                (true, Commas::BeforeScheme) => ", comma-separated URLs",
            };
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

/// The environment variables of every secret row among `all`: what the
/// child's environment loses, whichever backend or feature declared them.
pub fn secret_envs(all: &[&'static Spec]) -> Vec<&'static str> {
    all.iter()
        .filter(|s| s.secret)
        .filter_map(|s| s.env)
        .collect()
}

pub const ELECTION: &str = "Election";
/// The heading of every backend's options.
pub const BACKEND: &str = "Backend";
pub const TIMING: &str = "Timing";
pub const WORK: &str = "Work";

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
pub const REGISTRY_HEARTBEAT: Spec = spec(
    "registry_heartbeat",
    "--registry-heartbeat",
    "LEADERD_REGISTRY_HEARTBEAT",
    "lease.registry_heartbeat",
)
.value("DUR")
.under(TIMING)
.help("How often a candidate rewrites its unchanged candidates-registry record; a record lapses two heartbeats after its last write")
.default("120s");
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
    .list()
    .commas(Commas::Kept);
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
/// The common options before the backends' (in `--help`, the manual and
/// `check`).
pub const HEAD: &[&Spec] = &[&CONFIG, &KEY, &ID];

/// The common options after the backends' (the features of the work's
/// section follow them).
pub const TAIL: &[&Spec] = &[
    &TTL,
    &RENEW_INTERVAL,
    &RENEW_DEADLINE,
    &RETRY_INTERVAL,
    &REGISTRY_HEARTBEAT,
    &HTTP,
    &STOP_SIGNAL,
    &STOP_TIMEOUT,
    &ON_CHILD_EXIT,
    &RESTART_LIMIT,
    &WAIT,
    &CHILD_COMMAND,
];

/// The common options last of all.
pub const END: &[&Spec] = &[&LOG_FORMAT, &LOG_LEVEL];

/// The option of `all` with TOML key `key`.
pub fn by_key(all: &[&'static Spec], key: &str) -> Option<&'static Spec> {
    all.iter().copied().find(|s| s.key == Some(key))
}
