//! The `.held` link: a second name for the file the current holder locked.
//!
//! A lock file deleted from outside (an operator "removing a stale lock", a
//! cleaner) leaves its holder working on the unlinked file, its lock intact
//! but invisible at the path: the next candidate creates a new file there
//! and locks it at once. So each holder, once it has locked the file at the
//! path, links that file at `PATH.held` too. A candidate that locked the file
//! at the path looks there before it takes the lease: another file, still
//! locked, is a holder working on a deleted file, and the lease is free the
//! moment that holder lets go (it learns of the deletion within its watch
//! interval). Deleting both names leaves only what each candidate remembers
//! (see the module above).
//!
//! Linking is two steps (remove, link) and is checked afterwards: the path
//! must still name the file we locked, so two candidates racing with a
//! deletion cannot both believe they point `.held` at the current file.

use super::Holder;
use crate::private;
use std::fs::{File, TryLockError};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// `PATH.held` for the lock file `PATH`.
pub(super) fn path(lock: &Path) -> PathBuf {
    let mut name = lock.as_os_str().to_owned();
    name.push(".held");
    PathBuf::from(name)
}

/// What `.held` names, seen by a candidate that locked the file `ours`.
#[derive(Debug)]
pub(super) enum Other {
    /// Nothing, or the file we locked.
    None,
    /// Another file, whose holder still works on it.
    Locked { file: (u64, u64), holder: Holder },
    /// Another file, nobody's any more: its holder let go or died.
    Unlocked { file: (u64, u64) },
}

/// Looks at `.held` beside `lock`. Errors name `.held` and say how to fix
/// it (a symlink or another user's file planted there is refused, as the
/// lock file itself would be).
pub(super) fn other(lock: &Path, ours: (u64, u64)) -> Result<Other, (PathBuf, String)> {
    let held = path(lock);
    let fail = |e: String| (held.clone(), e);
    let Some(mut file) = private::open_existing(&held).map_err(fail)? else {
        return Ok(Other::None);
    };
    let meta = file.metadata().map_err(|e| fail(e.to_string()))?;
    let file_id = (meta.dev(), meta.ino());
    if file_id == ours {
        return Ok(Other::None);
    }
    match file.try_lock() {
        Ok(()) => Ok(Other::Unlocked { file: file_id }),
        Err(TryLockError::WouldBlock) => Ok(Other::Locked {
            file: file_id,
            holder: super::FileLease::holder_in(&mut file),
        }),
        Err(TryLockError::Error(e)) => Err(fail(e.to_string())),
    }
}

/// Points `.held` at the file at `lock`, which we locked as `ours`.
/// `Ok(false)` when the path no longer names that file afterwards (deleted
/// or replaced meanwhile): the lease is not ours to take.
pub(super) fn point_at(lock: &Path, ours: &File) -> Result<bool, (PathBuf, String)> {
    let held = path(lock);
    let fail = |e: std::io::Error| (held.clone(), e.to_string());
    let meta = ours.metadata().map_err(fail)?;
    let id = (meta.dev(), meta.ino());
    match std::fs::remove_file(&held) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(fail(e)),
    }
    match std::fs::hard_link(lock, &held) {
        Ok(()) => {}
        // The path is gone (deleted since we locked it), or another
        // candidate linked its file in the meantime: checked below.
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::AlreadyExists
            ) => {}
        Err(e) => return Err(fail(e)),
    }
    Ok(super::identity(lock) == Some(id) && super::identity(&held) == Some(id))
}
