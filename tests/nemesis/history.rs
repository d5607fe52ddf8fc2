//! What a nemesis run records, for the checkers to judge afterwards: every
//! `/leader` answer of every candidate (sent and received on
//! CLOCK_MONOTONIC), samples of the probe children alive according to
//! `/proc`, the faults as injected, and (read at the end) the children's
//! own start and stop lines.

use crate::support::os::mono_ns;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One `/leader` question: who, when it was asked and answered (or given
/// up on), and whether the answer was "leader" (200).
#[derive(Debug, Clone)]
pub struct Answer {
    pub who: usize,
    pub sent: u128,
    pub received: u128,
    pub leader: bool,
}

/// A fault as injected: from `start` to `end` (equal for an instant one);
/// `tolerated`: the store is built to keep electing through it, within
/// this bound.
#[derive(Debug, Clone)]
pub struct Injected {
    pub kind: &'static str,
    pub start: u128,
    pub end: u128,
    pub tolerated: Option<Duration>,
    /// The store rides it out without its own failover (one Redlock master,
    /// a sentinel, an etcd or ZooKeeper follower frozen): the leader at its
    /// start must still lead, in the same term, at its end (C7).
    pub keeps_leader: bool,
}

/// A probe child's life, from its own log: start (with its token) and stop.
#[derive(Debug, Clone)]
pub struct Life {
    pub who: usize,
    pub pid: i32,
    pub start: u128,
    pub stop: Option<u128>,
    pub token: u64,
    /// Its `--exclusive` lock at birth: `(when, free)`; not free means an
    /// earlier child of the run was still alive.
    pub exclusive: Option<(u128, bool)>,
}

/// `(when, the probe children alive by /proc)`.
pub type Sample = (u128, Vec<i32>);

#[derive(Debug, Default)]
pub struct History {
    pub answers: Vec<Answer>,
    pub samples: Vec<Sample>,
    /// When each probe child died, by a pidfd watched from its first sample
    /// (exact, where `/proc` samples are 20 ms apart): the end of a child
    /// killed with SIGKILL, which writes no stop line.
    pub deaths: Vec<(i32, u128)>,
    pub faults: Vec<Injected>,
    pub lives: Vec<Life>,
    /// Processes found running after everything was stopped.
    pub leftovers: Vec<String>,
}

/// The ports candidates listen on now (a restarted candidate gets a new one).
pub type Ports = Arc<Mutex<Vec<u16>>>;

/// Polls every candidate's `/leader` every 20 ms, each on its own thread (a
/// frozen candidate must not stall the others' answers), and samples `/proc`
/// for the run's probe children, until stopped.
pub struct Recorder {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    pub answers: Arc<Mutex<Vec<Answer>>>,
    pub samples: Arc<Mutex<Vec<Sample>>>,
    pub deaths: Arc<Mutex<Vec<(i32, u128)>>>,
}

impl Recorder {
    pub fn start(ports: Ports, dir: PathBuf) -> Recorder {
        let stop = Arc::new(AtomicBool::new(false));
        let answers = Arc::new(Mutex::new(Vec::new()));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let mut threads = Vec::new();
        let count = ports.lock().unwrap().len();
        for who in 0..count {
            let (stop, ports, answers) = (stop.clone(), ports.clone(), answers.clone());
            threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let port = ports.lock().unwrap()[who];
                    let sent = mono_ns();
                    let got = leader_of(port);
                    let received = mono_ns();
                    // No answer (frozen, restarting) is not a 200: it ends
                    // a streak, since nothing says the candidate led
                    // throughout it.
                    answers.lock().unwrap().push(Answer {
                        who,
                        sent,
                        received,
                        leader: got == Some(true),
                    });
                    std::thread::sleep(Duration::from_millis(20));
                }
            }));
        }
        let deaths = Arc::new(Mutex::new(Vec::new()));
        let (s, out, died) = (stop.clone(), samples.clone(), deaths.clone());
        threads.push(std::thread::spawn(move || {
            let mut watched = std::collections::BTreeSet::new();
            while !s.load(Ordering::Relaxed) {
                let when = mono_ns();
                let alive = probes_alive(&dir);
                for pid in &alive {
                    if watched.insert(*pid) {
                        watch_death(*pid, died.clone());
                    }
                }
                out.lock().unwrap().push((when, alive));
                std::thread::sleep(Duration::from_millis(20));
            }
        }));
        Recorder {
            stop,
            threads,
            answers,
            samples,
            deaths,
        }
    }

    pub fn finish(self) -> (Vec<Answer>, Vec<Sample>, Vec<(i32, u128)>) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
        let answers = std::mem::take(&mut *self.answers.lock().unwrap());
        let samples = std::mem::take(&mut *self.samples.lock().unwrap());
        let deaths = std::mem::take(&mut *self.deaths.lock().unwrap());
        (answers, samples, deaths)
    }
}

/// Notes when `pid` dies: a pidfd becomes readable the moment the process
/// exits. The thread ends with the process (a process gone already is
/// left to the `/proc` samples).
fn watch_death(pid: i32, deaths: Arc<Mutex<Vec<(i32, u128)>>>) {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    if fd < 0 {
        return;
    }
    std::thread::spawn(move || {
        let mut poll = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; -1 waits until the process exits.
        while unsafe { libc::poll(&mut poll, 1, -1) } < 0 {}
        deaths.lock().unwrap().push((pid, mono_ns()));
        // SAFETY: fd is ours, opened above.
        unsafe { libc::close(fd) };
    });
}

/// `GET /leader` with short timeouts: whether it leads, or `None` when the
/// candidate does not answer (frozen, restarting).
pub fn leader_of(port: u16) -> Option<bool> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(300)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    write!(stream, "GET /leader HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let code: u16 = response.split_whitespace().nth(1)?.parse().ok()?;
    Some(code == 200)
}

/// The live (not zombie) probe children whose arguments name `dir`: the
/// run's.
pub fn probes_alive(dir: &Path) -> Vec<i32> {
    let needle = dir.to_string_lossy().into_owned();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            // The probe itself (argv[0]), not leaderd, whose command line
            // names it too.
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline);
            let mut argv = cmdline.split('\0');
            argv.next().is_some_and(|a| a.ends_with("probe_child"))
                && argv.any(|a| a.contains(&needle))
                && crate::support::alive(*pid)
        })
        .collect()
}

/// Every live process descended from this one, with its command name:
/// the servers a scene started, and anything they started (a wrapper's
/// child reparented elsewhere is missed; the fixtures start servers
/// directly).
pub fn descendants() -> Vec<(i32, String)> {
    let all: Vec<(i32, i32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| crate::support::proc_stat(pid).map(|(_, ppid, _)| (pid, ppid)))
        .collect();
    let mut found = vec![std::process::id() as i32];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(all.iter().filter(|(_, p)| *p == parent).map(|(c, _)| *c));
        i += 1;
    }
    found
        .into_iter()
        .skip(1)
        .filter(|pid| crate::support::alive(*pid))
        .map(|pid| {
            let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            (pid, name.trim().to_string())
        })
        .collect()
}

/// Every probe child's life, from the candidates' probe logs.
pub fn lives(logs: &[PathBuf]) -> Vec<Life> {
    let mut lives = Vec::new();
    for (who, log) in logs.iter().enumerate() {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            match f.as_slice() {
                ["start", pid, ns, token, ..] => lives.push(Life {
                    who,
                    pid: pid.parse().unwrap_or(0),
                    start: ns.parse().unwrap_or(0),
                    stop: None,
                    token: token.parse().unwrap_or(0),
                    exclusive: None,
                }),
                ["exclusive", pid, ns, state] => {
                    let pid: i32 = pid.parse().unwrap_or(0);
                    if let Some(life) = lives
                        .iter_mut()
                        .rev()
                        .find(|l| l.who == who && l.pid == pid)
                    {
                        life.exclusive = Some((ns.parse().unwrap_or(0), *state == "free"));
                    }
                }
                ["stop", pid, ns, ..] => {
                    let pid: i32 = pid.parse().unwrap_or(0);
                    if let Some(life) = lives
                        .iter_mut()
                        .rev()
                        .find(|l| l.who == who && l.pid == pid && l.stop.is_none())
                    {
                        life.stop = ns.parse().ok();
                    }
                }
                _ => {}
            }
        }
    }
    lives
}
