//! The guard process (`leaderd __guard`): leads the child's process group and
//! kills it when leaderd goes away. See `process` for why it exists.

use std::io::Read;

/// The hidden first argument that turns `leaderd` into a guard.
pub const ARG: &str = "__guard";

/// Waits for EOF on stdin (the lifeline from leaderd), then SIGKILLs its own
/// process group, itself included. Ignores the signals leaderd sends to the
/// group to stop or notify the child, so it outlives the child's stop.
pub fn main() -> ! {
    // Already ignored from birth (set before exec); repeated in case the
    // guard was started some other way.
    for signal in super::process::GUARD_IGNORES {
        // SAFETY: setting a disposition to SIG_IGN before any other thread exists.
        unsafe {
            libc::signal(signal, libc::SIG_IGN);
        }
    }
    let mut stdin = std::io::stdin().lock();
    let mut buf = [0u8; 64];
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    // SAFETY: plain syscall; 0 addresses our own process group.
    unsafe {
        libc::kill(0, libc::SIGKILL);
    }
    std::process::exit(137)
}
