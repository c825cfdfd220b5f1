//! onnxruntime-genai's `genai_config.json`: a contract the exporter wrote
//! beside its model. Its sizes (the head size is often nowhere else: the
//! graph calls it `kv_cache_dim`) and its input/output name templates
//! (`past_key_values.%d.key`) become our sizes and our contract for that
//! file, so a model that contradicts its own genai_config.json fails with a
//! finding naming the JSON key and both values.

use super::config::{ConfigError, ModelConfig, Size};
use crate::contract::{parse, Contract, ContractError};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// What genai_config.json states about the decoder.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GenaiConfig {
    /// `model.decoder.filename`: the file it describes.
    pub filename: Option<String>,
    /// `model.type`.
    pub model_type: Option<String>,
    /// Sizes with their JSON keys (`genai_config.json: model.decoder.head_size`).
    pub config: ModelConfig,
    /// `model.decoder.inputs`: our role → the model's name (templates keep `%d`).
    pub inputs: BTreeMap<String, String>,
    /// `model.decoder.outputs`.
    pub outputs: BTreeMap<String, String>,
    /// `search.past_present_share_buffer`: pasts and presents are one
    /// buffer of `max_length`, written in place.
    pub share_buffer: Option<bool>,
    /// `model.encoder.outputs`: our role → the encoder's output name
    /// (`encoder_hidden_states` → `hidden_states`).
    pub encoder_outputs: BTreeMap<String, String>,
    /// `search.max_length`: the length of those shared buffers.
    pub max_length: Option<i64>,
}

const SIZE_KEYS: &[(&str, &str)] = &[
    ("layers", "model.decoder.num_hidden_layers"),
    ("heads", "model.decoder.num_attention_heads"),
    ("kv_heads", "model.decoder.num_key_value_heads"),
    ("head_dim", "model.decoder.head_size"),
    ("hidden", "model.decoder.hidden_size"),
    ("vocab", "model.vocab_size"),
    ("context_length", "model.context_length"),
    ("eos", "model.eos_token_id"),
];

fn at<'a>(v: &'a Value, dotted: &str) -> Option<&'a Value> {
    dotted.split('.').try_fold(v, |v, k| v.get(k))
}

fn strings(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .map(|m| m.iter().filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string()))).collect())
        .unwrap_or_default()
}

impl GenaiConfig {
    /// Reads `dir/genai_config.json`; `Ok(None)` when there is none.
    pub fn read(dir: &Path) -> Result<Option<GenaiConfig>, ConfigError> {
        let path = dir.join("genai_config.json");
        if !path.is_file() {
            return Ok(None);
        }
        let err = |message: String| ConfigError { path: path.clone(), message };
        let text = std::fs::read(&path).map_err(|e| err(format!("cannot read: {e}")))?;
        let v: Value = serde_json::from_slice(&text).map_err(|e| err(format!("not valid JSON: {e}")))?;
        GenaiConfig::from_value(&v).map(Some).map_err(err)
    }

    /// What a parsed genai_config.json states, or why it is not one.
    pub fn from_value(v: &Value) -> Result<GenaiConfig, String> {
        if at(v, "model.decoder").and_then(Value::as_object).is_none() {
            return Err("no `model.decoder` object: not an onnxruntime-genai config".into());
        }
        let mut sizes = BTreeMap::new();
        for (name, key) in SIZE_KEYS {
            let value = match at(v, key) {
                Some(Value::Array(a)) => a.first().and_then(Value::as_i64),
                Some(x) => x.as_i64(),
                None => None,
            };
            if let Some(value) = value {
                sizes.insert(name.to_string(), Size { value, source: format!("genai_config.json: {key}") });
            }
        }
        let model_type = at(v, "model.type").and_then(Value::as_str).map(str::to_string);
        Ok(GenaiConfig {
            filename: at(v, "model.decoder.filename").and_then(Value::as_str).map(str::to_string),
            model_type: model_type.clone(),
            config: ModelConfig {
                model_type,
                sizes,
                sliding_window: None,
                attention_layers: at(v, "model.decoder")
                    .and_then(|d| super::config::attention_layers(d, "genai_config.json: model.decoder")),
                tokens: Vec::new(),
                fed_tokens: at(v, "model")
                    .map(|m| super::config::fed_ids(m, "genai_config.json: model"))
                    .unwrap_or_default(),
            },
            inputs: strings(at(v, "model.decoder.inputs")),
            outputs: strings(at(v, "model.decoder.outputs")),
            encoder_outputs: strings(at(v, "model.encoder.outputs")),
            share_buffer: at(v, "search.past_present_share_buffer").and_then(Value::as_bool),
            max_length: at(v, "search.max_length").and_then(Value::as_i64).filter(|&n| n > 0 && n <= 1 << 20),
        })
    }

    /// The contract genai_config.json implies for its decoder, sized from `sizes`.
    pub fn contract(&self, sizes: &BTreeMap<String, Size>) -> Result<Contract, ContractError> {
        let size = |k: &str| sizes.get(k).map(|s| s.value);
        let kv = if size("kv_heads").is_some() { "$kv_heads" } else { "_" };
        let hd = if size("head_dim").is_some() { "$head_dim" } else { "_" };
        let vocab = if size("vocab").is_some() { "$vocab" } else { "_" };
        // A hybrid keeps key/value caches only on its attention layers, and a
        // convolution state (`past_conv_names`) on the others.
        let hybrid = self.config.attention_layers.as_ref();
        let list = |l: Vec<i64>| format!("{{{}}}", l.iter().map(i64::to_string).collect::<Vec<_>>().join(","));
        let kv_layers = hybrid.map(|h| list(h.layers.clone())).unwrap_or_else(|| "{layer}".into());
        let other_layers = hybrid.and_then(|h| {
            let n = size("layers")?;
            let rest: Vec<i64> = (0..n).filter(|i| !h.layers.contains(i)).collect();
            (!rest.is_empty()).then(|| list(rest))
        });
        let layered = |t: &str| t.replace("%d", &kv_layers);
        let name = |k: &str, default: &str| self.inputs.get(k).cloned().unwrap_or_else(|| default.to_string());
        let mut yaml = String::from("name: genai-decoder\nparams:\n");
        for p in ["layers", "kv_heads", "head_dim", "vocab"] {
            yaml.push_str(&format!("  {p}: {}\n", size(p).unwrap_or(1)));
        }
        yaml.push_str("extra_inputs: error\nextra_outputs: warn\ninputs:\n");
        yaml.push_str(&format!("  {}: {{dtype: int64|int32, shape: [batch, seq]}}\n", name("input_ids", "input_ids")));
        for (key, optional) in [("attention_mask", false), ("position_ids", false)] {
            if let Some(n) = self.inputs.get(key) {
                let opt = if optional { ", optional: true" } else { "" };
                yaml.push_str(&format!("  {n}: {{dtype: int64|int32, shape: [batch, _]{opt}}}\n"));
            }
        }
        let past = [("past_key_names", "past_key_values.%d.key"), ("past_value_names", "past_key_values.%d.value")];
        let mut self_past = Vec::new();
        for (key, default) in past {
            let t = layered(&name(key, default));
            yaml.push_str(&format!(
                "  \"{t}\": {{dtype: float32|float16|bfloat16, shape: [batch, {kv}, any, {hd}]}}\n"
            ));
            self_past.push(format!("\"{t}\""));
        }
        let states = |key: &str| {
            Some(self.inputs.get(key).or_else(|| self.outputs.get(key))?.replace("%d", other_layers.as_deref()?))
        };
        if let Some(t) = states("past_conv_names") {
            yaml.push_str(&format!("  \"{t}\": {{dtype: float32|float16|bfloat16, shape: [batch, any, any]}}\n"));
        }
        yaml.push_str("outputs:\n");
        let out = |k: &str, default: &str| self.outputs.get(k).cloned().unwrap_or_else(|| default.to_string());
        yaml.push_str(&format!(
            "  {}: {{dtype: float32|float16|bfloat16, shape: [batch, _, {vocab}]}}\n",
            out("logits", "logits")
        ));
        for (key, default) in [("present_key_names", "present.%d.key"), ("present_value_names", "present.%d.value")] {
            yaml.push_str(&format!(
                "  \"{}\": {{dtype: float32|float16|bfloat16, shape: [batch, {kv}, any, {hd}]}}\n",
                layered(&out(key, default))
            ));
        }
        if let Some(t) = states("present_conv_names") {
            yaml.push_str(&format!("  \"{t}\": {{dtype: float32|float16|bfloat16, shape: [batch, any, any]}}\n"));
        }
        // How onnxruntime-genai drives it: mask over past + new; positions only when declared.
        yaml.push_str(&format!("cache:\n  self_past: [{}]\n", self_past.join(", ")));
        let (from, to) = (name("past_key_names", "past_key_values.%d.key"), out("present_key_names", "present.%d.key"));
        let prefix = |t: &str| t.split("%d").next().unwrap_or(t).trim_end_matches('.').to_string();
        yaml.push_str(&format!("  present_prefix: [\"{}\", \"{}\"]\n", prefix(&from), prefix(&to)));
        if let Some(n) = self.inputs.get("attention_mask") {
            yaml.push_str(&format!("  attention_mask: {n}\n"));
        }
        if let Some(n) = self.inputs.get("position_ids") {
            yaml.push_str(&format!("  position_ids: {n}\n"));
        }
        yaml.push_str("  step0_past_lengths: [0]\n");
        parse(Path::new("genai_config.json"), &yaml, &[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn dir(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models").join(name)
    }

    #[test]
    fn genai_config_gives_sizes_names_and_a_contract_the_good_model_passes() {
        let g = GenaiConfig::read(&dir("llama-genai")).unwrap().unwrap();
        assert_eq!(g.filename.as_deref(), Some("model.onnx"));
        assert_eq!(g.config.get("head_dim"), Some(16));
        assert_eq!(g.config.sizes["kv_heads"].source, "genai_config.json: model.decoder.num_key_value_heads");
        let c = g.contract(&g.config.sizes).unwrap();
        let sig = crate::model::reader::read_signature(&dir("llama-genai").join("model.onnx")).unwrap();
        let errors: Vec<_> = crate::contract::check(&sig, &c)
            .into_iter()
            .filter(|f| f.severity == crate::finding::Severity::Error)
            .collect();
        assert!(errors.is_empty(), "{errors:#?}");
        // The disagreeing copy: 4 KV heads in the config, 2 in the graph.
        let bad = GenaiConfig::read(&dir("llama-genai-config-mismatch")).unwrap().unwrap();
        let found = super::super::sizes::mismatches(&bad.config, "model.onnx", &sig);
        assert!(
            found.iter().any(|f| f.message.starts_with(
                "genai_config.json: model.decoder.num_key_value_heads = 4, but model.onnx has kv_heads 2"
            )),
            "{found:#?}"
        );
        assert_eq!(GenaiConfig::read(&dir("gpt2-tiny")).unwrap(), None);
    }
}
