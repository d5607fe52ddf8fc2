//! One server process of a fixture — a `redis-server`, an etcd member, a
//! ZooKeeper server: spawned by its fixture's own launcher, then killed,
//! paused and resumed for real, and on drop resumed, killed and its
//! directory removed. A restart is the fixture's: kill, then its launcher.

use std::path::PathBuf;
use std::process::Child;

pub struct Process {
    child: Option<Child>,
    /// The server's working directory, removed on drop.
    dir: PathBuf,
}

impl Process {
    /// Not started yet; `dir` is the server's to use and is removed on drop.
    pub fn new(dir: PathBuf) -> Process {
        Process { child: None, dir }
    }

    pub fn dir(&self) -> &PathBuf {
        &self.dir
    }

    /// Started by the fixture's launcher.
    pub fn started(&mut self, child: Child) {
        self.child = Some(child);
    }

    /// Not killed (a paused server still runs).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// SIGSTOP: the kernel still accepts connections; nothing answers.
    pub fn pause(&self) {
        super::os::kill(self.pid(), libc::SIGSTOP);
    }

    pub fn resume(&self) {
        super::os::kill(self.pid(), libc::SIGCONT);
    }

    /// kill -9, and reaped.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            super::os::kill(child.id(), libc::SIGCONT);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
