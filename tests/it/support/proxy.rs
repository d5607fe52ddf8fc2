//! A loopback TCP proxy: the fixture's stand-in for a DNS name that a managed
//! Redis moves to a new primary on failover. New connections go to the
//! current target; connections already made stay where they were. Frozen,
//! it is a partition: connections stay open and nothing crosses. Slowed, it
//! holds every chunk back before passing it on (latency); reset, it closes
//! every connection it carries (a middlebox or a server dropping them);
//! blackholed, the connections it carries lose everything from then on
//! while new ones work (half-open: a NAT or firewall that forgot them).
//! A request that contains a given needle can be held back on its own,
//! with what follows it on its connection (one slow command).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Proxy {
    pub port: u16,
    target: Arc<AtomicU16>,
    frozen: Arc<AtomicBool>,
    links: Links,
}

/// What every connection's copying threads share.
#[derive(Clone, Default)]
struct Links {
    /// Milliseconds each chunk waits before it is passed on.
    delay: Arc<AtomicU64>,
    /// Both ends of every connection carried, for [`Proxy::reset`].
    open: Arc<Mutex<Vec<TcpStream>>>,
    /// Each connection's "drop everything" switch, for [`Proxy::blackhole`].
    dead: Arc<Mutex<Vec<Arc<AtomicBool>>>>,
    /// A client's chunk that contains these bytes waits this much longer,
    /// for [`Proxy::hold_requests_with`].
    held: Arc<Held>,
}

/// A needle, and how much longer a client's chunk that contains it waits.
type Held = Mutex<Option<(Vec<u8>, Duration)>>;

fn wait_thawed(frozen: &AtomicBool) {
    while frozen.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(5));
    }
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `127.0.0.1:target`.
    pub fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("bound").port();
        let target = Arc::new(AtomicU16::new(target));
        let frozen = Arc::new(AtomicBool::new(false));
        let links = Links::default();
        let (to, ice, shared) = (target.clone(), frozen.clone(), links.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let (to, ice, shared) = (to.clone(), ice.clone(), shared.clone());
                std::thread::spawn(move || {
                    wait_thawed(&ice);
                    let port = to.load(Ordering::SeqCst);
                    let Ok(server) = TcpStream::connect(("127.0.0.1", port)) else {
                        return; // the client sees its connection closed
                    };
                    if let (Ok(c), Ok(s)) = (client.try_clone(), server.try_clone()) {
                        shared.open.lock().unwrap().extend([c, s]);
                    }
                    let dead = Arc::new(AtomicBool::new(false));
                    shared.dead.lock().unwrap().push(dead.clone());
                    let link = Link {
                        frozen: ice,
                        delay: shared.delay,
                        dead,
                        held: None,
                    };
                    let upstream = Link {
                        held: Some(shared.held),
                        ..link.clone()
                    };
                    pipe(
                        client.try_clone().expect("clone"),
                        server.try_clone().expect("clone"),
                        upstream,
                    );
                    pipe(server, client, link);
                });
            }
        });
        Proxy {
            port,
            target,
            frozen,
            links,
        }
    }

    /// Latency: every chunk, either way, waits `delay` before it crosses
    /// (zero: none).
    pub fn slow(&self, delay: Duration) {
        self.links
            .delay
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// Closes every connection carried so far, both ends; new ones are
    /// carried as before.
    pub fn reset(&self) {
        for stream in self.links.open.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Every connection carried so far drops what it carries from now on,
    /// both ways, and stays open: neither end learns of it but by silence.
    /// New connections are carried as before.
    pub fn blackhole(&self) {
        for dead in self.links.dead.lock().unwrap().drain(..) {
            dead.store(true, Ordering::SeqCst);
        }
    }

    /// From now on, a chunk a client sends that contains `needle` crosses
    /// `delay` late, and what follows it on that connection behind it (a
    /// server slow to answer one command); `None` ends it.
    pub fn hold_requests_with(&self, hold: Option<(&[u8], Duration)>) {
        *self.links.held.lock().unwrap() = hold.map(|(needle, delay)| (needle.to_vec(), delay));
    }

    /// A partition: nothing crosses until [`Proxy::thaw`]; connections stay
    /// open, so neither side learns of it but by silence.
    pub fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }

    pub fn thaw(&self) {
        self.frozen.store(false, Ordering::SeqCst);
    }

    /// From now on, new connections go to `127.0.0.1:port`.
    pub fn retarget(&self, port: u16) {
        self.target.store(port, Ordering::SeqCst);
    }

    pub fn redis_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

/// One connection's switches.
#[derive(Clone)]
struct Link {
    frozen: Arc<AtomicBool>,
    delay: Arc<AtomicU64>,
    dead: Arc<AtomicBool>,
    /// Client to server only: see [`Proxy::hold_requests_with`].
    held: Option<Arc<Held>>,
}

/// How much longer than the others `chunk` waits.
fn extra(held: Option<&Held>, chunk: &[u8]) -> Duration {
    let Some(held) = held else {
        return Duration::ZERO;
    };
    match &*held.lock().unwrap() {
        Some((needle, delay)) if chunk.windows(needle.len()).any(|w| w == &needle[..]) => *delay,
        _ => Duration::ZERO,
    }
}

/// Copies `from` to `to` until either side closes: a reader thread stamps
/// each chunk with when it may cross, a writer thread passes it on then, so
/// a delay is latency (chunks in flight overlap), not a slower link.
fn pipe(mut from: TcpStream, mut out: TcpStream, link: Link) {
    let Link {
        frozen,
        delay,
        dead,
        held,
    } = link;
    let (chunks, due) = std::sync::mpsc::channel::<(Instant, Vec<u8>)>();
    let ice = frozen.clone();
    std::thread::spawn(move || {
        for (at, chunk) in due {
            let wait = at.saturating_duration_since(Instant::now());
            if !wait.is_zero() {
                std::thread::sleep(wait);
            }
            // Read just before a freeze: held back until the thaw.
            wait_thawed(&ice);
            if dead.load(Ordering::SeqCst) {
                continue;
            }
            if out.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = out.shutdown(Shutdown::Write);
    });
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            wait_thawed(&frozen);
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let at = Instant::now()
                        + Duration::from_millis(delay.load(Ordering::SeqCst))
                        + extra(held.as_deref(), &buf[..n]);
                    if chunks.send((at, buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
        // The writer shuts its side down once every chunk read has crossed.
        drop(chunks);
        let _ = from.shutdown(Shutdown::Read);
    });
}
