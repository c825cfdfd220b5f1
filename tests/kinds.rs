//! Kinds of folders beside decoders with a growing cache (issue: every kind
//! of folder people keep): each correct one made by a real exporter gets no
//! flag, and is driven the way its runtime drives it.

mod common;
use common::*;
use serde_json::Value;

fn flags(f: &Value) -> Vec<String> {
    f["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["severity"] != "info")
        .map(|x| format!("{}: {}", x["code"].as_str().unwrap_or("?"), x["message"].as_str().unwrap_or("?")))
        .collect()
}

/// optimum's `merge_decoders` of a decoder-only pair: one file with the
/// branch flag and no encoder, fed the flag in every run (steps, the padded
/// batch, the chunk after a past) and described as what it is.
#[test]
fn a_merged_decoder_only_file_is_driven_with_its_flag_everywhere_and_gets_no_flag() {
    let (code, r) = check_folder("gpt2-merged-decoders");
    assert_eq!(code, 0, "{r:#}");
    let f = file_report(&r, "decoder_model_merged.onnx");
    assert_eq!(f["role"], "merged-decoder");
    assert!(flags(f).is_empty(), "{:#?}", flags(f));
    let how = f["driven_as"].as_str().unwrap();
    assert!(how.starts_with("merged decoder-only") && !how.contains("encoder states"), "{how}");
    let rt = &f["runtimes"][0];
    assert!(rt["batch"].as_array().unwrap().len() >= 4 && rt["chunk"].as_array().unwrap().len() >= 3, "{rt:#}");
    // Step 0 on the no-cache branch, then the cache branch.
    let flag_at = |step: u64| {
        let s = rt["steps"].as_array().unwrap().iter().find(|s| s["step"] == step).unwrap();
        s["feeds"].as_array().unwrap().iter().any(|x| x["name"] == "use_cache_branch")
    };
    assert!(flag_at(0) && flag_at(1), "{rt:#}");
}

/// A Qwen2-VL-style image-text layout: 3-D positions `[3, batch, seq]` (M-RoPE),
/// text positions in every row continuing the cache; its vision encoder of
/// flattened patches and a patch grid is one.
#[test]
fn rank_3_multimodal_positions_are_fed_as_three_rows_and_the_folder_gets_no_flag() {
    let (code, r) = check_folder("qwen2vl-tiny");
    assert_eq!(code, 0, "{r:#}");
    for (file, role) in [
        ("onnx/decoder_model_merged.onnx", "decoder-only"),
        ("onnx/embed_tokens.onnx", "embed-tokens"),
        ("onnx/vision_encoder.onnx", "vision-encoder"),
    ] {
        let f = file_report(&r, file);
        assert_eq!(f["role"], role, "{file}");
        assert!(flags(f).is_empty(), "{file}: {:#?}", flags(f));
    }
    let f = file_report(&r, "onnx/decoder_model_merged.onnx");
    assert_eq!(shape_at(f, 0, "feeds", "position_ids"), serde_json::json!([3, 1, 4]));
    assert_eq!(shape_at(f, 2, "feeds", "position_ids"), serde_json::json!([3, 1, 1]));
    assert!(f["runtimes"][0]["steps"].as_array().unwrap().iter().all(|s| s["ok"] == true));
}

/// optimum's `text-generation` without past: driven by re-feeding the whole
/// prefix (no parity: there is no cached path), a left-padded batch against
/// each row alone, the measured cost per token said as a warning, never
/// judged against a cached contract; its twin whose mask reaches no node
/// fails on the padded row.
#[test]
fn a_decoder_without_a_cache_is_driven_by_its_prefix_and_its_cost_is_measured() {
    let (code, r) = check_folder("llama-no-cache");
    assert_eq!(code, 0, "{r:#}");
    let f = file_report(&r, "model.onnx");
    assert_eq!(f["role"], "decoder-only-no-cache");
    let flagged = flags(f);
    assert_eq!(flagged.len(), 1, "{flagged:#?}");
    assert!(
        flagged[0].starts_with("no-cache: no KV cache: every generated token re-feeds the whole prefix"),
        "{flagged:#?}"
    );
    let rt = &f["runtimes"][0];
    // The prefix grows by one token per step: 4, 5, 6, 7.
    for step in 0..4u64 {
        assert_eq!(shape_at(f, step as usize, "feeds", "input_ids"), serde_json::json!([1, 4 + step]), "{rt:#}");
    }
    assert!(rt["batch"].as_array().unwrap().iter().all(|row| row[4] == true), "{rt:#}");
    let (code, r) = check_folder("llama-no-cache-mask-ignored");
    assert_eq!(code, 2, "{r:#}");
    let f = file_report(&r, "model.onnx");
    let first = f["findings"].as_array().unwrap().iter().find(|x| x["severity"] == "error").unwrap();
    assert_eq!(first["code"], "batch-padding", "{first:#}");
    assert!(first["message"].as_str().unwrap().contains("row 1 of a batch of 2 (left-padded by 2)"), "{first:#}");
}

/// optimum's legacy decoder-only pair: the prompt half is recognised as such
/// (its presents allowed), the with-past file driven; no flag.
#[test]
fn the_legacy_decoder_only_pair_gets_no_flag() {
    let (code, r) = check_folder("gpt2-legacy-pair");
    assert_eq!(code, 0, "{r:#}");
    for file in ["decoder_model.onnx", "decoder_with_past_model.onnx"] {
        assert!(flags(file_report(&r, file)).is_empty(), "{file}: {:#?}", flags(file_report(&r, file)));
    }
    assert!(file_report(&r, "decoder_model.onnx")["driven_as"]
        .as_str()
        .unwrap()
        .contains("the prompt half of the split pair"));
}

/// An embeddings model exported by optimum for feature extraction, alone in
/// its folder: driven as its own product (batch 1, a right-padded batch of
/// 2 whose rows equal each row alone on their real positions), no decoder
/// contract, no flag.
#[test]
fn an_encoder_alone_is_driven_as_its_own_product_and_gets_no_flag() {
    let (code, r) = check_folder("bert-embeddings");
    assert_eq!(code, 0, "{r:#}");
    let f = file_report(&r, "model.onnx");
    assert_eq!(f["role"], "encoder");
    assert!(flags(f).is_empty(), "{:#?}", flags(f));
    assert!(f["driven_as"].as_str().unwrap().starts_with("encoder alone"), "{f:#}");
    let rt = &f["runtimes"][0];
    assert_eq!(rt["steps"].as_array().unwrap().len(), 1, "{rt:#}");
    assert_eq!(shape_at(f, 0, "feeds", "token_type_ids"), serde_json::json!([1, 6]));
    let rows = rt["batch"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{rt:#}");
    assert!(rows.iter().all(|row| row[2].as_f64().unwrap() < 1e-4), "{rt:#}");
}

/// The legacy pair driven as a pair: a with-past file right for one token
/// but wrong for several is named by the chunk check, not by parity.
#[test]
fn a_legacy_pair_wrong_for_chunks_is_named_by_the_chunk_check() {
    let (code, r) = check_folder("gpt2-legacy-pair-chunk-bug");
    assert_eq!(code, 2, "{r:#}");
    let f = file_report(&r, "decoder_with_past_model.onnx");
    assert!(f["driven_as"].as_str().unwrap().starts_with("legacy split pair"), "{f:#}");
    let errors: Vec<&Value> = f["findings"].as_array().unwrap().iter().filter(|x| x["severity"] == "error").collect();
    assert_eq!(errors[0]["code"], "chunk-after-past", "{errors:#?}");
    assert!(errors.iter().all(|e| e["code"] != "parity"), "one-token steps are right: {errors:#?}");
}

/// A 3-D-position decoder whose rotary sections all read row 0: right on
/// every text-only call, named by the probe that changes rows 1 and 2 (the
/// correct graph's logits move; this one's do not).
#[test]
fn a_multimodal_decoder_whose_sections_read_one_row_is_named() {
    let (code, r) = check_folder("qwen2vl-tiny");
    assert_eq!(code, 0);
    let probes = file_report(&r, "onnx/decoder_model_merged.onnx")["runtimes"][0]["probes"].to_string();
    assert!(probes.contains("logits moved by") && !probes.contains("moved by 0.000e0"), "{probes}");
    let (code, r) = check_folder("qwen2vl-collapsed-rows");
    assert_eq!(code, 2, "{r:#}");
    let f = file_report(&r, "onnx/decoder_model_merged.onnx");
    let first = f["findings"].as_array().unwrap().iter().find(|x| x["severity"] == "error").unwrap();
    assert_eq!(first["code"], "position-rows", "{first:#}");
    assert!(first["message"].as_str().unwrap().contains("every section reads row 0"), "{first:#}");
}

/// MusicGen (issue 30): decoder rows are batch × codebooks where the dim
/// names say `batch_size`; the text encoder feeds the decoder; the codec
/// decoder and the delay-pattern helper are recognised and run once on
/// inputs built with the folder's codebooks. The correct export passes.
#[test]
fn a_multi_codebook_audio_folder_is_driven_as_its_runtime_drives_it() {
    let (code, r) = check_folder("musicgen-tiny");
    assert_eq!(code, 0, "{r:#}");
    // Zero flags: the dim names that say `batch_size` for batch × codebooks are the decoder's own.
    for f in r["files"].as_array().unwrap() {
        let flags: Vec<&Value> = f["findings"].as_array().unwrap().iter().filter(|x| x["severity"] != "info").collect();
        assert!(flags.is_empty(), "{}: {flags:#?}", f["path"]);
    }
    let d = file_report(&r, "decoder_with_past_model.onnx");
    assert!(d["driven_as"].as_str().unwrap().contains("encoder states from text_encoder.onnx"), "{d:#}");
    // Token rows are batch × codebooks (2), the caches keep the batch (1).
    let steps = d["runtimes"][0]["steps"].as_array().unwrap();
    let shape = |s: &Value, list: &str, name: &str| {
        s[list].as_array().unwrap().iter().find(|x| x["name"] == name).unwrap()["shape"].clone()
    };
    assert_eq!(shape(&steps[1], "feeds", "input_ids"), serde_json::json!([2, 1]));
    assert_eq!(shape(&steps[1], "outputs", "logits"), serde_json::json!([2, 1, 64]));
    assert_eq!(shape(&steps[1], "outputs", "present.0.decoder.key")[0], 1);
    assert!(steps.iter().skip(1).all(|s| s["parity_max_abs_diff"].as_f64().unwrap() < 1e-4), "{steps:#?}");
    for (file, role, made) in [
        ("encodec_decode.onnx", "codec-decoder", "audio_values"),
        ("build_delay_pattern_mask.onnx", "delay-pattern", "delay_pattern_mask"),
    ] {
        let f = file_report(&r, file);
        assert_eq!(f["role"], role, "{f:#}");
        let driven = f["driven_as"].as_str().unwrap();
        assert!(driven.contains("loads and runs") && driven.contains(made), "{driven}");
        assert!(!f["findings"].as_array().unwrap().iter().any(|x| x["code"] == "role-unknown"), "{f:#}");
    }
}
