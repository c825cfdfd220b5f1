//! An engine that guards every call: before each `run`, the feed guard
//! compares what is about to be fed with what the model needs (and, across
//! calls, with the cache protocol), and refuses with a clear message instead
//! of letting ONNX Runtime crash or silently misbehave.
//!
//!   cargo run --example feed_guard -- MODEL.onnx [--trace TRACE.jsonl]
//!
//! `--trace` records the calls with the library's recorder, for `replay`.
//!
//! The engine feeds what an optimum merged Marian decoder takes (28 inputs);
//! on incident 1's 15-input export the guard refuses before any run (exit 2).

use ndarray::{Array1, Array2, Array3, Array4};
use onnx_contract::caller::{FeedGuard, TensorMeta};
use onnx_contract::engine::locate;
use ort::session::Session;
use ort::value::{DynValue, Tensor};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

fn meta(v: &DynValue) -> TensorMeta {
    onnx_contract::caller::trace::describe(v)
}

fn main() -> ExitCode {
    onnx_contract::init_child();
    let Some(model) = std::env::args().nth(1) else {
        eprintln!("usage: feed_guard MODEL.onnx");
        return ExitCode::from(64);
    };
    let args: Vec<String> = std::env::args().collect();
    let trace = args.iter().position(|a| a == "--trace").and_then(|i| args.get(i + 1)).map(std::path::PathBuf::from);
    match run(Path::new(&model), trace.as_deref()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
    }
}

fn run(model: &Path, trace: Option<&Path>) -> Result<(), Box<dyn std::error::Error>> {
    let mut recorder = trace.map(onnx_contract::caller::trace::Recorder::create).transpose()?;
    // The guard: the model's signature and the plan of its protocol (no weights read).
    let mut guard = FeedGuard::for_file(model)?;
    let lib = locate::locate(None)?;
    let env = ort::init_from(&lib.path)?.build()?;
    let mut session = Session::builder(&env)?.commit_from_file(model)?;

    // What the engine feeds at step 0: the 28 inputs of an optimum merged Marian decoder.
    let (layers, heads, head_dim, enc_len, hidden) = (6, 8, 4, 7, 32);
    let mut feeds: Vec<(String, DynValue)> = vec![
        ("encoder_attention_mask".into(), Tensor::from_array(Array2::<i64>::ones((1, enc_len)))?.into_dyn()),
        ("input_ids".into(), Tensor::from_array(Array2::from_elem((1, 1), 999i64))?.into_dyn()),
        ("encoder_hidden_states".into(), Tensor::from_array(Array3::<f32>::zeros((1, enc_len, hidden)))?.into_dyn()),
    ];
    for l in 0..layers {
        for part in ["decoder", "encoder"] {
            for kv in ["key", "value"] {
                let past = Array4::<f32>::zeros((1, heads, 0, head_dim));
                feeds.push((format!("past_key_values.{l}.{part}.{kv}"), Tensor::from_array(past)?.into_dyn()));
            }
        }
    }
    feeds.push(("use_cache_branch".into(), Tensor::from_array(Array1::from_vec(vec![false]))?.into_dyn()));

    let described: BTreeMap<String, TensorMeta> = feeds.iter().map(|(n, v)| (n.clone(), meta(v))).collect();
    let name = model.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if let Err(refused) = guard.before_run(&name, &described) {
        // Refused before ONNX Runtime saw anything.
        for f in &refused.findings {
            eprintln!("refused: [{}] {}", f.code, f.message);
        }
        return Err(format!(
            "{}: the feed guard refused call 0 ({} departures)",
            model.display(),
            refused.findings.len()
        )
        .into());
    }
    let out = session.run(feeds.iter().map(|(n, v)| (n.as_str(), v)).collect::<Vec<_>>());
    if let Some(r) = recorder.as_mut() {
        let fed: Vec<(&str, &DynValue)> = feeds.iter().map(|(n, v)| (n.as_str(), v)).collect();
        r.record(&name, &fed, out.as_ref())?;
    }
    let out = out?;
    let outputs: BTreeMap<String, TensorMeta> = out.iter().map(|(n, v)| (n.to_string(), meta(&v))).collect();
    guard.after(&name, Some(&outputs));
    println!("call 0 ran: {} outputs, logits {:?}", outputs.len(), outputs.get("logits").map(|m| m.shape.clone()));
    Ok(())
}
