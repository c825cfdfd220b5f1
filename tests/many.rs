//! Many folders at once: `check DIR…` (and `--from-list`, `--jobs`) gives each
//! folder the report `check DIR` gives it alone, one line each, and the exit
//! code of the worst; `merge` joins JSON reports made apart into the same.

mod common;
use common::*;
use serde_json::Value;

const FOLDERS: [&str; 3] = ["models/gpt2-tiny", "models/marian-pair-baked-past", "models/bert-embeddings"];

/// What must not differ between a folder checked alone and among others:
/// the verdict, and each file's verdict and finding codes.
fn essence(f: &Value) -> Value {
    let files: Vec<Value> = f["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            let codes: Vec<&Value> = x["findings"].as_array().unwrap().iter().map(|c| &c["code"]).collect();
            serde_json::json!([x["path"], x["verdict"], codes])
        })
        .collect();
    serde_json::json!([f["path"], f["verdict"], files])
}

#[test]
fn several_folders_get_their_own_reports_one_line_each_and_the_worst_exit_code() {
    let alone: Vec<Value> = FOLDERS.iter().map(|d| json(&["check", "--format", "json", d, "--no-fetch"]).1).collect();
    let mut args = vec!["check", "--format", "json", "--jobs", "2", "--no-fetch"];
    args.extend(FOLDERS);
    let (code, many) = json(&args);
    assert_eq!((code, many["verdict"].as_str()), (2, Some("fail")), "{many:#}");
    let folders = many["folders"].as_array().unwrap();
    assert_eq!(folders.len(), 3);
    for (one, among) in alone.iter().zip(folders) {
        assert_eq!(essence(one), essence(among));
    }
    // People: one line per folder and a total.
    let mut args = vec!["check", "--no-fetch"];
    args.extend(FOLDERS);
    let out = run(&args);
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(
        lines[1]
            .starts_with("FAIL  models/marian-pair-baked-past  first error: decoder_with_past_model.onnx: run-failed"),
        "{text}"
    );
    assert_eq!(lines[3], "FAIL: 3 folders checked, 1 failing");
    assert_eq!(out.status.code(), Some(2));
    // A list file, as a CI shard gets it; only passing folders: exit 0.
    let list = std::env::temp_dir().join(format!("onnx-contract-list-{}.txt", std::process::id()));
    std::fs::write(&list, "# shard 1 of 2\nmodels/gpt2-tiny\n\nmodels/bert-embeddings\n").unwrap();
    let out = run(&["check", "--from-list", path_str(&list), "--no-fetch"]);
    let _ = std::fs::remove_file(&list);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stdout).ends_with("PASS: 2 folders checked, 0 failing\n"));
    // A folder that cannot be checked is its own line and its own exit code.
    let out = run(&["check", "models/gpt2-tiny", "tests/bad", "--no-fetch"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("ERROR  tests/bad  ") && text.contains("(exit 65)"), "{text}");
    assert_eq!(out.status.code(), Some(65), "{text}");
}

#[test]
fn merged_reports_are_the_reports_checked_together() {
    let dir = std::env::temp_dir().join(format!("onnx-contract-merge-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut paths = Vec::new();
    for (i, d) in FOLDERS.iter().enumerate() {
        let out = run(&["check", "--format", "json", d, "--no-fetch"]);
        let p = dir.join(format!("{i}.json"));
        std::fs::write(&p, &out.stdout).unwrap();
        paths.push(p.display().to_string());
    }
    let mut args = vec!["merge", "--format", "json"];
    args.extend(paths.iter().map(String::as_str));
    let (code, merged) = json(&args);
    assert_eq!((code, merged["verdict"].as_str()), (2, Some("fail")));
    let mut together = vec!["check", "--format", "json", "--no-fetch"];
    together.extend(FOLDERS);
    let (_, many) = json(&together);
    let a: Vec<Value> = merged["folders"].as_array().unwrap().iter().map(essence).collect();
    let b: Vec<Value> = many["folders"].as_array().unwrap().iter().map(essence).collect();
    assert_eq!(a, b);
    // A merge of merges, and the page.
    let twice = dir.join("merged.json");
    std::fs::write(&twice, serde_json::to_string(&merged).unwrap()).unwrap();
    let (code, again) = json(&["merge", "--format", "json", path_str(&twice), &paths[0]]);
    assert_eq!((code, again["folders"].as_array().unwrap().len()), (2, 4));
    let page = run(&["merge", "--format", "html", &paths[0], &paths[1]]);
    let html = String::from_utf8(page.stdout).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.contains("models/marian-pair-baked-past"), "{}", &html[..200]);
    // Not a report: exit 65 naming the file.
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{\"x\": 1}").unwrap();
    let out = run(&["merge", path_str(&bad)]);
    assert_eq!(out.status.code(), Some(65));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.json: neither a folder report"));
    let _ = std::fs::remove_dir_all(&dir);
}
