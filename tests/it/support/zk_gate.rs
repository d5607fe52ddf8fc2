//! A loopback proxy in front of a ZooKeeper server that reads the client's
//! requests frame by frame and holds back the first `create` of a path
//! containing a needle, with everything after it on that connection, until
//! the test opens the gate. It puts a race between two calls of one
//! candidate (a listing, then a create) on the test's own schedule: what
//! another candidate does while the gate is shut lands between them.
//!
//! The wire format: every message is a 4-byte big-endian length and a body.
//! A connection's first body is the session handshake; every later one
//! starts with the request header (xid, op code), and a create's body then
//! starts with its path (a 4-byte length and the bytes).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// `create` and `create2`, the op codes a client creates a node with.
const CREATES: [i32; 2] = [1, 15];

#[derive(Default)]
struct Shut {
    /// A create is held back now.
    holding: bool,
    /// Opened: nothing is held any more, ever.
    open: bool,
}

pub struct ZkGate {
    pub port: u16,
    state: Arc<(Mutex<Shut>, Condvar)>,
}

impl ZkGate {
    /// Listens on a free loopback port, forwards to `127.0.0.1:target`, and
    /// holds back the first create of a path that contains `needle`.
    pub fn start(target: u16, needle: &[u8]) -> ZkGate {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the gate");
        let port = listener.local_addr().expect("bound").port();
        let state = Arc::new((Mutex::new(Shut::default()), Condvar::new()));
        let (shared, needle) = (state.clone(), needle.to_vec());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let (c, s) = (client.try_clone(), server.try_clone());
                let (Ok(c), Ok(s)) = (c, s) else { continue };
                let (shared, needle) = (shared.clone(), needle.clone());
                std::thread::spawn(move || requests(client, server, &needle, &shared));
                std::thread::spawn(move || copy(s, c));
            }
        });
        ZkGate { port, state }
    }

    /// The connect string through the gate.
    pub fn connect(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Waits until a create is held back.
    pub fn wait_held(&self, limit: Duration) {
        let (lock, cvar) = &*self.state;
        let start = Instant::now();
        let mut shut = lock.lock().unwrap();
        while !shut.holding {
            let left = limit.checked_sub(start.elapsed()).unwrap_or_else(|| {
                panic!("timed out after {limit:?} waiting for a create to hold back")
            });
            shut = cvar.wait_timeout(shut, left).unwrap().0;
        }
    }

    /// Lets the held create through, and everything after it.
    pub fn open(&self) {
        let (lock, cvar) = &*self.state;
        lock.lock().unwrap().open = true;
        cvar.notify_all();
    }
}

/// Copies the client's requests to the server one message at a time,
/// waiting at the first create of a matching path until the gate opens.
fn requests(mut from: TcpStream, mut to: TcpStream, needle: &[u8], state: &(Mutex<Shut>, Condvar)) {
    let mut first = true;
    loop {
        let mut len = [0u8; 4];
        if from.read_exact(&mut len).is_err() {
            break;
        }
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        if from.read_exact(&mut body).is_err() {
            break;
        }
        if !first && is_create_of(&body, needle) {
            let (lock, cvar) = state;
            let mut shut = lock.lock().unwrap();
            if !shut.open {
                shut.holding = true;
                cvar.notify_all();
                while !shut.open {
                    shut = cvar.wait(shut).unwrap();
                }
            }
        }
        first = false;
        if to
            .write_all(&len)
            .and_then(|()| to.write_all(&body))
            .is_err()
        {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}

/// Whether a request body is a create of a path containing `needle`.
fn is_create_of(body: &[u8], needle: &[u8]) -> bool {
    let int = |at: usize| {
        body.get(at..at + 4)
            .map(|b| i32::from_be_bytes(b.try_into().expect("4 bytes")))
    };
    let (Some(op), Some(path_len)) = (int(4), int(8)) else {
        return false;
    };
    let path = body
        .get(12..12 + path_len.max(0) as usize)
        .unwrap_or_default();
    CREATES.contains(&op) && path.windows(needle.len()).any(|w| w == needle)
}

fn copy(mut from: TcpStream, mut to: TcpStream) {
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}
