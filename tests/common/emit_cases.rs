//! The fixture folders every emitted program is tested on (tests/protocol.rs
//! runs the Python ones under the recorder, tests/emitted.rs the Rust and
//! JavaScript ones), and what those tests share.
#![allow(dead_code)]

use super::common::*;
use serde_json::Value;
use std::process::Command;

/// (folder or file, form, --ids or --features, top-5 logit tolerance)
pub const CASES: &[(&str, &str, &str, f64)] = &[
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
    // Outside optimum's conventions, planned from the inferred protocol (issue 20).
    ("dynamo-llama", "decoder-only", "3,14,15,92", 1e-4),
    ("custom-total-seq", "decoder-only", "3,14,15,92", 1e-4),
    ("gpt-bigcode-tiny", "decoder-only", "3,14,15,92", 1e-4),
    ("bloom-tiny", "decoder-only", "3,14,15,92", 1e-4),
    ("gemma3-tiny", "decoder-only", "3,14,15,92", 1e-4),
    // Folder kinds: optimum's merge_decoders of a decoder-only pair (the flag,
    // no encoder), 3-D multimodal positions through embed_tokens.onnx.
    ("gpt2-merged-decoders", "merged-decoder", "3,14,15,92", 1e-4),
    ("qwen2vl-tiny", "decoder-only", "3,14,15,92", 1e-4),
    // optimum's text-generation without past: the whole prefix every call.
    ("llama-no-cache", "no-cache", "3,14,15,92", 1e-4),
    // optimum's legacy decoder-only pair: the prompt through decoder_model.onnx.
    ("gpt2-legacy-pair", "split-pair", "3,14,15,92", 1e-4),
    // Cache forms of their own: a static cache (one token per call into fixed
    // buffers at cache_position, with and without a mask over the buffer), a
    // genai hybrid (shared max_length buffers, conv states), embeddings through
    // embed_tokens.onnx, raw audio samples, multi-head latent attention.
    ("static-cache-llama", "decoder-only", "1,307,42,118", 1e-4),
    ("static-cache-with-mask", "decoder-only", "1,307,42,118", 1e-4),
    // Buffers the caller keeps (presents of the new rows only): written in at
    // cache_position, or rolled in under a right-aligned mask (winml-cli).
    ("static-cache-caller-writes", "decoder-only", "1,307,42,118", 1e-4),
    ("sliding-cache-caller-rolls", "decoder-only", "1,307,42,118", 1e-4),
    ("lfm2-genai", "decoder-only", "3,14,15,92", 1e-4),
    ("tjs-vlm", "decoder-only", "1,5,17,42,100,250", 1e-4),
    ("moonshine-tiny", "merged-decoder", "SAMPLES", 1e-4),
    ("moonshine-tiny", "split-pair", "SAMPLES", 1e-4),
    ("deepseek-mla-tiny", "decoder-only", "3,14,15,92", 1e-4),
    // onnxruntime-genai's Whisper: int32 ids, cross caches computed by the encoder.
    ("whisper-genai-nonzero-bias", "cross-from-encoder", "FEATURES", 1e-4),
    // MusicGen: one token row per codebook, each its own greedy token (issue 30).
    ("musicgen-tiny", "split-pair", "5,17,42", 1e-4),
    // An encoder alone: one call, the last token's hidden values against the tool's own run.
    ("bert-embeddings", "encoder-alone", "5,17,42", 1e-4),
];

/// Beam searches: (folder or file, form, input, beams; 0 = the folder's
/// generation_config.json num_beams). Every cache form, one row per beam.
pub const BEAM_CASES: &[(&str, &str, &str, u32)] = &[
    ("marian-tiny", "merged-decoder", "5,17,42,7", 0),
    ("bart-tjs", "split-pair", "5,17,42", 3),
    ("whisper-tiny", "merged-decoder", "FEATURES", 3),
    ("gpt2-tiny", "decoder-only", "3,14,15,92", 3),
    ("llama-genai", "decoder-only", "3,14,15,92", 3),
    ("lfm2-genai", "decoder-only", "3,14,15,92", 2),
    ("tjs-vlm", "decoder-only", "1,5,17,42,100,250", 3),
    ("llama-no-cache", "no-cache", "3,14,15,92", 3),
    ("marian-fp16", "merged-decoder", "5,17,42,7", 2),
    ("whisper-genai-nonzero-bias", "cross-from-encoder", "FEATURES", 2),
    ("gpt2-legacy-pair", "split-pair", "3,14,15,92", 2),
    ("qwen2vl-tiny", "decoder-only", "3,14,15,92", 2),
];

/// The recordings of BEAM_CASES whose beams replay reads.
pub const BEAMS_READ: &[&str] = &["marian-tiny", "whisper-tiny", "gpt2-tiny", "marian-fp16"];

/// Tokens a beam search generates in the tests (its reference recomputes every beam's prefix).
pub const BEAM_TOKENS: &str = "8";

pub fn features(dir: &std::path::Path) -> String {
    let path = dir.join("features.npy");
    let code = "import numpy as np, sys; np.save(sys.argv[1], np.random.default_rng(0).standard_normal((80, 3000)).astype(np.float32))";
    let ok = Command::new("python3").args(["-c", code, path_str(&path)]).status().unwrap().success();
    assert!(ok, "numpy writes the features");
    path.display().to_string()
}

/// One second of seeded 16 kHz samples (a raw-audio encoder's input).
pub fn samples(dir: &std::path::Path) -> String {
    let path = dir.join("samples.npy");
    let code = "import numpy as np, sys; np.save(sys.argv[1], (0.1 * np.random.default_rng(0).standard_normal(16000)).astype(np.float32))";
    let ok = Command::new("python3").args(["-c", code, path_str(&path)]).status().unwrap().success();
    assert!(ok, "numpy writes the samples");
    path.display().to_string()
}

pub fn input_args(input: &str, features: &str) -> Vec<String> {
    if input == "FEATURES" {
        vec!["--features".into(), features.into()]
    } else if input == "SAMPLES" {
        let dir = std::path::Path::new(features).parent().unwrap();
        vec!["--features".into(), samples(dir)]
    } else {
        vec!["--ids".into(), input.into()]
    }
}

pub fn compare(case: &str, got: &Value, want: &Value, tol: f64) {
    assert_eq!(got["ids"], want["ids"], "{case}: ids");
    let n = want["ids"].as_array().unwrap().len();
    // A decoder generates 16 tokens; an encoder alone generates none, its values are compared.
    let encoder = case.contains("encoder-alone");
    assert!(
        n >= 16 || (encoder && n == 0 && want["top5"][0].as_array().is_some_and(|v| v.len() == 5)),
        "{case}: {n} tokens"
    );
    for (g, w) in got["top5"].as_array().unwrap().iter().zip(want["top5"].as_array().unwrap()) {
        for (a, b) in g.as_array().unwrap().iter().zip(w.as_array().unwrap()) {
            let (la, lb) = (a[1].as_f64().unwrap(), b[1].as_f64().unwrap());
            let scale = lb.abs().max(1.0);
            assert!((la - lb).abs() <= tol * scale, "{case}: logit {la} vs {lb}");
        }
    }
}

pub fn model_dir(dir: &str) -> std::path::PathBuf {
    let target = root().join("models").join(dir);
    if dir.ends_with(".onnx") {
        target.parent().unwrap().to_path_buf()
    } else {
        target
    }
}

/// `protocol --reference` for the case: greedy over 16 tokens, or `beams` over BEAM_TOKENS.
pub fn reference(dir: &str, form: &str, args: &[String], beams: Option<u32>) -> Value {
    let target = format!("models/{dir}");
    let beams = beams.map(|b| b.to_string());
    let mut cmd = vec!["protocol", &target, "--form", form, "--reference", "--ignore-eos"];
    match &beams {
        Some(b) if b != "0" => cmd.extend(["--max-new-tokens", BEAM_TOKENS, "--num-beams", b]),
        Some(_) => cmd.extend(["--max-new-tokens", BEAM_TOKENS]),
        None => cmd.extend(["--max-new-tokens", "16", "--num-beams", "1"]),
    }
    cmd.extend(args.iter().map(String::as_str));
    let r = run(&cmd);
    assert!(r.status.success(), "{dir}: {}", String::from_utf8_lossy(&r.stderr));
    serde_json::from_slice(&r.stdout).unwrap()
}

/// The program arguments of a case: greedy over 16 tokens, or `beams` over BEAM_TOKENS.
pub fn program_args(dir: &str, input: &str, feats: &str, beams: Option<u32>) -> Vec<String> {
    let mut a: Vec<String> = vec!["--model-dir".into(), path_str(&model_dir(dir)).into(), "--ignore-eos".into()];
    match beams {
        Some(0) => a.extend(["--max-new-tokens".into(), BEAM_TOKENS.into()]),
        Some(b) => a.extend(["--max-new-tokens".into(), BEAM_TOKENS.into(), "--num-beams".into(), b.to_string()]),
        None => a.extend(["--max-new-tokens".into(), "16".into(), "--num-beams".into(), "1".into()]),
    }
    a.extend(input_args(input, feats));
    a
}

/// A beam search's result against its reference: the same ids, the same summed log-probability.
pub fn compare_beams(case: &str, got: &Value, want: &Value, tol: f64) {
    assert_eq!(got["ids"], want["ids"], "{case}: ids");
    assert_eq!(want["ids"].as_array().unwrap().len(), BEAM_TOKENS.parse::<usize>().unwrap(), "{case}");
    let (a, b) = (got["score"].as_f64().unwrap(), want["score"].as_f64().unwrap());
    assert!((a - b).abs() <= tol * b.abs().max(1.0), "{case}: score {a} vs {b}");
}

pub fn emitted(dir: &str, form: &str, lang: &str) -> Vec<u8> {
    let out = run(&["protocol", &format!("models/{dir}"), "--form", form, "--emit", lang]);
    assert!(out.status.success(), "{dir}: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// The Rust programs of `cases`, compiled once into one binary (one module
/// per case, chosen by EMITTED_CASE) in a scratch crate against ort 2.
pub fn build_rust(cases: &[(String, Vec<u8>)]) -> std::path::PathBuf {
    let krate = root().join("target").join("emitted-rust-crate");
    let src = krate.join("src");
    let _ = std::fs::remove_dir_all(&src);
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        krate.join("Cargo.toml"),
        "[package]\nname = \"emitted\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n[dependencies]\n\
         ort = { version = \"=2.0.0-rc.15\", default-features = false, features = [\"std\", \"ndarray\", \"load-dynamic\", \"api-17\", \"half\"] }\n\
         ndarray = \"0.17\"\nhalf = \"2\"\n\n[workspace]\n",
    )
    .unwrap();
    let mut main = String::from("fn main() -> Result<(), Box<dyn std::error::Error>> {\n    match std::env::var(\"EMITTED_CASE\")?.as_str() {\n");
    let mut mods = String::new();
    for (name, program) in cases {
        // The program as written, its `main` made reachable from the dispatcher.
        let text = String::from_utf8(program.clone()).unwrap().replace("\nfn main()", "\npub fn main()");
        std::fs::write(src.join(format!("{name}.rs")), text).unwrap();
        mods.push_str(&format!("mod {name};\n"));
        main.push_str(&format!("        {name:?} => {name}::main(),\n"));
    }
    main.push_str("        other => Err(format!(\"no case {other}\").into()),\n    }\n}\n");
    std::fs::write(src.join("main.rs"), format!("{mods}\n{main}")).unwrap();
    // Its own target dir: the outer cargo holds ours.
    let target = root().join("target").join("emitted-rust");
    let build = Command::new("cargo")
        .args(["build", "--quiet"])
        .current_dir(&krate)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .unwrap();
    assert!(build.status.success(), "the emitted Rust does not build:\n{}", String::from_utf8_lossy(&build.stderr));
    target.join("debug").join("emitted")
}
