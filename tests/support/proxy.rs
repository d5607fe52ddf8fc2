//! A loopback TCP proxy: the fixture's stand-in for a DNS name that a managed
//! Redis moves to a new primary on failover. New connections go to the
//! current target; connections already made stay where they were. Frozen,
//! it is a partition: connections stay open and nothing crosses.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::time::Duration;

pub struct Proxy {
    pub port: u16,
    target: Arc<AtomicU16>,
    frozen: Arc<AtomicBool>,
}

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
        let (to, ice) = (target.clone(), frozen.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let (to, ice) = (to.clone(), ice.clone());
                std::thread::spawn(move || {
                    wait_thawed(&ice);
                    let port = to.load(Ordering::SeqCst);
                    let Ok(server) = TcpStream::connect(("127.0.0.1", port)) else {
                        return; // the client sees its connection closed
                    };
                    pipe(
                        client.try_clone().expect("clone"),
                        server.try_clone().expect("clone"),
                        ice.clone(),
                    );
                    pipe(server, client, ice);
                });
            }
        });
        Proxy {
            port,
            target,
            frozen,
        }
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

/// Copies `from` to `to` on a thread until either side closes.
fn pipe(mut from: TcpStream, mut to: TcpStream, frozen: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            wait_thawed(&frozen);
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    // Read just before a freeze: held back until the thaw.
                    wait_thawed(&frozen);
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Write);
        let _ = from.shutdown(Shutdown::Read);
    });
}
