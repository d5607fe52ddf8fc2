//! Priorities as a feature: its two rows (`--priority`,
//! `--handover-delay`), declared once, their resolution, and what they
//! resolve to ([`Ranking`]). The registry carries the priority; the runner's
//! succession acts on it.

use super::Priority;
use crate::config::options::{ELECTION, Spec, spec};
use crate::config::{
    Config, ConfigError, Feature, Resolving, Section, Settings, or_default, positive,
    show_duration as show,
};
use std::sync::Arc;
use std::time::Duration;

pub const PRIORITY: Spec = spec("priority", "--priority", "LEADERD_PRIORITY", "priority")
    // `N…`: the file takes a bare integer too.
    .value("N|VERSION")
    .under(ELECTION)
    .help("This candidate's priority, an integer or a dotted version (1.14.2): the highest healthy candidate leads, and a leader hands over to a higher one it has seen for --handover-delay")
    .default("0");
pub const HANDOVER_DELAY: Spec = spec(
    "handover_delay",
    "--handover-delay",
    "LEADERD_HANDOVER_DELAY",
    "handover_delay",
)
.value("DUR")
.under(ELECTION)
.help("How long a leader sees a registered, healthy candidate of higher priority before it hands over to it")
.default("10s, at least the renew interval");

/// This candidate's rank among the others.
#[derive(Debug, Clone, Default)]
pub struct Ranking {
    pub priority: Priority,
    /// How long a leader sees a higher candidate before handing over.
    pub handover_delay: Duration,
}

impl Ranking {
    /// The configured ranking (the defaults when a `Config` was built
    /// without it, as unit tests do).
    pub fn of(config: &Config) -> Ranking {
        config
            .features
            .get::<Ranking>()
            .cloned()
            .unwrap_or_default()
    }
}

pub static FEATURE: Feature = Feature {
    name: "priorities",
    section: Section::Election,
    options: &[&PRIORITY, &HANDOVER_DELAY],
    resolve,
};

fn resolve(x: &mut Resolving<'_>) -> Result<Option<Arc<dyn Settings>>, ConfigError> {
    let priority = x.r.scalar(&PRIORITY, Priority::parse)?;
    let priority = or_default(priority, Priority::default(), "");
    let shown = format!("{:?}", priority.value.to_string());
    x.note("priority", shown, &priority.origin);
    let renew_interval = x.renew_interval;
    let delay =
        x.r.scalar(&HANDOVER_DELAY, positive(crate::config::parse_duration))?;
    // The default follows a long renew interval (a TTL over 30 s).
    let delay = or_default(
        delay,
        Duration::from_secs(10).max(renew_interval.value),
        "10s, at least the renew interval",
    );
    x.note(
        "handover_delay",
        format!("{:?}", show(delay.value)),
        &delay.origin,
    );
    if delay.value < renew_interval.value {
        return Err(ConfigError(format!(
            "handover_delay = {} ({}) is shorter than lease.renew_interval = {} ({}): candidates read the registry every renew interval, and all of them must have seen the higher candidate before the leader hands over to it; give at least the renew interval",
            show(delay.value),
            delay.origin,
            show(renew_interval.value),
            renew_interval.origin
        )));
    }
    Ok(Some(Arc::new(Ranking {
        priority: priority.value,
        handover_delay: delay.value,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::Case;

    #[test]
    fn priority_and_handover_delay_from_flag_env_and_file() {
        let c = Case::new().build().unwrap();
        assert_eq!(Ranking::of(&c).priority, Priority::default());
        assert_eq!(Ranking::of(&c).handover_delay, Duration::from_secs(10));
        let c = Case::new()
            .env("LEADERD_PRIORITY", "1.14.2")
            .env("LEADERD_HANDOVER_DELAY", "5s")
            .build()
            .unwrap();
        assert_eq!(Ranking::of(&c).priority, Priority::parse("1.14.2").unwrap());
        assert_eq!(Ranking::of(&c).handover_delay, Duration::from_secs(5));
        let c = Case::new().file("priority = 7\n").build().unwrap();
        assert_eq!(Ranking::of(&c).priority.to_string(), "7");
        let err = Case::new().env("LEADERD_PRIORITY", "1.14.2-rc1").err();
        assert!(
            err.starts_with("LEADERD_PRIORITY: `1.14.2-rc1` is not a priority"),
            "{err}"
        );
        // A long TTL takes the default along; given shorter, it is an error.
        let c = Case::new().env("LEADERD_TTL", "90s").build().unwrap();
        assert_eq!(Ranking::of(&c).handover_delay, Duration::from_secs(30));
        let err = Case::new().env("LEADERD_HANDOVER_DELAY", "1s").err();
        assert!(
            err.contains("is shorter than lease.renew_interval"),
            "{err}"
        );
    }
}
