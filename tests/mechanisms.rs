//! The headline names the mechanism, found by experiment (issue 34): each
//! broken fixture of models/generate_mechanisms.py (a real exporter's output
//! plus one small graph edit, verified against PyTorch by that script) gets
//! its cause and figure, and every good twin stays at zero flags with no
//! experiment run.

mod common;
use common::{check_folder, file_report};
use serde_json::Value;

/// The first error of `file` in folder `dir` (the headline), which must fail.
fn headline(dir: &str, file: &str) -> (Value, Value) {
    let (code, r) = check_folder(dir);
    assert_eq!(code, 2, "{dir} must fail: {r:#}");
    let f = file_report(&r, file).clone();
    let first = f["findings"].as_array().unwrap().iter().find(|x| x["severity"] == "error").expect("an error").clone();
    (first, f)
}

fn cause(f: &Value) -> &str {
    f["cause"].as_str().unwrap_or_else(|| panic!("no cause: {f:#}"))
}

/// The restored figure in `text` after "restores parity to ".
fn restored(text: &str) -> f64 {
    let at = text.find("restores parity to ").unwrap_or_else(|| panic!("no figure: {text}")) + 19;
    text[at..].split([':', ' ', ';']).next().unwrap().parse().unwrap()
}

fn probes(f: &Value) -> Vec<String> {
    f["runtimes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["probes"].as_array().cloned().unwrap_or_default())
        .map(|p| p.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn reversed_layers_are_seen_in_the_presents_and_confirmed_by_running() {
    let (first, f) = headline("mech-layers-reversed", "model.onnx");
    assert_eq!(first["code"], "parity", "{first:#}");
    let c = cause(&first);
    assert!(c.contains("`present.0.key` carries what the graph reads as `past_key_values.2.key`"), "{c}");
    assert!(c.contains("reverse layer order"), "{c}");
    assert!(restored(c) < 1e-5, "{c}");
    assert!(!c.contains(" or "), "no list of possibilities: {c}");
    assert!(probes(&f).iter().any(|p| p.starts_with("experiments at step 1: each present fed")), "{:?}", probes(&f));
}

#[test]
fn exchanged_cross_key_and_value_restore_parity_when_exchanged_back() {
    let (first, _) = headline("mech-cross-kv-swapped", "decoder_model_merged.onnx");
    assert_eq!(first["code"], "parity");
    let c = cause(&first);
    assert!(c.contains("cross-attention key and value are exchanged") && c.contains("present.0.encoder.value"), "{c}");
    assert!(restored(c) < 1e-5, "{c}");
}

#[test]
fn swapped_if_branches_are_confirmed_with_the_flag_inverted() {
    let (first, f) = headline("mech-if-swapped", "decoder_model_merged.onnx");
    assert_eq!(first["code"], "cache-growth", "{first:#}");
    assert!(first["message"].as_str().unwrap().contains("the past fed (4) is dropped"), "{first:#}");
    let c = cause(&first);
    assert!(c.contains("`use_cache_branch` false restores parity") && c.contains("branches are exchanged"), "{c}");
    assert!(restored(c) < 1e-5, "{c}");
    // The graph's own fact: the branch taken when the flag is true reads no past.
    let b = f["findings"].as_array().unwrap().iter().find(|x| x["code"] == "branch-swapped").expect("branch-swapped");
    assert!(b["message"].as_str().unwrap().contains("reads the pasts only in its else-branch"), "{b:#}");
    // A merged decoder-only file is described as one, not as seeded encoder states.
    let driven = f["driven_as"].as_str().unwrap();
    assert!(driven.contains("merged decoder-only") && !driven.contains("encoder"), "{driven}");
}

#[test]
fn a_key_appended_twice_is_said_as_arithmetic() {
    let (first, _) = headline("mech-key-twice", "model.onnx");
    assert_eq!(first["code"], "cache-growth");
    let m = first["message"].as_str().unwrap();
    assert!(m.contains("grows by 2 × the tokens fed (8 after a past of 0 and 4 new)"), "{m}");
}

#[test]
fn a_mask_reaching_no_node_is_a_warning_and_the_cause() {
    let (first, f) = headline("mech-mask-unused", "model.onnx");
    assert_eq!(first["code"], "batch-padding");
    assert!(cause(&first).starts_with("`attention_mask` reaches no node of the graph"), "{first:#}");
    let w = f["findings"].as_array().unwrap().iter().find(|x| x["code"] == "input-unread").expect("input-unread");
    assert_eq!(w["severity"], "warning");
    assert_eq!(w["tensor"], "attention_mask");
}

#[test]
fn a_padded_row_turning_nan_is_traced_to_the_fully_masked_softmax() {
    let (first, _) = headline("mech-fp16-pad-nan", "model.onnx");
    assert_eq!(first["code"], "batch-padding");
    assert_eq!(first["node"], "/model/layers.0/self_attn/Softmax (Softmax)", "{first:#}");
    let c = cause(&first);
    assert!(
        c.contains("softmax over fully masked rows") && c.contains("-inf in float16") && c.contains("-65504"),
        "{c}"
    );
}

#[test]
fn positions_restarting_at_zero_are_measured_on_the_keys() {
    let (first, f) = headline("custom-positions-restart", "model.onnx");
    assert_eq!(first["code"], "parity");
    assert!(cause(&first).contains("position 0, where the cache holds 4: positions restart at 0"), "{first:#}");
    assert!(probes(&f).iter().any(|p| p.contains("keys at positions 0..5: position 0")), "{:?}", probes(&f));
}

#[test]
fn good_twins_stay_at_zero_flags_and_run_no_experiment() {
    for dir in ["mech-llama-good", "mech-fp16-good", "mech-marian-good", "gpt2-merged-decoders"] {
        let (code, r) = check_folder(dir);
        assert_eq!(code, 0, "{dir}: {r:#}");
        for f in r["files"].as_array().unwrap() {
            let flags: Vec<&Value> =
                f["findings"].as_array().unwrap().iter().filter(|x| x["severity"] != "info").collect();
            assert!(flags.is_empty(), "{dir}/{}: {flags:#?}", f["path"]);
            assert!(!probes(f).iter().any(|p| p.starts_with("experiments")), "{dir}: {:?}", probes(f));
        }
    }
}

/// A chunk's departure says what was measured: one-token steps that held
/// (custom-chunk-mask-bug) or that departed too (custom-positions-restart).
#[test]
fn a_chunk_departure_says_what_the_one_token_steps_showed() {
    let (first, _) = headline("custom-chunk-mask-bug", "model.onnx");
    assert_eq!(first["code"], "chunk-after-past");
    assert!(cause(&first).starts_with("measured: one token per call onto a past agrees"), "{first:#}");
    let (_, f) = headline("custom-positions-restart", "model.onnx");
    let chunk = f["findings"].as_array().unwrap().iter().find(|x| x["code"] == "chunk-after-past").expect("chunk");
    assert!(cause(chunk).starts_with("the one-token steps depart too"), "{chunk:#}");
}
