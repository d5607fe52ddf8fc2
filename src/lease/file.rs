//! The lock-file lease, the embedded default: an exclusive `flock` on a file
//! coordinates the processes of one host, and the kernel frees it the moment
//! the holder dies. The file's content names the holder and the fencing token
//! (`cat` it to see who leads); the lock, not the content, decides.

use super::{Acquire, BoxFuture, Error, Holder, LeaseBackend, Peek, Renew};
use crate::config::{BackendConfig, Config};
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::time::Instant;

/// How soon a refused candidate looks again. A lock file has no TTL to wait
/// for, and a try-lock costs one system call.
const POLL: Duration = Duration::from_millis(200);

pub struct FileLease {
    path: PathBuf,
    id: String,
    held: Option<File>,
    highest_fencing: u64,
    /// The embedded default, chosen because no backend was configured.
    implicit: bool,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Content {
    id: String,
    fencing_token: u64,
}

impl FileLease {
    pub fn new(path: &Path, id: &str) -> Self {
        FileLease {
            path: path.to_path_buf(),
            id: id.to_string(),
            held: None,
            highest_fencing: 0,
            implicit: false,
        }
    }

    /// The lock file of `config` (see [`super::open`]).
    pub fn open(config: &Config) -> Self {
        let BackendConfig::LockFile { path, implicit } = &config.backend else {
            unreachable!("lease::open passes only a lock-file configuration")
        };
        FileLease {
            implicit: *implicit,
            ..FileLease::new(path, &config.id)
        }
    }

    fn error(&self, detail: impl std::fmt::Display) -> Error {
        Error::File {
            path: self.path.display().to_string(),
            detail: detail.to_string(),
        }
    }

    fn open_file(&self) -> Result<File, Error> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.path)
            .map_err(|e| {
                self.error(format!(
                    "{e}; check that the directory exists and is writable"
                ))
            })
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
        let mut file = self.open_file()?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let holder = Self::read_content(&mut file).map(|c| Holder {
                    id: Some(c.id),
                    fencing_token: Some(c.fencing_token),
                });
                if let Some(f) = holder.as_ref().and_then(|h| h.fencing_token) {
                    self.highest_fencing = self.highest_fencing.max(f);
                }
                return Ok(Acquire::Held {
                    holder: holder.unwrap_or(Holder {
                        id: None,
                        fencing_token: None,
                    }),
                    expires_in: Some(POLL),
                });
            }
            Err(TryLockError::Error(e)) => return Err(self.error(e)),
        }
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
            self.held = None;
            Ok(Renew::Lost { holder: None })
        }
    }

    /// Unlocks. The content stays, so the next holder continues the fencing
    /// sequence.
    pub fn release_now(&mut self) -> bool {
        match self.held.take() {
            Some(file) => file.unlock().is_ok(),
            None => false,
        }
    }

    pub fn peek_now(&mut self) -> Result<Peek, Error> {
        if !self.path.exists() {
            return Ok(Peek::default());
        }
        let mut file = self.open_file()?;
        match file.try_lock() {
            Ok(()) => {
                let _ = file.unlock();
                Ok(Peek::default())
            }
            Err(TryLockError::WouldBlock) => {
                let holder = Self::read_content(&mut file).map_or(
                    Holder {
                        id: None,
                        fencing_token: None,
                    },
                    |c| Holder {
                        id: Some(c.id),
                        fencing_token: Some(c.fencing_token),
                    },
                );
                Ok(Peek {
                    holder: Some(holder),
                    ..Peek::default()
                })
            }
            Err(TryLockError::Error(e)) => Err(self.error(e)),
        }
    }
}

/// Now, in ms since the Unix epoch (0 if the clock is before it).
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl LeaseBackend for FileLease {
    /// The lock file can be opened (created) now: a missing directory or
    /// a permission is a configuration error at start-up, not a retry loop.
    fn preflight(&mut self) -> Result<(), Error> {
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

    fn acquire(&mut self) -> BoxFuture<'_, Result<Acquire, Error>> {
        Box::pin(std::future::ready(self.acquire_now()))
    }

    fn renew(&mut self) -> BoxFuture<'_, Result<Renew, Error>> {
        Box::pin(std::future::ready(self.renew_now()))
    }

    fn release(&mut self) -> BoxFuture<'_, Result<bool, Error>> {
        Box::pin(std::future::ready(Ok(self.release_now())))
    }

    fn peek(&mut self) -> BoxFuture<'_, Result<Peek, Error>> {
        Box::pin(std::future::ready(self.peek_now()))
    }

    /// The directory is writable and the file can be opened and locked.
    fn self_check(&mut self) -> BoxFuture<'_, Result<Vec<String>, Error>> {
        let checked = self.open_file().map(|_| {
            vec![format!(
                "the lock file {} can be opened for locking",
                self.path.display()
            )]
        });
        Box::pin(std::future::ready(checked))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_fencing_grows() {
        let dir = std::env::temp_dir().join(format!("leaderd-file-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.lock");
        let _ = std::fs::remove_file(&path);
        let mut a = FileLease::new(&path, "a");
        let mut b = FileLease::new(&path, "b");
        let Acquire::Won {
            fencing_token: first,
            ..
        } = a.acquire_now().unwrap()
        else {
            panic!()
        };
        let Acquire::Held { holder, .. } = b.acquire_now().unwrap() else {
            panic!("b must be refused")
        };
        assert_eq!(holder.id.as_deref(), Some("a"));
        assert!(matches!(a.renew_now().unwrap(), Renew::Renewed { .. }));
        assert_eq!(
            b.peek_now().unwrap().holder.and_then(|h| h.fencing_token),
            Some(first)
        );
        assert!(a.release_now());
        let Acquire::Won {
            fencing_token: second,
            ..
        } = b.acquire_now().unwrap()
        else {
            panic!()
        };
        assert!(second > first);
        std::fs::remove_file(&path).unwrap();
        assert!(
            matches!(b.renew_now().unwrap(), Renew::Lost { .. }),
            "a deleted lock file is a lost lease"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
