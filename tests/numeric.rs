//! Every numeric form that ships, with zero flags on real ONNX Runtime:
//! float16 I/O, int8 dynamic quantization, onnxruntime-genai exports; and the
//! broken counterpart of each.

mod common;
use common::*;
use serde_json::Value;

fn finding<'a>(f: &'a Value, code: &str) -> &'a Value {
    f["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["code"] == code)
        .unwrap_or_else(|| panic!("no {code}: {:#}", f["findings"]))
}

fn cached_steps(f: &Value) -> Vec<&Value> {
    f["runtime"]["steps"].as_array().unwrap().iter().filter(|s| s["parity_max_abs_diff"].is_number()).collect()
}

#[test]
fn float16_seq2seq_is_fed_float16_and_passes() {
    let (code, r) = check_folder("marian-fp16");
    assert_eq!(code, 0, "{r:#}");
    let f = file_report(&r, "decoder_model_merged.onnx");
    assert_eq!(f["runtime"]["parity_rule"]["form"], "float16");
    let step0 = &f["runtime"]["steps"][0]["feeds"];
    for name in ["encoder_hidden_states", "past_key_values.0.decoder.key"] {
        let feed = step0.as_array().unwrap().iter().find(|x| x["name"] == name).unwrap();
        assert_eq!(feed["dtype"], "float16", "{name}");
    }
    for s in cached_steps(f) {
        assert!(s["parity_rel_diff"].as_f64().unwrap() < 2e-2, "{s:#}");
        assert_eq!(s["greedy_agrees"], true);
    }
}

#[test]
fn int8_quantized_variant_passes_within_its_noise_and_says_why() {
    let (code, r) = check_folder("gpt2-int8");
    assert_eq!(code, 0, "{r:#}");
    let q = file_report(&r, "onnx/model_quantized.onnx");
    assert_eq!(q["variant"], "quantized");
    let rule = &q["runtime"]["parity_rule"];
    assert!(rule["form"]["quantized"]["ops"].as_array().unwrap().iter().any(|o| o == "MatMulInteger"), "{rule:#}");
    assert!(rule["reason"].as_str().unwrap().contains("activation ranges are measured per call"));
    let steps = cached_steps(q);
    // Quantization noise is far above float32's 1e-4 and far below a cache bug.
    assert!(steps.iter().any(|s| s["parity_max_abs_diff"].as_f64().unwrap() > 1e-4), "{steps:#?}");
    assert!(steps.iter().all(|s| s["parity_rel_diff"].as_f64().unwrap() < 5e-2));
    assert_eq!(file_report(&r, "onnx/model.onnx")["runtime"]["parity_rule"]["form"], "float32");
}

#[test]
fn a_real_cache_bug_in_a_quantized_model_still_fails() {
    let (code, r) = check_folder("gpt2-int8-cache-bug");
    assert_eq!(code, 2);
    let q = file_report(&r, "onnx/model_quantized.onnx");
    let p = finding(q, "parity");
    assert!(p["message"].as_str().unwrap().contains("> tolerance 2.5e-1 relative"), "{p:#}");
}

#[test]
fn onnxruntime_genai_export_is_sized_and_named_by_its_genai_config() {
    let (code, r) = check_folder("llama-genai");
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(r["sizes"]["head_dim"]["value"], 16);
    assert_eq!(r["sizes"]["head_dim"]["source"], "genai_config.json: model.decoder.head_size");
    let f = file_report(&r, "model.onnx");
    assert_eq!(f["contract"]["name"], "genai-decoder");
    // The past's head size is the symbol kv_cache_dim in the graph: fed 16 from the config.
    let past = f["runtime"]["steps"][1]["feeds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "past_key_values.0.key")
        .unwrap();
    // genai_config.json: past_present_share_buffer with max_length 128: the
    // buffers are fed at max_length, the mask over the real length (prompt 4 + 1).
    assert_eq!(past["shape"], serde_json::json!([1, 2, 128, 16]));
    let feeds = f["runtime"]["steps"][1]["feeds"].as_array().unwrap();
    let mask = feeds.iter().find(|x| x["name"] == "attention_mask").unwrap();
    assert_eq!(mask["shape"], serde_json::json!([1, 5]));
    let present = f["runtime"]["steps"][1]["outputs"].as_array().unwrap();
    let present = present.iter().find(|x| x["name"] == "present.0.key").unwrap();
    assert_eq!(present["shape"], serde_json::json!([1, 2, 128, 16]));
    assert_eq!(cached_steps(f).len(), 3);
}

#[test]
fn a_genai_config_that_contradicts_its_model_names_the_key_and_both_values() {
    let (code, r) = check_folder("llama-genai-config-mismatch");
    assert_eq!(code, 2);
    let m = finding(file_report(&r, "model.onnx"), "config-mismatch");
    assert_eq!(
        m["message"],
        "genai_config.json: model.decoder.num_key_value_heads = 4, but model.onnx has kv_heads 2 (head axis of the past)"
    );
}

#[test]
fn a_float16_conversion_with_a_wrongly_typed_cast_names_the_node_and_branch() {
    let (code, r) = check_folder("marian-fp16-cast-bug");
    assert_eq!(code, 2);
    let f = finding(file_report(&r, "decoder_model_merged.onnx"), "model-load");
    assert_eq!(f["node"], "optimum::if (then_branch) → Cast_461 (Cast)");
    let cause = f["cause"].as_str().unwrap();
    assert!(cause.contains("casts to float32 while its output is declared float16"), "{cause}");
    assert_eq!(file_report(&r, "encoder_model.onnx")["verdict"], "pass");
}

#[test]
fn float16_overflow_is_a_non_finite_finding_with_step_and_tensor() {
    let (code, r) = check_folder("gpt2-fp16-overflow");
    assert_eq!(code, 2);
    let f = file_report(&r, "model.onnx");
    let found: Vec<(&str, i64)> = f["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["code"] == "non-finite" && x["tensor"].is_string())
        .map(|x| (x["tensor"].as_str().unwrap(), x["step"].as_i64().unwrap()))
        .collect();
    assert!(found.contains(&("logits", 0)), "{found:?}");
    // NaN in the batch and the chunk is said too (JSON cannot carry it: the wire stands in for it), once per check.
    let others: Vec<&str> = f["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["code"] == "non-finite" && !x["tensor"].is_string())
        .map(|x| x["message"].as_str().unwrap())
        .collect();
    assert_eq!(others.len(), 2, "{others:?}");
    assert!(
        others[0]
            .starts_with("left-padded batch: the logits hold NaN or Inf at 8 of 8 measured (first at row 0, step 0)"),
        "{others:?}"
    );
    assert!(found.contains(&("present.0.key", 0)), "{found:?}");
    // The first node whose output is non-finite while its inputs are finite,
    // found with every node output exposed (the -inf mask constants skipped).
    let first = finding(f, "non-finite");
    assert_eq!(first["node"], "/transformer/h.0/attn/c_attn/Gemm (Gemm)");
    let cause = first["cause"].as_str().unwrap();
    // The mechanism, not an untried remedy: `--remedy` runs the float32 island first.
    assert!(cause.contains("a float16 overflow (float16's largest finite is 65504)"), "{cause}");
    assert_eq!(first["repair"]["kind"], "keep_float32", "{first:#}");
    assert_eq!(first["repair"]["node"], "/transformer/h.0/attn/c_attn/Gemm");
}
