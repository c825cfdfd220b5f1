//! The sizes a folder is checked with, and where each came from: config.json
//! (and generation_config.json) first, the model's own signature for what
//! they do not state. Where config and model disagree, that is a finding
//! naming both values.

use super::config::{ModelConfig, Size};
use crate::contract::init::infer_params;
use crate::finding::{Code, Finding};
use crate::model::signature::{Dim, Signature};
use std::collections::BTreeMap;

/// What a signature fixes, by size name, with the tensor that says it.
pub fn from_model(sig: &Signature) -> Vec<(&'static str, i64, &'static str)> {
    let p = infer_params(sig);
    let mut out = Vec::new();
    if let Some(v) = p.layers {
        out.push(("layers", v, "layer indices of the past/present names"));
    }
    if let Some(v) = p.heads {
        out.push(("kv_heads", v, "head axis of the past"));
    }
    // Keys and values with head sizes of their own (multi-head latent attention).
    let last = |key: bool| {
        let port = sig.inputs.iter().find(|x| {
            crate::model::names::is_past_name(&x.name)
                && !x.name.ends_with("key_value")
                && crate::model::names::cache_slot(&x.name)
                    .is_some_and(|(_, k, _)| k == if key { "key" } else { "value" })
        })?;
        match port.ty.tensor_parts()?.1?.last()? {
            Dim::Fixed(v) => Some(*v),
            _ => None,
        }
    };
    match (last(true), last(false)) {
        (Some(k), Some(v)) if k != v => {
            out.push(("key_dim", k, "last axis of the past keys"));
            out.push(("value_dim", v, "last axis of the past values"));
        }
        _ => {
            if let Some(v) = p.head_dim {
                out.push(("head_dim", v, "last axis of the past"));
            }
        }
    }
    if let Some(v) = p.vocab {
        out.push(("vocab", v, "last axis of logits"));
    }
    let width = |name: &str, output: bool| {
        let port = if output { sig.output(name) } else { sig.input(name) }?;
        match port.ty.tensor_parts()?.1?.last()? {
            Dim::Fixed(v) => Some(*v),
            _ => None,
        }
    };
    if let Some(v) = p.hidden.or_else(|| width("last_hidden_state", true)) {
        out.push(("hidden", v, "width of the encoder states"));
    }
    out
}

/// Config sizes, completed from `model` (the folder's main decoder) for
/// what the config does not state; `heads` defaults to the past's head axis.
pub fn resolve(config: &ModelConfig, model: Option<(&str, &Signature)>) -> BTreeMap<String, Size> {
    let mut sizes = config.sizes.clone();
    if let Some((file, sig)) = model {
        for (name, value, how) in from_model(sig) {
            let source = format!("model: {file}: {how}");
            sizes.entry(name.to_string()).or_insert_with(|| Size { value, source: source.clone() });
            if name == "kv_heads" {
                sizes.entry("heads".to_string()).or_insert(Size { value, source });
            }
        }
    }
    sizes
}

/// Every size config.json states that `file`'s signature contradicts.
pub fn mismatches(config: &ModelConfig, file: &str, sig: &Signature) -> Vec<Finding> {
    let mut out = Vec::new();
    for (name, model_value, how) in from_model(sig) {
        // An MLA config's `head_dim` is the rotary part; its key size is `key_dim`.
        let name = if name == "head_dim" && config.sizes.contains_key("key_dim") { "key_dim" } else { name };
        let Some(stated) = config.sizes.get(name) else { continue };
        if stated.value != model_value {
            out.push(
                Finding::error(
                    Code::ConfigMismatch,
                    format!(
                        "{} = {}, but {file} has {name} {model_value} ({how})",
                        stated.source, stated.value
                    ),
                )
                .cause(Some(
                    "the export and its config file disagree: a model exported from another config, or a config edited after export"
                        .into(),
                ))
                .repair(config_repair(&stated.source, model_value).or_else(|| derived_repair(config, name, model_value))),
            );
        }
    }
    // End tokens the logits cannot produce: generation never stops on them.
    let vocab = from_model(sig).into_iter().find(|(n, _, _)| *n == "vocab").map(|(_, v, _)| v);
    if let Some(vocab) = vocab {
        for t in config.tokens.iter().filter(|t| t.value < 0 || t.value >= vocab) {
            out.push(Finding::error(
                Code::ConfigMismatch,
                format!("{} = {} is not a token of {file}'s vocabulary ({vocab} logits)", t.source, t.value),
            ).cause(Some("a generation loop that waits for this end token never sees it: the config belongs to another tokenizer or vocabulary size".into())));
        }
    }
    // Tokens a caller feeds that the embedding table has no row for (a negative one is "none": pad -1).
    // The token input's table only (positions and segments are gathered from tables too).
    let inferred = crate::plan::infer::infer(sig, &crate::plan::infer::Hints::default());
    let is_token =
        |n: &str| inferred.inputs.iter().any(|p| p.name == n && p.role == crate::plan::roles::InputRole::TokenIds);
    for (input, (table, rows)) in sig.token_rows.iter().filter(|(n, _)| is_token(n)) {
        let mut seen = std::collections::BTreeSet::new();
        for t in config.fed_tokens.iter().filter(|t| t.value >= *rows && seen.insert(&t.source)) {
            // genai never feeds genai_config.json's bos itself (its tokenizer adds the
            // tokenizer's own): only a caller copying it would (onnxruntime-genai 0.18, measured).
            let unfed = t.source.starts_with("genai_config.json") && t.source.contains("bos_token_id");
            out.push(
                Finding::new(
                    Code::ConfigMismatch,
                    if unfed { crate::finding::Severity::Warning } else { crate::finding::Severity::Error },
                    format!(
                        "{} = {} is not a row of {file}'s token embedding (`{table}`, {rows} rows, read by `{input}`)",
                        t.source, t.value
                    ),
                )
                .tensor(input)
                .cause(Some("a caller feeding this token gets an out-of-range Gather (an error, or another token's row): the config belongs to another tokenizer or vocabulary size".into())),
            );
        }
    }
    out
}

/// A derived `head_dim` (hidden / heads) the graph contradicts: the heads
/// key is what is wrong, set to hidden / the graph's head size.
fn derived_repair(config: &ModelConfig, name: &str, model_value: i64) -> Option<crate::finding::Repair> {
    let (hidden, heads) = (config.sizes.get("hidden")?, config.sizes.get("heads")?);
    (name == "head_dim" && model_value > 0 && hidden.value % model_value == 0)
        .then(|| config_repair(&heads.source, hidden.value / model_value))
        .flatten()
}

/// The key to set when a size was read from one key (`config.json:
/// decoder_layers`, `genai_config.json: model.decoder.num_hidden_layers`);
/// none for a derived size (`d_model / decoder_attention_heads`).
fn config_repair(source: &str, value: i64) -> Option<crate::finding::Repair> {
    let (file, key) = source.split_once(": ")?;
    // `config.json: text_config: num_hidden_layers` is the nested key text_config.num_hidden_layers.
    let key = key.replace(": ", ".");
    let key = key.as_str();
    let plain = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    (file.ends_with(".json") && plain(key)).then(|| crate::finding::Repair::SetConfig {
        file: file.to_string(),
        key: key.to_string(),
        value: value.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn load(folder: &str, file: &str) -> (ModelConfig, Signature) {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models").join(folder);
        (ModelConfig::read(&dir).unwrap().unwrap(), crate::model::reader::read_signature(&dir.join(file)).unwrap())
    }

    #[test]
    fn a_config_that_disagrees_with_its_model_is_named_with_both_values() {
        let (config, sig) = load("marian-config-mismatch", "decoder_model_merged.onnx");
        let found = mismatches(&config, "decoder_model_merged.onnx", &sig);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(
            found[0].message,
            "config.json: decoder_layers = 6, but decoder_model_merged.onnx has layers 3 (layer indices of the past/present names)"
        );
        for (folder, file) in
            [("marian-tiny", "decoder_model_merged.onnx"), ("gemma-tiny", "model.onnx"), ("llama-tiny", "model.onnx")]
        {
            let (config, sig) = load(folder, file);
            assert!(mismatches(&config, file, &sig).is_empty(), "{folder}");
        }
    }

    #[test]
    fn sizes_the_config_does_not_state_come_from_the_model_and_say_so() {
        let (_, sig) = load("llama-tiny", "model.onnx");
        let sizes = resolve(&ModelConfig::default(), Some(("model.onnx", &sig)));
        assert_eq!(sizes["kv_heads"].value, 2);
        assert_eq!(sizes["heads"].value, 2);
        assert_eq!(sizes["layers"].source, "model: model.onnx: layer indices of the past/present names");
        let (config, sig) = load("llama-tiny", "model.onnx");
        let sizes = resolve(&config, Some(("model.onnx", &sig)));
        assert_eq!((sizes["heads"].value, sizes["kv_heads"].value), (4, 2));
        assert_eq!(sizes["heads"].source, "config.json: num_attention_heads");
    }
}
