//! The family contracts, compiled into the binary so they work after
//! `cargo install` with no checkout: chosen by name (`marian`,
//! `marian-decoder-merged`) or by a config.json `model_type`.

use super::{parse, Contract, ContractError};
use std::path::Path;

/// `(name, YAML text)` of every built-in contract, from `specs/`.
pub const SPECS: &[(&str, &str)] = &[
    ("marian-decoder-merged", include_str!("../../specs/marian-decoder-merged.yaml")),
    ("bart-decoder-merged", include_str!("../../specs/bart-decoder-merged.yaml")),
    ("t5-decoder-merged", include_str!("../../specs/t5-decoder-merged.yaml")),
    ("whisper-decoder-merged", include_str!("../../specs/whisper-decoder-merged.yaml")),
    ("seq2seq-decoder-merged", include_str!("../../specs/seq2seq-decoder-merged.yaml")),
    ("gpt2-decoder", include_str!("../../specs/gpt2-decoder.yaml")),
    ("llama-decoder", include_str!("../../specs/llama-decoder.yaml")),
    ("qwen2-decoder", include_str!("../../specs/qwen2-decoder.yaml")),
    ("gemma-decoder", include_str!("../../specs/gemma-decoder.yaml")),
    ("decoder-only", include_str!("../../specs/decoder-only.yaml")),
    ("embed-tokens", include_str!("../../specs/embed-tokens.yaml")),
    ("vision-encoder", include_str!("../../specs/vision-encoder.yaml")),
];

/// config.json `model_type` → built-in contract. Families whose optimum
/// exports share a signature share a contract.
const BY_MODEL_TYPE: &[(&str, &str)] = &[
    ("marian", "marian-decoder-merged"),
    ("bart", "bart-decoder-merged"),
    ("mbart", "bart-decoder-merged"),
    ("pegasus", "bart-decoder-merged"),
    ("blenderbot", "bart-decoder-merged"),
    ("m2m_100", "bart-decoder-merged"),
    ("t5", "t5-decoder-merged"),
    ("mt5", "t5-decoder-merged"),
    ("longt5", "t5-decoder-merged"),
    ("whisper", "whisper-decoder-merged"),
    ("gpt2", "gpt2-decoder"),
    ("llama", "llama-decoder"),
    ("mistral", "llama-decoder"),
    ("phi3", "llama-decoder"),
    ("qwen2", "qwen2-decoder"),
    ("qwen3", "qwen2-decoder"),
    ("gemma", "gemma-decoder"),
    ("gemma2", "gemma-decoder"),
    ("gemma3_text", "gemma-decoder"),
];

/// The generic contracts for families without their own.
pub const GENERIC_SEQ2SEQ: &str = "seq2seq-decoder-merged";
/// The generic decoder-only contract.
pub const GENERIC_DECODER_ONLY: &str = "decoder-only";

/// The built-in contract's text for `name`: its full name, or the family
/// alone (`marian`, `gpt2`).
pub fn text(name: &str) -> Option<(&'static str, &'static str)> {
    SPECS.iter().copied().find(|(n, _)| *n == name).or_else(|| {
        SPECS
            .iter()
            .copied()
            .find(|(n, _)| n.strip_suffix("-decoder-merged").or_else(|| n.strip_suffix("-decoder")) == Some(name))
    })
}

/// The built-in contract name for a config.json `model_type`, if we know the family.
pub fn for_model_type(model_type: &str) -> Option<&'static str> {
    BY_MODEL_TYPE.iter().find(|(t, _)| *t == model_type).map(|(_, n)| *n)
}

/// The `model_type`s each built-in contract is chosen for.
pub fn model_types(name: &str) -> Vec<&'static str> {
    BY_MODEL_TYPE.iter().filter(|(_, n)| *n == name).map(|(t, _)| *t).collect()
}

/// One built-in contract as `specs` lists it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Listed {
    /// Its name.
    pub name: &'static str,
    /// The config.json `model_type`s that choose it.
    pub model_types: Vec<&'static str>,
    /// Its parameters with their defaults (real model sizes).
    pub params: Vec<(String, i64)>,
    /// Its inputs, as written (templates unexpanded).
    pub inputs: Vec<String>,
}

/// Every built-in contract.
pub fn list() -> Vec<Listed> {
    SPECS
        .iter()
        .filter_map(|(name, text)| {
            let c = parse(Path::new(name), text, &[]).ok()?;
            let mut inputs: Vec<String> = Vec::new();
            for r in &c.inputs {
                if !inputs.contains(&r.template) {
                    inputs.push(r.template.clone());
                }
            }
            Some(Listed { name, model_types: model_types(name), params: c.params, inputs })
        })
        .collect()
}

/// Loads the built-in contract `name` with parameter overrides.
pub fn load(name: &str, overrides: &[(String, i64)]) -> Option<Result<Contract, ContractError>> {
    let (full, text) = text(name)?;
    Some(parse(Path::new(&format!("builtin:{full}")), text, overrides))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_parses_and_every_model_type_names_one() {
        for (name, body) in SPECS {
            let c = parse(Path::new(name), body, &[]).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(c.name, *name);
        }
        for (t, n) in BY_MODEL_TYPE {
            assert!(text(n).is_some(), "{t} → {n}");
        }
        assert_eq!(text("marian").unwrap().0, "marian-decoder-merged");
        assert_eq!(text("gpt2").unwrap().0, "gpt2-decoder");
        assert_eq!(for_model_type("mistral"), Some("llama-decoder"));
        assert!(text("nope").is_none());
        assert!(load("marian", &[("hidden".into(), 32)])
            .unwrap()
            .unwrap()
            .path
            .display()
            .to_string()
            .starts_with("builtin:"));
    }
}
