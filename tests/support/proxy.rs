//! A loopback TCP proxy: the fixture's stand-in for a DNS name that a managed
//! Redis moves to a new primary on failover. New connections go to the
//! current target; connections already made stay where they were.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};

pub struct Proxy {
    pub port: u16,
    target: Arc<AtomicU16>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `127.0.0.1:target`.
    pub fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("bound").port();
        let target = Arc::new(AtomicU16::new(target));
        let to = target.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let port = to.load(Ordering::SeqCst);
                let Ok(server) = TcpStream::connect(("127.0.0.1", port)) else {
                    continue; // the client sees its connection closed
                };
                pipe(
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                );
                pipe(server, client);
            }
        });
        Proxy { port, target }
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
fn pipe(mut from: TcpStream, mut to: TcpStream) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
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
