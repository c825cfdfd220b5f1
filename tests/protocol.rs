//! `protocol`: the table for every committed folder, and the emitted
//! programs tested by running them: their cached greedy loop must give the
//! same ids and top-5 logits as the tool's own generation without a cache.

mod common;
use common::*;
use serde_json::Value;
use std::process::Command;

/// (folder or file, form, --ids or --features, top-5 logit tolerance)
const CASES: &[(&str, &str, &str, f64)] = &[
    ("marian-tiny", "merged-decoder", "5,17,42,7", 1e-4),
    ("marian-tiny", "split-pair", "5,17,42,7", 1e-4),
    ("bart-tjs", "merged-decoder", "5,17,42", 1e-4),
    ("bart-tjs", "split-pair", "5,17,42", 1e-4),
    ("t5-tiny", "merged-decoder", "5,17,42", 1e-4),
    ("whisper-tiny", "merged-decoder", "FEATURES", 1e-4),
    ("gpt2-tiny", "decoder-only", "3,14,15,92", 1e-4),
    ("llama-tiny", "decoder-only", "3,14,15,92", 1e-4),
    ("qwen2-tiny", "decoder-only", "3,14,15,92", 1e-4),
    ("mistral-tiny", "decoder-only", "3,14,15,92", 1e-4),
    ("gemma-tiny", "decoder-only", "3,14,15,92", 1e-4),
    ("llama-genai", "decoder-only", "3,14,15,92", 1e-4),
    ("marian-fp16", "merged-decoder", "5,17,42,7", 2e-2),
    ("gpt2-int8/onnx/model_quantized.onnx", "decoder-only", "3,14,15,92", 5e-2),
];

fn features(dir: &std::path::Path) -> String {
    let path = dir.join("features.npy");
    let code = "import numpy as np, sys; np.save(sys.argv[1], np.random.default_rng(0).standard_normal((80, 3000)).astype(np.float32))";
    let ok = Command::new("python3").args(["-c", code, path_str(&path)]).status().unwrap().success();
    assert!(ok, "numpy writes the features");
    path.display().to_string()
}

fn input_args(input: &str, features: &str) -> Vec<String> {
    if input == "FEATURES" {
        vec!["--features".into(), features.into()]
    } else {
        vec!["--ids".into(), input.into()]
    }
}

fn compare(case: &str, got: &Value, want: &Value, tol: f64) {
    assert_eq!(got["ids"], want["ids"], "{case}: ids");
    let n = want["ids"].as_array().unwrap().len();
    assert!(n >= 16, "{case}: {n} tokens");
    for (g, w) in got["top5"].as_array().unwrap().iter().zip(want["top5"].as_array().unwrap()) {
        for (a, b) in g.as_array().unwrap().iter().zip(w.as_array().unwrap()) {
            let (la, lb) = (a[1].as_f64().unwrap(), b[1].as_f64().unwrap());
            let scale = lb.abs().max(1.0);
            assert!((la - lb).abs() <= tol * scale, "{case}: logit {la} vs {lb}");
        }
    }
}

#[test]
fn protocol_prints_every_step_within_100_columns_and_as_json() {
    for (dir, form, _, _) in CASES {
        let target = format!("models/{dir}");
        let out = bin().args(["protocol", &target]).env_remove("COLUMNS").output().unwrap();
        assert!(out.status.success(), "{dir}: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout);
        let widest = text.lines().map(|l| l.chars().count()).max().unwrap();
        assert!(widest <= 100, "{dir}: {widest} columns");
        assert!(
            text.contains("step 0 (prompt)") && text.contains("step k ≥ 1") && text.contains(form),
            "{dir}:\n{text}"
        );
        let (code, v) = json(&["protocol", "--format", "json", &target]);
        assert_eq!(code, 0);
        let forms: Vec<&str> = v["loops"].as_array().unwrap().iter().map(|l| l["form"].as_str().unwrap()).collect();
        assert!(forms.contains(form), "{dir}: {forms:?}");
    }
}

#[test]
fn emitted_python_programs_match_the_uncached_reference() {
    let tmp = std::env::temp_dir().join(format!("onnx-contract-emit-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let feats = features(&tmp);
    for (dir, form, input, tol) in CASES {
        let case = format!("{dir} ({form})");
        let target = format!("models/{dir}");
        let model_dir = if dir.ends_with(".onnx") {
            root().join(&target).parent().unwrap().to_path_buf()
        } else {
            root().join(&target)
        };
        let out = run(&["protocol", &target, "--form", form, "--emit", "python"]);
        assert!(out.status.success(), "{case}: {}", String::from_utf8_lossy(&out.stderr));
        let program = tmp.join("gen.py");
        std::fs::write(&program, &out.stdout).unwrap();
        let args = input_args(input, &feats);
        let ran = Command::new("python3")
            .arg(&program)
            .args(["--model-dir", path_str(&model_dir), "--max-new-tokens", "16", "--ignore-eos"])
            .args(&args)
            .output()
            .unwrap();
        assert!(ran.status.success(), "{case}: {}", String::from_utf8_lossy(&ran.stderr));
        let got: Value = serde_json::from_slice(&ran.stdout).unwrap();
        let mut reference =
            vec!["protocol", &target, "--form", form, "--reference", "--max-new-tokens", "16", "--ignore-eos"];
        let args_ref: Vec<&str> = args.iter().map(String::as_str).collect();
        reference.extend(args_ref);
        let r = run(&reference);
        assert!(r.status.success(), "{case}: {}", String::from_utf8_lossy(&r.stderr));
        let want: Value = serde_json::from_slice(&r.stdout).unwrap();
        compare(&case, &got, &want, *tol);
    }
    let _ = std::fs::remove_dir_all(&tmp);
}
