//! The candidates registry of the lock file: `PATH.candidates` beside it, a
//! JSON object of every candidate's record and its expiry in ms (one host,
//! one clock), rewritten under an exclusive `flock` of its own by each
//! registration. Opened like the lock file: never through a symlink,
//! created 0600, refused when another user owns it ([`crate::private`]).

use crate::lease::registry::{Age, Record, Stamp, parse_all};
use crate::private;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(serde::Serialize, serde::Deserialize)]
struct Entry {
    r: String,
    x: u64,
}

pub(super) fn path_for(lock: &Path) -> PathBuf {
    let mut name = lock.as_os_str().to_owned();
    name.push(".candidates");
    PathBuf::from(name)
}

/// Writes (or, with `None`, removes) `id`'s record and returns the live ones.
/// `write: false` only reads.
pub(super) fn register(
    path: &Path,
    id: &str,
    me: Option<&Record>,
    ttl: Duration,
    write: bool,
) -> Result<Vec<Record>, String> {
    let mut file = if write {
        private::open_file(path)?
    } else {
        match private::open_existing(path)? {
            Some(file) => file,
            None => return Ok(Vec::new()),
        }
    };
    let locked = if write {
        file.lock()
    } else {
        file.lock_shared()
    };
    locked.map_err(|e| format!("cannot lock it: {e}"))?;
    let result = rewrite(&mut file, id, me, ttl, write);
    let _ = file.unlock();
    result
}

fn rewrite(
    file: &mut File,
    id: &str,
    me: Option<&Record>,
    ttl: Duration,
    write: bool,
) -> Result<Vec<Record>, String> {
    let mut text = String::new();
    file.read_to_string(&mut text)
        .map_err(|e| format!("cannot read it: {e}"))?;
    let now = Stamp::now();
    let mut entries: BTreeMap<String, Entry> = serde_json::from_str(&text).unwrap_or_default();
    entries.retain(|_, e| Stamp(e.x).age(Duration::ZERO, now) == Age::Live);
    if write {
        entries.remove(id);
        if let Some(record) = me {
            let r = serde_json::to_string(record).expect("a record always serialises");
            let x = now.plus(ttl).0;
            entries.insert(id.to_string(), Entry { r, x });
        }
        let json = serde_json::to_string(&entries).expect("entries always serialise");
        file.rewind()
            .and_then(|()| file.set_len(0))
            .and_then(|()| file.write_all(json.as_bytes()))
            .map_err(|e| format!("cannot write it: {e}"))?;
    }
    Ok(parse_all(entries.values().map(|e| e.r.as_bytes())))
}
