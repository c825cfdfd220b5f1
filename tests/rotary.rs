//! What config.json says the model computes (issue 29): the rotary
//! frequencies measured on the graph's own rotary subgraph against those
//! transformers derives from the folder's config. Fixtures are optimum
//! exports (models/generate_rope.py, each verified against PyTorch loaded
//! from the folder's own config).

mod common;
use common::{check_folder, file_report};
use serde_json::Value;

fn audit_line(f: &Value) -> String {
    f["runtimes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["probes"].as_array().cloned().unwrap_or_default())
        .map(|p| p.as_str().unwrap().to_string())
        .find(|p| p.starts_with("rotary audit"))
        .unwrap_or_else(|| panic!("no audit: {f:#}"))
}

fn rotary_error(dir: &str) -> String {
    let (code, r) = check_folder(dir);
    assert_eq!(code, 2, "{dir}: {r:#}");
    let f = file_report(&r, "model.onnx");
    let first = &f["findings"][0];
    assert_eq!(first["code"], "rotary", "{dir}: {first:#}");
    first["message"].as_str().unwrap().to_string()
}

#[test]
fn dropped_llama3_scaling_is_named_with_its_first_position() {
    let m = rotary_error("rope-llama3-dropped");
    assert!(
        m.contains("unscaled frequencies (rope_theta 10000)") && m.contains("rope_scaling llama3 (factor 8)"),
        "{m}"
    );
    assert!(m.contains("from position 1 it computes another model"), "{m}");
}

#[test]
fn a_theta_changed_after_export_is_named() {
    let m = rotary_error("rope-theta-changed");
    assert!(m.contains("the graph applies rope_theta 10000 where config.json says 500000"), "{m}");
}

#[test]
fn longrope_baked_at_the_short_factors_is_named_at_the_switch() {
    let m = rotary_error("rope-longrope-short");
    assert!(
        m.contains(
            "longrope: the graph holds the short factors only; from position 32 (original_max_position_embeddings)"
        ),
        "{m}"
    );
}

#[test]
fn good_exports_of_every_rope_type_pass_with_the_figure() {
    for (dir, want) in [
        ("rope-llama3", "llama3 (factor 8)"),
        ("rope-linear", "linear (factor 2)"),
        ("rope-longrope", "at sequence lengths [32, 33]"),
        ("rope-yarn", "cos/sin scale 1.138629"),
        ("rope-partial", "4 frequencies"),
        ("gemma3-tiny", "rope_local_base_freq 10000"),
        ("llama-tiny", "rope_theta 10000"),
    ] {
        let (code, r) = check_folder(dir);
        assert_eq!(code, 0, "{dir}: {r:#}");
        let line = audit_line(file_report(&r, "model.onnx"));
        assert!(line.contains(want) && line.contains("match"), "{dir}: {line}");
    }
}

/// onnxruntime-genai's precomputed cos/sin tables (read by
/// GroupQueryAttention, stored in model.onnx.data) are audited too: the
/// good export matches; the same folder with rope_theta edited is named.
#[test]
fn precomputed_genai_tables_are_audited() {
    let (code, r) = check_folder("llama-genai");
    assert_eq!(code, 0, "{r:#}");
    let line = audit_line(file_report(&r, "model.onnx"));
    assert!(line.contains("precomputed table pair") && line.contains("match"), "{line}");
    let dir = std::env::temp_dir().join(format!("onnx-contract-genai-theta-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["model.onnx", "model.onnx.data", "genai_config.json", "generation_config.json"] {
        std::fs::copy(format!("models/llama-genai/{f}"), dir.join(f)).unwrap();
    }
    let mut c: Value =
        serde_json::from_str(&std::fs::read_to_string("models/llama-genai/config.json").unwrap()).unwrap();
    c["rope_theta"] = serde_json::json!(500000.0);
    std::fs::write(dir.join("config.json"), c.to_string()).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_onnx-contract"))
        .args(["check", dir.to_str().unwrap(), "--format", "json", "--no-fetch"])
        .output()
        .unwrap();
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let f = file_report(&r, "model.onnx");
    let e = f["findings"].as_array().unwrap().iter().find(|x| x["code"] == "rotary").unwrap_or_else(|| panic!("{f:#}"));
    let m = e["message"].as_str().unwrap();
    assert!(m.contains("rope_theta 10000 where config.json says 500000") && m.contains("`cos_cache`"), "{m}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn malformed_rope_fields_are_named_never_a_panic() {
    for (field, value, said) in [
        ("rope_scaling", serde_json::json!({"rope_type": "wild", "factor": 2.0}), "`rope_scaling` type `wild`"),
        ("rope_theta", serde_json::json!("big"), "`rope_theta` is \"big\", not a number"),
        ("rope_scaling", serde_json::json!({"rope_type": "llama3", "factor": 8.0}), "`low_freq_factor` is missing"),
        ("head_dim", serde_json::json!(1e30), "rotated width"),
    ] {
        let dir = std::env::temp_dir().join(format!("onnx-contract-rope-{}-{field}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["model.onnx", "generation_config.json"] {
            std::fs::copy(format!("models/llama-tiny/{f}"), dir.join(f)).unwrap();
        }
        let mut c: Value =
            serde_json::from_str(&std::fs::read_to_string("models/llama-tiny/config.json").unwrap()).unwrap();
        c[field] = value;
        std::fs::write(dir.join("config.json"), c.to_string()).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_onnx-contract"))
            .args(["check", dir.to_str().unwrap(), "--format", "json", "--no-fetch", "--static-only"])
            .output()
            .unwrap();
        let r: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{field}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        let f = file_report(&r, "model.onnx");
        let w = f["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["code"] == "rotary-unaudited")
            .unwrap_or_else(|| panic!("{field}: {f:#}"));
        assert_eq!(w["severity"], "warning");
        assert!(w["message"].as_str().unwrap().contains(said), "{field}: {w:#}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn special_tokens_outside_the_vocabulary_are_named() {
    let dir = std::env::temp_dir().join(format!("onnx-contract-tokens-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy("models/llama-tiny/model.onnx", dir.join("model.onnx")).unwrap();
    std::fs::copy("models/llama-tiny/config.json", dir.join("config.json")).unwrap();
    // Llama 3's end tokens in a 1000-token model: generation never stops on them.
    std::fs::write(dir.join("generation_config.json"), r#"{"bos_token_id": 128000, "eos_token_id": [2, 128001]}"#)
        .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_onnx-contract"))
        .args(["check", dir.to_str().unwrap(), "--format", "json", "--no-fetch", "--static-only"])
        .output()
        .unwrap();
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let f = file_report(&r, "model.onnx");
    let bad: Vec<&Value> =
        f["findings"].as_array().unwrap().iter().filter(|x| x["code"] == "config-mismatch").collect();
    // The end token the logits cannot produce, and the start token the embedding table has no row for.
    assert_eq!(bad.len(), 2, "{bad:#?}");
    let m = bad[0]["message"].as_str().unwrap();
    assert!(
        m.contains(
            "generation_config.json: eos_token_id[1] = 128001 is not a token of model.onnx's vocabulary (1000 logits)"
        ),
        "{m}"
    );
    let m = bad[1]["message"].as_str().unwrap();
    assert!(
        m.starts_with("generation_config.json: bos_token_id = 128000 is not a row of model.onnx's token embedding"),
        "{m}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Gemma 2's final_logit_softcapping, measured in the run: the good export
/// stays within ± 3; the one exported without the cap (config.json still
/// says 3) goes beyond, though its cached and uncached paths agree.
#[test]
fn logits_beyond_the_configured_softcap_are_named() {
    let (code, r) = check_folder("softcap-gemma2");
    assert_eq!(code, 0, "{r:#}");
    let (code, r) = check_folder("softcap-dropped");
    assert_eq!(code, 2, "{r:#}");
    let f = file_report(&r, "model.onnx");
    let first = f["findings"].as_array().unwrap().iter().find(|x| x["severity"] == "error").unwrap();
    assert_eq!(first["code"], "logit-softcap", "{first:#}");
    assert!(first["message"].as_str().unwrap().contains("caps every logit at ± 3"), "{first:#}");
    assert!(!f["findings"].as_array().unwrap().iter().any(|x| x["code"] == "parity"), "parity cannot see it");
}

/// Issue 29: the token ids a caller feeds (bos, pad, decoder start, from
/// config.json or generation_config.json) must be rows of the embedding
/// table the graph gathers them from; a negative pad means none.
#[test]
fn fed_token_ids_past_the_embedding_table_are_named() {
    let tmp = std::env::temp_dir().join(format!("onnx-contract-fed-tokens-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let src = common::root().join("models/gpt2-tiny");
    for f in std::fs::read_dir(&src).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, tmp.join(f.file_name().unwrap())).unwrap();
    }
    let mut config: Value = serde_json::from_slice(&std::fs::read(tmp.join("config.json")).unwrap()).unwrap();
    config["bos_token_id"] = 5000.into();
    config["pad_token_id"] = (-1).into();
    std::fs::write(tmp.join("config.json"), config.to_string()).unwrap();
    let out = common::run(&["check", common::path_str(&tmp), "--static-only", "--format", "json"]);
    assert_eq!(out.status.code(), Some(2));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let findings = file_report(&r, "model.onnx")["findings"].as_array().unwrap().clone();
    let named: Vec<&str> = findings
        .iter()
        .filter(|f| f["message"].as_str().unwrap().contains("is not a row of"))
        .map(|f| f["message"].as_str().unwrap())
        .collect();
    assert_eq!(named.len(), 1, "{named:#?}");
    assert!(
        named[0].starts_with("config.json: bos_token_id = 5000 is not a row of model.onnx's token embedding")
            && named[0].contains("`transformer.wte.weight`, 1000 rows, read by `input_ids`"),
        "{}",
        named[0]
    );
    let _ = std::fs::remove_dir_all(&tmp);
    // Every committed folder's fed tokens are rows of its tables (MusicGen's
    // pad and start token are the codebook size: its extra embedding row).
    for dir in ["marian-tiny", "musicgen-tiny", "llama-genai", "whisper-tiny", "t5-tiny"] {
        let out = common::run(&["check", &format!("models/{dir}"), "--static-only"]);
        assert!(!String::from_utf8_lossy(&out.stdout).contains("is not a row of"), "{dir}");
    }
}

/// Exports past 2 GB keep every tensor in external data, the rotary
/// `inv_freq` Constant's value included (issue 40): the audit's subgraph
/// reads it from the model's own folder wherever the check runs, also
/// through a hub cache's file links. Made on the fly from
/// rope-theta-changed, its weights and its rotary Constant moved to
/// `model.onnx_data` by onnx, the folder reached through a link to each
/// file, checked from another working directory.
#[test]
fn an_audit_reads_attribute_tensors_from_external_data_beside_the_model_from_anywhere() {
    let tmp = std::env::temp_dir().join(format!("oc-rotary-ext-{}", std::process::id()));
    let (store, linked) = (tmp.join("blobs"), tmp.join("snapshot"));
    std::fs::create_dir_all(&store).unwrap();
    std::fs::create_dir_all(&linked).unwrap();
    let src = common::model("rope-theta-changed");
    // What optimum writes past 2 GB: the weights and the rotary Constant's
    // value (a [1, half, 1] tensor) in the data file.
    let script = "import onnx, sys\n\
        from onnx.external_data_helper import set_external_data\n\
        m = onnx.load(sys.argv[1])\n\
        for n in m.graph.node:\n\
        \x20   for a in n.attribute:\n\
        \x20       if n.op_type == 'Constant' and a.HasField('t') and len(a.t.dims) == 3:\n\
        \x20           set_external_data(a.t, 'model.onnx_data')\n\
        onnx.save_model(m, sys.argv[2], save_as_external_data=True, all_tensors_to_one_file=True,\n\
        \x20   location='model.onnx_data', size_threshold=0, convert_attribute=False)\n";
    let out = std::process::Command::new("python3")
        .args(["-c", script, src.join("model.onnx").to_str().unwrap(), store.join("model.onnx").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for f in ["config.json", "generation_config.json"] {
        std::fs::copy(src.join(f), store.join(f)).unwrap();
    }
    for f in ["model.onnx", "model.onnx_data", "config.json", "generation_config.json"] {
        std::os::unix::fs::symlink(store.join(f), linked.join(f)).unwrap();
    }
    let out = common::bin()
        .current_dir("/")
        .args(["check", linked.to_str().unwrap(), "--format", "json", "--no-fetch"])
        .output()
        .unwrap();
    std::fs::remove_dir_all(&tmp).ok();
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let first = &file_report(&r, "model.onnx")["findings"][0];
    assert_eq!(first["code"], "rotary", "{r:#}");
    assert!(first["message"]
        .as_str()
        .unwrap()
        .contains("the graph applies rope_theta 10000 where config.json says 500000"));
}
