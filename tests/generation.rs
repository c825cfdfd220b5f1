//! Generation the way applications run it: a left-padded batch of two
//! prompts against each row run alone, variants against fp32, sliding
//! windows, `--deep` long runs and optimizer levels; the first non-finite node lives in
//! tests/numeric.rs, cache names beyond optimum in tests/folders.rs.

mod common;
use common::*;
use serde_json::Value;

fn row1_max(r: &Value) -> f64 {
    r["files"][0]["runtime"]["batch"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x[0] == 1)
        .map(|x| x[2].as_f64().unwrap())
        .fold(0.0, f64::max)
}

#[test]
fn a_model_without_position_ids_shifts_left_padded_rows() {
    let (code, r) = check_folder("gpt2-no-position-ids");
    assert_eq!(code, 2, "{r:#}");
    let f = &r["files"][0]["findings"];
    let err = f
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["code"] == "batch-padding" && x["severity"] == "error")
        .expect("batch-padding error");
    assert!(err["message"].as_str().unwrap().starts_with("row 1 of a batch of 2 (left-padded by 2)"), "{err:#}");
    assert!(err["cause"].as_str().unwrap().contains("takes no position_ids"), "{err:#}");
    // The static suspicion is settled by the measurement: information carrying it.
    let suspicion = f
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["code"] == "batch-padding" && x["message"].as_str().unwrap().starts_with("no position_ids input"))
        .expect("the static suspicion");
    assert_eq!(suspicion["severity"], "info", "{suspicion:#}");
    assert!(suspicion["cause"].as_str().unwrap().starts_with("measured: the padded batch departs"), "{suspicion:#}");
    assert!(row1_max(&r) > 0.1, "{}", row1_max(&r));
}

#[test]
fn models_that_place_padded_rows_right_pass_the_batch_check() {
    // Learned positions fed cumsum(mask) - 1, and rotary models.
    for dir in ["gpt2-with-position-ids", "llama-tiny", "qwen2-tiny"] {
        let (code, r) = check_folder(dir);
        assert_eq!(code, 0, "{dir}: {r:#}");
        let rows = r["files"][0]["runtime"]["batch"].as_array().unwrap().len();
        assert_eq!(rows, 8, "{dir}: 2 rows x (prompt + 3 steps)");
        assert!(row1_max(&r) < 1e-4, "{dir}: {}", row1_max(&r));
    }
}

fn max_rel(f: &Value) -> f64 {
    f["runtime"]["variant"][1].as_array().unwrap().iter().map(|p| p[2].as_f64().unwrap()).fold(0.0, f64::max)
}

#[test]
fn every_correct_variant_stays_near_fp32_and_a_wrong_q4_does_not() {
    let (code, r) = check_folder("tjs-variants");
    assert_eq!(code, 0, "{r:#}");
    for (path, bound) in
        [("onnx/model_fp16.onnx", 0.1), ("onnx/model_quantized.onnx", 0.5), ("onnx/model_q4.onnx", 0.5)]
    {
        let f = file_report(&r, path);
        assert_eq!(f["runtime"]["variant"][0], "model.onnx", "{path}: compared with the fp32 sibling");
        assert!(max_rel(f) < bound, "{path}: {}", max_rel(f));
    }
    let (code, r) = check_folder("tjs-variants-broken-q4");
    assert_eq!(code, 2);
    let q4 = file_report(&r, "onnx/model_q4.onnx");
    let d = q4["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["code"] == "variant-divergence")
        .expect("variant-divergence");
    assert!(d["message"].as_str().unwrap().starts_with("departs from model.onnx (fp32) by relative"), "{d:#}");
    assert!(max_rel(q4) > 1.0);
    // Where: every MatMulNBits got another column's scales, so the first node
    // departing from fp32 is a MatMulNBits of the first layer, named with the
    // fp32 MatMul it replaced (tensors matched by name).
    let node = d["node"].as_str().expect("the first diverging node");
    assert!(node.ends_with("_Q4 (MatMulNBits)") && node.contains("layers.0/"), "{d:#}");
    let cause = d["cause"].as_str().unwrap();
    let replaced = node.trim_end_matches("_Q4 (MatMulNBits)");
    assert!(cause.contains(&format!("first node departing from model.onnx by more than 0.5: {replaced} (MatMul), written in the variant by {node}")), "{cause}");
    // Self-consistent all the same: only the comparison with fp32 shows it.
    assert!(!q4["findings"].as_array().unwrap().iter().any(|x| x["code"] == "parity"));
    assert_eq!(file_report(&r, "onnx/model_fp16.onnx")["verdict"], "pass");
}

#[test]
fn a_sliding_window_the_graph_ignores_fails_and_one_it_keeps_passes() {
    // Same sizes, same weights: mistral-tiny was exported with its window 16
    // in the graph; mistral-sliding-window's config says 4, its graph is full causal.
    let (code, r) = check_folder("mistral-tiny");
    assert_eq!(code, 0, "{r:#}");
    let w = &r["files"][0]["runtime"]["window"];
    assert_eq!((w["size"].as_u64(), w["past_len"].as_u64()), (Some(16), Some(18)), "{w:#}");
    assert!(w["outside"].as_f64().unwrap() < 1e-6, "{w:#}");
    assert!(w["inside"].as_f64().unwrap() > 1e-2, "the probe moves the logits inside the window: {w:#}");

    let (code, r) = check_folder("mistral-sliding-window");
    assert_eq!(code, 2, "{r:#}");
    let f = r["files"][0]["findings"].as_array().unwrap();
    let err = f.iter().find(|x| x["code"] == "sliding-window").expect("sliding-window finding");
    let m = err["message"].as_str().unwrap();
    assert!(m.starts_with("config.json: sliding_window = 4, but the graph attends beyond it"), "{m}");
    assert!(err["cause"].as_str().unwrap().contains("full causal attention"), "{err:#}");
    let w = &r["files"][0]["runtime"]["window"];
    assert!(w["outside"].as_f64().unwrap() > 1e-2, "{w:#}");

    // Models whose config states no window (or turns it off) are not probed.
    for dir in ["llama-tiny", "qwen2-tiny"] {
        let (_, r) = check_folder(dir);
        assert!(r["files"][0]["runtime"]["window"].is_null(), "{dir}");
    }
}

#[test]
fn a_group_query_attention_window_the_graph_drops_fails_statically_and_one_it_keeps_passes() {
    // onnxruntime-genai builder exports of the same tiny Mistral (window 8 in
    // config.json): GroupQueryAttention local_window_size 8, and the same
    // graph edited to -1 (the whole past attended).
    let (code, r) = check_folder("mistral-genai");
    assert_eq!(code, 0, "{r:#}");
    let w = &r["files"][0]["runtime"]["window"];
    assert_eq!(w["size"].as_u64(), Some(8), "{w:#}");
    assert_eq!(w["outside"].as_f64(), Some(0.0), "outside the window nothing moves: {w:#}");
    assert!(w["inside"].as_f64().unwrap() > 1e-2, "{w:#}");

    let (code, r) = check_folder("mistral-genai-no-window");
    assert_eq!(code, 2, "{r:#}");
    let f = r["files"][0]["findings"].as_array().unwrap();
    // The run decides: the measured mechanism leads, the static evidence follows.
    assert_eq!(f[0]["code"], "sliding-window", "{f:#?}");
    assert!(f[0]["message"].as_str().unwrap().contains("the graph attends beyond it"), "{:#}", f[0]);
    let err = f
        .iter()
        .find(|x| x["code"] == "sliding-window" && x["message"].as_str().unwrap().contains("local_window_size"))
        .expect("the static sliding-window finding");
    let msg = err["message"].as_str().unwrap();
    assert!(
        msg.starts_with(
            "config.json: sliding_window = 8, but model.onnx has GroupQueryAttention local_window_size = -1"
        ),
        "{msg}"
    );
    // The runtime probe ran although the static check failed (no --force-run needed).
    let w = &r["files"][0]["runtime"]["window"];
    assert!(w["outside"].as_f64().unwrap() > 1e-2, "the dropped window shows at run time too: {w:#}");
}

#[test]
fn deep_runs_32_steps_and_reruns_them_without_graph_optimizations() {
    let (code, r) = json(&["check", "--format", "json", "--deep", "models/mistral-tiny", "--no-fetch"]);
    assert_eq!(code, 0, "{r:#}");
    let rt = &r["files"][0]["runtime"];
    let steps = rt["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 32, "a long run");
    // Cached against uncached at every step after the first.
    assert!(steps.iter().skip(1).all(|s| s["parity_max_abs_diff"].as_f64().is_some_and(|p| p < 1e-4)), "{rt:#}");
    let levels = &rt["levels"];
    assert_eq!(levels["rerun_at"], "disabled");
    assert_eq!(levels["steps"].as_array().unwrap().len(), 32, "{levels:#}");
    let worst = levels["steps"].as_array().unwrap().iter().map(|s| s[2].as_f64().unwrap()).fold(0.0, f64::max);
    assert!(worst < 1e-4, "fp32 fusions stay within float rounding: {worst}");
    // Long runs on every numeric form: no false alarm on a correct variant
    // (dynamic int8 drifts to 0.11 relative over 32 steps), a cache bug still fails.
    let (code, r) = json(&["check", "--format", "json", "--deep", "models/tjs-variants", "--no-fetch"]);
    assert_eq!(code, 0, "{r:#}");
    assert!(r["files"].as_array().unwrap().iter().all(|f| f["runtime"]["steps"].as_array().unwrap().len() == 32));
    let (code, r) = json(&["check", "--format", "json", "--deep", "models/gpt2-int8-cache-bug", "--no-fetch"]);
    assert_eq!(code, 2, "{r:#}");
    let q = r["files"].as_array().unwrap().iter().find(|f| f["path"] == "onnx/model_quantized.onnx").unwrap();
    assert!(q["findings"].as_array().unwrap().iter().any(|x| x["code"] == "parity"), "{q:#}");
}

#[test]
fn a_seq2seq_decoder_that_ignores_the_encoder_mask_fails_a_padded_source_batch() {
    // Two sources of 7 and 4 tokens, the shorter padded with the encoder mask
    // zero over its padding, against each source alone, through the folder's encoder.
    for dir in ["marian-tiny", "t5-tiny", "bart-tjs"] {
        let (code, r) = check_folder(dir);
        assert_eq!(code, 0, "{dir}: {r:#}");
        let merged = r["files"].as_array().unwrap().iter().find(|f| f["role"] == "merged-decoder").unwrap();
        assert_eq!(merged["runtime"]["batch"].as_array().unwrap().len(), 8, "{dir}: 2 rows × 4 steps");
        assert!(row1_max(&serde_json::json!({"files": [merged]})) < 1e-5, "{dir}: {merged:#}");
    }
    // marian-tiny's merged decoder with encoder_attention_mask declared but
    // replaced by ones inside both If branches: batch 1 is bit-identical.
    let (code, r) = check_folder("marian-ignores-encoder-mask");
    assert_eq!(code, 2, "{r:#}");
    let merged = r["files"].as_array().unwrap().iter().find(|f| f["role"] == "merged-decoder").unwrap();
    let f = merged["findings"].as_array().unwrap();
    assert!(!f.iter().any(|x| x["code"] == "parity"), "batch 1 is right: {f:#?}");
    let b = f.iter().find(|x| x["code"] == "batch-padding").expect("batch-padding");
    assert!(b["message"].as_str().unwrap().starts_with("row 1 of a batch of 2 sources"), "{b:#}");
    // The graph's own fact is the cause (issue 34): the mask's values reach no node.
    assert!(b["cause"].as_str().unwrap().contains("`encoder_attention_mask` is read only for its shape"), "{b:#}");
    assert!(f.iter().any(|x| x["code"] == "input-unread" && x["severity"] == "warning"), "{f:#?}");
    assert!(row1_max(&serde_json::json!({"files": [merged]})) > 1e-3);
}

#[test]
fn a_seq2seq_variant_runs_as_a_pair_and_its_encoder_is_judged_on_its_own_output() {
    // transformers.js ships encoder_model_X with decoder_model_merged_X: the
    // variant decoder reads its own encoder's states, the fp32 decoder the fp32 encoder's.
    let (code, r) = check_folder("bart-tjs-variants");
    assert_eq!(code, 0, "{r:#}");
    for path in ["onnx/decoder_model_merged_fp16.onnx", "onnx/decoder_model_merged_quantized.onnx"] {
        let f = file_report(&r, path);
        assert_eq!(f["runtime"]["variant"][0], "encoder_model.onnx → decoder_model_merged.onnx", "{path}");
        assert!(max_rel(f) < 0.1, "{path}: {}", max_rel(f));
    }
    // The same folder with the quantized encoder's weight scales ×8: its
    // decoder barely reads the encoder, so the logits stay close; the encoder's own output does not.
    let (code, r) = check_folder("bart-tjs-variants-broken-encoder");
    assert_eq!(code, 2, "{r:#}");
    let q = file_report(&r, "onnx/decoder_model_merged_quantized.onnx");
    let d = q["findings"].as_array().unwrap().iter().find(|x| x["code"] == "variant-divergence").expect("finding");
    let msg = d["message"].as_str().unwrap();
    assert!(
        msg.starts_with("encoder_model_quantized.onnx departs from encoder_model.onnx (fp32) by relative"),
        "{msg}"
    );
    // The first encoder node beyond the bound: a quantized MatMul of the first layer, mapped to the fp32 MatMul.
    let cause = d["cause"].as_str().unwrap();
    assert!(cause.contains("first node departing from encoder_model.onnx by more than 0.5: /layers.0/"), "{cause}");
    assert!(cause.contains("(MatMul), written in the variant by /layers.0/"), "{cause}");
    assert_eq!(file_report(&r, "onnx/decoder_model_merged_fp16.onnx")["verdict"], "pass");
}

#[test]
fn a_window_too_long_to_probe_is_said_not_silently_skipped() {
    // mistral-tiny's files with the config's window raised past the probe's limit.
    let dir = std::env::temp_dir().join(format!("onnx-contract-long-window-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(root().join("models/mistral-tiny/model.onnx"), dir.join("model.onnx")).unwrap();
    let text = std::fs::read_to_string(root().join("models/mistral-tiny/config.json")).unwrap();
    let mut config: Value = serde_json::from_str(&text).unwrap();
    config["sliding_window"] = 8192.into();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let (code, r) = json(&["check", "--format", "json", dir.to_str().unwrap(), "--no-fetch"]);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(code, 0, "{r:#}");
    let f = &r["files"][0];
    assert!(f["runtime"]["window"].is_null(), "not probed: {f:#}");
    let note = f["findings"].as_array().unwrap().iter().find(|x| x["code"] == "runtime-skipped").expect("a note");
    assert!(
        note["message"]
            .as_str()
            .unwrap()
            .starts_with("config.json: sliding_window = 8192: longer than 4096, not probed"),
        "{note:#}"
    );
}
