//! The admin socket as a feature: its rows, declared once, their
//! resolution, and what they resolve to ([`AdminConfig`]).

use crate::config::options::{Spec, spec};
use crate::config::{
    Config, ConfigError, Feature, Origin, Resolving, Section, Settings, or_default, parse_duration,
    show_duration as show,
};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

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

#[derive(Debug, Clone)]
pub struct AdminConfig {
    /// The step-down socket; `None`: no admin endpoint.
    pub socket: Option<PathBuf>,
    /// How long a step-down (or a crash loop) keeps this candidate out.
    pub step_down_hold: Duration,
}

impl Default for AdminConfig {
    fn default() -> AdminConfig {
        AdminConfig {
            socket: None,
            step_down_hold: DEFAULT_HOLD,
        }
    }
}

const DEFAULT_HOLD: Duration = Duration::from_secs(30);

impl AdminConfig {
    /// The admin settings (the defaults when a `Config` was built without
    /// them, as unit tests do).
    pub fn of(config: &Config) -> AdminConfig {
        config
            .features
            .get::<AdminConfig>()
            .cloned()
            .unwrap_or_default()
    }
}

pub static FEATURE: Feature = Feature {
    name: "the admin socket",
    section: Section::Work,
    options: &[&ADMIN_SOCKET, &STEP_DOWN_HOLD],
    resolve,
};

fn resolve(x: &mut Resolving<'_>) -> Result<Option<Arc<dyn Settings>>, ConfigError> {
    let socket = x.r.scalar(&ADMIN_SOCKET, |p| {
        if p.trim().is_empty() {
            Err("the path is empty; give a socket path such as /run/leaderd/admin.sock".into())
        } else {
            Ok(PathBuf::from(p.trim()))
        }
    })?;
    match &socket {
        Some(s) => {
            let shown = format!("{:?}", s.value.display().to_string());
            x.note("admin.socket", shown, &s.origin)
        }
        None => x.note("admin.socket", "\"off\"".into(), &Origin::Default("off")),
    }
    let hold = x.r.scalar(&STEP_DOWN_HOLD, parse_duration)?;
    let hold = or_default(hold, DEFAULT_HOLD, "");
    let shown = format!("{:?}", show(hold.value));
    x.note("admin.step_down_hold", shown, &hold.origin);
    Ok(Some(Arc::new(AdminConfig {
        socket: socket.map(|s| s.value),
        step_down_hold: hold.value,
    })))
}
