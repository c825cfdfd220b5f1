//! The runtime smoke test on real ONNX Runtime and the committed real models.
//! Needs an ONNX Runtime library: `pip install onnxruntime==1.31.1` (what
//! .ci/run does), or ORT_DYLIB_PATH. Without one these tests fail and say so.

mod common;
use common::*;
use serde_json::Value;

fn ort_lib() -> String {
    match onnx_contract::engine::locate::locate(None) {
        Ok(l) => l.path.display().to_string(),
        Err(e) => panic!("these tests need ONNX Runtime: {e}"),
    }
}

const MARIAN_SPEC: &str = "specs/marian-decoder-merged.yaml";
const TINY: [&str; 6] = ["--param", "hidden=32", "--param", "head_dim=4", "--param", "vocab=1000"];
/// Fits specs/gpt2-decoder.yaml to models/gpt2-tiny (and the position-bug fixture).
const TINY_GPT2: [&str; 8] =
    ["--param", "layers=2", "--param", "heads=4", "--param", "head_dim=8", "--param", "vocab=1000"];

fn check_json(model_rel: &str, spec: &str, extra: &[&str]) -> (i32, Value) {
    let lib = ort_lib();
    let m = model(model_rel);
    let mut args = vec!["check", "--format", "json", path_str(&m), "--contract", spec, "--ort-lib", &lib, "--no-fetch"];
    args.extend_from_slice(extra);
    json(&args)
}

fn steps(report: &Value) -> &Vec<Value> {
    report["runtime"]["steps"].as_array().expect("runtime.steps")
}

fn shape_of(step: &Value, output: &str) -> Vec<i64> {
    let o = step["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == output)
        .unwrap_or_else(|| panic!("no {output}"));
    o["shape"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect()
}

#[test]
fn merged_marian_passes_with_growing_cache_and_parity_for_both_step0_lengths() {
    let (code, r) = check_json(MARIAN_MERGED, MARIAN_SPEC, &TINY);
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(r["verdict"], "pass");
    assert_eq!(r["runtime"]["ort_version"], "1.31.1");
    let steps = steps(&r);
    assert_eq!(steps.len(), 8, "4 steps for step-0 past lengths 0 and 1");
    for s in steps {
        assert_eq!(s["ok"], true, "{s:#}");
        let k = s["step"].as_i64().unwrap();
        // Self-attention cache grows by one per step; cross-attention keeps the encoder length at step 0.
        assert_eq!(shape_of(s, "present.3.decoder.value"), vec![1, 8, k + 1, 4]);
        if k == 0 {
            assert_eq!(shape_of(s, "present.0.encoder.key"), vec![1, 8, 7, 4]);
        } else {
            let p = s["parity_max_abs_diff"].as_f64().unwrap();
            assert!(p < 1e-4, "parity {p} at step {k}");
        }
        assert_eq!(shape_of(s, "logits"), vec![1, 1, 1000]);
    }
    let lens: Vec<i64> = steps.iter().map(|s| s["step0_past_len"].as_i64().unwrap()).collect();
    assert_eq!(lens, [0, 0, 0, 0, 1, 1, 1, 1]);
}

#[test]
fn gpt2_passes_with_parity_and_batch_two() {
    let mut params = TINY_GPT2.to_vec();
    params.extend(["--batch", "2", "--steps", "3"]);
    let (code, r) = check_json(GPT2, "specs/gpt2-decoder.yaml", &params);
    assert_eq!(code, 0, "{r:#}");
    let steps = steps(&r);
    assert_eq!(steps.len(), 3);
    // A 4-token prompt at step 0, then one token per step.
    assert_eq!(shape_of(&steps[0], "present.1.key"), vec![2, 4, 4, 8]);
    assert_eq!(shape_of(&steps[2], "present.1.key"), vec![2, 4, 6, 8]);
    for s in &steps[1..] {
        assert!(s["parity_max_abs_diff"].as_f64().unwrap() < 1e-4);
    }
}

#[test]
fn fifteen_input_model_fails_its_contract_and_is_run_anyway() {
    let (code, r) = check_json(MARIAN_15, MARIAN_SPEC, &TINY);
    assert_eq!(code, 2);
    // The user's contract is the requirement: its deviations stay errors ...
    assert_eq!(r["findings"][0]["message"], "expected 28 inputs, found 15: 13 missing");
    // ... and the run still happens, showing the model computes right with its own protocol.
    assert!(!r["runtime"].is_null(), "a run: {r:#}");
    assert!(steps(&r).iter().all(|s| s["error"].is_null()), "{r:#}");
    assert!(!r["findings"].as_array().unwrap().iter().any(|f| f["code"] == "runtime-skipped"));
}

#[test]
fn baked_past_fails_at_step_2_with_node_path_cause_and_traced_shapes() {
    let (code, r) = check_json("marian-baked-past/decoder_model_merged.onnx", MARIAN_SPEC, &TINY);
    assert_eq!(code, 2, "{r:#}");
    let f = r["findings"].as_array().unwrap().iter().find(|f| f["code"] == "run-failed").expect("run-failed finding");
    assert_eq!(f["step"], 2);
    assert_eq!(f["node"], "optimum::if (then_branch) → /Reshape_5");
    assert!(f["message"].as_str().unwrap().contains("Reshape node `/Reshape_5`"), "{f:#}");
    assert!(f["message"].as_str().unwrap().contains("Input shape:{1,8,3,4}, requested shape:{1,8,2,4}"));
    assert!(f["cause"].as_str().unwrap().contains("fixed at export time"), "{f:#}");
    // Steps 0 and 1 worked; the failing step's node inputs were traced by re-running the lifted branch.
    let s = steps(&r);
    assert_eq!(s[0]["ok"], true);
    assert_eq!(s[1]["ok"], true);
    assert_eq!(s[2]["step"], 2);
    let node = &s[2]["failed_node"];
    assert_eq!(node["op_type"], "Reshape");
    assert_eq!(node["inputs"][0]["shape"], serde_json::json!([1, 8, 3, 4]));
    assert_eq!(node["inputs"][1]["shape"], serde_json::json!([4]));
}

#[test]
fn a_runtime_crash_becomes_a_finding_with_step_and_feeds() {
    let lib = ort_lib();
    let m = model(MARIAN_MERGED);
    let out = bin()
        .args(["check", "--format", "json", path_str(&m), "--contract", MARIAN_SPEC, "--ort-lib", &lib])
        .args(TINY)
        .env("ONNX_CONTRACT_FAULT", "segv@2")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let crash = r["findings"].as_array().unwrap().iter().find(|f| f["code"] == "crash").expect("crash finding");
    assert_eq!(crash["step"], 2);
    assert_eq!(crash["step0_past_len"], 0, "the first run to reach step 2 dies");
    let msg = crash["message"].as_str().unwrap();
    assert!(msg.contains("SIGSEGV"), "{msg}");
    assert!(msg.contains("input_ids [1, 1]"), "{msg}");
    // What ran before the crash is still reported.
    let s = steps(&r);
    assert_eq!(s[0]["ok"], true);
    assert_eq!(s[1]["ok"], true);
}

#[test]
fn a_file_that_is_not_a_runtime_is_a_clear_error() {
    let m = model(MARIAN_MERGED);
    let not_a_lib = root().join("Cargo.toml");
    let mut args =
        vec!["check", "--format", "json", path_str(&m), "--contract", MARIAN_SPEC, "--ort-lib", path_str(&not_a_lib)];
    args.extend(TINY);
    let (code, r) = json(&args);
    assert_eq!(code, 69, "{r:#}");
    let f = r["findings"].as_array().unwrap().iter().find(|f| f["code"] == "runtime-load").expect("runtime-load");
    assert!(f["message"].as_str().unwrap().contains("Cargo.toml"), "{f:#}");
    assert!(f["cause"].as_str().unwrap().contains("could not be loaded as a shared library"), "{f:#}");
}

#[test]
fn every_family_passes_its_spec_with_parity_under_tolerance() {
    let seq2seq = [
        "--param",
        "layers=2",
        "--param",
        "heads=4",
        "--param",
        "head_dim=8",
        "--param",
        "hidden=32",
        "--param",
        "vocab=1000",
    ];
    let decoder_only =
        ["--param", "layers=2", "--param", "kv_heads=2", "--param", "head_dim=8", "--param", "vocab=1000"];
    let cases: [(&str, &str, &[&str], usize); 5] = [
        ("bart-tiny/decoder_model_merged.onnx", "specs/bart-decoder-merged.yaml", &seq2seq, 8),
        ("t5-tiny/decoder_model_merged.onnx", "specs/t5-decoder-merged.yaml", &seq2seq, 8),
        ("whisper-tiny/decoder_model_merged.onnx", "specs/whisper-decoder-merged.yaml", &seq2seq, 8),
        ("llama-tiny/model.onnx", "specs/llama-decoder.yaml", &decoder_only, 4),
        ("qwen2-tiny/model.onnx", "specs/qwen2-decoder.yaml", &decoder_only, 4),
    ];
    for (m, spec, params, n_steps) in cases {
        let (code, r) = check_json(m, spec, params);
        assert_eq!(code, 0, "{m}: {r:#}");
        let s = steps(&r);
        assert_eq!(s.len(), n_steps, "{m}");
        for step in s.iter().filter(|s| s["step"].as_i64() > Some(0)) {
            let p = step["parity_max_abs_diff"].as_f64().unwrap();
            assert!(p < 1e-4, "{m}: parity {p}");
        }
    }
}

#[test]
fn init_contracts_drive_the_model_too() {
    // `init` writes a cache section; checking the model against its own contract runs the steps.
    let dir = std::env::temp_dir().join(format!("onnx-contract-init-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = dir.join("qwen2.yaml");
    let m = model("qwen2-tiny/model.onnx");
    let out = run(&["init", path_str(&m), "-o", path_str(&spec)]);
    assert!(out.status.success());
    let text = std::fs::read_to_string(&spec).unwrap();
    assert!(text.contains("self_past: [\"past_key_values.{layer}.{key,value}\"]"), "{text}");
    let (code, r) = check_json("qwen2-tiny/model.onnx", path_str(&spec), &[]);
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(steps(&r).len(), 4);
}

#[test]
fn real_encoder_states_and_a_separate_no_cache_decoder() {
    let enc = model("marian-tiny/encoder_model.onnx");
    let dec = model("marian-tiny/decoder_model.onnx");
    let mut extra = TINY.to_vec();
    extra.extend(["--encoder", path_str(&enc), "--no-cache-model", path_str(&dec), "--steps", "3"]);
    let (code, r) = check_json(MARIAN_MERGED, MARIAN_SPEC, &extra);
    assert_eq!(code, 0, "{r:#}");
    let s = steps(&r);
    assert_eq!(s.len(), 6);
    for step in s.iter().filter(|s| s["step"].as_i64() > Some(0)) {
        assert!(step["parity_max_abs_diff"].as_f64().unwrap() < 1e-4);
    }
}

#[test]
fn no_runtime_anywhere_says_what_to_install() {
    let empty = std::env::temp_dir().join(format!("onnx-contract-empty-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let m = model(GPT2);
    let out = bin()
        .args(["check", path_str(&m), "--contract", "specs/gpt2-decoder.yaml", "--no-fetch"])
        .args(TINY_GPT2)
        .env("PATH", &empty) // no python3: no onnxruntime package to find
        .env("COLUMNS", "400") // the phrases below, unwrapped
        .env("ONNX_CONTRACT_CACHE", &empty)
        .env_remove("ORT_DYLIB_PATH")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69));
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("pip install onnxruntime==1.31.1"), "{report}");
    assert!(report.contains("--ort-lib PATH or ORT_DYLIB_PATH"), "{report}");
    // The static check still ran and is shown: the runtime is missing, not the verdict on the model.
    assert!(report.contains("runtime-load"), "{report}");
    assert!(report.contains("static check: 7 inputs, 5 outputs as the contract says"), "{report}");
}

const TOY_SPEC: &str = "tests/fixtures/toy_decoder.yaml";

fn toy(name: &str) -> String {
    root().join("tests/fixtures").join(name).display().to_string()
}

#[test]
fn a_model_the_runtime_refuses_is_a_finding_with_its_cause() {
    let lib = ort_lib();
    let cases = [
        (
            "toy_decoder_ir14.onnx",
            "Unsupported model IR version: 14, max supported IR version: 13",
            "IR version is newer",
        ),
        (
            "toy_decoder_unknown_op.onnx",
            "com.example:NoSuchOp(-1) is not a registered function/op",
            "does not implement",
        ),
    ];
    for (file, message, cause) in cases {
        let (code, r) = json(&["check", "--format", "json", &toy(file), "--contract", TOY_SPEC, "--ort-lib", &lib]);
        assert_eq!(code, 2, "{r:#}");
        let all = r["findings"].as_array().unwrap();
        // For IR 14 the compatibility table already said so before the run.
        let predicted = all.iter().any(|f| f["code"] == "runtime-compat");
        assert_eq!(predicted, file.contains("ir14"), "{r:#}");
        let findings: Vec<&Value> = all.iter().filter(|f| f["code"] != "runtime-compat").collect();
        assert_eq!(findings.len(), 1, "only the load failure, no false crash: {r:#}");
        assert_eq!(findings[0]["code"], "model-load");
        assert!(findings[0]["message"].as_str().unwrap().contains(message), "{r:#}");
        assert!(findings[0]["cause"].as_str().unwrap().contains(cause), "{r:#}");
        // What was checked before the fault is still in the report.
        assert_eq!(r["runtime"]["ort_version"], "1.31.1");
    }
    let (code, r) =
        json(&["check", "--format", "json", &toy("toy_decoder.onnx"), "--contract", TOY_SPEC, "--ort-lib", &lib]);
    assert_eq!(code, 0, "{r:#}");
}

#[test]
fn target_ort_names_a_too_new_ir_before_running() {
    let (code, r) = json(&[
        "check",
        "--format",
        "json",
        &toy("toy_decoder_ir14.onnx"),
        "--contract",
        TOY_SPEC,
        "--target-ort",
        "1.16",
        "--static-only",
    ]);
    assert_eq!(code, 2);
    assert_eq!(r["findings"][0]["code"], "runtime-compat");
    assert_eq!(
        r["findings"][0]["message"],
        "the model has IR version 14; ONNX Runtime 1.16 accepts at most IR 9 (documented)"
    );
    let (code, _) = json(&[
        "check",
        "--format",
        "json",
        &toy("toy_decoder.onnx"),
        "--contract",
        TOY_SPEC,
        "--target-ort",
        "1.16",
        "--static-only",
    ]);
    assert_eq!(code, 0);
}

/// Older runtimes come from PyPI wheels (tests/fetch_runtimes.py, run here).
fn older_runtimes() -> Vec<String> {
    let out = std::process::Command::new("python3")
        .arg(root().join("tests/fetch_runtimes.py"))
        .output()
        .expect("python3 is needed to fetch the older runtimes");
    assert!(
        out.status.success(),
        "fetching onnxruntime 1.20.1 and 1.22.0 wheels failed (needs PyPI): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().lines().map(str::to_string).collect()
}

#[test]
fn several_runtimes_give_a_row_each_and_the_ir_limit_shows_per_version() {
    let mut libs: Vec<String> = older_runtimes().into_iter().filter(|l| !l.ends_with("1.16.3")).collect();
    libs.push(ort_lib());
    let mut args: Vec<String> = ["check", "--format", "json"].map(String::from).to_vec();
    // IR 11: accepted by 1.31.1, refused by 1.20.1 and 1.22.0 (measured here).
    let dir = std::env::temp_dir().join(format!("onnx-contract-ir11-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut bytes = std::fs::read(toy("toy_decoder.onnx")).unwrap();
    assert_eq!(&bytes[..2], &[0x08, 0x08], "ir_version is the first field");
    bytes[1] = 11;
    let ir11 = dir.join("toy_ir11.onnx");
    std::fs::write(&ir11, &bytes).unwrap();
    args.extend([ir11.display().to_string(), "--contract".into(), TOY_SPEC.into()]);
    for l in &libs {
        args.extend(["--ort-lib".to_string(), l.clone()]);
    }
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, r) = json(&argv);
    assert_eq!(code, 2, "{r:#}");
    let versions: Vec<&str> =
        r["runtimes"].as_array().unwrap().iter().map(|x| x["ort_version"].as_str().unwrap()).collect();
    assert_eq!(versions, ["1.20.1", "1.22.0", "1.31.1"]);
    let failed: Vec<&str> = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["code"] == "model-load")
        .map(|f| f["runtime"].as_str().unwrap())
        .collect();
    assert_eq!(failed, ["1.20.1", "1.22.0"]);
    assert_eq!(r["runtimes"][2]["steps"].as_array().unwrap().len(), 4, "1.31.1 runs all steps");
}

#[test]
fn a_runtime_older_than_the_supported_api_is_refused_clearly() {
    let old = older_runtimes().into_iter().find(|l| l.ends_with("1.16.3")).expect("1.16.3 fetched");
    let (code, r) =
        json(&["check", "--format", "json", &toy("toy_decoder.onnx"), "--contract", TOY_SPEC, "--ort-lib", &old]);
    assert_eq!(code, 69, "{r:#}");
    let f = &r["findings"][0];
    assert_eq!(f["code"], "runtime-load");
    assert!(f["cause"].as_str().unwrap().contains("1.16.3 is older than 1.17"), "{f:#}");
    assert_eq!(r["runtime"]["ort_version"], "1.16.3", "the version comes from the file name when loading fails");
}

#[test]
fn external_data_is_loaded_by_the_runtime_and_checked_before_it() {
    let lib = ort_lib();
    let model_path = toy("toy_external/model.onnx");
    let (code, r) = json(&["check", "--format", "json", &model_path, "--contract", TOY_SPEC, "--ort-lib", &lib]);
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(steps(&r).len(), 4);
    // A copy of the .onnx without its data file: refused before any run.
    let dir = std::env::temp_dir().join(format!("onnx-contract-nodata-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let lonely = dir.join("model.onnx");
    std::fs::copy(&model_path, &lonely).unwrap();
    let out = bin().args(["check", path_str(&lonely), "--contract", TOY_SPEC, "--ort-lib", &lib]).output().unwrap();
    assert_eq!(out.status.code(), Some(65));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("model.onnx_data` is missing"), "{err}");
    assert!(out.stdout.is_empty(), "no report, no run");
}

#[test]
fn a_static_axis_fails_at_step_0_with_its_cause() {
    let lib = ort_lib();
    let (code, r) = json(&[
        "check",
        "--format",
        "json",
        &toy("toy_decoder_static_seq.onnx"),
        "--contract",
        TOY_SPEC,
        "--ort-lib",
        &lib,
        "--force-run",
    ]);
    assert_eq!(code, 2);
    let f = r["findings"].as_array().unwrap();
    // The static finding that explains the refusal leads (issue 34), the run's refusal is its evidence.
    assert_eq!(f[0]["code"], "dim-static", "{f:#?}");
    assert!(f[0]["cause"].as_str().unwrap().contains("confirmed by the run: step 0"), "{:#}", f[0]);
    let run = f.iter().find(|f| f["code"] == "run-failed").expect("run-failed");
    assert_eq!(run["step"], 0);
    assert!(run["message"].as_str().unwrap().contains("index: 1 Got: 4 Expected: 1"), "{run:#}");
    assert!(run["cause"].as_str().unwrap().contains("a static axis"), "{run:#}");
}

#[test]
fn a_position_offset_bug_is_caught_by_parity_only() {
    let (code, r) = check_json("gpt2-position-bug/model.onnx", "specs/gpt2-decoder.yaml", &TINY_GPT2);
    assert_eq!(code, 2, "{r:#}");
    let all = r["findings"].as_array().unwrap();
    // The signature is right and every step runs with the right shapes (its
    // missing position_ids also fail the left-padded batch check, by design) ...
    // (and a chunk of tokens onto the cache, computed at restarted positions too).
    assert!(
        all.iter().all(|f| ["parity", "batch-padding", "chunk-after-past"].contains(&f["code"].as_str().unwrap())),
        "{r:#}"
    );
    assert!(steps(&r).iter().all(|s| s["error"].is_null()));
    // ... but the cached logits are not the recomputed ones, from step 1 on.
    let findings: Vec<&Value> = all.iter().filter(|f| f["code"] == "parity").collect();
    assert_eq!(findings.len(), 3);
    assert_eq!(findings[0]["step"], 1);
    // The mechanism, measured on the keys (issue 34), not a list of possibilities.
    assert!(findings[0]["cause"].as_str().unwrap().contains("positions restart at 0 every call"), "{:#}", findings[0]);
    for s in steps(&r).iter().skip(1) {
        assert!(s["parity_max_abs_diff"].as_f64().unwrap() > 1e-2);
    }
}
