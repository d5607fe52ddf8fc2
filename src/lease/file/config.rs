//! The lock file's one option, `--lock-file`, and the default used when no
//! backend is configured: a file in a directory only this user can use.

use crate::config::options::{BACKEND, Spec, spec};
use crate::config::{Backend, ConfigError, Declared, Origin, Resolving, Value};
use std::path::PathBuf;

pub const LOCK_FILE: Spec = spec("lock_file", "--lock-file", "LEADERD_LOCK_FILE", "lock_file")
    .value("PATH")
    .under(BACKEND)
    .help("Lock file for the single-host backend")
    .default("$XDG_RUNTIME_DIR/leaderd-KEY.lock, else $TMPDIR or /tmp, in leaderd-UID/ (0700)");

/// The lock file as the configuration sees it: chosen by `--lock-file`,
/// and the fallback when no backend is configured.
pub const DECLARED: Declared = Declared {
    name: "a lock file",
    options: &[&LOCK_FILE],
    selectors: &[&LOCK_FILE],
    resolve,
    fallback: Some(fallback),
};

/// The lock file's settings.
#[derive(Debug, Clone)]
pub struct LockFileConfig {
    pub path: PathBuf,
    /// No backend was configured: this is the embedded default.
    pub implicit: bool,
}

fn resolve(x: &mut Resolving<'_>) -> Result<Backend, ConfigError> {
    let file =
        x.r.scalar(&LOCK_FILE, |p| {
            if p.trim().is_empty() {
                Err("is empty; give a file path".to_string())
            } else {
                Ok(PathBuf::from(p))
            }
        })?
        .expect("chosen by this option");
    Ok(settle(x, file, false))
}

/// No backend configured (and not in a pod, where the Kubernetes Lease is
/// the default): a lock file in the user's private directory.
fn fallback(x: &mut Resolving<'_>) -> Option<Result<Backend, ConfigError>> {
    let dir = crate::private::default_dir(
        x.r.env("XDG_RUNTIME_DIR").ok().flatten(),
        x.r.env("TMPDIR").ok().flatten(),
    );
    let path = dir.join(format!("leaderd-{}.lock", x.key.replace('/', "_")));
    let file = Value {
        value: path,
        origin: Origin::Default("no backend configured: lock file on this host"),
    };
    Some(Ok(settle(x, file, true)))
}

fn settle(x: &mut Resolving<'_>, file: Value<PathBuf>, implicit: bool) -> Backend {
    x.note(
        "lock_file",
        format!("{:?}", file.value.display().to_string()),
        &file.origin,
    );
    Backend::new(LockFileConfig {
        path: file.value,
        implicit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::Case;

    #[test]
    fn implicit_lock_file_lives_in_the_runtime_dir() {
        let c = Case::new()
            .env("XDG_RUNTIME_DIR", "/run/user/7")
            .args(|a| a.set(&crate::config::options::KEY, "jobs/a"))
            .build()
            .unwrap();
        let file = c.backend.get::<LockFileConfig>().expect("the lock file");
        assert!(file.implicit);
        assert_eq!(file.path, PathBuf::from("/run/user/7/leaderd-jobs_a.lock"));
    }
}
