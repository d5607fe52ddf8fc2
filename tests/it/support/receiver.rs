//! A real HTTP server on a free loopback port that records what it receives
//! (webhooks) and answers as a test tells it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request a [`Receiver`] got.
#[derive(Debug, Clone)]
pub struct Received {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// How a [`Receiver`] answers its n-th request (0-based).
#[derive(Debug, Clone, Copy)]
pub enum Answer {
    Status(u16),
    Hang,
}

/// A real HTTP server on a free loopback port that records what it receives.
pub struct Receiver {
    pub port: u16,
    pub received: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    pub fn start(answer: fn(usize) -> Answer) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind receiver");
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let sink = received.clone();
        std::thread::spawn(move || {
            for (n, stream) in listener.incoming().enumerate() {
                let Ok(stream) = stream else { continue };
                let sink = sink.clone();
                std::thread::spawn(move || serve_one(stream, n, answer, sink));
            }
        });
        Receiver { port, received }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    pub fn requests(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

fn serve_one(
    mut stream: TcpStream,
    n: usize,
    answer: fn(usize) -> Answer,
    sink: Arc<Mutex<Vec<Received>>>,
) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone stream"));
    let mut headers = Vec::new();
    let mut line = String::new();
    let _ = reader.read_line(&mut line); // request line
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.trim_end().split_once(':') {
            headers.push((name.trim().to_string(), value.trim().to_string()));
        }
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
    sink.lock().unwrap().push(Received { headers, body });
    match answer(n) {
        Answer::Status(code) => {
            let _ = write!(
                stream,
                "HTTP/1.1 {code} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
        }
        Answer::Hang => std::thread::sleep(Duration::from_secs(60)),
    }
}
