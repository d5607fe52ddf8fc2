//! A worker's health endpoint for the health-gating tests: a real HTTP
//! server on a free loopback port that answers `GET` with 200 or 503 as the
//! test sets it (or alternately, to flap), and records when it answered
//! each check on `CLOCK_MONOTONIC`, the clock the probe child stamps.

use super::os::mono_ns;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Healthy,
    Unhealthy,
    /// 503 and 200 in turn, one per check.
    Flapping,
}

/// One check answered: when, and whether it passed.
#[derive(Debug, Clone, Copy)]
pub struct Answered {
    pub ns: u128,
    pub passed: bool,
}

pub struct Worker {
    pub port: u16,
    mode: Arc<AtomicU8>,
    answered: Arc<Mutex<Vec<Answered>>>,
}

impl Worker {
    pub fn start(mode: Mode) -> Worker {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the worker's endpoint");
        let port = listener.local_addr().expect("bound").port();
        let worker = Worker {
            port,
            mode: Arc::new(AtomicU8::new(mode as u8)),
            answered: Arc::new(Mutex::new(Vec::new())),
        };
        let (mode, answered) = (worker.mode.clone(), worker.answered.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                answer(stream, &mode, &answered);
            }
        });
        worker
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/ready", self.port)
    }

    pub fn set(&self, mode: Mode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }

    pub fn answered(&self) -> Vec<Answered> {
        self.answered.lock().expect("lock").clone()
    }

    /// When the `n`-th failed check (1-based) after `since` was answered.
    pub fn nth_failure_after(&self, since: u128, n: usize) -> Option<u128> {
        self.answered()
            .into_iter()
            .filter(|a| a.ns > since && !a.passed)
            .nth(n - 1)
            .map(|a| a.ns)
    }
}

fn answer(mut stream: TcpStream, mode: &AtomicU8, answered: &Mutex<Vec<Answered>>) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone stream"));
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
            break;
        }
    }
    let mut log = answered.lock().expect("lock");
    let passed = match mode.load(Ordering::SeqCst) {
        m if m == Mode::Healthy as u8 => true,
        m if m == Mode::Unhealthy as u8 => false,
        _ => log.last().is_none_or(|a| !a.passed),
    };
    log.push(Answered {
        ns: mono_ns(),
        passed,
    });
    drop(log);
    let code = if passed {
        "200 OK"
    } else {
        "503 Service Unavailable"
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {code}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    );
}
