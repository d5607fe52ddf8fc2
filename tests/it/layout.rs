//! The crate's layout keeps its promise (issue #25): dependencies point
//! down, with no import circle between two files of `src/` nor between two
//! of its top-level modules (`config` never reaches up to `cli` or `lease`).
//! An import is any `crate::`, `super::` or `self::` path outside comments
//! and test modules, resolved to the file of the deepest module it names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, by its module path (`["lease", "redis"]`).
fn modules(root: &Path, dir: &Path, out: &mut BTreeMap<Vec<String>, PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src/") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            modules(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path
                .strip_prefix(root)
                .expect("under src/")
                .with_extension("");
            let mut name: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                name.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                name.pop();
            }
            out.insert(name, path);
        }
    }
}

/// The code a file contributes outside tests: comments dropped, and its
/// `#[cfg(test)]` items (test modules, test helpers) cut out.
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]" {
            // Skip the item: to the end of its braces, or its `;`.
            let mut depth = 0i32;
            for next in lines.by_ref() {
                depth += next.matches('{').count() as i32 - next.matches('}').count() as i32;
                if depth <= 0 && (next.contains('}') || next.trim_end().ends_with(';')) {
                    break;
                }
            }
            continue;
        }
        out.push_str(line.split("//").next().unwrap_or(""));
        out.push('\n');
    }
    out
}

/// The paths a file names: `crate::a::b`, `super::x`, and each item of a
/// `crate::{a::b, c}` group.
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < bytes.len() {
        let starts = ["crate::", "super::", "self::"]
            .into_iter()
            .find(|p| bytes[i..].starts_with(p.as_bytes()) && (i == 0 || !ident(bytes[i - 1])));
        let Some(start) = starts else {
            i += 1;
            continue;
        };
        let head = start.trim_end_matches("::");
        let mut j = i + start.len();
        let mut segs = vec![head.to_string()];
        loop {
            let from = j;
            while j < bytes.len() && ident(bytes[j]) {
                j += 1;
            }
            if j > from {
                segs.push(code[from..j].to_string());
            }
            if code[j..].starts_with("::") {
                j += 2;
            } else {
                break;
            }
        }
        if code[j..].starts_with('{') {
            let end = code[j..].find('}').map_or(code.len(), |e| j + e);
            for item in code[j + 1..end].split(',') {
                let mut path = segs.clone();
                path.extend(
                    item.split("::")
                        .map(|s| s.trim().trim_matches(['{', '}']).to_string())
                        .filter(|s| !s.is_empty() && !s.starts_with("self")),
                );
                found.push(path);
            }
            j = end;
        } else {
            found.push(segs);
        }
        i = j.max(i + 1);
    }
    found
}

/// The file of the deepest module `path` names, seen from module `from`.
fn resolve(
    files: &BTreeMap<Vec<String>, PathBuf>,
    from: &[String],
    path: &[String],
) -> Option<PathBuf> {
    let mut base: Vec<String> = Vec::new();
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => rest = &path[1..],
        Some("self") => {
            base = from.to_vec();
            rest = &path[1..];
        }
        Some("super") => {
            base = from.to_vec();
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    (0..=rest.len()).rev().find_map(|n| {
        let mut module = base.clone();
        module.extend_from_slice(&rest[..n]);
        files.get(&module).cloned()
    })
}

/// Files (or modules) that reach each other: each circle once, as a list.
fn circles<T: Ord + Clone>(edges: &BTreeMap<T, BTreeSet<T>>) -> Vec<Vec<T>> {
    let reach = |from: &T| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(x) = todo.pop() {
            for y in edges.get(&x).into_iter().flatten() {
                if seen.insert(y.clone()) {
                    todo.push(y.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&T, BTreeSet<T>> = edges.keys().map(|k| (k, reach(k))).collect();
    let mut out: Vec<Vec<T>> = Vec::new();
    for (a, from_a) in &reached {
        let circle: Vec<T> = reached
            .iter()
            .filter(|(b, from_b)| from_a.contains(b) && from_b.contains(a))
            .map(|(b, _)| (*b).clone())
            .collect();
        if circle.len() > 1 && !out.contains(&circle) {
            out.push(circle);
        }
    }
    out
}

fn graph() -> (
    BTreeMap<PathBuf, BTreeSet<PathBuf>>,
    BTreeMap<String, BTreeSet<String>>,
) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = BTreeMap::new();
    modules(&root, &root, &mut files);
    let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    let mut tops: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let top = |m: &Path| {
        let rel = m.strip_prefix(&root).expect("under src/");
        let first = rel.components().next().expect("a component");
        let name = first.as_os_str().to_string_lossy();
        name.trim_end_matches(".rs").to_string()
    };
    for (module, file) in &files {
        let name = file.file_name().expect("a name").to_string_lossy();
        if name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("read a source file");
        for path in paths(&code(&text)) {
            let Some(target) = resolve(&files, module, &path) else {
                continue;
            };
            if &target == file {
                continue;
            }
            let (a, b) = (top(file), top(&target));
            if a != b && !["lib", "main"].contains(&a.as_str()) {
                tops.entry(a).or_default().insert(b);
            }
            edges.entry(file.clone()).or_default().insert(target);
        }
    }
    (edges, tops)
}

#[test]
fn no_import_circle_between_files_or_top_level_modules() {
    let (files, modules) = graph();
    assert!(
        files.values().map(BTreeSet::len).sum::<usize>() > 100,
        "the import graph looks empty: the parser is broken"
    );
    let file_circles = circles(&files);
    let module_circles = circles(&modules);
    assert!(
        file_circles.is_empty() && module_circles.is_empty(),
        "import circles: files {file_circles:#?}, top-level modules {module_circles:?}"
    );
}

/// The checker is shown to fail: a planted circle is found.
#[test]
fn the_circle_finder_finds_a_planted_circle() {
    let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    edges.entry("config").or_default().insert("lease");
    edges.entry("lease").or_default().insert("config");
    edges.entry("cli").or_default().insert("config");
    assert_eq!(circles(&edges), vec![vec!["config", "lease"]]);
    let from = ["config".to_string(), "backend".to_string()];
    let names = paths("use super::{error::ConfigError, options::Spec};\nuse crate::lease::x;");
    assert!(names.contains(&vec!["super".into(), "error".into(), "ConfigError".into()]));
    assert!(names.contains(&vec!["crate".into(), "lease".into(), "x".into()]));
    let mut files = BTreeMap::new();
    files.insert(
        vec!["config".to_string(), "error".to_string()],
        PathBuf::from("e.rs"),
    );
    assert_eq!(
        resolve(&files, &from, &names[0]),
        Some(PathBuf::from("e.rs"))
    );
}

/// The imports inside one folder of `src/` (`dir`, relative to `src/`)
/// that run back up: from a file to its folder's `mod.rs` while `mod.rs`
/// uses that file (the parent names `child::…`), a loop the circle finder
/// does not see, since a parent reaches its children by their bare names.
fn back_up(dir: &str) -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let folder = root.join(dir);
    let parent = std::fs::read_to_string(folder.join("mod.rs")).expect("the folder's mod.rs");
    let parent = code(&parent);
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&folder).expect("read the folder") {
        let path = entry.expect("an entry").path();
        let Some(name) = path.file_stem().map(|s| s.to_string_lossy().into_owned()) else {
            continue;
        };
        if path.extension().is_none_or(|e| e != "rs") || name == "mod" || name.ends_with("tests") {
            continue;
        }
        let uses_child = parent.contains(&format!("{name}::"));
        let text = code(&std::fs::read_to_string(&path).expect("read a file"));
        // `super::x` where `x` is no sibling: an item of mod.rs itself.
        let siblings = |first: &str| {
            folder.join(format!("{first}.rs")).exists() || folder.join(first).is_dir()
        };
        let to_parent = paths(&text).into_iter().any(|p| {
            p.first().is_some_and(|s| s == "super")
                && p.get(1).is_some_and(|s| s != "super" && !siblings(s))
        });
        if uses_child && to_parent {
            found.push((format!("{dir}/{name}.rs"), format!("{dir}/mod.rs")));
        }
    }
    found.sort();
    found
}

/// Issue #49: inside the Redis lease, at most two imports run back up (11
/// before its client moved out); the client rooms import no lease backend,
/// and the fence uses the client rooms, not a lease backend's insides.
#[test]
fn the_redis_lease_keeps_its_floors_and_the_fence_and_clients_no_backend() {
    let up = back_up("lease/redis");
    assert!(up.len() <= 2, "imports back up in src/lease/redis: {up:?}");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let backends = [
        "file",
        "redis",
        "redlock",
        "postgres",
        "etcd",
        "zookeeper",
        "kubernetes",
    ];
    for dir in ["fence", "client"] {
        let mut files = BTreeMap::new();
        modules(&root, &root.join(dir), &mut files);
        for file in files.values() {
            let text = code(&std::fs::read_to_string(file).expect("read a file"));
            for path in paths(&text) {
                let reaches = path.len() > 2
                    && path[0] == "crate"
                    && path[1] == "lease"
                    && backends.contains(&path[2].as_str());
                assert!(
                    !reaches,
                    "{} imports a lease backend: {}",
                    file.display(),
                    path.join("::")
                );
            }
        }
    }
}

/// The back-up finder is shown to find one: a planted child of the
/// runner's folder importing an item of its mod.rs, which names it back.
#[test]
fn the_back_up_finder_finds_a_planted_one() {
    // `runner/mod.rs` declares `mod worker;` and uses `worker::…`; a
    // `super::Outputs` in worker.rs (an item of mod.rs) would run back up.
    let text = "use super::Outputs;\nuse super::registry::Due;";
    let names = paths(text);
    assert!(names.iter().any(|p| p == &["super", "Outputs"]));
    let runner = back_up("runner");
    // worker.rs imports nothing of mod.rs today; election.rs does (Outputs,
    // Ident), and mod.rs uses election::…: the finder reports it.
    assert!(
        runner.iter().any(|(from, _)| from == "runner/election.rs"),
        "{runner:?}"
    );
}
