//! `check DIR --source CHECKPOINT` (issue 40): the transformers checkpoint an
//! export came from (models/*-source, saved by the fixtures' generators) is
//! the reference of every step, for the folder's first form and each dtype
//! variant; a departure names the file, the step, the token and both logits.

mod common;
use common::*;
use serde_json::Value;

fn with_source(dir: &str, source: &str) -> (i32, Value) {
    json(&[
        "check",
        &format!("models/{dir}"),
        "--source",
        &format!("models/{source}"),
        "--format",
        "json",
        "--no-fetch",
    ])
}

/// The folder's `source-*` findings: (severity, message).
fn said(r: &Value) -> Vec<(String, String)> {
    r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["code"].as_str().unwrap().starts_with("source"))
        .map(|f| (f["severity"].as_str().unwrap().to_string(), f["message"].as_str().unwrap().to_string()))
        .collect()
}

#[test]
fn exports_agree_with_the_checkpoints_they_came_from() {
    // Decoder-only, encoder-decoder, and a folder of dtype variants (fp16, q8, q4) of one fp32 model.
    for (dir, source, files) in [
        ("granite-tiny", "granite-tiny-source", 1),
        ("marian-tiny", "marian-tiny-source", 1),
        ("tjs-variants", "llama-tiny-source", 4),
    ] {
        let (code, r) = with_source(dir, source);
        assert_eq!(code, 0, "{dir}: {r:#}");
        let s = said(&r);
        assert_eq!(s.len(), files, "{dir}: {s:#?}");
        assert!(s.iter().all(|(sev, m)| sev == "info" && m.contains("agrees with the checkpoint")), "{dir}: {s:#?}");
    }
}

#[test]
fn a_semantic_defect_and_a_broken_quantization_depart_from_the_checkpoint() {
    // logits_scaling dropped: every logit 8× the checkpoint's from step 0 (greedy tokens unchanged).
    let (code, r) = with_source("granite-logits-scaling-dropped", "granite-tiny-source");
    assert_eq!(code, 2, "{r:#}");
    let s = said(&r);
    let e = s.iter().find(|(sev, _)| sev == "error").unwrap_or_else(|| panic!("{s:#?}"));
    assert!(e.1.starts_with("model.onnx: at step 0 (prompt [1, 3, 14, 15]"), "{}", e.1);
    assert!(e.1.contains("the greedy token is the same"), "{}", e.1);
    // A q4 file whose quantization is wrong, beside good fp16 and q8 files.
    let (code, r) = with_source("tjs-variants-broken-q4", "llama-tiny-source");
    assert_eq!(code, 2, "{r:#}");
    let errors: Vec<(String, String)> = said(&r).into_iter().filter(|(sev, _)| sev == "error").collect();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(errors[0].1.starts_with("onnx/model_q4.onnx: at step 0"), "{}", errors[0].1);
    assert!(errors[0].1.contains("a quantized file is expected within"), "{}", errors[0].1);
}

#[test]
fn a_source_that_is_no_checkpoint_is_said_and_a_single_file_is_a_usage_error() {
    let (code, r) = with_source("granite-tiny", "granite-tiny");
    assert_eq!(code, 2, "{r:#}");
    let s = said(&r);
    assert!(s.iter().any(|(sev, m)| sev == "error" && m.contains("transformers fails")), "{s:#?}");
    let (code, r) = with_source("llama-tiny", "no-such-checkpoint");
    assert_eq!(code, 2, "{r:#}");
    assert!(said(&r)[0].1.contains("no config.json there"), "{r:#}");
    let out = run(&["check", "models/llama-tiny/model.onnx", "--source", "models/llama-tiny-source"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--source compares an export folder"));
}
