//! `check DIR` with no other argument on every committed export folder, on
//! real ONNX Runtime: the verdict of each file and of the folder.

mod common;
use common::*;
use serde_json::Value;

fn error_codes(f: &Value) -> Vec<String> {
    f["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["severity"] == "error")
        .map(|x| x["code"].as_str().unwrap().to_string())
        .collect()
}

/// Folders whose every file must pass with zero flags, and the roles found.
const GOOD: &[(&str, &[(&str, &str)])] = &[
    (
        "marian-tiny",
        &[
            ("decoder_model.onnx", "decoder"),
            ("decoder_model_merged.onnx", "merged-decoder"),
            ("decoder_with_past_model.onnx", "decoder-with-past"),
            ("encoder_model.onnx", "encoder"),
        ],
    ),
    (
        "bart-tiny",
        &[("decoder_model_merged.onnx", "merged-decoder"), ("decoder_with_past_model.onnx", "decoder-with-past")],
    ),
    (
        "t5-tiny",
        &[("decoder_model_merged.onnx", "merged-decoder"), ("decoder_with_past_model.onnx", "decoder-with-past")],
    ),
    (
        "whisper-tiny",
        &[
            ("encoder_model.onnx", "encoder"),
            ("decoder_model_merged.onnx", "merged-decoder"),
            ("decoder_with_past_model.onnx", "decoder-with-past"),
        ],
    ),
    (
        "bart-tjs",
        &[
            ("onnx/decoder_model_merged.onnx", "merged-decoder"),
            ("onnx/decoder_with_past_model.onnx", "decoder-with-past"),
            ("onnx/encoder_model.onnx", "encoder"),
        ],
    ),
    ("gpt2-tiny", &[("model.onnx", "decoder-only")]),
    ("llama-tiny", &[("model.onnx", "decoder-only")]),
    ("qwen2-tiny", &[("model.onnx", "decoder-only")]),
    ("mistral-tiny", &[("model.onnx", "decoder-only")]),
    ("gemma-tiny", &[("model.onnx", "decoder-only")]),
    ("gpt2-past-key-names", &[("model.onnx", "decoder-only")]),
];

#[test]
fn every_good_folder_passes_with_zero_flags() {
    for (dir, roles) in GOOD {
        let (code, r) = check_folder(dir);
        assert_eq!((code, r["verdict"].as_str()), (0, Some("pass")), "{dir}: {r:#}");
        for (path, role) in *roles {
            let f = file_report(&r, path);
            assert_eq!(f["role"], *role, "{dir}/{path}");
            assert_eq!(f["verdict"], "pass", "{dir}/{path}: {:?}", error_codes(f));
        }
        // Sizes come from config.json, each with its key.
        assert!(
            r["sizes"]["layers"]["source"].as_str().unwrap().starts_with("config.json: "),
            "{dir}: {:#}",
            r["sizes"]
        );
    }
}

#[test]
fn the_split_pair_is_driven_as_a_pair_and_its_cache_checked() {
    let (_, r) = check_folder("bart-tjs");
    let f = file_report(&r, "onnx/decoder_with_past_model.onnx");
    assert!(
        f["driven_as"].as_str().unwrap().starts_with("split pair: onnx/decoder_model.onnx at step 0"),
        "{}",
        f["driven_as"]
    );
    let steps = f["runtime"]["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 4);
    // Step 0 is the no-past decoder's: encoder states fed; afterwards the with-past file's 14 inputs.
    assert!(steps[0]["feeds"].as_array().unwrap().iter().any(|x| x["name"] == "encoder_hidden_states"));
    assert_eq!(steps[1]["feeds"].as_array().unwrap().len(), 14);
    for s in &steps[1..] {
        assert!(s["parity_max_abs_diff"].as_f64().unwrap() < 1e-4, "{s:#}");
    }
    // Sizes of another model than bart-tiny's, read from its config.json.
    assert_eq!(r["sizes"]["hidden"]["value"], 48);
    assert_eq!(r["sizes"]["vocab"]["value"], 1200);
}

#[test]
fn a_with_past_file_with_its_past_length_baked_in_fails_at_step_2_only_as_a_pair() {
    let (code, r) = check_folder("marian-pair-baked-past");
    assert_eq!(code, 2, "{r:#}");
    let f = file_report(&r, "decoder_with_past_model.onnx");
    let fail = f["findings"].as_array().unwrap().iter().find(|x| x["code"] == "run-failed").expect("run-failed");
    assert_eq!(fail["step"], 2);
    assert!(fail["message"].as_str().unwrap().contains("Reshape node `/Reshape_5`"), "{fail:#}");
    assert!(fail["cause"].as_str().unwrap().contains("fixed at export time"), "{fail:#}");
    // Its siblings are fine: the folder verdict names the one file.
    assert_eq!(file_report(&r, "decoder_model.onnx")["verdict"], "pass");
    assert_eq!(file_report(&r, "encoder_model.onnx")["verdict"], "pass");
    let out = run(&["check", "models/marian-pair-baked-past", "--no-fetch"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().unwrap();
    assert!(first.contains("FAIL (1 file of 3 failing"), "{first}");
}

#[test]
fn a_config_that_disagrees_with_the_model_is_named_with_both_values() {
    let (code, r) = check_folder("marian-config-mismatch");
    assert_eq!(code, 2);
    let f = file_report(&r, "decoder_model_merged.onnx");
    let m = f["findings"].as_array().unwrap().iter().find(|x| x["code"] == "config-mismatch").expect("config-mismatch");
    assert_eq!(
        m["message"],
        "config.json: decoder_layers = 6, but decoder_model_merged.onnx has layers 3 (layer indices of the past/present names)"
    );
}

#[test]
fn incident_1_is_judged_as_the_with_past_decoder_it_is() {
    let (code, r) = check_folder("marian-15-inputs");
    assert_eq!(code, 2);
    let f = file_report(&r, "decoder_model_merged.onnx");
    assert_eq!(f["role"], "decoder-with-past");
    let msgs: Vec<&str> = f["findings"].as_array().unwrap().iter().map(|x| x["message"].as_str().unwrap()).collect();
    assert!(msgs.contains(&"missing input past_key_values.{0..5}.encoder.{key,value} (12 tensors)"), "{msgs:#?}");
}

#[test]
fn known_bad_exports_still_fail_with_zero_flags() {
    let (code, r) = check_folder("marian-baked-past");
    assert_eq!(code, 2);
    assert!(error_codes(file_report(&r, "decoder_model_merged.onnx")).contains(&"run-failed".to_string()));
    let (code, r) = check_folder("gpt2-position-bug");
    assert_eq!(code, 2);
    assert!(error_codes(file_report(&r, "model.onnx")).contains(&"parity".to_string()));
}

#[test]
fn a_single_file_without_a_contract_uses_its_folder() {
    let out = json(&["check", "--format", "json", "models/t5-tiny/decoder_model_merged.onnx", "--no-fetch"]);
    assert_eq!(out.0, 0, "{:#}", out.1);
    assert_eq!(out.1["contract"]["name"], "t5-decoder-merged");
    assert_eq!(out.1["contract"]["params"]["hidden"], 32);
    // Whisper: the audio encoder's features, no encoder mask.
    let (code, r) = json(&["check", "--format", "json", "models/whisper-tiny/decoder_model_merged.onnx", "--no-fetch"]);
    assert_eq!(code, 0, "{r:#}");
    let feeds = r["runtime"]["steps"][0]["feeds"].as_array().unwrap();
    assert!(!feeds.iter().any(|x| x["name"] == "encoder_attention_mask"));
    let states = feeds.iter().find(|x| x["name"] == "encoder_hidden_states").unwrap();
    assert_eq!(
        states["shape"],
        serde_json::json!([1, 1500, 32]),
        "states from the real audio encoder (3000 frames → 1500)"
    );
}

#[test]
fn init_never_writes_a_contract_its_own_good_model_fails() {
    let dir = std::env::temp_dir().join(format!("onnx-contract-init-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for m in [
        "marian-tiny/decoder_model.onnx",
        "marian-tiny/decoder_with_past_model.onnx",
        "marian-tiny/decoder_model_merged.onnx",
        "marian-tiny/encoder_model.onnx",
        "whisper-tiny/decoder_with_past_model.onnx",
        "t5-tiny/decoder_with_past_model.onnx",
        "gemma-tiny/model.onnx",
    ] {
        let spec = dir.join("spec.yaml");
        let out = run(&["init", path_str(&model(m)), "-o", path_str(&spec)]);
        assert!(out.status.success(), "{m}: {}", String::from_utf8_lossy(&out.stderr));
        let text = std::fs::read_to_string(&spec).unwrap();
        assert!(!text.contains(": \"1\""), "{m}: exporter noise pinned:\n{text}");
        let (code, r) =
            json(&["check", "--format", "json", path_str(&model(m)), "--contract", path_str(&spec), "--no-fetch"]);
        assert_eq!((code, r["verdict"].as_str()), (0, Some("pass")), "{m}: {:#}", r["findings"]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_cache_named_past_key_n_is_paired_by_name_and_says_how() {
    let (code, r) = check_folder("gpt2-past-key-names");
    assert_eq!(code, 0, "{r:#}");
    let pairs = &file_report(&r, "model.onnx")["runtime"]["cache_pairs"];
    assert_eq!(pairs[0], serde_json::json!(["past_key_0", "present_key_0", "name: past… → present…"]));
    assert_eq!(pairs.as_array().unwrap().len(), 4);
}

/// Every file's companion sessions in a folder report: (model, shared).
fn companions(r: &Value) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for f in r["files"].as_array().unwrap() {
        for c in f["runtime"]["companions"].as_array().into_iter().flatten() {
            out.push((c["model"].as_str().unwrap().to_string(), c["shared"].as_bool().unwrap()));
        }
    }
    out
}

#[test]
fn a_folders_encoder_gets_one_session_for_all_its_decoders() {
    for dir in ["marian-tiny", "whisper-tiny"] {
        let (code, r) = check_folder(dir);
        assert_eq!(code, 0, "{dir}: {r:#}");
        let taken = companions(&r);
        // The merged decoder and the split pair both run the encoder.
        assert_eq!(taken.len(), 2, "{dir}: {taken:?}");
        assert!(taken.iter().all(|(m, _)| m.ends_with("encoder_model.onnx")), "{dir}: {taken:?}");
        let created = taken.iter().filter(|(_, shared)| !shared).count();
        assert_eq!(created, 1, "{dir}: one run creates it, the other shares it: {taken:?}");
    }
}

#[test]
fn a_run_that_kills_the_shared_process_is_named_at_its_own_file() {
    // The encoder's crash kills the host running both decoders' jobs: each
    // is run again alone, and the crash is named at the encoder, its siblings checked.
    let (code, r) = check_folder("crash-gather-oob");
    assert_eq!(code, 2, "{r:#}");
    let enc = file_report(&r, "encoder_model.onnx");
    assert!(error_codes(enc).contains(&"crash".to_string()), "{enc:#}");
    let crash = enc["findings"].as_array().unwrap().iter().find(|x| x["code"] == "crash").unwrap();
    assert_eq!(crash["node"], "/bucket/Div (Div)", "{crash:#}");
    assert_eq!(file_report(&r, "decoder_model.onnx")["verdict"], "pass");
}

#[test]
fn a_panic_of_ours_in_a_shared_process_is_named_at_each_job_it_hit() {
    // A bug of this tool (a panic no code catches) in the host running both
    // decoders' jobs: each runs again alone and its own panic is named there.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_onnx-contract"))
        .args(["check", "models/marian-tiny", "--format", "json", "--no-consumer-run"])
        .env("ONNX_CONTRACT_FAULT", "panic@2")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    for file in ["decoder_model_merged.onnx", "decoder_with_past_model.onnx"] {
        let f = file_report(&r, file);
        let crash = f["findings"].as_array().unwrap().iter().find(|x| x["code"] == "crash").expect("a crash");
        let said = format!("{}", crash["cause"]);
        assert!(said.contains("panicked (a bug in this tool)") && said.contains("panic@2"), "{file}: {crash:#}");
    }
    assert_eq!(file_report(&r, "encoder_model.onnx")["verdict"], "pass");
}
