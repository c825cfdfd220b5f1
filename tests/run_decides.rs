//! The run decides (issue 20): exports that leave optimum's conventions are
//! planned from the protocol inferred from their graph and run, also when
//! the static check against the family contract failed; a deviation the run
//! shows harmless is a warning saying so, a failing run leads with its
//! mechanism, and a chunk of several tokens onto a cache is checked.

mod common;
use common::*;
use serde_json::Value;

/// The one file's report of a one-file folder (its entry holds the report's fields).
fn only(r: &Value) -> &Value {
    let files = r["files"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{r}");
    &files[0]
}

fn codes(report: &Value, severity: &str) -> Vec<String> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] == severity)
        .map(|f| f["code"].as_str().unwrap().to_string())
        .collect()
}

fn steps_ok(report: &Value) -> usize {
    report["runtimes"][0]["steps"].as_array().map_or(0, |s| s.iter().filter(|s| s["ok"] == true).count())
}

#[test]
fn a_dynamo_export_is_driven_by_its_inferred_protocol_and_passes() {
    let (code, r) = check_folder("dynamo-llama");
    let f = only(&r);
    assert_eq!(code, 0, "{}", f["findings"]);
    assert!(steps_ok(f) >= 4, "the run happened: {}", f["runtimes"]);
    // k0 is driven with cat_7: the pairing came from the graph.
    let pairs = f["runtimes"][0]["cache_pairs"].as_array().unwrap();
    assert!(pairs.iter().any(|p| p[0] == "k0" && p[1] == "cat_7"), "{pairs:?}");
    // The names the family contract expected are evidence, settled by the run: the
    // exporter's own convention, information (issue 40: no warning for it).
    let all = f["findings"].as_array().unwrap();
    assert!(all.iter().all(|x| x["severity"] == "info"), "{}", f["findings"]);
    let convention =
        all.iter().filter(|x| x["cause"].as_str().is_some_and(|c| c.starts_with("the family contract's convention")));
    assert!(convention.count() >= 3, "{}", f["findings"]);
    assert!(codes(f, "error").is_empty());
}

#[test]
fn a_fresh_mask_symbol_binds_to_past_plus_new_and_the_run_confirms_it() {
    let (code, r) = check_folder("custom-total-seq");
    let f = only(&r);
    assert_eq!(code, 0, "{}", f["findings"]);
    let binding = f["findings"].as_array().unwrap().iter().find(|x| x["code"] == "dim-name").unwrap();
    assert_eq!(binding["severity"], "info");
    assert!(binding["message"].as_str().unwrap().contains("total_seq"), "{binding}");
    assert!(steps_ok(f) >= 4);
}

#[test]
fn positions_that_restart_fail_on_the_run_and_the_mechanism_leads() {
    let (code, r) = check_folder("custom-positions-restart");
    let f = only(&r);
    assert_eq!(code, 2);
    // The static deviation (no position_ids) no longer stops the run: the run names the mechanism first.
    let first = &f["findings"][0];
    assert_eq!(first["code"], "parity", "{}", f["findings"]);
    assert_eq!(first["step"], 1);
    assert!(codes(f, "error").contains(&"input-missing".to_string()));
}

#[test]
fn a_chunk_after_a_past_catches_a_mask_built_for_one_new_token() {
    let (code, r) = check_folder("custom-chunk-mask-bug");
    let f = only(&r);
    assert_eq!(code, 2);
    assert_eq!(codes(f, "error"), vec!["chunk-after-past".to_string()], "{}", f["findings"]);
    let chunk = f["runtimes"][0]["chunk"].as_array().unwrap();
    assert_eq!(chunk.len(), 3);
    assert!(chunk.iter().all(|c| c[1].as_f64().unwrap() > 0.1), "{chunk:?}");
    // The same check on a correct export of the same model: exactly the uncached logits.
    let (_, good) = check_folder("custom-total-seq");
    let chunk = only(&good)["runtimes"][0]["chunk"].as_array().unwrap().clone();
    assert!(chunk.iter().all(|c| c[1].as_f64().unwrap() < 1e-4), "{chunk:?}");
}

#[test]
fn an_explicit_contract_keeps_its_errors_and_the_model_is_run_anyway() {
    let m = model(MARIAN_15);
    let (code, r) = json(&[
        "check",
        path_str(&m),
        "--contract",
        "specs/marian-decoder-merged.yaml",
        "--param",
        "hidden=32",
        "--param",
        "head_dim=4",
        "--param",
        "vocab=1000",
        "--format",
        "json",
        "--no-fetch",
    ]);
    assert_eq!(code, 2);
    assert!(codes(&r, "error").contains(&"input-count".to_string()));
    assert!(!codes(&r, "warning").contains(&"runtime-skipped".to_string()), "{}", r["findings"]);
    // Without a branch flag only an empty past is right at step 0: one run, every step ok.
    assert!(steps_ok(&r) >= 4, "{}", r["runtimes"]);
    assert!(!codes(&r, "error").contains(&"parity".to_string()), "{}", r["findings"]);
}

#[test]
fn fused_alibi_and_sliding_exports_through_optimum_pass_as_they_are() {
    // GPT-BigCode's fused key_value cache grows on axis 1; Bloom has no positions; Gemma 3 alternates windows.
    for dir in ["gpt-bigcode-tiny", "bloom-tiny", "gemma3-tiny"] {
        let (code, r) = check_folder(dir);
        let f = only(&r);
        assert_eq!(code, 0, "{dir}: {}", f["findings"]);
        assert!(steps_ok(f) >= 4, "{dir}: {}", f["runtimes"]);
        let chunk = f["runtimes"][0]["chunk"].as_array().unwrap();
        assert!(chunk.iter().all(|c| c[1].as_f64().unwrap() < 1e-4), "{dir}: {chunk:?}");
    }
    let (_, r) = check_folder("gpt-bigcode-tiny");
    let pairs = only(&r)["runtimes"][0]["cache_pairs"].as_array().unwrap().clone();
    assert!(pairs.iter().any(|p| p[0] == "past_key_values.0.key_value"), "{pairs:?}");
}

#[test]
fn a_speech_model_on_raw_samples_gets_as_many_samples_as_its_encoder_needs() {
    // Moonshine (optimum-cli): the encoder's conv stack needs at least 895 samples for one frame;
    // its output-length expression says how many, and every decoder form then runs.
    let (code, r) = check_folder("moonshine-tiny");
    assert_eq!(code, 0, "{r:#}");
    let files = r["files"].as_array().unwrap();
    for name in ["decoder_model_merged.onnx", "decoder_with_past_model.onnx"] {
        let f = files.iter().find(|f| f["path"] == name).unwrap();
        assert!(steps_ok(f) >= 4, "{name}: {}", f["runtimes"]);
        let feeds = f["runtimes"][0]["steps"][0]["feeds"].as_array().unwrap();
        let states = feeds.iter().find(|x| x["name"] == "encoder_hidden_states").unwrap();
        assert!(states["shape"][1].as_i64().unwrap() >= 1, "{states}");
    }
}

#[test]
fn conv_states_are_zero_filled_carried_and_never_grown() {
    // LFM2 from the onnxruntime-genai builder: KV on attention layers 1 and 3, conv states on 0 and 2.
    let (_, r) = check_folder("lfm2-genai");
    let f = only(&r);
    let steps = f["runtimes"][0]["steps"].as_array().unwrap();
    assert!(steps.iter().filter(|s| s["ok"] == true).count() >= 4, "{}", f["runtimes"]);
    for s in &steps[1..] {
        assert!(s["parity_max_abs_diff"].as_f64().unwrap() < 1e-4, "{s}");
    }
    // The state keeps its fixed [batch, 64, 2] at every step; the KV grows.
    for s in steps {
        let conv = s["feeds"].as_array().unwrap().iter().find(|x| x["name"] == "past.0.conv").unwrap();
        assert_eq!(conv["shape"], serde_json::json!([1, 64, 2]), "{s}");
    }
    let kv = steps[2]["feeds"].as_array().unwrap().iter().find(|x| x["name"] == "past_key_values.1.key").unwrap();
    assert!(kv["shape"][2].as_i64().unwrap() > 0, "{kv}");
    assert!(!f["findings"].as_array().unwrap().iter().any(|x| x["code"] == "cache-growth" || x["code"] == "plan"));
}
