//! The bad-input corpus: every broken model or contract gives a clear message
//! naming the file and the problem, the documented exit code, no panic, in
//! bounded time and memory. Files: tests/bad/ (made by tests/bad/make_bad.py)
//! and tests/contracts/; truncations of a real model are generated here.

mod common;
use common::*;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Runs the binary under a 1 GiB address-space limit and a time bound.
fn run_bounded(args: &[&str]) -> (i32, String, String) {
    let mut line = format!("ulimit -v 1048576; exec '{}'", env!("CARGO_BIN_EXE_onnx-contract"));
    for a in args {
        line.push_str(&format!(" '{a}'"));
    }
    let t = Instant::now();
    let out = Command::new("sh").arg("-c").arg(&line).current_dir(root()).output().unwrap();
    assert!(t.elapsed() < Duration::from_secs(10), "{args:?} took {:?}", t.elapsed());
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

const MODEL_CASES: &[(&str, i32, &str)] = &[
    ("tests/bad/empty.onnx", 65, "empty file (0 bytes)"),
    ("tests/bad/random.onnx", 65, "not an ONNX ModelProto"),
    ("tests/bad/text.onnx", 65, "not an ONNX ModelProto"),
    ("tests/bad/contract-named.onnx", 65, "this is a YAML or text file"),
    ("tests/bad/wrong-message-tensor.onnx", 65, "not an ONNX ModelProto"),
    ("tests/bad/wrong-message-graph.onnx", 65, "not an ONNX ModelProto"),
    ("tests/bad/overrun-length.onnx", 65, "runs past the end of the file"),
    ("tests/bad/overrun-varint.onnx", 65, "invalid varint"),
    ("tests/bad/nested-if-60.onnx", 65, "nested too deeply"),
    ("tests/bad/duplicate-inputs.onnx", 65, "duplicate graph input name `x` (inputs #0 and #2)"),
    ("tests/bad/non-utf8-name.onnx", 65, "not valid UTF-8"),
    ("tests/bad/does-not-exist.onnx", 65, "cannot open"),
];

/// Export folders that cannot be checked: each a clear error naming the file.
const FOLDER_CASES: &[(&str, &str, &[&str])] = &[
    ("tests/bad/folders/no-onnx", "no-onnx", &["no .onnx file in this folder or in its onnx/ subfolder"]),
    ("tests/bad/folders/broken-config", "config.json", &["not valid JSON", "line 4"]),
    ("tests/bad/folders/config-not-object", "config.json", &["not a JSON object"]),
    ("tests/bad/folders/bad-model", "decoder_model.onnx", &["not an ONNX ModelProto"]),
    ("tests/bad/folders/genai-not-genai", "genai_config.json", &["no `model.decoder` object"]),
];

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

#[test]
fn broken_folders_are_clear_errors_naming_the_file_and_nothing_is_written() {
    for (dir, names, texts) in FOLDER_CASES {
        let before = listing(&root().join(dir));
        for cmd in [vec!["sig", dir], vec!["check", dir, "--static-only"], vec!["check", dir, "--format", "json"]] {
            let (got, out, err) = run_bounded(&cmd);
            assert_eq!(got, 65, "{cmd:?}: {err}");
            let text = if cmd.contains(&"json") { out } else { err };
            assert!(text.contains(names), "{cmd:?} does not name {names}: {text}");
            for t in *texts {
                assert!(text.contains(t), "{cmd:?}: expected `{t}` in: {text}");
            }
        }
        assert_eq!(listing(&root().join(dir)), before, "{dir}: the check wrote into the folder");
    }
    // A directory named like a model is not one; the real model beside it is read.
    let (code, out, err) = run_bounded(&["sig", "--format", "json", "tests/bad/folders/dir-named-onnx"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let files: Vec<&str> = v["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert_eq!(files, ["model.onnx"]);
    // A contract file applies to one model, not a folder: a usage error.
    let (code, _, err) = run_bounded(&["check", "models/gpt2-tiny", "--contract", "specs/gpt2-decoder.yaml"]);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("a contract file applies to one model"), "{err}");
}

#[test]
fn broken_models_are_clear_errors_with_exit_65() {
    for (file, code, text) in MODEL_CASES {
        for cmd in [vec!["sig", file], vec!["check", file, "--contract", "specs/gpt2-decoder.yaml", "--static-only"]] {
            let (got, _, err) = run_bounded(&cmd);
            assert_eq!(got, *code, "{cmd:?}: {err}");
            assert!(err.contains(file), "{cmd:?} does not name the file: {err}");
            assert!(err.contains(text), "{cmd:?}: expected `{text}` in: {err}");
        }
    }
}

#[test]
fn odd_but_valid_models_read_fine() {
    let (code, out, err) = run_bounded(&["sig", "--format", "json", "tests/bad/no-inputs.onnx"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["inputs"].as_array().unwrap().len(), 0);
    assert_eq!(v["outputs"][0]["name"], "y");
    let (code, out, _) = run_bounded(&["sig", "tests/bad/nested-if-5.onnx"]);
    assert_eq!(code, 0);
    assert!(out.contains("5 If"), "{out}");
}

#[test]
fn a_real_model_truncated_anywhere_is_an_error_never_a_panic() {
    let bytes = std::fs::read(model(GPT2)).unwrap();
    let dir = std::env::temp_dir().join(format!("onnx-contract-trunc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("truncated.onnx");
    // 400 cut points across the whole file, plus the first 64 bytes one by one.
    let mut cuts: Vec<usize> = (1..64).collect();
    cuts.extend((0..400).map(|i| i * bytes.len() / 400).filter(|&c| c > 0));
    let full = onnx_contract::model::reader::read_signature(&model(GPT2)).unwrap();
    let mut errors = 0;
    for cut in &cuts {
        std::fs::write(&path, &bytes[..*cut]).unwrap();
        match onnx_contract::model::reader::read_signature(&path) {
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.contains("truncated.onnx"), "{msg}");
                errors += 1;
            }
            // A cut exactly between top-level fields can leave a valid, smaller
            // model: whatever it declares must then be what the whole model declares.
            Ok(sig) => {
                assert!(sig.inputs.iter().all(|p| full.inputs.contains(p)), "cut {cut}: {:?}", sig.inputs);
                assert!(sig.outputs.iter().all(|p| full.outputs.contains(p)), "cut {cut}: {:?}", sig.outputs);
            }
        }
    }
    // The graph holds almost all bytes, so nearly every cut must be caught.
    assert!(errors * 10 >= cuts.len() * 9, "{errors} errors for {} cuts", cuts.len());
    // And through the binary, with the exit code, for a cut inside the graph.
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let (code, _, err) = run_bounded(&["sig", path.to_str().unwrap()]);
    assert_eq!(code, 65);
    assert!(err.contains("truncated or corrupt"), "{err}");
}

#[test]
fn external_data_is_checked_without_reading_it() {
    let cases = [
        ("tests/bad/ext-absolute/model.onnx", "location `/etc/passwd` is refused"),
        ("tests/bad/ext-dotdot/model.onnx", "location `../random.onnx` is refused"),
        ("tests/bad/ext-missing/model.onnx", "weights.bin` is missing"),
        ("tests/bad/ext-short/model.onnx", "has 100 bytes, the tensor needs bytes 0..1024"),
    ];
    for (file, text) in cases {
        // `sig` reads only the .onnx file and warns.
        let (code, _, err) = run_bounded(&["sig", file]);
        assert_eq!(code, 0, "{file}: {err}");
        assert!(err.contains(text), "{file}: {err}");
        // `check` refuses the model before any run.
        let (code, _, err) = run_bounded(&["check", file, "--contract", "specs/gpt2-decoder.yaml"]);
        assert_eq!(code, 65, "{file}: {err}");
        assert!(err.contains(file) && err.contains(text), "{file}: {err}");
    }
    let (code, _, err) = run_bounded(&["sig", "tests/bad/ext-ok/model.onnx"]);
    assert_eq!(code, 0);
    assert!(err.is_empty(), "{err}");
}

const CONTRACT_CASES: &[(&str, &str)] = &[
    ("broken-syntax.yaml", ":4:1: while parsing a flow mapping"),
    ("unknown-key.yaml", ":4:23: unknown field `shap`"),
    ("bad-dtype.yaml", ":3:14: input_ids: unknown dtype `int65`"),
    ("empty-template.yaml", ":5:3: `past.{layer}.key` expands to no tensor names"),
    ("wrong-type.yaml", ":2:8: "),
    ("unknown-param.yaml", "`$heads` is not a parameter"),
    ("unclosed-template.yaml", "unclosed `{`"),
    ("duplicate-key.yaml", "duplicate"),
    ("bad-dim.yaml", "dim `a b` is not understood"),
    ("empty.yaml", "the contract is empty"),
    ("not-utf8.yaml", "not UTF-8"),
];

#[test]
fn broken_contracts_name_file_line_and_column_with_exit_78() {
    for (file, text) in CONTRACT_CASES {
        let path = format!("tests/contracts/{file}");
        assert!(Path::new(&root().join(&path)).exists(), "{path}");
        let (code, _, err) =
            run_bounded(&["check", "models/gpt2-tiny/model.onnx", "--contract", &path, "--static-only"]);
        assert_eq!(code, 78, "{file}: {err}");
        assert!(err.contains(&path), "{file}: {err}");
        assert!(err.contains(text), "{file}: expected `{text}` in {err}");
    }
}

#[test]
fn a_dim_variable_bound_two_ways_is_a_finding_not_a_crash() {
    let (code, out, _) = run_bounded(&[
        "check",
        "--format",
        "json",
        "models/gpt2-tiny/model.onnx",
        "--contract",
        "tests/contracts/binding-conflict.yaml",
        "--static-only",
    ]);
    assert_eq!(code, 2);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["findings"].as_array().unwrap().iter().any(|f| f["code"] == "dim-binding"));
}

/// Caller traces that cannot be replayed: each a clear error naming the file
/// and the line, exit 65, in bounded time and memory (tests/bad/traces/).
const TRACE_CASES: &[(&str, &str)] = &[
    ("truncated.jsonl", "truncated.jsonl:2: not a trace line: EOF while parsing"),
    ("non-utf8.jsonl", "non-utf8.jsonl:2: not UTF-8 text"),
    ("deep.jsonl", "deep.jsonl: none of its 1 calls is to models/gpt2-tiny (it calls m.onnx)"),
    (
        "negative-shape.jsonl",
        "negative-shape.jsonl:2: `past_key_values.0.key` has shape [1, 4, -3, 8]: a negative size",
    ),
    ("not-json.jsonl", "not-json.jsonl:1: not a trace line"),
    ("wrong-types.jsonl", "wrong-types.jsonl:1: not a trace line: invalid value: integer `-1`"),
    ("empty.jsonl", "empty.jsonl: no calls in the trace"),
    ("rows-count.jsonl", "rows-count.jsonl:2: `input_ids` has 1 row digests for a batch of 2 (shape [2, 5])"),
    ("rows-rank1.jsonl", "rows-rank1.jsonl:2: `input_ids` has row digests but rank 1"),
    (
        "rows-absurd-batch.jsonl",
        "rows-absurd-batch.jsonl:2: `input_ids` has 2 row digests for a batch of 1099511627776",
    ),
    ("rows-not-strings.jsonl", "rows-not-strings.jsonl:2: not a trace line: invalid type: integer `1`"),
    ("format-3.jsonl", "format-3.jsonl:1: trace format 3 (this onnx-contract reads formats 1 to 2"),
    ("bad-header.jsonl", "bad-header.jsonl:1: not a trace header"),
];

#[test]
fn broken_and_hostile_traces_are_clear_errors_naming_the_line() {
    for (file, text) in TRACE_CASES {
        let trace = format!("tests/bad/traces/{file}");
        let (code, _, err) = run_bounded(&["replay", &trace, "--model", "models/gpt2-tiny", "--static-only"]);
        assert_eq!(code, 65, "{file}: {err}");
        assert!(err.contains(text), "{file}: {err}");
    }
    // A 1 GiB line (sparse: no disk used) is refused after reading 16 MiB of it.
    let big = std::env::temp_dir().join(format!("onnx-contract-1g-line-{}.jsonl", std::process::id()));
    std::fs::File::create(&big).unwrap().set_len(1 << 30).unwrap();
    let (code, _, err) =
        run_bounded(&["replay", big.to_str().unwrap(), "--model", "models/gpt2-tiny", "--static-only"]);
    let _ = std::fs::remove_file(&big);
    assert_eq!(code, 65, "{err}");
    assert!(err.contains(":1: longer than 16 MiB: not a trace line"), "{err}");
    // A directory given as the trace.
    let (code, _, err) = run_bounded(&["replay", "tests/traces", "--model", "models/gpt2-tiny", "--static-only"]);
    assert_eq!((code, err.contains("tests/traces: is a directory")), (65, true), "{err}");
}

#[test]
fn a_huge_shape_in_a_trace_is_judged_and_never_allocated() {
    let (code, out, err) = run_bounded(&["replay", "tests/bad/traces/huge-shape.jsonl", "--model", "models/gpt2-tiny"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.contains("`past_key_values.0.key` axis 1 is 4294967296; the model fixes it at 4"), "{out}");
    // The table wraps its cells at 100 columns in a pipe: read the words, not the lines.
    let words = out.replace(['│', '┆'], " ").split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains("the caller's calls were not re-run: call 1 feeds `past_key_values.0.key` of shape"),
        "{out}"
    );
}

/// A folder holding a good model beside every odd kind of `.onnx` entry:
/// each is named with what is wrong with it, the good model is still
/// checked, and nothing is written into the folder.
#[test]
fn odd_entries_are_named_and_the_rest_of_the_folder_is_checked() {
    use std::os::unix::fs::{symlink, PermissionsExt};
    let dir = std::env::temp_dir().join(format!("onnx-contract-odd-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("dir.onnx")).unwrap();
    for f in ["model.onnx", "config.json", "generation_config.json"] {
        std::fs::copy(root().join("models/gpt2-tiny").join(f), dir.join(f)).unwrap();
    }
    symlink("loop.onnx", dir.join("loop.onnx")).unwrap();
    symlink("b_loop.onnx", dir.join("a_loop.onnx")).unwrap();
    symlink("a_loop.onnx", dir.join("b_loop.onnx")).unwrap();
    symlink("/nonexistent/x.onnx", dir.join("dangling.onnx")).unwrap();
    assert!(Command::new("mkfifo").arg(dir.join("fifo.onnx")).status().unwrap().success());
    // Mode 000: unreadable for anyone but root (CI runs as root, who reads it: then it is a model like any other).
    std::fs::copy(root().join("models/gpt2-tiny/model.onnx"), dir.join("locked.onnx")).unwrap();
    std::fs::set_permissions(dir.join("locked.onnx"), std::fs::Permissions::from_mode(0o000)).unwrap();
    let root_user = std::fs::File::open(dir.join("locked.onnx")).is_ok();
    let before = listing(&dir);
    let d = dir.to_str().unwrap();
    let (code, out, err) = run_bounded(&["check", "--format", "json", d]);
    assert_eq!(code, 2, "{out}{err}");
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    let odd: Vec<(String, String)> = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["code"] == "odd-file")
        .map(|f| (f["severity"].as_str().unwrap().to_string(), f["message"].as_str().unwrap().to_string()))
        .collect();
    let said = |text: &str, severity: &str| odd.iter().any(|(s, m)| s == severity && m.contains(text));
    assert!(said("loop.onnx is a link that loops (→ loop.onnx)", "error"), "{odd:#?}");
    assert!(said("a_loop.onnx is a link that loops (→ b_loop.onnx)", "error"), "{odd:#?}");
    assert!(said("dangling.onnx is a link to /nonexistent/x.onnx, which does not exist", "error"), "{odd:#?}");
    assert!(said("dir.onnx is a directory, not a model file", "warning"), "{odd:#?}");
    assert!(said("fifo.onnx is not a regular file", "error"), "{odd:#?}");
    assert_eq!(said("locked.onnx", "error"), !root_user, "{odd:#?}");
    let files: Vec<&str> = r["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert!(files.contains(&"model.onnx"), "{files:?}");
    assert_eq!(r["files"][0]["verdict"], "pass");
    assert_eq!(listing(&dir), before, "nothing is written into the folder");
    // Only a dangling link: the folder has no readable model, and says why.
    let only = dir.join("only");
    std::fs::create_dir_all(&only).unwrap();
    symlink("/nonexistent/model.onnx", only.join("model.onnx")).unwrap();
    let (code, _, err) = run_bounded(&["check", only.to_str().unwrap()]);
    assert_eq!(code, 65, "{err}");
    assert!(err.contains("no readable .onnx file in this folder or in its onnx/ subfolder: model.onnx is a link to /nonexistent/model.onnx, which does not exist"), "{err}");
    std::fs::set_permissions(dir.join("locked.onnx"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_path_that_does_not_exist_is_named_itself() {
    for path in ["nope", "nope.onnx", "models/nope/"] {
        let (code, _, err) = run_bounded(&["check", path]);
        assert_eq!(code, 65, "{path}: {err}");
        assert!(
            err.contains(&format!("{}: cannot ", path.trim_end_matches('/')))
                || err.contains(&format!("{path}: cannot ")),
            "{path}: {err}"
        );
    }
}

/// A call feeding one tensor with 0 rows beside others with 1 (the trace
/// fuzz target's find, issue 42): judged as the caller's mistake, never a
/// panic (the feed guard divided by the 0 rows it had just tested for).
#[test]
fn a_call_with_zero_rows_beside_one_is_the_caller_s_signature_not_a_panic() {
    for extra in [&["--static-only"][..], &[][..]] {
        let mut args = vec!["replay", "tests/bad/traces/zero-rows.jsonl", "--model", "models/marian-tiny"];
        args.extend_from_slice(extra);
        let (code, out, err) = run_bounded(&args);
        assert_eq!(code, 2, "{out}{err}");
        assert!(
            out.contains("verdict: caller: call 1: `batch_size` is 0 in `encoder_attention_mask` and 1 in input_ids"),
            "{out}"
        );
    }
}
