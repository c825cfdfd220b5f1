//! The emitted Rust and JavaScript programs, run on every fixture folder the
//! Python one is (issue 33): the same greedy tokens and top-5 logits as the
//! tool's own uncached generation; and every language's beam search against
//! the uncached beam search (every beam's prefix recomputed), on every cache
//! form, the Python one recorded and replayed "both fine".

mod common;
#[path = "common/emit_cases.rs"]
mod emit_cases;
use common::*;
use emit_cases::*;
use serde_json::Value;
use std::process::Command;

fn scratch(name: &str) -> std::path::PathBuf {
    let tmp = std::env::temp_dir().join(format!("onnx-contract-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    tmp
}

/// The JavaScript programs' folder, resolving onnxruntime-node from a link to
/// the one tests/setup.sh installed for the recorder (README's test command
/// runs the setup first), so this test fetches nothing.
fn js_dir() -> std::path::PathBuf {
    let js = root().join("target").join("emitted-js");
    std::fs::create_dir_all(&js).unwrap();
    let installed = root().join("tests/callers/node_modules");
    assert!(installed.join("onnxruntime-node").is_dir(), "onnxruntime-node is missing: run tests/setup.sh");
    std::fs::write(js.join("package.json"), "{\"name\": \"emitted\", \"private\": true, \"type\": \"module\"}\n")
        .unwrap();
    let link = js.join("node_modules");
    if std::fs::read_link(&link).ok().as_deref() != Some(installed.as_path()) {
        let _ = std::fs::remove_dir_all(&link).or_else(|_| std::fs::remove_file(&link));
        std::os::unix::fs::symlink(&installed, &link).unwrap();
    }
    js
}

fn output(case: &str, cmd: &mut Command) -> Value {
    let ran = cmd.output().unwrap();
    assert!(ran.status.success(), "{case}: {}", String::from_utf8_lossy(&ran.stderr));
    serde_json::from_slice(&ran.stdout)
        .unwrap_or_else(|e| panic!("{case}: {e}: {}", String::from_utf8_lossy(&ran.stdout)))
}

/// Every greedy case and every beam case, in Rust (one binary) and JavaScript.
#[test]
fn emitted_rust_and_javascript_programs_match_the_uncached_reference() {
    let tmp = scratch("emit-lang");
    let feats = features(&tmp);
    let programs: Vec<(String, Vec<u8>)> = CASES
        .iter()
        .enumerate()
        .map(|(i, (dir, form, _, _))| (format!("case{i}"), emitted(dir, form, "rust")))
        .collect();
    let rust = build_rust(&programs);
    let lib = onnx_contract::engine::locate::locate(None).expect("ONNX Runtime").path;
    let js = js_dir();
    for (i, (dir, form, input, tol)) in CASES.iter().enumerate() {
        let want = reference(dir, form, &input_args(input, &feats), None);
        let args = program_args(dir, input, &feats, None);
        let case = format!("rust {dir} ({form})");
        let got = output(
            &case,
            Command::new(&rust).args(&args).env("EMITTED_CASE", format!("case{i}")).env("ORT_DYLIB_PATH", &lib),
        );
        compare(&case, &got, &want, *tol);
        let program = js.join(format!("case{i}.mjs"));
        std::fs::write(&program, emitted(dir, form, "js")).unwrap();
        let case = format!("js {dir} ({form})");
        let got = output(&case, Command::new("node").arg(&program).args(&args));
        compare(&case, &got, &want, *tol);
    }
    for (dir, form, input, beams) in BEAM_CASES {
        let i = CASES.iter().position(|(d, f, _, _)| d == dir && f == form).expect("a beam case is a case");
        let want = reference(dir, form, &input_args(input, &feats), Some(*beams));
        let args = program_args(dir, input, &feats, Some(*beams));
        let case = format!("rust {dir} ({form}) beams");
        let got = output(
            &case,
            Command::new(&rust).args(&args).env("EMITTED_CASE", format!("case{i}")).env("ORT_DYLIB_PATH", &lib),
        );
        compare_beams(&case, &got, &want, CASES[i].3);
        let case = format!("js {dir} ({form}) beams");
        let got = output(&case, Command::new("node").arg(js.join(format!("case{i}.mjs"))).args(&args));
        compare_beams(&case, &got, &want, CASES[i].3);
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

/// The Python beam search on every cache form: the reference's tokens and
/// score, and its recording replays "both fine" (the cache rows reordered
/// as the beams chose).
#[test]
fn emitted_python_beam_searches_match_the_reference_and_replay() {
    let tmp = scratch("emit-beams");
    let feats = features(&tmp);
    let mut recognised = Vec::new();
    for (dir, form, input, beams) in BEAM_CASES {
        let case = format!("{dir} ({form}) beams {beams}");
        let program = tmp.join("gen.py");
        std::fs::write(&program, emitted(dir, form, "python")).unwrap();
        let trace = tmp.join("trace.jsonl");
        let _ = std::fs::remove_file(&trace);
        let mut cmd = Command::new("python3");
        cmd.arg(root().join("python/onnx_contract_trace.py")).arg(&trace).arg(&program);
        let got = output(&case, cmd.args(program_args(dir, input, &feats, Some(*beams))));
        let tol = CASES.iter().find(|(d, f, _, _)| d == dir && f == form).unwrap().3;
        compare_beams(&case, &got, &reference(dir, form, &input_args(input, &feats), Some(*beams)), tol);
        let r = run(&["replay", path_str(&trace), "--model", &format!("models/{dir}")]);
        let text = String::from_utf8_lossy(&r.stdout);
        assert_eq!(r.status.code(), Some(0), "{case}:\n{text}{}", String::from_utf8_lossy(&r.stderr));
        assert!(text.contains("both fine"), "{case}:\n{text}");
        // Replay reads the beams off most recordings; not over genai's shared
        // buffers (it names no decoding there), nor where a split pair's
        // with-past calls start with the beams already apart (step 0 ran on
        // the other file), nor where the trace holds only a digest of the
        // audio the re-run must then seed (it reads independent rows).
        if text.contains("decoding: beam search") {
            recognised.push(*dir);
        }
    }
    assert_eq!(recognised, BEAMS_READ, "replay read the beams of these recordings");
    let _ = std::fs::remove_dir_all(&tmp);
}

/// A folder that asks for beams gets them by default: marian-tiny's
/// generation_config.json says num_beams 4, and every program says so.
#[test]
fn the_folders_num_beams_is_every_programs_default() {
    for (lang, line) in
        [("python", "NUM_BEAMS = 4"), ("rust", "const NUM_BEAMS: usize = 4;"), ("js", "const NUM_BEAMS = 4;")]
    {
        let text = String::from_utf8(emitted("marian-tiny", "merged-decoder", lang)).unwrap();
        assert!(text.contains(line), "{lang}: {}", &text[..400.min(text.len())]);
    }
    // A static export fixed at batch 1 cannot run beams: its programs say why.
    let text = String::from_utf8(emitted("static-cache-llama", "decoder-only", "python")).unwrap();
    assert!(text.contains("the graph fixes the batch at 1"), "{text}");
}
