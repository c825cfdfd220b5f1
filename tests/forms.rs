//! Cache forms beyond the growing cache (issue 20): static caches driven one
//! call at a time into fixed buffers at `cache_position`, onnxruntime-genai's
//! shared past/present buffers at `max_length` with the mask over the real
//! length, a hybrid's convolution states beside KV on its attention layers
//! only, and multi-head latent attention's separate key and value sizes.
//! Each on a real export, with its broken counterpart where the run decides.

mod common;
use common::*;
use serde_json::{json, Value};

fn findings<'a>(f: &'a Value, severity: &str) -> Vec<&'a Value> {
    f["findings"].as_array().unwrap().iter().filter(|x| x["severity"] == severity).collect()
}

fn parities(f: &Value) -> Vec<f64> {
    f["runtimes"][0]["steps"].as_array().unwrap().iter().filter_map(|s| s["parity_max_abs_diff"].as_f64()).collect()
}

#[test]
fn static_caches_are_driven_one_call_at_a_time_into_their_buffers() {
    for (dir, past) in [("static-cache-llama", "past_key_values.0.key"), ("static-cache-with-mask", "past_0_key")] {
        let (code, r) = check_folder(dir);
        let f = file_report(&r, "model.onnx");
        assert_eq!(code, 0, "{dir}: {:#}", f["findings"]);
        assert!(findings(f, "error").is_empty());
        // One token per call (its ids are [1, 1]), written at its absolute position.
        assert_eq!(shape_at(f, 0, "feeds", "input_ids"), json!([1, 1]), "{dir}");
        assert_eq!(shape_at(f, 2, "feeds", "cache_position"), json!([1]), "{dir}");
        assert_eq!(shape_at(f, 2, "feeds", past), json!([1, 2, 32, 16]), "{dir}");
        let present = past.replace("past_key_values", "present").replace("past_", "present_");
        assert_eq!(shape_at(f, 2, "outputs", &present), json!([1, 2, 32, 16]), "{dir}: the buffer never grows");
        // The reference fills every unwritten slot with noise: a mask that hides them moves nothing.
        let p = parities(f);
        assert!(p.len() >= 3 && p.iter().all(|&d| d <= 1e-4), "{dir}: {p:?}");
        // Fixed batch and buffer sizes are the form, not a fault: information that says so (issue 40: no
        // warning for an exporter's own conventions once the run passed).
        assert!(findings(f, "warning").is_empty(), "{dir}: {:#}", f["findings"]);
        let fixed: Vec<&Value> = findings(f, "info").into_iter().filter(|x| x["code"] == "dim-static").collect();
        assert!(!fixed.is_empty(), "{dir}");
        assert!(fixed.iter().all(|x| x["cause"].as_str().unwrap().contains("static-cache export")), "{dir}");
    }
    // The mask spans the whole buffer: ones up to the token, zeros after.
    let (_, r) = check_folder("static-cache-with-mask");
    assert_eq!(shape_at(file_report(&r, "model.onnx"), 2, "feeds", "attention_mask"), json!([1, 32]));
}

#[test]
fn a_static_cache_written_at_a_frozen_slot_fails_with_the_slot_it_wrote() {
    let (code, r) = check_folder("static-cache-writes-at-zero");
    let f = file_report(&r, "model.onnx");
    assert_eq!(code, 2);
    let first = &f["findings"][0];
    assert_eq!(first["code"], "cache-write", "{:#}", f["findings"]);
    assert_eq!(first["step"], 1);
    let m = first["message"].as_str().unwrap();
    assert!(m.contains("changed slot(s) 0") && m.contains("outside the slot 1"), "{m}");
    // The logits show it too: the cache holds one token where it should hold two.
    assert!(f["findings"].as_array().unwrap().iter().any(|x| x["code"] == "parity" && x["severity"] == "error"));
}

#[test]
fn a_static_cache_traced_at_four_tokens_fails_at_its_first_one_token_call() {
    let (code, r) = check_folder("static-cache-traced-at-4");
    let f = file_report(&r, "model.onnx");
    assert_eq!(code, 2);
    let first = &f["findings"][0];
    assert_eq!(first["code"], "run-failed", "{:#}", f["findings"]);
    assert_eq!(first["step"], 1);
    assert_eq!(first["node"], "/model/model/Reshape");
    // Its token axis is dynamic: the prompt went in as one chunk at step 0 and ran.
    assert_eq!(shape_at(f, 0, "feeds", "input_ids"), json!([1, 4]));
    assert_eq!(shape_at(f, 0, "feeds", "cache_position"), json!([4]));
}

#[test]
fn a_genai_hybrid_shares_its_buffers_and_carries_conv_states_on_its_other_layers() {
    let (code, r) = check_folder("lfm2-genai");
    let f = file_report(&r, "model.onnx");
    assert_eq!(code, 0, "{:#}", f["findings"]);
    assert!(findings(f, "error").is_empty());
    // KV only on the attention layers genai_config.json's layer_types names, at max_length.
    assert_eq!(shape_at(f, 1, "feeds", "past_key_values.1.key"), json!([1, 2, 128, 16]));
    assert_eq!(shape_at(f, 1, "outputs", "present.3.value"), json!([1, 2, 128, 16]));
    // The mask over the real length: a prompt of 4, then one token.
    assert_eq!(shape_at(f, 1, "feeds", "attention_mask"), json!([1, 5]));
    // The convolution states keep their fixed shape.
    assert_eq!(shape_at(f, 1, "feeds", "past.0.conv"), json!([1, 64, 2]));
    assert_eq!(shape_at(f, 1, "outputs", "present.2.conv"), json!([1, 64, 2]));
    let p = parities(f);
    assert!(p.len() >= 3 && p.iter().all(|&d| d <= 1e-4), "{p:?}");
    // The contract genai_config.json implies has KV on layers 1 and 3 and states on 0 and 2.
    assert!(!f["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|x| x["code"] == "input-missing" || x["code"] == "input-extra"));
}

#[test]
fn mla_keys_and_values_are_sized_separately_from_the_config() {
    let (code, r) = check_folder("deepseek-mla-tiny");
    assert_eq!(r["sizes"]["key_dim"]["value"], 24);
    assert_eq!(r["sizes"]["key_dim"]["source"], "config.json: qk_head_dim");
    assert_eq!(r["sizes"]["value_dim"]["value"], 16);
    let f = file_report(&r, "model.onnx");
    assert_eq!(code, 0, "{:#}", f["findings"]);
    assert!(f["findings"]
        .as_array()
        .unwrap()
        .iter()
        .all(|x| x["code"] != "dim-value" && x["code"] != "config-mismatch"));
    assert_eq!(shape_at(f, 1, "feeds", "past_key_values.0.key"), json!([1, 4, 4, 24]));
    assert_eq!(shape_at(f, 1, "feeds", "past_key_values.0.value"), json!([1, 4, 4, 16]));
}

#[test]
fn an_embeddings_split_layout_is_driven_through_its_embedding_model_every_call() {
    let (code, r) = check_folder("tjs-vlm");
    assert_eq!(code, 0, "{r:#}");
    let roles: Vec<(&str, &str)> = r["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["path"].as_str().unwrap(), f["role"].as_str().unwrap()))
        .collect();
    assert!(roles.contains(&("onnx/embed_tokens.onnx", "embed-tokens")), "{roles:?}");
    assert!(roles.contains(&("onnx/vision_encoder.onnx", "vision-encoder")), "{roles:?}");
    let f = file_report(&r, "onnx/decoder_model_merged.onnx");
    assert!(f["driven_as"].as_str().unwrap().contains("through onnx/embed_tokens.onnx every call"));
    // The decoder's contract is the family's, fitted to embeddings and a logits count: nothing to warn about.
    assert!(f["findings"].as_array().unwrap().is_empty(), "{:#}", f["findings"]);
    assert_eq!(shape_at(f, 0, "feeds", "inputs_embeds"), json!([1, 4, 64]));
    assert_eq!(shape_at(f, 2, "feeds", "inputs_embeds"), json!([1, 1, 64]));
    assert_eq!(shape_at(f, 2, "feeds", "num_logits_to_keep"), json!([]));
    let p = parities(f);
    assert!(p.len() >= 3 && p.iter().all(|&d| d <= 1e-4), "{p:?}");
    // The padded batch and the chunk go through the embedding model too.
    assert!(!f["runtimes"][0]["batch"].as_array().unwrap().is_empty());
    assert_eq!(f["runtimes"][0]["chunk"].as_array().unwrap().len(), 3);
}

#[test]
fn a_decoder_fed_embeddings_without_its_embedding_model_is_fed_seeded_vectors_per_token() {
    let dir = std::env::temp_dir().join(format!("oc-noembed-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("onnx")).unwrap();
    for f in ["config.json", "generation_config.json"] {
        std::fs::copy(model("tjs-vlm").join(f), dir.join(f)).unwrap();
    }
    std::fs::copy(model("tjs-vlm/onnx/decoder_model_merged.onnx"), dir.join("onnx/decoder_model_merged.onnx")).unwrap();
    let (code, r) = json(&["check", path_str(&dir), "--format", "json", "--no-fetch"]);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(code, 0, "{r:#}");
    let f = file_report(&r, "onnx/decoder_model_merged.onnx");
    assert!(f["driven_as"].as_str().unwrap().contains("seeded embeddings per token id"), "{}", f["driven_as"]);
    let p = parities(f);
    assert!(p.len() >= 3 && p.iter().all(|&d| d <= 1e-4), "{p:?}");
}

#[test]
fn genai_whisper_takes_its_cross_cache_from_the_encoder_and_int32_ids() {
    let (code, r) = check_folder("whisper-genai-nonzero-bias");
    assert_eq!(code, 0, "{r:#}");
    let f = file_report(&r, "decoder.onnx");
    assert!(f["driven_as"].as_str().unwrap().contains("the cross past the encoder computes"), "{}", f["driven_as"]);
    assert!(f["findings"].as_array().unwrap().is_empty(), "{:#}", f["findings"]);
    let ids = f["runtimes"][0]["steps"][1]["feeds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "input_ids")
        .unwrap()
        .clone();
    assert_eq!(ids["dtype"], "int32");
    // Whisper's encoder length is fixed at 1500 frames in genai's export.
    assert_eq!(shape_at(f, 1, "feeds", "past_key_cross_0"), json!([1, 4, 1500, 16]));
    let p = parities(f);
    assert!(p.len() >= 3 && p.iter().all(|&d| d <= 1e-4), "{p:?}");
    // The encoder's contract is genai's: its states are `hidden_states`, and it computes the cross caches.
    let e = file_report(&r, "encoder.onnx");
    assert!(e["findings"].as_array().unwrap().is_empty(), "{:#}", e["findings"]);
}

#[test]
fn an_encoder_that_crashes_onnx_runtime_is_that_files_finding_and_the_decoder_is_still_checked() {
    let (code, r) = check_folder("whisper-genai");
    assert_eq!(code, 2);
    let e = file_report(&r, "encoder.onnx");
    assert_eq!(e["verdict"], "fail");
    let crash = &e["findings"][0];
    assert_eq!(crash["code"], "crash");
    let m = crash["message"].as_str().unwrap();
    assert!(m.contains("SIGSEGV") && m.contains("audio_features [1, 80, 3000]"), "{m}");
    // The encoder keeps its weights in encoder.onnx.data: each cut graph is
    // loaded from memory with that data resolved from the model's folder
    // (issue 40: resolved from the working directory, every cut failed to
    // load and the halving blamed node 1). The node that kills is the
    // Attention whose optional bias is empty, verified alone before it is named.
    assert_eq!(crash["node"], "/model/layers.0/attn/Attention (Attention)", "{crash:#}");
    let cause = crash["cause"].as_str().unwrap();
    assert!(cause.contains("node 8 of 38, /model/layers.0/attn/Attention (Attention), kills the process"), "{cause}");
    assert!(cause.contains("verified: 1 node(s) alone, on those values, kill a child"), "{cause}");
    // The decoder is driven again on seeded encoder states, and its own verdict stands.
    let d = file_report(&r, "decoder.onnx");
    assert!(d["driven_as"].as_str().unwrap().contains("driven again on seeded encoder states"));
    assert_eq!(d["verdict"], "pass", "{:#}", d["findings"]);
    // `--repro`: the Attention alone (its weights read from the external data
    // into the reduction) kills a Python child too; the folder is not left empty.
    encoder_crash_reproduces("whisper-genai", "encoder");
}

/// `check models/FOLDER --repro DIR` keeps the reduction of the crash in
/// `ENCODER.onnx`, and its script kills a Python child too.
fn encoder_crash_reproduces(folder: &str, encoder: &str) {
    let dir = std::env::temp_dir().join(format!("onnx-contract-{folder}-crash-{}", std::process::id()));
    let out = bin()
        .args(["check", &format!("models/{folder}"), "--format", "json", "--no-fetch", "--repro", path_str(&dir)])
        .output()
        .unwrap();
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = file_report(&r, &format!("{encoder}.onnx"))["findings"][0]["cause"].as_str().unwrap().to_string();
    assert!(c.contains("reproduced by 1 node(s) alone in") && c.contains(&format!("{encoder}-crash")), "{c}");
    let ran =
        std::process::Command::new("python3").arg(dir.join(format!("{encoder}-crash/repro.py"))).output().unwrap();
    assert!(ran.status.success(), "{}", String::from_utf8_lossy(&ran.stdout));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 29: a crash mid-graph (an integer Div of INT64_MIN by -1, SIGFPE in
/// ONNX Runtime 1.31.1 on x86-64, spliced into a Marian encoder) is bisected
/// to its node, with the shapes and types it was about to read; every
/// decoder of the folder is still checked, the split pair on seeded states.
#[test]
fn a_crash_mid_graph_is_bisected_to_its_node() {
    let (code, r) = check_folder("crash-gather-oob");
    assert_eq!(code, 2);
    let e = file_report(&r, "encoder_model.onnx");
    let crash = &e["findings"][0];
    assert_eq!(crash["code"], "crash", "{crash:#}");
    assert!(crash["message"].as_str().unwrap().contains("SIGFPE"), "{crash:#}");
    assert_eq!(crash["node"], "/bucket/Div (Div)", "{crash:#}");
    let c = crash["cause"].as_str().unwrap();
    assert!(c.contains("node 365 of 620") && c.contains("/bucket/Neg_output_0 int64 [1, 7]"), "{c}");
    let runs: usize = c["bisected in ".len()..].split(' ').next().unwrap().parse().unwrap();
    assert!(runs <= 11, "log2(620) + 1 children at most: {c}");
    for d in ["decoder_model_merged.onnx", "decoder_with_past_model.onnx"] {
        assert_eq!(file_report(&r, d)["verdict"], "pass", "{d}: {:#}", file_report(&r, d)["findings"]);
    }
    // `--repro`: the Div alone, its inputs captured, reproduces the death in a child.
    encoder_crash_reproduces("crash-gather-oob", "encoder_model");
}

/// Issue 29: a crash inside the decoder, only on cached steps (the same
/// INT64_MIN / -1 Div, its divisor -1 once the past is not empty), is
/// bisected at the step it happened: the steps before it run whole, that
/// step's file runs cut. A process killed before any node runs (the test
/// fault injected ahead of the call) is said to be no node's.
#[test]
fn a_decoder_crash_on_a_cached_step_is_bisected_at_that_step() {
    let (code, r) = check_folder("crash-decoder-cached");
    assert_eq!(code, 2);
    let crash = &file_report(&r, "model.onnx")["findings"][0];
    assert_eq!(crash["code"], "crash", "{crash:#}");
    assert_eq!(crash["step"], 1, "the prompt runs; the first cached step dies: {crash:#}");
    assert_eq!(crash["node"], "/crash/Div (Div)", "{crash:#}");
    let c = crash["cause"].as_str().unwrap();
    assert!(c.contains("the decoder at step 1 cut after node k") && c.contains("node 50 of 567"), "{c}");
    assert!(c.contains("/crash/Constant_3_output_0 int64 [1]") && c.contains("/crash/Sub_output_0 int64 []"), "{c}");
    let runs: usize = c["bisected in ".len()..].split(' ').next().unwrap().parse().unwrap();
    assert!(runs <= 11, "log2(567) + 1 children at most: {c}");

    // `--repro`: the node alone, with the values it was about to read, written
    // and run by a child that died; its script shows the death on plain onnxruntime.
    let dir = std::env::temp_dir().join(format!("onnx-contract-crash-repro-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = bin()
        .args(["check", "models/crash-decoder-cached", "--format", "json", "--no-fetch", "--repro", path_str(&dir)])
        .output()
        .unwrap();
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let f = file_report(&r, "model.onnx");
    let repro = &f["runtimes"][0]["repros"][0];
    assert_eq!(repro["code"], "crash", "{f:#}");
    assert_eq!(repro["reproduces"], true, "{repro:#}");
    assert_eq!(repro["node"], "/crash/Div (Div)");
    assert!(repro["nodes"][1].as_u64().unwrap() <= 2, "the Div and the constant it reads: {repro:#}");
    assert!(repro["observed"].as_str().unwrap().contains("SIGFPE"), "{repro:#}");
    let written = dir.join("model-crash");
    for file in ["model.onnx", "inputs.npz", "repro.py", "README.md", "requirements.txt"] {
        assert!(written.join(file).is_file(), "{file}");
    }
    let ran = std::process::Command::new("python3").arg(written.join("repro.py")).output().unwrap();
    let said = String::from_utf8_lossy(&ran.stdout);
    assert!(ran.status.success() && said.contains("return code -8"), "{said}");
    let _ = std::fs::remove_dir_all(&dir);

    let out = bin()
        .args(["check", "models/gpt2-tiny", "--format", "json", "--no-fetch"])
        .env("ONNX_CONTRACT_FAULT", "segv@2")
        .output()
        .unwrap();
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let crash = &file_report(&r, "model.onnx")["findings"][0];
    assert_eq!(crash["code"], "crash", "{crash:#}");
    assert!(crash["node"].is_null(), "no node named for a death before any node: {crash:#}");
    assert!(crash["cause"].as_str().unwrap().contains("not one node's execution"), "{crash:#}");
}

#[test]
fn float16_presents_fed_back_into_float32_pasts_fail_where_a_caller_fails() {
    let (code, r) = check_folder("gpt2-fp16-presents");
    assert_eq!(code, 2);
    let f = file_report(&r, "model.onnx");
    // The cause leads (issue 34): the static cache-dtype finding explains the
    // run's refusal at step 1, which is its evidence, not the headline.
    let first = &f["findings"][0];
    assert_eq!(first["code"], "cache-dtype", "{:#}", f["findings"]);
    let cause = first["cause"].as_str().unwrap();
    assert!(cause.contains("confirmed by the run: step 1") && cause.contains("Unexpected input data type"), "{first}");
    let run =
        f["findings"].as_array().unwrap().iter().find(|x| x["code"] == "run-failed").expect("the refusal stays listed");
    assert_eq!(run["step"], 1);
    assert!(run["cause"].as_str().unwrap().contains("explained by the `cache-dtype` finding"), "{run}");
    let step1 = &f["runtimes"][0]["steps"][1]["feeds"];
    let past = step1.as_array().unwrap().iter().find(|x| x["name"] == "past_key_values.0.key").unwrap();
    assert_eq!(past["dtype"], "float16");
    // And statically, every pair by name.
    let dtypes: Vec<&Value> = f["findings"].as_array().unwrap().iter().filter(|x| x["code"] == "cache-dtype").collect();
    assert_eq!(dtypes.len(), 4);
    assert!(dtypes[0]["message"]
        .as_str()
        .unwrap()
        .contains("is float16, but it is fed back as `past_key_values.0.key`, which takes float32"));
}

#[test]
fn an_input_nobody_can_place_is_named_with_the_reason_and_not_guessed() {
    // gpt2-tiny with one more input that neither its name nor its use explains.
    let dir = std::env::temp_dir().join(format!("oc-unplaced-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.json", "generation_config.json"] {
        std::fs::copy(model("gpt2-tiny").join(f), dir.join(f)).unwrap();
    }
    let code = "import onnx, sys; from onnx import helper, TensorProto as T; m = onnx.load(sys.argv[1]); \
        m.graph.input.append(helper.make_tensor_value_info('temperature_knob', T.FLOAT, [1])); onnx.save(m, sys.argv[2])";
    let ok = std::process::Command::new("python3")
        .args(["-c", code, path_str(&model("gpt2-tiny/model.onnx")), path_str(&dir.join("model.onnx"))])
        .status()
        .unwrap()
        .success();
    assert!(ok, "onnx writes the model");
    let (code, r) = json(&["check", path_str(&dir), "--format", "json", "--no-fetch"]);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(code, 2);
    let f = file_report(&r, "model.onnx");
    assert_eq!(f["role"], "decoder-only", "its role still comes from its cache and logits");
    let plan = f["findings"].as_array().unwrap().iter().find(|x| x["code"] == "plan").expect("a plan finding");
    let m = plan["message"].as_str().unwrap();
    assert!(m.starts_with("cannot place input `temperature_knob` (1 of 8 inputs unplaced): a float32 input of shape [1] whose name and use say nothing we know"), "{m}");
    assert_eq!(plan["tensor"], "temperature_knob");
    assert!(f["runtimes"].as_array().unwrap().is_empty(), "nothing is run on a guess");
}

#[test]
fn a_padded_audio_batch_that_differs_inside_the_encoder_is_measured_and_only_warned() {
    let (code, r) = check_folder("moonshine-tiny");
    assert_eq!(code, 0, "{r:#}");
    let f = file_report(&r, "decoder_model_merged.onnx");
    let rows = f["runtimes"][0]["batch"].as_array().unwrap();
    assert!(!rows.is_empty(), "two clips batched, each row against itself alone");
    // Row 0 (not padded) is unchanged; row 1 departs, and its encoder states already do.
    assert!(rows.iter().filter(|r| r[0] == 0).all(|r| r[2].as_f64().unwrap() <= 1e-4), "{rows:?}");
    let w = f["findings"].as_array().unwrap().iter().find(|x| x["code"] == "batch-padding").expect("measured");
    assert_eq!(w["severity"], "warning");
    let cause = w["cause"].as_str().unwrap();
    assert!(
        cause.contains("normalises over the whole padded audio axis") && cause.contains("not an export bug"),
        "{cause}"
    );
}

/// Buffers the caller keeps (microsoft/winml-cli's forms): the presents hold
/// only the new token's rows, which the caller writes in at `cache_position`
/// or rolls in at the end. Inferred from the graph, driven that way (a
/// present fed back whole is refused by ONNX Runtime), and said by `protocol`.
#[test]
fn buffers_the_caller_keeps_are_driven_as_their_form_says() {
    for (dir, form, mask) in [
        ("static-cache-caller-writes", "caller-written", "ones over past + new, zeros after"),
        ("sliding-cache-caller-rolls", "caller-rolled", "zeros, then ones over past + new at the end"),
    ] {
        let (code, r) = check_folder(dir);
        let f = file_report(&r, "model.onnx");
        assert_eq!(code, 0, "{dir}: {:#}", f["findings"]);
        assert!(findings(f, "warning").is_empty(), "{dir}: {:#}", f["findings"]);
        assert_eq!(shape_at(f, 2, "feeds", "past_0_key"), json!([1, 2, 32, 16]), "{dir}");
        assert_eq!(shape_at(f, 2, "outputs", "present_0_key"), json!([1, 2, 1, 16]), "{dir}: the new rows only");
        let p = parities(f);
        assert!(p.len() >= 3 && p.iter().all(|&d| d <= 1e-4), "{dir}: {p:?}");
        let (_, proto) = json(&["protocol", &format!("models/{dir}"), "--format", "json"]);
        let text = proto.to_string();
        assert!(text.contains(&format!("\"{form}\"")), "{dir}: {text}");
        assert!(text.contains(mask), "{dir}: {text}");
    }
}
