//! `protocol`: the table for every committed folder, and the emitted
//! programs tested by running them: their cached greedy loop must give the
//! same ids and top-5 logits as the tool's own generation without a cache.

mod common;
use common::*;
use serde_json::Value;
use std::process::Command;

/// (folder or file, form, --ids or --features, top-5 logit tolerance)
const CASES: &[(&str, &str, &str, f64)] = &[
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

fn features(dir: &std::path::Path) -> String {
    let path = dir.join("features.npy");
    let code = "import numpy as np, sys; np.save(sys.argv[1], np.random.default_rng(0).standard_normal((80, 3000)).astype(np.float32))";
    let ok = Command::new("python3").args(["-c", code, path_str(&path)]).status().unwrap().success();
    assert!(ok, "numpy writes the features");
    path.display().to_string()
}

/// One second of seeded 16 kHz samples (a raw-audio encoder's input).
fn samples(dir: &std::path::Path) -> String {
    let path = dir.join("samples.npy");
    let code = "import numpy as np, sys; np.save(sys.argv[1], (0.1 * np.random.default_rng(0).standard_normal(16000)).astype(np.float32))";
    let ok = Command::new("python3").args(["-c", code, path_str(&path)]).status().unwrap().success();
    assert!(ok, "numpy writes the samples");
    path.display().to_string()
}

fn input_args(input: &str, features: &str) -> Vec<String> {
    if input == "FEATURES" {
        vec!["--features".into(), features.into()]
    } else if input == "SAMPLES" {
        let dir = std::path::Path::new(features).parent().unwrap();
        vec!["--features".into(), samples(dir)]
    } else {
        vec!["--ids".into(), input.into()]
    }
}

fn compare(case: &str, got: &Value, want: &Value, tol: f64) {
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

#[test]
fn protocol_prints_every_step_within_100_columns_and_as_json() {
    for (dir, form, _, _) in CASES {
        let target = format!("models/{dir}");
        let out = bin().args(["protocol", &target]).env_remove("COLUMNS").output().unwrap();
        assert!(out.status.success(), "{dir}: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout);
        let widest = text.lines().map(|l| l.chars().count()).max().unwrap();
        assert!(widest <= 100, "{dir}: {widest} columns");
        let steps = if *form == "encoder-alone" {
            text.contains("the one call")
        } else {
            text.contains("step 0 (prompt)") && text.contains("step k ≥ 1")
        };
        assert!(steps && text.contains(form), "{dir}:\n{text}");
        let (code, v) = json(&["protocol", "--format", "json", &target]);
        assert_eq!(code, 0);
        let forms: Vec<&str> = v["loops"].as_array().unwrap().iter().map(|l| l["form"].as_str().unwrap()).collect();
        assert!(forms.contains(form), "{dir}: {forms:?}");
    }
}

#[test]
fn emitted_python_programs_match_the_uncached_reference() {
    let tmp = std::env::temp_dir().join(format!("onnx-contract-emit-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let feats = features(&tmp);
    for (dir, form, input, tol) in CASES {
        let case = format!("{dir} ({form})");
        let target = format!("models/{dir}");
        let model_dir = if dir.ends_with(".onnx") {
            root().join(&target).parent().unwrap().to_path_buf()
        } else {
            root().join(&target)
        };
        let out = run(&["protocol", &target, "--form", form, "--emit", "python"]);
        assert!(out.status.success(), "{case}: {}", String::from_utf8_lossy(&out.stderr));
        let program = tmp.join("gen.py");
        std::fs::write(&program, &out.stdout).unwrap();
        let args = input_args(input, &feats);
        let ran = Command::new("python3")
            .arg(&program)
            .args(["--model-dir", path_str(&model_dir), "--max-new-tokens", "16", "--ignore-eos"])
            .args(&args)
            .output()
            .unwrap();
        assert!(ran.status.success(), "{case}: {}", String::from_utf8_lossy(&ran.stderr));
        let got: Value = serde_json::from_slice(&ran.stdout).unwrap();
        let mut reference =
            vec!["protocol", &target, "--form", form, "--reference", "--max-new-tokens", "16", "--ignore-eos"];
        let args_ref: Vec<&str> = args.iter().map(String::as_str).collect();
        reference.extend(args_ref);
        let r = run(&reference);
        assert!(r.status.success(), "{case}: {}", String::from_utf8_lossy(&r.stderr));
        let want: Value = serde_json::from_slice(&r.stdout).unwrap();
        compare(&case, &got, &want, *tol);
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

/// A subset covering every form and numeric kind, for the compiled languages.
const LANG_CASES: &[(&str, &str, &str, f64)] = &[
    ("marian-tiny", "merged-decoder", "5,17,42,7", 1e-4),
    ("bart-tjs", "split-pair", "5,17,42", 1e-4),
    ("whisper-tiny", "merged-decoder", "FEATURES", 1e-4),
    ("gpt2-tiny", "decoder-only", "3,14,15,92", 1e-4),
    ("llama-genai", "decoder-only", "3,14,15,92", 1e-4),
    ("marian-fp16", "merged-decoder", "5,17,42,7", 2e-2),
    ("gpt2-int8/onnx/model_quantized.onnx", "decoder-only", "3,14,15,92", 5e-2),
];

fn model_dir(dir: &str) -> std::path::PathBuf {
    let target = root().join("models").join(dir);
    if dir.ends_with(".onnx") {
        target.parent().unwrap().to_path_buf()
    } else {
        target
    }
}

fn reference(dir: &str, form: &str, args: &[String]) -> Value {
    let target = format!("models/{dir}");
    let mut cmd = vec!["protocol", &target, "--form", form, "--reference", "--max-new-tokens", "16", "--ignore-eos"];
    cmd.extend(args.iter().map(String::as_str));
    let r = run(&cmd);
    assert!(r.status.success(), "{dir}: {}", String::from_utf8_lossy(&r.stderr));
    serde_json::from_slice(&r.stdout).unwrap()
}

fn emitted(dir: &str, form: &str, lang: &str) -> Vec<u8> {
    let out = run(&["protocol", &format!("models/{dir}"), "--form", form, "--emit", lang]);
    assert!(out.status.success(), "{dir}: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

#[test]
fn emitted_rust_programs_build_and_match_the_uncached_reference() {
    let krate = root().join("target").join("emitted-rust-crate");
    let bins = krate.join("src").join("bin");
    std::fs::create_dir_all(&bins).unwrap();
    std::fs::write(
        krate.join("Cargo.toml"),
        "[package]\nname = \"emitted\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n[dependencies]\n\
         ort = { version = \"=2.0.0-rc.15\", default-features = false, features = [\"std\", \"ndarray\", \"load-dynamic\", \"api-17\", \"half\"] }\n\
         ndarray = \"0.17\"\nhalf = \"2\"\n\n[workspace]\n",
    )
    .unwrap();
    for (i, (dir, form, _, _)) in LANG_CASES.iter().enumerate() {
        std::fs::write(bins.join(format!("case{i}.rs")), emitted(dir, form, "rust")).unwrap();
    }
    // Its own target dir: the outer cargo holds ours.
    let target = root().join("target").join("emitted-rust");
    let build = Command::new("cargo")
        .args(["build", "--quiet", "--bins"])
        .current_dir(&krate)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .unwrap();
    assert!(build.status.success(), "the emitted Rust does not build:\n{}", String::from_utf8_lossy(&build.stderr));
    let lib = onnx_contract::engine::locate::locate(None).expect("ONNX Runtime").path;
    let tmp = std::env::temp_dir().join(format!("onnx-contract-emit-rs-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let feats = features(&tmp);
    for (i, (dir, form, input, tol)) in LANG_CASES.iter().enumerate() {
        let args = input_args(input, &feats);
        let ran = Command::new(target.join("debug").join(format!("case{i}")))
            .args(["--model-dir", path_str(&model_dir(dir)), "--max-new-tokens", "16", "--ignore-eos"])
            .args(&args)
            .env("ORT_DYLIB_PATH", &lib)
            .output()
            .unwrap();
        assert!(ran.status.success(), "{dir}: {}", String::from_utf8_lossy(&ran.stderr));
        let got: Value = serde_json::from_slice(&ran.stdout).unwrap();
        compare(&format!("rust {dir} ({form})"), &got, &reference(dir, form, &args), *tol);
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn emitted_javascript_programs_match_the_uncached_reference() {
    // onnxruntime-node as tests/setup.sh installed it for the recorder (README's
    // test command runs the setup first): the emitted programs resolve it from
    // a link beside them, so this test fetches nothing.
    let js = root().join("target").join("emitted-js");
    std::fs::create_dir_all(&js).unwrap();
    let installed = root().join("tests/callers/node_modules");
    assert!(installed.join("onnxruntime-node").is_dir(), "onnxruntime-node is missing: run tests/setup.sh");
    std::fs::write(js.join("package.json"), "{\"name\": \"emitted\", \"private\": true, \"type\": \"module\"}\n")
        .unwrap();
    let link = js.join("node_modules");
    if std::fs::read_link(&link).ok().as_deref() != Some(installed.as_path()) {
        let _ = std::fs::remove_dir_all(&link).or_else(|_| std::fs::remove_file(&link));
        std::os::unix::fs::symlink(&installed, &link).unwrap();
    }
    let tmp = std::env::temp_dir().join(format!("onnx-contract-emit-js-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let feats = features(&tmp);
    for (i, (dir, form, input, tol)) in LANG_CASES.iter().enumerate() {
        let program = js.join(format!("case{i}.mjs"));
        std::fs::write(&program, emitted(dir, form, "js")).unwrap();
        let args = input_args(input, &feats);
        let ran = Command::new("node")
            .arg(&program)
            .args(["--model-dir", path_str(&model_dir(dir)), "--max-new-tokens", "16", "--ignore-eos"])
            .args(&args)
            .output()
            .unwrap();
        assert!(ran.status.success(), "{dir}: {}", String::from_utf8_lossy(&ran.stderr));
        let got: Value = serde_json::from_slice(&ran.stdout).unwrap();
        compare(&format!("js {dir} ({form})"), &got, &reference(dir, form, &args), *tol);
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

/// Issue 33: the table and the driver are views of one plan. For every
/// fixture form, the batch-1 shapes and element types the `protocol` table
/// shows for steps 0–2 are those `check` fed when it drove the same file
/// (the encoder's length aside: the table shows an example source of 7).
#[test]
fn the_table_shows_what_the_driver_feeds() {
    for (dir, form, _, _) in CASES {
        let (code, p) = json(&["protocol", "--format", "json", &format!("models/{dir}")]);
        assert_eq!(code, 0, "{dir}");
        let lp = p["loops"].as_array().unwrap().iter().find(|l| l["form"] == *form).unwrap();
        let (_, r) = json(&["check", "--format", "json", "--no-fetch", &format!("models/{dir}")]);
        let file = lp["later_file"].as_str().unwrap();
        // A single-file target reports the file itself; a folder lists its files.
        let report = match r["files"].as_array() {
            Some(files) => files.iter().find(|f| f["path"] == file).unwrap_or_else(|| panic!("{dir}: {file}")).clone(),
            None => r.clone(),
        };
        let steps = report["runtimes"][0]["steps"].as_array().unwrap_or_else(|| panic!("{dir}: no run"));
        let mut compared = 0;
        for (k, kind) in [(0usize, 0usize), (1, 1), (2, 1)] {
            let table = &lp["steps"][kind];
            let Some(fed) = steps.iter().find(|s| s["step"] == k && s["step0_past_len"] == steps[0]["step0_past_len"])
            else {
                continue;
            };
            for row in table["feeds"].as_array().unwrap() {
                let label = row["name"].as_str().unwrap();
                let example = table["examples"].as_array().unwrap().iter().find(|e| e[0] == label).unwrap()[1][k]
                    .as_str()
                    .unwrap()
                    .to_string();
                for name in row["names"].as_array().unwrap() {
                    let Some(f) = fed["feeds"].as_array().unwrap().iter().find(|f| f["name"] == *name) else {
                        panic!("{dir} {form}: the table shows `{name}` at step {k}, the driver does not feed it");
                    };
                    assert_eq!(f["dtype"], row["dtype"], "{dir} {form}: `{name}` at step {k}");
                    let shape: Vec<String> =
                        f["shape"].as_array().unwrap().iter().map(|d| d.as_i64().unwrap().to_string()).collect();
                    let shape = format!("[{}]", shape.join(", "));
                    let encoder_sized = row["shape"].as_str().unwrap().contains("enc_len");
                    if !encoder_sized {
                        assert_eq!(shape, example, "{dir} {form}: `{name}` at step {k}");
                    }
                    compared += 1;
                }
            }
            // And nothing the driver feeds is missing from the table.
            for f in fed["feeds"].as_array().unwrap() {
                let shown = table["feeds"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|row| row["names"].as_array().unwrap().contains(&f["name"]));
                assert!(
                    shown,
                    "{dir} {form}: the driver feeds `{}` at step {k}, the table does not show it",
                    f["name"]
                );
            }
        }
        assert!(compared > 0, "{dir} {form}: nothing compared");
    }
}

/// Issue 30: with a vision encoder beside a decoder of 3-D positions, the
/// protocol says what an image call needs, from the vision encoder's own signature.
#[test]
fn an_image_call_is_described_from_the_vision_encoder() {
    let (code, p) = json(&["protocol", "--format", "json", "models/qwen2vl-tiny"]);
    assert_eq!(code, 0);
    let rules: Vec<&str> = p["loops"][0]["rules"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
    let image = rules.iter().find(|r| r.starts_with("An image call")).unwrap_or_else(|| panic!("{rules:#?}"));
    assert!(image.contains("onnx/vision_encoder.onnx on `pixel_values` float32 [num_patches, 24]"), "{image}");
    assert!(image.contains("`image_features` replaces the embeddings") && image.contains("rows differ"), "{image}");
}
