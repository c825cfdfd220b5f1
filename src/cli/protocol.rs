//! `protocol`: how to call this model, as a table or JSON, as a complete
//! program (`--emit`), or as a reference generation without a cache.

use super::fail::Fail;
use super::output::emit;
use clap::ValueEnum;
use onnx_contract::exit;
use onnx_contract::render::{json, table};
use std::path::PathBuf;

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Lang {
    Python,
    Rust,
    Js,
    /// The consumer's own call: onnxruntime-genai's Generator loop (Python).
    Genai,
    /// The consumer's own call: transformers.js' from_pretrained + generate (Node).
    #[value(name = "transformers.js")]
    TransformersJs,
    /// The consumer's own call: optimum's ORTModelForCausalLM + generate (Python, torch).
    Optimum,
}

#[derive(clap::Args, Debug)]
pub(crate) struct ProtocolArgs {
    /// An export folder, or one decoder file.
    path: PathBuf,
    /// Write a program instead: python (onnxruntime + numpy), rust (ort 2 + ndarray) or js
    /// (onnxruntime-node); or the folder's consumer's own call: genai (onnxruntime-genai's
    /// Generator loop), transformers.js (from_pretrained + generate) or optimum
    /// (ORTModelForCausalLM + generate), the programs `check`
    /// runs to compare the consumer's tokens with the reference.
    #[arg(long, value_enum)]
    emit: Option<Lang>,
    /// Instead: generate WITHOUT a cache (every step recomputes the prefix)
    /// and print what an emitted program prints, as a reference.
    #[arg(long, conflicts_with = "emit")]
    reference: bool,
    /// The prompt (decoder-only) or the source ids (text seq2seq) for --reference, e.g. 5,17,42.
    #[arg(long, value_delimiter = ',')]
    ids: Vec<i64>,
    /// The audio encoder's input features (.npy) for --reference.
    #[arg(long)]
    features: Option<PathBuf>,
    /// New tokens for --reference.
    #[arg(long, default_value_t = 16)]
    max_new_tokens: usize,
    /// Do not stop at the end token (--reference).
    #[arg(long)]
    ignore_eos: bool,
    /// Beams for --reference (default: generation_config.json's num_beams, else 1: greedy).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    num_beams: Option<u16>,
    /// Which decoder form to emit or generate with when the folder has
    /// several: merged-decoder, split-pair, decoder-only (default: the first).
    #[arg(long)]
    form: Option<String>,
}

pub(crate) fn run(args: ProtocolArgs, json_out: bool) -> Result<i32, Fail> {
    let ProtocolArgs { path, emit: lang, reference, ids, features, max_new_tokens, ignore_eos, num_beams, form } = args;
    let mut p = onnx_contract::protocol::describe(&path)?;
    if let Some(form) = form {
        let forms: Vec<String> = p.loops.iter().map(|l| l.form.clone()).collect();
        p.loops.retain(|l| l.form == form);
        if p.loops.is_empty() {
            return Err(Fail {
                code: exit::USAGE,
                kind: "usage",
                message: format!("--form {form}: {} has only: {}", path.display(), forms.join(", ")),
            });
        }
    }
    if reference {
        // An empty prompt makes no reference (the graph reshapes zero tokens): said, not run.
        if ids.is_empty() && features.is_none() {
            return Err(Fail {
                code: exit::USAGE,
                kind: "usage",
                message: "--reference needs the prompt (decoder-only) or the source ids (text seq2seq): --ids 5,17,42 (audio: --features FILE.npy)".into(),
            });
        }
        let beams = num_beams.map(usize::from);
        let (ids, top5, score) =
            onnx_contract::protocol::reference::generate(&p, &path, ids, features, max_new_tokens, ignore_eos, beams)
                .map_err(|message| Fail { code: exit::NO_RUNTIME, kind: "runtime", message })?;
        emit(&format!("{}\n", serde_json::json!({ "ids": ids, "score": score, "top5": top5 })));
        return Ok(exit::OK);
    }
    match lang {
        #[cfg(feature = "runtime")]
        Some(Lang::Genai) => emit(onnx_contract::protocol::consumer::GENAI),
        #[cfg(feature = "runtime")]
        Some(Lang::TransformersJs) => emit(onnx_contract::protocol::consumer::TRANSFORMERS_JS),
        #[cfg(feature = "runtime")]
        Some(Lang::Optimum) => emit(onnx_contract::protocol::consumer::OPTIMUM),
        Some(lang) => {
            let lang = match lang {
                Lang::Python => onnx_contract::protocol::emit::Lang::Python,
                Lang::Rust => onnx_contract::protocol::emit::Lang::Rust,
                Lang::Js => onnx_contract::protocol::emit::Lang::Js,
                _ => {
                    return Err(Fail {
                        code: exit::USAGE,
                        kind: "usage",
                        message: "this build has no runtime feature".into(),
                    })
                }
            };
            // A plan no program can be written for: the folder, not the caller (one line, nothing written).
            let text = onnx_contract::protocol::emit::program(&p, lang).map_err(|message| Fail {
                code: exit::BAD_MODEL,
                kind: "protocol",
                message: format!("{}: {message}", path.display()),
            })?;
            emit(&text);
        }
        None if json_out => emit(&json::to_text(&p)),
        None => {
            emit(&table::protocol(&p));
            #[cfg(feature = "runtime")]
            if onnx_contract::protocol::consumer::text_plan(&p).is_some() {
                emit(&consumer_calls(&path));
            }
        }
    }
    Ok(exit::OK)
}

/// The consumers the folder is laid out for, each with the commands that
/// write and run its own call (the program `check` runs).
fn consumer_calls(path: &std::path::Path) -> String {
    use onnx_contract::consumer::{self, Choice, Consumer, View};
    if !path.is_dir() {
        return String::new();
    }
    let Ok(layout) = onnx_contract::folder::layout::Layout::read(path, None, None) else { return String::new() };
    let view = View::read(path, &layout);
    // The programs generate from token ids: a text decoder's prompt, a text encoder-decoder's source.
    let ids = match (view.text_decoder_only(), view.text_encoder_decoder()) {
        (true, _) => "[1, 3, 14, 15]",
        (_, true) => "[5, 17, 42, 7, 9, 3]",
        _ => return String::new(),
    };
    let mut out = String::new();
    for t in consumer::targets(&view, &Choice::Infer) {
        let (flag, file, run) = match t.consumer {
            // genai builds encoder-decoders for audio only.
            Consumer::Genai if view.text_encoder_decoder() => continue,
            Consumer::Genai => ("genai", "generate.py", "python3 generate.py"),
            // PKG: the @huggingface/transformers package folder (node_modules/@huggingface/transformers).
            Consumer::TransformersJs => ("transformers.js", "generate.mjs", "node generate.mjs PKG"),
            // Not optimum.py: a program named like its package would shadow it.
            Consumer::Optimum => ("optimum", "generate_optimum.py", "python3 generate_optimum.py"),
            _ => continue,
        };
        out.push_str(&format!(
            "the consumer's own call ({}):\n  onnx-contract protocol DIR --emit {flag} > {file}\n  {run} DIR '{ids}' 16\n",
            t.consumer.rules_from(t.major)
        ));
    }
    out
}
