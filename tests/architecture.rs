//! The house docs/architecture.md describes ("Where things are"), checked on the
//! source: every room of `src/` stands on a floor and imports only rooms on
//! floors below it; no two files import each other; no source file is longer
//! than 500 lines; `main.rs` only parses, dispatches and maps the exit code.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The floors, bottom first. A room imports only rooms on a lower floor;
/// rooms on one floor do not import each other. Data flows up: a model is
/// read (`model`), checked statically (`contract`), its protocol inferred
/// (`plan`), its folder's files classified by it (`folder`), driven (`engine`), explained (`diagnose`), a
/// failing node cut out as a new model (`edit`) to file upstream (`repro`), judged (`checks`), gathered into a
/// report (`checker`), shown to a caller (`protocol`, `caller`), repaired and re-checked (`remedy`), rendered
/// (`render`, `schema`), and commanded (`cli`).
const FLOORS: &[&[&str]] = &[
    &["finding", "exit", "error", "memory"],
    &["model"],
    &["contract"],
    &["plan"],
    &["folder"],
    &["consumer"],
    &["engine"],
    &["diagnose"],
    &["edit"],
    &["repro"],
    &["checks"],
    &["checker"],
    &["protocol", "caller", "remedy"],
    &["render"],
    &["schema"],
    // The library's root: declares the rooms and re-exports; nothing in them imports it.
    &["lib"],
    // The binary.
    &["cli", "main"],
];

fn src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn all_files() -> Vec<PathBuf> {
    let mut all = Vec::new();
    rust_files(&src(), &mut all);
    all.sort();
    all
}

/// `engine/driver.rs` → ["engine", "driver"]; `engine/mod.rs` → ["engine"]; `lib.rs` → [].
fn module_of(file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src()).unwrap();
    let mut parts: Vec<String> = rel.iter().map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string()).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts
}

/// The room a file is in: its first folder under `src/`, or its own name.
fn room_of(file: &Path) -> String {
    let rel = file.strip_prefix(src()).unwrap();
    rel.iter().next().unwrap().to_string_lossy().trim_end_matches(".rs").to_string()
}

fn floor_of(room: &str) -> Option<usize> {
    FLOORS.iter().position(|f| f.contains(&room))
}

/// The source without comments: doc links name paths that are not imports.
fn code_of(file: &Path) -> String {
    let text = std::fs::read_to_string(file).unwrap();
    text.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// The file a module path names, trying the longest prefix first.
fn file_of(module: &[String], files: &BTreeMap<Vec<String>, PathBuf>) -> Option<Vec<String>> {
    (1..=module.len()).rev().map(|n| module[..n].to_vec()).find(|m| files.contains_key(m))
}

/// Modules a file refers to through `crate::…`, `super::…` and (in the
/// binary) `onnx_contract::…` paths. `crate::X` where X is no module is an
/// item of the crate root: the module `[]`.
fn imports(file: &Path, files: &BTreeMap<Vec<String>, PathBuf>) -> BTreeSet<Vec<String>> {
    let text = code_of(file);
    let me = module_of(file);
    let mut out = BTreeSet::new();
    let in_binary = matches!(room_of(file).as_str(), "cli" | "main");
    let mut prefixes = vec![
        ("super::", {
            // `super` of engine/driver.rs is engine; of engine/mod.rs (module engine) the crate.
            let mut b = me.clone();
            b.pop();
            b
        }),
        ("onnx_contract::", Vec::new()),
    ];
    if !in_binary {
        prefixes.push(("crate::", Vec::new()));
    }
    for (prefix, base) in prefixes {
        for (i, _) in text.match_indices(prefix) {
            if text[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let rest = &text[i + prefix.len()..];
            let mut path = base.clone();
            let mut group = rest;
            loop {
                let seg: String = group.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if seg.is_empty() {
                    // `super::{a, b}`: each member of the group.
                    if let Some(inner) = group.strip_prefix('{') {
                        for item in inner.split('}').next().unwrap_or("").split(',') {
                            let name = item.trim().split("::").next().unwrap_or("").trim().to_string();
                            let mut p = path.clone();
                            p.push(name);
                            if let Some(m) = file_of(&p, files) {
                                out.insert(m);
                            }
                        }
                    }
                    break;
                }
                path.push(seg.clone());
                group = &group[seg.len()..];
                match group.strip_prefix("::") {
                    Some(g) => group = g,
                    None => break,
                }
            }
            match file_of(&path, files) {
                Some(m) => {
                    out.insert(m);
                }
                // `crate::Error`, `onnx_contract::Checker`: the root's own items.
                None if prefix != "super::" => {
                    out.insert(Vec::new());
                }
                None => {}
            }
        }
    }
    out.remove(&me);
    out
}

struct House {
    files: BTreeMap<Vec<String>, PathBuf>,
    graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
}

fn house() -> House {
    let all = all_files();
    // The library's modules; the binary's (`main.rs`, `cli/`) are scanned on their own.
    let lib_files: BTreeMap<Vec<String>, PathBuf> = all
        .iter()
        .filter(|f| !matches!(room_of(f).as_str(), "cli" | "main"))
        .map(|f| (module_of(f), f.clone()))
        .collect();
    let graph = all.iter().map(|f| (module_of(f), imports(f, &lib_files))).collect();
    House { files: all.iter().map(|f| (module_of(f), f.clone())).collect(), graph }
}

fn room_of_module(m: &[String]) -> String {
    m.first().cloned().unwrap_or_else(|| "lib".into())
}

#[test]
fn every_room_stands_on_a_floor_and_imports_only_rooms_below() {
    let h = house();
    let mut unplaced = BTreeSet::new();
    let mut upward = Vec::new();
    for (m, deps) in &h.graph {
        let file = &h.files[m];
        let room = room_of(file);
        let Some(floor) = floor_of(&room) else {
            unplaced.insert(room);
            continue;
        };
        for d in deps {
            let to = room_of_module(d);
            if to == room {
                continue;
            }
            let Some(to_floor) = floor_of(&to) else {
                unplaced.insert(to);
                continue;
            };
            if to_floor >= floor {
                upward.push(format!(
                    "{} (floor {floor}) imports {} (floor {to_floor})",
                    file.strip_prefix(src()).unwrap().display(),
                    if d.is_empty() { "lib.rs".to_string() } else { d.join("/") }
                ));
            }
        }
    }
    assert!(unplaced.is_empty(), "rooms on no floor (add them to FLOORS and to docs/architecture.md): {unplaced:?}");
    assert!(upward.is_empty(), "imports from a room to a room on its floor or above:\n{}", upward.join("\n"));
    // The scanner sees the imports it must see, so an empty list above means something.
    let sees = |from: &[&str], to: &[&str]| {
        let from: Vec<String> = from.iter().map(|s| s.to_string()).collect();
        let to: Vec<String> = to.iter().map(|s| s.to_string()).collect();
        h.graph.get(&from).is_some_and(|d| d.contains(&to))
    };
    assert!(sees(&["checks", "cache"], &["engine", "feeds"]), "the scanner sees checks/cache → engine/feeds");
    assert!(sees(&["cli", "check"], &["render"]), "the scanner sees cli/check → render (through onnx_contract::)");
    assert!(sees(&["cli", "check"], &[]), "the scanner sees cli/check → lib.rs (onnx_contract::Checker)");
}

#[test]
fn no_two_files_import_each_other() {
    let h = house();
    let mut circles = Vec::new();
    for (a, deps) in &h.graph {
        for b in deps {
            // A parent module declaring its children (`mod x;`) is not an import.
            if b.starts_with(a) || a.starts_with(b) {
                continue;
            }
            if h.graph.get(b).is_some_and(|d| d.contains(a)) && a < b {
                circles.push(format!("{} <-> {}", a.join("/"), b.join("/")));
            }
        }
    }
    assert!(h.graph.len() > 60, "found the modules: {:?}", h.graph.keys().collect::<Vec<_>>());
    assert!(circles.is_empty(), "files importing each other: {circles:?}");
}

#[test]
fn no_source_file_is_over_500_lines() {
    let long: Vec<String> = all_files()
        .iter()
        .map(|f| {
            (f.strip_prefix(src()).unwrap().display().to_string(), std::fs::read_to_string(f).unwrap().lines().count())
        })
        .filter(|(_, n)| *n > 500)
        .map(|(f, n)| format!("{f}: {n} lines"))
        .collect();
    assert!(long.is_empty(), "split these by what they hold: {long:?}");
}

#[test]
fn main_only_parses_dispatches_and_maps_the_exit_code() {
    let main = std::fs::read_to_string(src().join("main.rs")).unwrap();
    let lines = main.lines().count();
    assert!(lines < 100, "main.rs has {lines} lines: per-command code belongs in cli/");
    assert!(main.contains("cli::run("), "main.rs dispatches through cli::run");
    // Commands work through the library's front doors, never its engine.
    for f in all_files().iter().filter(|f| matches!(room_of(f).as_str(), "cli" | "main")) {
        let text = std::fs::read_to_string(f).unwrap();
        for call in ["plan::build", "child::run", "contract::check(", "driver::", "locate::"] {
            assert!(!text.contains(call), "{} calls {call} itself", f.display());
        }
    }
    let check = std::fs::read_to_string(src().join("cli").join("check.rs")).unwrap();
    assert!(check.contains("Checker::new()"), "check builds a Checker");
}

/// docs/architecture.md ("Where things are") names every room of `src/`,
/// and every room `FLOORS` names is in `src/`.
#[test]
fn the_readme_names_every_room() {
    let page = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md")).unwrap();
    let section =
        page.split("# Where things are").nth(1).expect("docs/architecture.md has a \"Where things are\" section");
    let section = section.split("\n## ").next().unwrap();
    let mut rooms: BTreeSet<String> = BTreeSet::new();
    for e in std::fs::read_dir(src()).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        rooms.insert(if p.is_dir() { format!("src/{name}/") } else { format!("src/{name}") });
    }
    let missing: Vec<&String> = rooms.iter().filter(|r| !section.contains(&format!("`{r}`"))).collect();
    assert!(missing.is_empty(), "rooms docs/architecture.md's \"Where things are\" does not name: {missing:?}");
    for room in FLOORS.iter().flat_map(|f| f.iter()) {
        let named = rooms.iter().any(|r| r == &format!("src/{room}/") || r == &format!("src/{room}.rs"));
        assert!(named, "FLOORS names `{room}`, which is not in src/");
    }
}
