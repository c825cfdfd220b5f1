//! What a person reads: every fixture folder checked with no flags, piped
//! (no terminal) and with no `COLUMNS`, as a CI log gets it: no line wider
//! than 100 columns. A pass fits one screen (at most 40 lines); a failure
//! names its first error within the first 15 lines, and that error is the
//! one the JSON report leads with.

mod common;
use common::*;

const WIDTH: usize = 100;
const PASS_LINES: usize = 40;
const CAUSE_WITHIN: usize = 15;

fn folders() -> Vec<String> {
    let mut dirs: Vec<String> = std::fs::read_dir(root().join("models"))
        .unwrap()
        .filter_map(|e| {
            let p = e.ok()?.path();
            let has_onnx = walk(&p).iter().any(|f| f.extension().is_some_and(|x| x == "onnx"));
            (p.is_dir() && has_onnx).then(|| p.file_name().unwrap().to_string_lossy().into_owned())
        })
        .collect();
    dirs.sort();
    dirs
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries.filter_map(|e| e.ok().map(|e| e.path())).flat_map(|p| if p.is_dir() { walk(&p) } else { vec![p] }).collect()
}

/// Exit code, human lines, the JSON's first error code.
type Read = (i32, Vec<String>, Option<String>);

/// One folder as a person reads it, and its JSON's first error.
fn read(dir: &str) -> Read {
    let path = format!("models/{dir}");
    let out = bin().args(["check", &path]).env_remove("COLUMNS").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let (_, r) = json(&["check", "--format", "json", &path]);
    let first = r["files"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|f| f["findings"].as_array().unwrap().iter())
        .chain(r["findings"].as_array().unwrap())
        .find(|f| f["severity"] == "error")
        .map(|f| f["code"].as_str().unwrap().to_string());
    (out.status.code().unwrap_or(-1), text.lines().map(str::to_string).collect(), first)
}

#[test]
fn a_pass_fits_one_screen_and_a_failure_leads_with_its_cause_on_every_fixture_folder() {
    let dirs = folders();
    assert!(dirs.len() >= 40, "{dirs:?}");
    // Two at a time: the machine has two cores.
    let (a, b) = dirs.split_at(dirs.len() / 2);
    let results: Vec<(String, Read)> = std::thread::scope(|s| {
        let h = s.spawn(|| a.iter().map(|d| (d.clone(), read(d))).collect::<Vec<_>>());
        let mut mine: Vec<_> = b.iter().map(|d| (d.clone(), read(d))).collect();
        let mut all = h.join().unwrap();
        all.append(&mut mine);
        all
    });
    let mut report = Vec::new();
    for (dir, (code, lines, first)) in &results {
        let wide: Vec<&String> = lines.iter().filter(|l| l.chars().count() > WIDTH).collect();
        assert!(wide.is_empty(), "{dir}: lines wider than {WIDTH}: {wide:#?}");
        match code {
            0 => assert!(lines.len() <= PASS_LINES, "{dir}: a pass in {} lines:\n{}", lines.len(), lines.join("\n")),
            2 => {
                let at = lines.iter().position(|l| l.starts_with("first error: ")).unwrap_or(usize::MAX);
                assert!(at < CAUSE_WITHIN, "{dir}: first error at line {at}:\n{}", lines.join("\n"));
                let code = first.as_deref().unwrap_or("?");
                assert!(lines[at].contains(&format!("{code}:")), "{dir}: the JSON leads with {code}: {}", lines[at]);
            }
            other => panic!("{dir}: exit {other}"),
        }
        report.push(format!("{dir}: exit {code}, {} lines", lines.len()));
    }
    println!("{}", report.join("\n"));
}
