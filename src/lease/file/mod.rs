//! The lock-file lease, the embedded default: an exclusive `flock` on a file
//! coordinates the processes of one host, and the kernel frees it the moment
//! the holder dies. The file's content names the holder and the fencing token
//! (`cat` it to see who leads); the lock, not the content, decides.
//!
//! Two things can take the lease away without a release, and both are
//! handled as the contract's vacancy rule says:
//! - the file deleted or replaced (a tmp cleaner, an operator "removing a
//!   stale lock"): the holder still holds its lock on the unlinked file,
//!   which `held` keeps visible as `PATH.held`, so candidates wait until
//!   it lets go. It learns at its next renewal, or within `POLL` (200 ms)
//!   from the watcher, which stats the path. With `.held` gone too, a
//!   waiter that saw the old file locked waits a TTL from when it first saw
//!   it gone, and keeps looking meanwhile (a newer term on a new file is
//!   the one it watches next);
//! - another local user planting the path: paths are opened without
//!   following symlinks, created 0600, and refused when another user owns
//!   them or could swap them ([`crate::private`]).

pub mod config;
mod held;
mod registry;

use super::contract::{Acquire, BackendEntry, Common, Error, Holder, LeaseBackend, Peek, Renew};
use super::registry::Record;
use super::vacancy::{Vacancies, Verdict};
use crate::config::Backend;
use crate::lease::contract::Wakeups;
use crate::lease::contract::open_as;
use crate::private;
use config::LockFileConfig;
use std::fs::{File, TryLockError};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How soon a refused candidate looks again. A lock file has no TTL to wait
/// for, and a try-lock costs one system call.
const POLL: Duration = Duration::from_millis(200);

pub struct FileLease {
    path: PathBuf,
    id: String,
    held: Option<File>,
    /// The file we held when it was deleted or replaced under us: still
    /// locked until this candidate's work has stopped (its next acquire, or
    /// a release), since letting go is what tells waiters the lease is free.
    lost: Option<File>,
    highest_fencing: u64,
    /// The embedded default, chosen because no backend was configured.
    implicit: bool,
    ttl: Duration,
    /// How long our registry record lives after a write.
    registry_lapse: Duration,
    /// The file we last saw locked by another candidate, and its term.
    seen: Option<Seen>,
    vacancies: Vacancies,
    /// The runner's wake-ups, once its release watcher runs: a release is
    /// announced through them ([`FileLease::announce`]).
    wakeups: OnceLock<Wakeups>,
    /// The term whose end this candidate announced last (file, token).
    announced: Option<((u64, u64), Option<u64>)>,
}

/// A file seen locked by another candidate: which inode, and its holder.
#[derive(Debug, Clone)]
struct Seen {
    file: (u64, u64),
    holder: Holder,
}

/// The device and inode at `path`, when something is there.
fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Content {
    id: String,
    fencing_token: u64,
}

/// The embedded lock file.
pub const ENTRY: BackendEntry = BackendEntry {
    declared: Some(&config::DECLARED),
    names: &["lock-file"],
    open,
    chatty_logs: &[],
};

fn open(backend: &Backend, common: &Common) -> Option<Result<Box<dyn LeaseBackend>, Error>> {
    open_as(backend, common, |file: &LockFileConfig, common| {
        Ok(FileLease::open(file, common))
    })
}

impl FileLease {
    pub fn new(path: &Path, id: &str) -> Self {
        FileLease {
            path: path.to_path_buf(),
            id: id.to_string(),
            held: None,
            lost: None,
            highest_fencing: 0,
            implicit: false,
            ttl: crate::timing::Timing::default().ttl,
            registry_lapse: crate::timing::Timing::default().registry_lapse(),
            seen: None,
            vacancies: Vacancies::default(),
            wakeups: OnceLock::new(),
            announced: None,
        }
    }

    /// The lock file `config` names, for `common.id`.
    pub fn open(config: &LockFileConfig, common: &Common) -> Self {
        FileLease {
            implicit: config.implicit,
            ttl: common.timing.ttl,
            registry_lapse: common.timing.registry_lapse(),
            ..FileLease::new(&config.path, &common.id)
        }
    }

    fn error(&self, detail: impl std::fmt::Display) -> Error {
        Error::File {
            path: self.path.display().to_string(),
            detail: detail.to_string(),
        }
    }

    /// The file's directory is one nobody else can use to swap the file
    /// (the per-user default is created first).
    fn check_dir(&self) -> Result<(), Error> {
        let dir = match self.path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let checked = if private::is_per_user_default(dir) {
            private::create_per_user_dir(dir).and_then(|()| private::check_per_user_dir(dir))
        } else {
            private::check_dir(dir)
        };
        checked.map_err(|e| self.error(e))
    }

    fn held_error((path, detail): (PathBuf, String)) -> Error {
        Error::File {
            path: path.display().to_string(),
            detail,
        }
    }

    fn open_file(&self) -> Result<File, Error> {
        private::open_file(&self.path).map_err(|e| self.error(e))
    }

    /// The file a holder had locked is gone or replaced, which no release
    /// does: wait until that holder's work must have stopped. Asked after
    /// this candidate locked the file at the path, so a vacancy is never
    /// judged without a look at what is there now.
    fn vacated(&mut self, locked: (u64, u64)) -> Option<Acquire> {
        let seen = self.seen.as_ref()?;
        if locked == seen.file {
            // The file we saw locked, unlocked: a release (or the kernel
            // freeing a dead holder's lock).
            return None;
        }
        let term = seen.holder.fencing_token.unwrap_or(0);
        match self.vacancies.judge(term, Instant::now(), self.ttl) {
            Verdict::Wait(left) => Some(Acquire::Held {
                holder: seen.holder.clone(),
                expires_in: Some(left.min(POLL)),
            }),
            Verdict::Free => None,
        }
    }

    /// The file we saw locked by another is unlocked: a release, or the
    /// kernel freeing a dead holder's lock, found by this candidate's poll.
    /// Network stores announce releases to every standby, which reads the
    /// candidates registry before it campaigns, so it defers to a newcomer
    /// of higher priority it has not seen yet (its copy is a heartbeat
    /// old). A lock file has no announcement, so the first candidate to
    /// look announces it to itself: it lets go, wakes its runner (which
    /// reads the registry, then campaigns) and takes the lease at the next
    /// attempt. `None`: take it now (announced already, or no runner to
    /// wake, as for `status`).
    fn announce(&mut self, locked: (u64, u64)) -> Option<Acquire> {
        let seen = self.seen.as_ref().filter(|seen| seen.file == locked)?;
        let term = (locked, seen.holder.fencing_token);
        if self.announced == Some(term) {
            return None;
        }
        let wakeups = self.wakeups.get()?;
        if !wakeups.wake() {
            return None;
        }
        self.announced = Some(term);
        Some(Acquire::Held {
            holder: Holder {
                id: None,
                fencing_token: None,
            },
            // Time for the runner to read the registry first; its release
            // wake-up campaigns sooner.
            expires_in: Some(POLL),
        })
    }

    /// Another candidate holds the lock on `file`. It becomes the term this
    /// candidate watches when it is the one watched already, or a newer
    /// term: a file locked without a newer token (another waiter's lock
    /// for a moment, a file of some other program) does not end the wait
    /// for a vacated term.
    fn saw_locked(&mut self, file: (u64, u64), holder: &Holder) {
        let newer = match &self.seen {
            None => true,
            Some(seen) => {
                seen.file == file
                    || holder.fencing_token.unwrap_or(0) > seen.holder.fencing_token.unwrap_or(0)
            }
        };
        if newer {
            self.seen = Some(Seen {
                file,
                holder: holder.clone(),
            });
        }
    }

    /// Who the file names (nobody known when it holds no leaderd content).
    fn holder_in(file: &mut File) -> Holder {
        Self::read_content(file).map_or(
            Holder {
                id: None,
                fencing_token: None,
            },
            |c| Holder {
                id: Some(c.id),
                fencing_token: Some(c.fencing_token),
            },
        )
    }

    fn read_content(file: &mut File) -> Option<Content> {
        let mut text = String::new();
        file.rewind().ok()?;
        file.read_to_string(&mut text).ok()?;
        serde_json::from_str(&text).ok()
    }

    pub fn acquire_now(&mut self) -> Result<Acquire, Error> {
        let sent_at = Instant::now();
        if self.held.is_some() {
            return Err(self.error("acquire while already holding the lock"));
        }
        // Acquiring again: the work of the term we lost has stopped.
        self.lost = None;
        let mut file = match self.open_file() {
            Ok(file) => file,
            // Checked at start-up; again only when opening fails (a cleaner
            // removed the per-user directory: created again, and checked).
            Err(_) => {
                self.check_dir()?;
                self.open_file()?
            }
        };
        let meta = file.metadata().map_err(|e| self.error(e))?;
        let this = (meta.dev(), meta.ino());
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let holder = Self::holder_in(&mut file);
                if let Some(f) = holder.fencing_token {
                    self.highest_fencing = self.highest_fencing.max(f);
                }
                self.saw_locked(this, &holder);
                return Ok(Acquire::Held {
                    holder,
                    expires_in: Some(POLL),
                });
            }
            Err(TryLockError::Error(e)) => return Err(self.error(e)),
        }
        // Locked, but a holder may still be working on a file deleted under
        // it: let go again (dropping the file unlocks it) and wait.
        match held::other(&self.path, this).map_err(Self::held_error)? {
            held::Other::None => {}
            held::Other::Locked { file, holder } => {
                if let Some(f) = holder.fencing_token {
                    self.highest_fencing = self.highest_fencing.max(f);
                }
                self.saw_locked(file, &holder);
                return Ok(Acquire::Held {
                    holder,
                    expires_in: Some(POLL),
                });
            }
            // Seen let go: that term is over, however its file vanished.
            held::Other::Unlocked { file } => {
                if self.seen.as_ref().is_some_and(|seen| seen.file == file) {
                    self.seen = None;
                }
            }
        }
        if let Some(wait) = self.vacated(this) {
            return Ok(wait);
        }
        if let Some(wait) = self.announce(this) {
            // Dropping the file lets go of the lock just taken.
            return Ok(wait);
        }
        self.seen = None;
        let previous = Self::read_content(&mut file).map_or(0, |c| c.fencing_token);
        // Above the file's token, above anything this candidate has seen, and
        // at least the wall clock in ms (as Redis's server time is there):
        // the sequence goes on even if the file was deleted meanwhile.
        let fencing_token = (previous.max(self.highest_fencing) + 1).max(unix_ms());
        let content = serde_json::to_string(&Content {
            id: self.id.clone(),
            fencing_token,
        })
        .expect("plain struct serialises");
        let written = file
            .set_len(0)
            .and_then(|_| file.rewind())
            .and_then(|_| file.write_all(format!("{content}\n").as_bytes()))
            .and_then(|_| file.sync_data());
        if let Err(e) = written {
            return Err(self.error(format!("cannot record the fencing token: {e}")));
        }
        self.highest_fencing = fencing_token;
        if !held::point_at(&self.path, &file).map_err(Self::held_error)? {
            // Deleted or replaced while we took it: whoever is there now
            // decides at the next attempt.
            return Ok(Acquire::Held {
                holder: Holder {
                    id: None,
                    fencing_token: None,
                },
                expires_in: Some(POLL),
            });
        }
        self.held = Some(file);
        Ok(Acquire::Won {
            fencing_token,
            sent_at,
        })
    }

    /// Still ours while we hold the lock on the file that is at the path: if
    /// someone deleted or replaced the file, another process can lock the new
    /// one, so that counts as lost.
    pub fn renew_now(&mut self) -> Result<Renew, Error> {
        let sent_at = Instant::now();
        let Some(file) = &self.held else {
            return Ok(Renew::Lost { holder: None });
        };
        let ours = file.metadata().map_err(|e| self.error(e))?;
        let same = std::fs::metadata(&self.path)
            .is_ok_and(|at_path| at_path.ino() == ours.ino() && at_path.dev() == ours.dev());
        if same {
            Ok(Renew::Renewed { sent_at })
        } else {
            // Not unlocked yet: the child still runs until the machine has
            // stopped it, and `.held` shows the lock to every waiter.
            self.lost = self.held.take();
            Ok(Renew::Lost { holder: None })
        }
    }

    /// Unlocks. The content stays, so the next holder continues the fencing
    /// sequence.
    pub fn release_now(&mut self) -> bool {
        self.lost = None;
        match self.held.take() {
            Some(file) => file.unlock().is_ok(),
            None => false,
        }
    }

    /// Who holds the lock on the file at the path, or else on the file
    /// `.held` names (a holder whose file was deleted under it).
    pub fn peek_now(&mut self) -> Result<Peek, Error> {
        let mut ours = (0, 0);
        if let Some(mut file) = private::open_existing(&self.path).map_err(|e| self.error(e))? {
            match file.try_lock() {
                Ok(()) => {
                    let meta = file.metadata().map_err(|e| self.error(e))?;
                    ours = (meta.dev(), meta.ino());
                }
                Err(TryLockError::WouldBlock) => {
                    return Ok(Peek {
                        holder: Some(Self::holder_in(&mut file)),
                        ..Peek::default()
                    });
                }
                Err(TryLockError::Error(e)) => return Err(self.error(e)),
            }
        }
        match held::other(&self.path, ours).map_err(Self::held_error)? {
            held::Other::Locked { holder, .. } => Ok(Peek {
                holder: Some(holder),
                ..Peek::default()
            }),
            _ => Ok(Peek::default()),
        }
    }
}

/// Now, in ms since the Unix epoch (0 if the clock is before it).
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[async_trait::async_trait]
impl LeaseBackend for FileLease {
    /// The lock file can be opened (created) now: a missing directory or
    /// a permission is a configuration error at start-up, not a retry loop.
    fn preflight(&mut self) -> Result<(), Error> {
        self.check_dir()?;
        self.open_file().map(drop)
    }

    fn describe(&self) -> String {
        format!("lock file {}", self.path.display())
    }

    fn notes(&self) -> Vec<String> {
        if self.implicit {
            vec![format!(
                "no backend configured: the lock file {} coordinates candidates on this host only; give --redis to elect across hosts",
                self.path.display()
            )]
        } else {
            Vec::new()
        }
    }

    async fn acquire(&mut self) -> Result<Acquire, Error> {
        self.acquire_now()
    }

    async fn renew(&mut self) -> Result<Renew, Error> {
        self.renew_now()
    }

    async fn release(&mut self) -> Result<bool, Error> {
        Ok(self.release_now())
    }

    async fn register(&mut self, me: Option<&Record>) -> Result<Vec<Record>, Error> {
        let path = registry::path_for(&self.path);
        let entry = crate::lease::registry::entry(&self.id);
        registry::register(&path, &entry, me, self.registry_lapse, true)
            .map_err(|e| self.error(format!("its candidates registry {}: {e}", path.display())))
    }

    async fn candidates(&mut self) -> Result<Vec<Record>, Error> {
        let path = registry::path_for(&self.path);
        let entry = crate::lease::registry::entry(&self.id);
        registry::register(&path, &entry, None, self.registry_lapse, false)
            .map_err(|e| self.error(format!("its candidates registry {}: {e}", path.display())))
    }

    async fn peek(&mut self) -> Result<Peek, Error> {
        self.peek_now()
    }

    /// Stats the path every [`POLL`] and says when the file there changed
    /// (deleted, replaced): the holder then checks its lease at once, rather
    /// than at its next renewal. Releases leave the file, so waiters find
    /// them by polling, and announce them to themselves
    /// ([`FileLease::announce`]).
    fn watch_releases(&self, wakeups: Wakeups) -> Option<JoinHandle<()>> {
        // Set once: the runner starts one watcher per lease.
        let _ = self.wakeups.set(wakeups.clone());
        let Wakeups { notices, stop, .. } = wakeups;
        let path = self.path.clone();
        Some(tokio::spawn(async move {
            let mut last = identity(&path);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(POLL) => {}
                }
                let now = identity(&path);
                if now != last {
                    last = now;
                    if notices.send(()).is_err() {
                        return;
                    }
                }
            }
        }))
    }

    /// The directory is writable and the file can be opened and locked.
    async fn self_check(&mut self) -> Result<Vec<String>, Error> {
        self.check_dir().and_then(|()| self.open_file()).map(|_| {
            vec![format!(
                "the lock file {} can be opened for locking",
                self.path.display()
            )]
        })
    }
}

#[cfg(test)]
mod tests;
