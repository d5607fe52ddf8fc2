//! A log writer that never blocks its caller and never panics.
//!
//! stderr is usually a pipe to a log shipper, a terminal or `| logger`. When
//! its reader stops, the pipe fills and a plain `write(2)` blocks; with one
//! runtime thread that froze renewals, the renew-deadline timer and the
//! child's stop, and two workers ran (issue #10). When its reader is gone,
//! the write fails with `EPIPE`, and tracing-subscriber's fallback
//! `eprintln!` panicked.
//!
//! So each formatted line is queued, with `try_send`, on a bounded channel
//! that a thread of its own drains into stderr. A full queue drops the line
//! and counts it ([`dropped_lines`], exported as
//! `leaderd_log_lines_dropped_total`); once lines flow again, one line says
//! how many were lost. A write that fails for good (a closed pipe) counts the
//! line as dropped too; nothing is retried and nothing panics.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tracing_subscriber::fmt::MakeWriter;

/// Lines held while stderr is slow, on top of the pipe's own buffer: at a
/// few hundred bytes a line, at most about 128 KiB, and many minutes of
/// output at the default level.
const QUEUE_LINES: usize = 512;
/// The "lines were dropped" notice, at most this often while drops go on.
const NOTICE_EVERY: Duration = Duration::from_secs(10);
/// A non-blocking stderr that is full is tried again after this long.
const RETRY_FULL: Duration = Duration::from_millis(10);

#[derive(Default)]
struct Counts {
    queued: AtomicU64,
    /// Written, or given up on: what `flush` waits for.
    done: AtomicU64,
    dropped: AtomicU64,
}

static COUNTS: OnceLock<Arc<Counts>> = OnceLock::new();

/// Lines lost so far: dropped on a full queue, or not writable.
pub fn dropped_lines() -> u64 {
    COUNTS
        .get()
        .map_or(0, |c| c.dropped.load(Ordering::Relaxed))
}

/// The `MakeWriter` handed to tracing-subscriber.
#[derive(Clone)]
pub struct Queue {
    tx: SyncSender<Vec<u8>>,
    counts: Arc<Counts>,
}

/// Starts the draining thread and returns the writer for the subscriber.
/// Without a thread (none could be started) lines go straight to stderr,
/// errors ignored: still no panic.
pub fn start() -> Queue {
    let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE_LINES);
    let counts = COUNTS.get_or_init(Arc::default).clone();
    let drain = counts.clone();
    let spawned = std::thread::Builder::new()
        .name("leaderd-log".into())
        .stack_size(256 * 1024)
        .spawn(move || run(rx, &drain));
    if let Err(e) = spawned {
        let _ = writeln!(
            std::io::stderr(),
            "leaderd: cannot start the log thread ({e}); logging synchronously"
        );
    }
    Queue { tx, counts }
}

/// Waits until every queued line was written or given up on, or `limit`.
pub fn flush(limit: Duration) {
    let Some(counts) = COUNTS.get() else { return };
    let until = Instant::now() + limit;
    while counts.done.load(Ordering::Acquire) < counts.queued.load(Ordering::Acquire)
        && Instant::now() < until
    {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The draining thread: writes each line whole; once it has caught up (the
/// queue is empty, so the notice itself has room), says how many lines were
/// dropped since it last said so, at most every [`NOTICE_EVERY`].
fn run(rx: Receiver<Vec<u8>>, counts: &Counts) {
    let mut stderr = std::io::stderr();
    let mut closed = false;
    let mut reported = 0;
    let mut last_notice: Option<Instant> = None;
    loop {
        let line = match rx.try_recv() {
            Ok(line) => line,
            Err(TryRecvError::Disconnected) => return,
            Err(TryRecvError::Empty) => {
                let dropped = counts.dropped.load(Ordering::Relaxed);
                let due = last_notice.is_none_or(|t| t.elapsed() >= NOTICE_EVERY);
                if !closed && dropped > reported && due {
                    // Through tracing, so it has the configured format.
                    tracing::warn!(
                        dropped = dropped - reported,
                        total = dropped,
                        "log lines were dropped: stderr was not read fast enough (see leaderd_log_lines_dropped_total)"
                    );
                    reported = dropped;
                    last_notice = Some(Instant::now());
                }
                match rx.recv() {
                    Ok(line) => line,
                    Err(_) => return,
                }
            }
        };
        if !closed {
            closed = !write_whole(&mut stderr, &line);
        }
        if closed {
            counts.dropped.fetch_add(1, Ordering::Relaxed);
        }
        counts.done.fetch_add(1, Ordering::Release);
    }
}

/// `false` once stderr cannot be written any more (closed, `EPIPE`).
fn write_whole(out: &mut impl Write, mut line: &[u8]) -> bool {
    while !line.is_empty() {
        match out.write(line) {
            Ok(0) => return false,
            Ok(n) => line = &line[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // stderr was handed over in non-blocking mode: wait, on this thread.
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(RETRY_FULL),
            Err(_) => return false,
        }
    }
    true
}

/// One event's bytes, queued whole when the subscriber drops it.
pub struct Line {
    buf: Vec<u8>,
    queue: Queue,
}

impl Write for Line {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let line = std::mem::take(&mut self.buf);
        let counts = &self.queue.counts;
        match self.queue.tx.try_send(line) {
            Ok(()) => {
                counts.queued.fetch_add(1, Ordering::Release);
            }
            Err(TrySendError::Full(_)) => {
                counts.dropped.fetch_add(1, Ordering::Relaxed);
            }
            // No draining thread: write here, never blocking for long on a
            // closed pipe, and never panicking.
            Err(TrySendError::Disconnected(line)) => {
                let _ = std::io::stderr().write_all(&line);
            }
        }
    }
}

impl<'a> MakeWriter<'a> for Queue {
    type Writer = Line;

    fn make_writer(&'a self) -> Line {
        Line {
            buf: Vec::new(),
            queue: self.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink that accepts `room` bytes, then fails as a closed pipe does.
    struct Pipe {
        got: Vec<u8>,
        room: usize,
    }

    impl Write for Pipe {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            if self.room == 0 {
                return Err(std::io::ErrorKind::BrokenPipe.into());
            }
            let n = bytes.len().min(self.room).min(3);
            self.got.extend_from_slice(&bytes[..n]);
            self.room -= n;
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_are_written_whole_across_short_writes_and_a_closed_pipe_is_survived() {
        let mut pipe = Pipe {
            got: Vec::new(),
            room: 10,
        };
        assert!(write_whole(&mut pipe, b"abcdefg\n"));
        assert_eq!(pipe.got, b"abcdefg\n");
        assert!(!write_whole(&mut pipe, b"hijk\n"), "EPIPE is the end");
    }

    #[test]
    fn a_full_queue_drops_and_counts_instead_of_blocking() {
        let (tx, rx) = std::sync::mpsc::sync_channel(2);
        let queue = Queue {
            tx,
            counts: Arc::default(),
        };
        for n in 0..5 {
            let mut line = queue.make_writer();
            writeln!(line, "line {n}").unwrap();
        }
        assert_eq!(queue.counts.queued.load(Ordering::Relaxed), 2);
        assert_eq!(queue.counts.dropped.load(Ordering::Relaxed), 3);
        assert_eq!(rx.try_iter().count(), 2);
    }
}
