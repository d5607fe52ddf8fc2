//! Local paths nobody else can reach: the lock file and the admin socket
//! decide who leads and who may make the leader step down, so another local
//! user must not be able to plant, replace or hold them. tmux's rules for
//! its socket directory, applied to both:
//! - the default lives in a directory only leaderd's user can write
//!   (`$XDG_RUNTIME_DIR`, else `leaderd-UID` in `$TMPDIR` or `/tmp`,
//!   created 0700 and checked for owner and mode every time);
//! - a path is opened without following symlinks and created 0600, and a
//!   file or directory owned by another user is refused, never written
//!   through;
//! - a directory others can write without the sticky bit is refused: anyone
//!   could rename our file away and put theirs in its place.

use std::fs::{DirBuilder, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The effective user id.
pub fn uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The directory for leaderd's default local files: `$XDG_RUNTIME_DIR`
/// (the service manager made it ours, 0700), else `leaderd-UID` in
/// `$TMPDIR` or `/tmp` (as tmux does).
pub fn default_dir(xdg_runtime_dir: Option<String>, tmpdir: Option<String>) -> PathBuf {
    match xdg_runtime_dir.filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(tmpdir.filter(|d| !d.is_empty()).unwrap_or("/tmp".into()))
            .join(format!("leaderd-{}", uid())),
    }
}

/// Whether `dir` is a per-user directory (`leaderd-UID`), which leaderd
/// creates and which must be ours alone.
pub fn is_per_user_default(dir: &Path) -> bool {
    dir.file_name()
        .is_some_and(|name| name.to_str() == Some(&format!("leaderd-{}", uid())))
}

/// Creates the per-user default directory (0700) if it is missing.
pub fn create_per_user_dir(dir: &Path) -> Result<(), String> {
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(format!(
            "cannot create the directory {}: {e}",
            dir.display()
        )),
    }
}

/// The directory holding `path` must be a real directory (not a symlink)
/// that another user cannot use to swap our file: owned by us or root, and
/// writable by others only with the sticky bit (as `/tmp` is).
pub fn check_dir(dir: &Path) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| {
        format!(
            "the directory {} is not usable: {e}; create it first",
            dir.display()
        )
    })?;
    if meta.file_type().is_symlink() {
        return Err(format!(
            "the directory {} is a symbolic link, which another user may have planted; give a path in a real directory",
            dir.display()
        ));
    }
    if !meta.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    let owner = meta.uid();
    if owner != uid() && owner != 0 {
        return Err(format!(
            "the directory {} belongs to another user (uid {owner}), who could replace the file in it; use a directory of your own (such as $XDG_RUNTIME_DIR)",
            dir.display()
        ));
    }
    let mode = meta.permissions().mode();
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(format!(
            "the directory {} can be written by other users and has no sticky bit, so anyone could replace the file in it; run chmod go-w (or chmod +t) on it, or use a directory of your own",
            dir.display()
        ));
    }
    Ok(())
}

/// The per-user default directory must be ours alone: owned by us, mode
/// 0700 (tmux's check of its socket directory).
pub fn check_per_user_dir(dir: &Path) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    if !meta.is_dir() {
        return check_dir(dir);
    }
    if meta.uid() != uid() {
        return Err(format!(
            "the directory {} belongs to uid {}, not to this user (uid {}): another user created it first; remove it, or set XDG_RUNTIME_DIR",
            dir.display(),
            meta.uid(),
            uid()
        ));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(format!(
            "the directory {} is open to other users (mode {:o}); run chmod 700 on it",
            dir.display(),
            meta.permissions().mode() & 0o7777
        ));
    }
    check_dir(dir)
}

/// Opens (creating 0600) a file read-write without following a symlink,
/// and refuses one that is not a regular file of ours.
pub fn open_file(path: &Path) -> Result<File, String> {
    open(path, true).map(|file| file.expect("created when missing"))
}

/// As [`open_file`], for a file that may be missing (`None`), which is not
/// created.
pub fn open_existing(path: &Path) -> Result<Option<File>, String> {
    open(path, false)
}

fn open(path: &Path, create: bool) -> Result<Option<File>, String> {
    let opened = OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        Err(e) if !create && e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err("it is a symbolic link, which leaderd never follows (another user may have planted it); remove it, or give another path".to_string());
        }
        Err(e) => {
            return Err(format!(
                "{e}; check that the directory exists and is writable"
            ));
        }
    };
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("it is not a regular file; give another path".into());
    }
    if meta.uid() != uid() {
        return Err(format!(
            "it belongs to another user (uid {}), who could hold or rewrite it; remove it, or give a path in a directory of your own",
            meta.uid()
        ));
    }
    Ok(Some(file))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("leaderd-private-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        DirBuilder::new().mode(0o700).create(&dir).unwrap();
        dir
    }

    #[test]
    fn a_symlink_is_never_followed() {
        let dir = scratch("link");
        let target = dir.join("target");
        std::fs::write(&target, "precious").unwrap();
        let link = dir.join("a.lock");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let err = open_file(&link).unwrap_err();
        assert!(err.contains("symbolic link"), "{err}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn files_are_created_0600_and_directories_checked() {
        let dir = scratch("mode");
        let path = dir.join("a.lock");
        open_file(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(check_dir(&dir).is_ok());
        assert!(check_per_user_dir(&dir).is_ok());
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = check_dir(&dir).unwrap_err();
        assert!(err.contains("sticky"), "{err}");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(check_dir(&dir).is_ok(), "sticky like /tmp");
        assert!(check_per_user_dir(&dir).unwrap_err().contains("chmod 700"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_default_is_the_runtime_dir_else_a_per_user_tmp_dir() {
        let run = Some("/run/user/7".to_string());
        assert_eq!(default_dir(run, None), Path::new("/run/user/7"));
        let fallback = default_dir(Some(String::new()), None);
        assert_eq!(fallback, PathBuf::from(format!("/tmp/leaderd-{}", uid())));
        assert!(is_per_user_default(&fallback));
        let tmp = default_dir(None, Some("/var/tmp".into()));
        assert_eq!(tmp, PathBuf::from(format!("/var/tmp/leaderd-{}", uid())));
    }
}
