//! `leaderd fence install` and `leaderd fence check`, and the fence's lines
//! in `leaderd check`: what [`crate::fence`] found, printed, and mapped to
//! exit codes.

use super::Failure;
use crate::config::{Config, ConfigError};
use crate::fence::{FenceConfig, Found, Guard};
use std::process::ExitCode;

/// No resource named: what to give.
const NO_RESOURCE: &str = "no fenced resource is configured: give --fence-postgres URL or --fence-redis URL (or LEADERD_FENCE_POSTGRES_URL / LEADERD_FENCE_REDIS_URL, fence.postgres_url / fence.redis_url)";

/// `leaderd fence install GUARD` without `--apply`: the text, no I/O.
pub fn print_guard(guard: Guard) -> ExitCode {
    print!("{}", guard.text());
    ExitCode::SUCCESS
}

/// `leaderd fence install [GUARD] [--apply]` with the configuration loaded:
/// without `--apply`, prints the guards of the configured resources' kinds;
/// with it, installs into each configured resource (only GUARD's, if given).
pub async fn install(
    config: Config,
    guard: Option<Guard>,
    apply: bool,
) -> Result<ExitCode, Failure> {
    let fence = FenceConfig::of(&config).ok_or_else(|| {
        let what = if apply {
            NO_RESOURCE.to_string()
        } else {
            format!("say what to print (postgres, redis or redis-eval), or {NO_RESOURCE} and add --apply")
        };
        ConfigError(what)
    })?;
    if !apply {
        let guards = [
            fence.postgres.as_ref().map(|_| Guard::Postgres),
            fence.redis.as_ref().map(|_| Guard::Redis),
        ];
        for guard in guards.into_iter().flatten() {
            print!("{}", guard.text());
        }
        eprintln_quiet(
            "leaderd: printed, not installed: add --apply to install the guards into the configured resources",
        );
        return Ok(ExitCode::SUCCESS);
    }
    let reports = fence.install(guard).await;
    if reports.is_empty() {
        return Err(Failure::Config(ConfigError(format!(
            "no {} resource is configured to install into; {NO_RESOURCE}",
            guard.map_or("", |g| match g {
                Guard::Postgres => "PostgreSQL",
                Guard::Redis | Guard::RedisEval => "Redis",
            })
        ))));
    }
    let mut failed = None;
    for report in reports {
        match report.outcome {
            Ok(done) => println!("{}: {done}", report.resource),
            Err(e) => {
                // The error names the resource itself.
                eprintln_quiet(&format!("leaderd: {e}"));
                failed.get_or_insert(Failure::Backend(e));
            }
        }
    }
    match failed {
        // Each error is printed above; the exit code is the first one's.
        Some(first) => Ok(first.exit_code()),
        None => Ok(ExitCode::SUCCESS),
    }
}

/// `leaderd fence check`: exit 0 when every resource is fenced, 3 when one
/// is not, 1 when one cannot be reached (2 for a refused configuration).
pub async fn check(config: Config) -> Result<ExitCode, Failure> {
    let fence = FenceConfig::of(&config).ok_or_else(|| ConfigError(NO_RESOURCE.into()))?;
    let (lines, code) = look(fence).await;
    for (ok, line) in lines {
        if ok {
            println!("{line}");
        } else {
            eprintln_quiet(&format!("leaderd: {line}"));
        }
    }
    Ok(code)
}

/// `leaderd check`'s lines for the fence, when one is configured: an error
/// for a resource not fenced or unreachable, since `run` would fail there.
pub async fn check_lines(config: &Config) -> Result<Vec<String>, Failure> {
    let Some(fence) = FenceConfig::of(config) else {
        return Ok(Vec::new());
    };
    let mut lines = Vec::new();
    for (resource, found) in fence.inspect().await {
        match found.map_err(Failure::Backend)? {
            Found::Missing { what } => {
                return Err(Failure::Config(ConfigError(format!(
                    "{resource}: not fenced: {what}; `leaderd fence install --apply` (with the same options) installs its guard"
                ))));
            }
            found => lines.push(format!("# ok: {}", describe(&resource, &fence.key, &found))),
        }
    }
    Ok(lines)
}

/// Each resource's line (true: fenced), and the exit code: 2 if one refused
/// leaderd's credentials or TLS (as `check` does), else 1 if one could not
/// be reached, else 3 if one is not fenced, else 0.
async fn look(fence: &FenceConfig) -> (Vec<(bool, String)>, ExitCode) {
    let mut lines = Vec::new();
    let (mut refused, mut unreachable, mut missing) = (false, false, false);
    for (resource, found) in fence.inspect().await {
        match found {
            Ok(found) => {
                let fenced = !matches!(found, Found::Missing { .. });
                missing |= !fenced;
                lines.push((fenced, describe(&resource, &fence.key, &found)));
            }
            Err(e) => {
                refused |= e.is_misconfiguration();
                unreachable = true;
                // The error names the resource itself.
                lines.push((false, e.to_string()));
            }
        }
    }
    let code = match (refused, unreachable, missing) {
        (true, _, _) => 2,
        (false, true, _) => 1,
        (false, false, true) => 3,
        (false, false, false) => 0,
    };
    (lines, ExitCode::from(code))
}

fn describe(resource: &str, key: &str, found: &Found) -> String {
    let token = |token: u64| match token {
        0 => format!("fence {key}: no token yet"),
        t => format!("fence {key}: token {t}"),
    };
    match found {
        Found::Fenced { token: t, what } => format!("{resource}: fenced ({what}); {}", token(*t)),
        Found::Differs { token: t, what } => format!(
            "{resource}: fenced, but {what}; `leaderd fence install --apply` replaces the guard; {}",
            token(*t)
        ),
        Found::Missing { what } => format!(
            "{resource}: not fenced: {what}; `leaderd fence install --apply` (with the same options) installs its guard"
        ),
    }
}

/// Not `eprintln!`, which panics when stderr is closed.
fn eprintln_quiet(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}
