//! `leaderd status --watch` against a real Redis and a real handover: in a
//! real terminal (tmux: the pane is captured and read back) the view shows
//! the new leader and the change with its time, and Ctrl-C ends it with
//! exit 0; without a terminal it prints one line (or JSON object) per
//! change, not one per look.

use crate::support::{self, BIN, FAST, Leaderd, Redis, WAIT, eventually, on_redis};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

/// A tmux server of the test's own (its own socket), killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// Runs `command` (words) in a detached 160×40 session `w`, whose pane
    /// stays after the command exits so its exit status can be read.
    fn start(name: &str, command: &[&str]) -> Tmux {
        let tmux = Tmux {
            socket: format!("leaderd-test-{name}-{}", std::process::id()),
        };
        // The command as separate words: tmux runs it without a shell, so
        // Ctrl-C reaches leaderd alone and the pane's exit status is its.
        let mut args = vec![
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "w",
            "-x",
            "160",
            "-y",
            "40",
            "--",
        ];
        args.extend_from_slice(command);
        tmux.run(&args);
        tmux.run(&["set-option", "-t", "w", "remain-on-exit", "on"]);
        tmux
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux runs (Debian: apt-get install tmux; scripts/test installs it)");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The pane's text as shown now.
    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "w"])
    }

    /// Waits for the screen to show every one of `needles`; returns it.
    fn wait_for(&self, needles: &[&str]) -> String {
        let mut last = String::new();
        eventually(WAIT, &format!("the pane to show {needles:?}"), || {
            last = self.screen();
            needles
                .iter()
                .all(|n| last.contains(n))
                .then(|| last.clone())
        })
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

/// `env -i PATH=… leaderd status --watch --redis URL --key KEY EXTRA…`
fn watch_command(redis: &Redis, key: &str, extra: &[&str]) -> Vec<String> {
    let mut words: Vec<String> = ["env", "-i", "PATH=/usr/bin:/bin", BIN, "status", "--watch"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    words.extend([
        "--redis".into(),
        redis.url(),
        "--key".into(),
        key.to_string(),
    ]);
    words.extend(extra.iter().map(|s| s.to_string()));
    words
}

fn two_candidates(redis: &Redis, key: &str) -> (Vec<Leaderd>, usize, u64) {
    let nodes = vec![
        on_redis(redis, key, "c1", FAST),
        on_redis(redis, key, "c2", FAST),
    ];
    let (leader, token) = support::the_leader(&nodes, WAIT);
    // Both registered before the watch starts: its first look then lists
    // both, and a later registration is no change the tests must expect.
    eventually(WAIT, "both candidates registered", || {
        let (_, body) = nodes[leader].leader()?;
        (body["candidates"].as_array()?.len() == 2).then_some(())
    });
    (nodes, leader, token)
}

#[test]
fn the_terminal_view_follows_a_handover_and_ctrl_c_exits_0() {
    let redis = Redis::start();
    let key = support::key("watch-tty");
    let (mut nodes, leader, token) = two_candidates(&redis, &key);
    let (old, new) = (nodes[leader].id.clone(), nodes[1 - leader].id.clone());
    let dir = support::Scratch::new("watch-tty");
    let exit_file = dir.join("exit");
    // A shell in front only to write leaderd's exit status to a file:
    // tmux sometimes marks the pane dead without reporting the status.
    // The shell ignores SIGINT (Ctrl-C goes to the whole foreground group);
    // leaderd installs its own handler whatever it inherits.
    let script = format!(
        "trap '' INT; \"$@\"; echo $? > {}",
        support::path_str(&exit_file)
    );
    let mut words = vec!["sh".to_string(), "-c".to_string(), script, "sh".to_string()];
    words.extend(watch_command(&redis, &key, &["--interval", "200ms"]));
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let tmux = Tmux::start("watch", &words);
    let before = tmux.wait_for(&[
        &format!("{key}: held by {old}, fencing token {token}"),
        "2 candidate(s), in the order they would lead:",
        &format!("{old} leads, fencing token {token}"),
    ]);
    assert!(before.contains("Ctrl-C quits"), "{before}");

    nodes[leader].signal("TERM");
    nodes[leader].wait_exit(WAIT);
    let after = tmux.wait_for(&[
        &format!("{key}: held by {new}, fencing token"),
        &format!("{old} → {new}"),
    ]);
    // Redrawn in place: the old lease line is gone from the screen.
    assert!(
        !after.contains(&format!("held by {old}")),
        "the view was not redrawn:\n{after}"
    );
    let change = after
        .lines()
        .find(|l| l.contains(&format!("{old} → {new}")))
        .unwrap();
    // `  HH:MM:SS.mmm  c1 → c2, fencing token N`
    let stamp = change.split_whitespace().next().unwrap();
    assert!(
        stamp.len() == 12 && stamp.as_bytes()[2] == b':' && stamp.as_bytes()[8] == b'.',
        "no time on the change: {change}"
    );
    eprintln!("the pane after the handover:\n{after}");

    tmux.run(&["send-keys", "-t", "w", "C-c"]);
    let status = eventually(WAIT, "the watch to exit", || {
        std::fs::read_to_string(&exit_file)
            .ok()
            .filter(|s| s.ends_with('\n'))
    });
    assert_eq!(status, "0\n", "Ctrl-C ends status --watch with exit 0");
}

#[test]
fn without_a_terminal_it_prints_one_json_object_per_change() {
    let redis = Redis::start();
    let key = support::key("watch-json");
    let (mut nodes, leader, token) = two_candidates(&redis, &key);
    let (old, new) = (nodes[leader].id.clone(), nodes[1 - leader].id.clone());
    let mut watch = support::command(&[
        "status",
        "--watch",
        "--json",
        "--interval",
        "100ms",
        "--redis",
        &redis.url(),
        "--key",
        &key,
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .expect("spawn status --watch");
    let lines = Arc::new(Mutex::new(Vec::<serde_json::Value>::new()));
    let sink = lines.clone();
    let stdout = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let json =
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            sink.lock().unwrap().push(json);
        }
    });
    let led_by = |id: &str| {
        let id = id.to_string();
        let lines = lines.clone();
        move || {
            let lines = lines.lock().unwrap();
            lines.iter().find(|l| l["leader"] == id.as_str()).cloned()
        }
    };
    let first = eventually(WAIT, "a line with the first leader", led_by(&old));
    assert_eq!(first["fencing_token"], token);
    assert_eq!(first["candidates"].as_array().map(Vec::len), Some(2));
    // Looks every 100 ms for a second without a change: no new line.
    std::thread::sleep(std::time::Duration::from_secs(1));
    let quiet = lines.lock().unwrap().len();
    assert_eq!(
        quiet,
        1,
        "lines without a change: {:?}",
        lines.lock().unwrap()
    );

    nodes[leader].signal("TERM");
    nodes[leader].wait_exit(WAIT);
    let next = eventually(WAIT, "a line with the next leader", led_by(&new));
    assert!(next["fencing_token"].as_u64() > Some(token), "{next}");
    assert!(
        next["at"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{next}"
    );

    support::send_signal(watch.id(), "INT");
    let status = eventually(WAIT, "the watch to exit", || watch.try_wait().unwrap());
    assert_eq!(status.code(), Some(0));
    let all = lines.lock().unwrap().clone();
    for pair in all.windows(2) {
        let same = |l: &serde_json::Value| {
            (
                l["leader"].clone(),
                l["fencing_token"].clone(),
                l["candidates"].clone(),
            )
        };
        assert_ne!(
            same(&pair[0]),
            same(&pair[1]),
            "a line without a change: {all:?}"
        );
    }
}
