//! What a configuration is made from — flags, environment, file, host name,
//! secret files — as plain values and lookups, so resolution is pure and
//! tested without touching the process.

use super::args::ConfigArgs;
use super::file::ConfigFile;
use std::ffi::OsString;
use std::path::Path;

/// Everything configuration is made from. The environment is a lookup so
/// tests can supply a map; `hostname` is the fallback id.
pub struct Sources<'a> {
    pub args: &'a ConfigArgs,
    pub command: &'a [String],
    pub file: Option<&'a ConfigFile>,
    pub env: &'a dyn Fn(&str) -> Option<OsString>,
    pub hostname: Option<String>,
    /// Reads a secret file named by an option (`*_FILE`): its text and its
    /// permission bits. A lookup, so tests need no files.
    pub read_secret: &'a dyn Fn(&Path) -> std::io::Result<(String, u32)>,
}

/// The warning for a secret file that group or others can read (as OpenSSH
/// warns about keys), naming where the file was configured; `None` when
/// its mode is tight.
pub fn loose_secret_file(origin: &dyn std::fmt::Display, path: &Path, mode: u32) -> Option<String> {
    (mode & 0o077 != 0).then(|| {
        format!(
            "{origin}: {} is readable by group or others (mode {:04o}); `chmod 600` it (in Kubernetes, give the Secret volume defaultMode: 0400)",
            path.display(),
            mode & 0o7777
        )
    })
}

/// The process's own secret-file reader for [`Sources::read_secret`].
pub fn read_secret_file(path: &Path) -> std::io::Result<(String, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)?.permissions().mode();
    if std::fs::metadata(path)?.len() > 64 * 1024 {
        return Err(std::io::Error::other(
            "larger than 64 KiB, which no secret is; check the path",
        ));
    }
    Ok((std::fs::read_to_string(path)?, mode))
}
