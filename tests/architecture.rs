//! The layering the README describes, checked on the source: no two files of
//! `src/` import each other, and the binary only parses, builds a `Checker`,
//! renders and maps the verdict.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

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

/// `runtime/driver.rs` → ["runtime", "driver"]; `runtime/mod.rs` → ["runtime"].
fn module_of(file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src()).unwrap();
    let mut parts: Vec<String> = rel.iter().map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string()).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts
}

/// The file a module path names, trying the longest prefix first.
fn file_of(module: &[String], files: &BTreeMap<Vec<String>, PathBuf>) -> Option<Vec<String>> {
    (1..=module.len()).rev().map(|n| module[..n].to_vec()).find(|m| files.contains_key(m))
}

/// Modules a file refers to through `crate::…` and `super::…` paths.
fn imports(file: &Path, files: &BTreeMap<Vec<String>, PathBuf>) -> BTreeSet<Vec<String>> {
    let text = std::fs::read_to_string(file).unwrap();
    let me = module_of(file);
    let mut out = BTreeSet::new();
    for (prefix, base) in [
        ("crate::", Vec::new()),
        ("super::", {
            // `super` of runtime/driver.rs is runtime; of runtime/mod.rs (module runtime) the crate.
            let mut b = me.clone();
            b.pop();
            b
        }),
    ] {
        for (i, _) in text.match_indices(prefix) {
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
            if let Some(m) = file_of(&path, files) {
                out.insert(m);
            }
        }
    }
    out.remove(&me);
    out
}

#[test]
fn no_two_files_import_each_other() {
    let mut all = Vec::new();
    rust_files(&src(), &mut all);
    let files: BTreeMap<Vec<String>, PathBuf> =
        all.iter().filter(|f| !f.ends_with("main.rs")).map(|f| (module_of(f), f.clone())).collect();
    let graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> =
        files.iter().map(|(m, f)| (m.clone(), imports(f, &files))).collect();
    let mut circles = Vec::new();
    for (a, deps) in &graph {
        for b in deps {
            // A parent module declaring its children (`mod x;`) is not an import.
            if b.starts_with(a) || a.starts_with(b) {
                continue;
            }
            if graph.get(b).is_some_and(|d| d.contains(a)) && a < b {
                circles.push(format!("{} <-> {}", a.join("/"), b.join("/")));
            }
        }
    }
    assert!(graph.len() > 20, "found the modules: {:?}", graph.keys().collect::<Vec<_>>());
    assert!(
        graph[&vec!["engine".to_string(), "driver".to_string()]].contains(&vec!["engine".into(), "feeds".into()]),
        "the import scanner sees driver → feeds"
    );
    assert!(circles.is_empty(), "files importing each other: {circles:?}");
}

#[test]
fn the_binary_only_parses_checks_through_the_checker_and_renders() {
    let main = std::fs::read_to_string(src().join("main.rs")).unwrap();
    for call in ["plan::build", "child::run", "contract::check(", "driver::", "locate::"] {
        assert!(!main.contains(call), "main.rs calls {call} itself");
    }
    assert!(main.contains("Checker::new()"), "main.rs builds a Checker");
}
