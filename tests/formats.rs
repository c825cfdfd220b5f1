//! The CI formats on a failing and a passing fixture: SARIF validated against
//! the official 2.1.0 JSON Schema, JUnit parsed as XML, GitHub workflow
//! commands matched by pattern (Python's jsonschema and xml.etree do the
//! validating: independent of our writers).

mod common;
use common::*;
use std::process::Command;

fn check(args: &[&str]) -> (i32, String) {
    let out = run(args);
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}

fn python(code: &str, input: &str) -> String {
    let mut child = Command::new("python3")
        .args(["-c", code])
        .current_dir(root())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    use std::io::Write;
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "python: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

const FAILING: [&str; 2] = ["models/marian-pair-baked-past", "--no-fetch"];
const PASSING: [&str; 2] = ["models/gpt2-tiny", "--no-fetch"];
const STATIC_FAIL: [&str; 9] = [
    "models/marian-15-inputs/decoder_model_merged.onnx",
    "--contract",
    "specs/marian-decoder-merged.yaml",
    "--param",
    "hidden=32",
    "--param",
    "head_dim=4",
    "--param",
    "vocab=1000",
];

const SARIF_CHECK: &str = r#"
import json, sys, jsonschema
schema = json.load(open("tests/fixtures/schemas/sarif-schema-2.1.0.json"))
log = json.load(sys.stdin)
jsonschema.validate(log, schema)
run = log["runs"][0]
rules = [r["id"] for r in run["tool"]["driver"]["rules"]]
res = run["results"]
print(len(rules), len(res), ",".join(sorted({r["ruleId"] for r in res if r["level"] == "error"})),
      ",".join(sorted({l["physicalLocation"]["artifactLocation"]["uri"] for r in res for l in r.get("relatedLocations", [])})))
"#;

#[test]
fn sarif_is_valid_2_1_0_with_rules_results_and_related_contract_lines() {
    let (code, out) = check(&[&["check", "--format", "sarif"][..], &STATIC_FAIL[..], &["--static-only"]].concat());
    assert_eq!(code, 2);
    let summary = python(SARIF_CHECK, &out);
    let parts: Vec<&str> = summary.split(' ').collect();
    assert_eq!(parts[0], onnx_contract::Code::ALL.len().to_string(), "every finding code is a rule");
    assert_eq!(parts[2], "input-count,input-missing");
    assert_eq!(parts[3], "specs/marian-decoder-merged.yaml", "the contract line as a related location");
    let (code, out) = check(&[&["check", "--format", "sarif"][..], &FAILING[..]].concat());
    assert_eq!(code, 2);
    assert!(python(SARIF_CHECK, &out).contains("run-failed"));
    let (code, out) = check(&[&["check", "--format", "sarif"][..], &PASSING[..]].concat());
    assert_eq!(code, 0);
    let summary = python(SARIF_CHECK, &out);
    assert_eq!(summary.split(' ').nth(1), Some("0"), "no results on a passing model: {summary}");
}

const JUNIT_CHECK: &str = r#"
import sys, xml.etree.ElementTree as ET
root = ET.fromstring(sys.stdin.read())
cases = root.findall("./testsuite/testcase")
failed = [c.get("name") for c in cases if c.find("failure") is not None or c.find("error") is not None]
msgs = [c.find("failure").get("message") for c in cases if c.find("failure") is not None]
print(root.get("tests"), root.get("failures"), len(root.findall("testsuite")), "|".join(failed), "|".join(msgs))
"#;

#[test]
fn junit_is_xml_with_a_suite_per_file_and_a_case_per_step() {
    let (code, out) = check(&[&["check", "--format", "junit"][..], &FAILING[..]].concat());
    assert_eq!(code, 2);
    let summary = python(JUNIT_CHECK, &out);
    // 3 files + the folder's cross-file suite: 3 static cases, the with-past file's
    // steps 0-2 (the run stops at the failure), the folder's; the failing case is step 2.
    assert!(summary.starts_with("7 1 4 step 2 (step-0 past length 0) "), "{summary}");
    assert!(summary.contains("Reshape node `/Reshape_5`"), "{summary}");
    assert!(out.contains("failing node: /Reshape_5 (Reshape)"), "the shape trace is in the failing step's output");
    let (code, out) = check(&[&["check", "--format", "junit"][..], &PASSING[..]].concat());
    assert_eq!(code, 0);
    assert_eq!(python(JUNIT_CHECK, &out), "6 0 2", "static case + 4 steps + folder: {out}");
}

#[test]
fn github_annotations_are_workflow_commands() {
    let (code, out) = check(&[&["check", "--format", "github"][..], &STATIC_FAIL[..], &["--static-only"]].concat());
    assert_eq!(code, 2);
    let lines: Vec<&str> = out.lines().collect();
    let pattern = |l: &str| {
        let (head, msg) = l.split_once("::").map(|(_, rest)| rest.split_once("::").unwrap_or((rest, ""))).unwrap();
        (head.to_string(), msg.to_string())
    };
    for l in &lines {
        assert!(l.starts_with("::error ") || l.starts_with("::warning ") || l.starts_with("::notice "), "{l}");
        assert!(!l.contains('\n'));
    }
    let (head, msg) = pattern(lines[1]);
    assert_eq!(head, "error file=specs/marian-decoder-merged.yaml,line=20,title=onnx-contract input-missing%3A models/marian-15-inputs/decoder_model_merged.onnx");
    assert_eq!(msg, "missing input past_key_values.{0..5}.encoder.{key,value} (12 tensors)");
    assert!(lines.last().unwrap().starts_with("::error title=onnx-contract::FAIL"));
    let (code, out) = check(&[&["check", "--format", "github"][..], &PASSING[..]].concat());
    assert_eq!(code, 0);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.starts_with("::notice title=onnx-contract::PASS"));
}

#[test]
fn human_output_fits_a_100_column_terminal_and_has_no_color_in_a_pipe() {
    let spec = [
        "--contract",
        "specs/marian-decoder-merged.yaml",
        "--param",
        "hidden=32",
        "--param",
        "head_dim=4",
        "--param",
        "vocab=1000",
    ];
    for args in [
        [&["check", "models/marian-baked-past/decoder_model_merged.onnx", "--no-fetch"][..], &spec[..]].concat(),
        vec!["check", "models/marian-pair-baked-past", "--no-fetch"],
        vec!["sig", "models/marian-tiny/decoder_model_merged.onnx"],
    ] {
        let out = bin().args(&args).env("COLUMNS", "100").output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let widest = text.lines().map(|l| l.chars().count()).max().unwrap_or(0);
        assert!(widest <= 100, "{args:?}: a line of {widest} columns:\n{text}");
        assert!(text.lines().count() > 20, "{text}");
        assert!(!text.contains('\u{1b}'), "no ANSI codes when stdout is not a terminal");
    }
    // Without COLUMNS, in a pipe (a CI log): 100 columns; COLUMNS says otherwise when set.
    let out =
        bin().args(["check", "models/marian-pair-baked-past", "--no-fetch"]).env_remove("COLUMNS").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
    let out = bin()
        .args(["check", "models/marian-pair-baked-past", "--no-fetch", "--verbose"])
        .env("COLUMNS", "200")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().any(|l| l.chars().count() > 100) && text.lines().all(|l| l.chars().count() <= 200), "{text}");
}

/// Issue 32: with no terminal and no COLUMNS (a CI log, `| tee`), the report
/// of every committed fixture folder — passing or failing, every kind —
/// fits in 100 columns.
#[test]
fn every_fixture_folders_report_fits_a_log_without_a_terminal() {
    let mut checked = 0;
    let mut dirs: Vec<_> = std::fs::read_dir(root().join("models")).unwrap().map(|e| e.unwrap().path()).collect();
    dirs.sort();
    // An export folder has an .onnx file (a checkpoint folder, `*-source`, has none).
    let has_onnx = |d: &std::path::Path| {
        [d.to_path_buf(), d.join("onnx")].iter().any(|x| {
            std::fs::read_dir(x).is_ok_and(|es| es.flatten().any(|e| e.path().extension().is_some_and(|x| x == "onnx")))
        })
    };
    for dir in dirs.iter().filter(|d| d.is_dir() && !d.ends_with("__pycache__") && has_onnx(d)) {
        let out = bin().args(["check", path_str(dir), "--no-fetch"]).env_remove("COLUMNS").output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.lines().count() > 2, "{}: {text}", dir.display());
        let widest = text.lines().map(|l| l.chars().count()).max().unwrap_or(0);
        assert!(widest <= 100, "{}: a line of {widest} columns:\n{text}", dir.display());
        checked += 1;
    }
    assert!(checked >= 80, "{checked} folders");
}
