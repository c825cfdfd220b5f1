//! Sizes and family from the folder's `config.json` (+ `generation_config.json`
//! for the decoder start and end tokens), each with the key it came from.
//! Read as plain JSON: a config from any transformers version (or a hand-made
//! one) yields what it states and nothing is guessed.

pub use crate::error::ConfigError;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// One size and where it came from (`config.json: d_model`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Size {
    /// The value.
    pub value: i64,
    /// `config.json: d_model`, `model: logits last axis`, …
    pub source: String,
}

/// What the config files of a folder state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ModelConfig {
    /// `model_type` (`marian`, `t5`, `llama`, …).
    pub model_type: Option<String>,
    /// Sizes by our name: `layers` (decoder layers), `heads`, `kv_heads`,
    /// `head_dim`, `hidden`, `vocab`, `num_mel_bins`, `max_source_positions`,
    /// `decoder_start`, `eos`.
    pub sizes: BTreeMap<String, Size>,
    /// The sliding attention window the config asks for, when it asks for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliding_window: Option<SlidingWindow>,
    /// The layers that keep a key/value cache, when the config says some
    /// do not (LFM2's `conv` layers, Qwen3-Next's `linear_attention`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_layers: Option<AttentionLayers>,
    /// Every end token id stated (each entry of an eos list), with its key:
    /// each must be a token the logits can choose. (Tokens only fed — bos,
    /// pad, decoder start — may lie past the logits: MusicGen's pad is the
    /// codebook size, an extra embedding row.)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tokens: Vec<Size>,
    /// Every token id a caller feeds (bos, pad, decoder start), with its
    /// key: each must be a row of the embedding table it is fed to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fed_tokens: Vec<Size>,
}

/// The end token ids `v` states, each with `label: key` (`key[i]` for a list).
fn token_ids(v: &Value, label: &str) -> Vec<Size> {
    ids_of(v, label, "eos_token_id")
}

/// The token ids a caller feeds that `v` states.
pub(crate) fn fed_ids(v: &Value, label: &str) -> Vec<Size> {
    ["bos_token_id", "pad_token_id", "decoder_start_token_id"].iter().flat_map(|key| ids_of(v, label, key)).collect()
}

/// The ids `v[key]` states (one, or each entry of a list).
fn ids_of(v: &Value, label: &str, key: &str) -> Vec<Size> {
    match v.get(key) {
        Some(Value::Array(list)) => list
            .iter()
            .enumerate()
            .filter_map(|(i, x)| Some(Size { value: x.as_i64()?, source: format!("{label}: {key}[{i}]") }))
            .collect(),
        Some(x) => x.as_i64().map(|value| Size { value, source: format!("{label}: {key}") }).into_iter().collect(),
        None => Vec::new(),
    }
}

/// The decoder layers with a key/value cache, in a hybrid model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AttentionLayers {
    /// Their indices.
    pub layers: Vec<i64>,
    /// `config.json: layer_types`.
    pub source: String,
}

/// The layers `layer_types` gives a key/value cache (full, sliding or
/// chunked attention; not linear attention, convolution or state-space
/// layers), when it gives some layers none.
pub(crate) fn attention_layers(scope: &Value, label: &str) -> Option<AttentionLayers> {
    let types = scope.get("layer_types")?.as_array()?;
    let kv = |t: &Value| t.as_str().is_some_and(|t| t.contains("attention") && !t.contains("linear"));
    let layers: Vec<i64> = types.iter().enumerate().filter(|(_, t)| kv(t)).map(|(i, _)| i as i64).collect();
    (layers.len() < types.len()).then(|| AttentionLayers { layers, source: format!("{label}: layer_types") })
}

/// `sliding_window` of config.json and the decoder layers that use it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SlidingWindow {
    /// How many positions a token attends to (itself included).
    pub size: i64,
    /// `config.json: sliding_window`.
    pub source: String,
    /// The windowed layers (from `layer_types` or `max_window_layers`); every layer when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<Vec<usize>>,
}

/// Our size names and the config keys that state them, first match wins.
/// Decoder-side keys come first: a seq2seq folder's caches are the decoder's.
const KEYS: &[(&str, &[&str])] = &[
    ("hidden", &["d_model", "hidden_size", "n_embd"]),
    ("layers", &["decoder_layers", "num_decoder_layers", "n_layer", "num_hidden_layers", "num_layers"]),
    ("heads", &["decoder_attention_heads", "num_heads", "n_head", "num_attention_heads"]),
    ("kv_heads", &["num_key_value_heads", "multi_query_group_num"]),
    ("head_dim", &["head_dim", "d_kv"]),
    // Multi-head latent attention (DeepSeek-V2/V3): keys and values have their own head sizes.
    ("key_dim", &["qk_head_dim"]),
    ("value_dim", &["v_head_dim"]),
    ("vocab", &["vocab_size"]),
    ("num_mel_bins", &["num_mel_bins"]),
    ("max_source_positions", &["max_source_positions"]),
    ("decoder_start", &["decoder_start_token_id"]),
    ("eos", &["eos_token_id"]),
    // Multi-codebook audio decoders (MusicGen): token rows per batch item.
    ("codebooks", &["num_codebooks"]),
];

/// An integer, or the first of a list of integers (`eos_token_id: [1, 2]`).
fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::Array(a) => a.first().and_then(Value::as_i64),
        _ => None,
    }
}

pub(crate) fn read_json(path: &Path) -> Result<Value, ConfigError> {
    let err = |message: String| ConfigError { path: path.to_path_buf(), message };
    let text = std::fs::read(path).map_err(|e| err(format!("cannot read: {e}")))?;
    let v: Value = serde_json::from_slice(&text).map_err(|e| err(format!("not valid JSON: {e}")))?;
    if !v.is_object() {
        return Err(err("not a JSON object".into()));
    }
    Ok(v)
}

/// The window a config asks for. Which layers are windowed is read, never
/// guessed: `layer_types` when stated; Qwen's `max_window_layers`; every layer
/// for the families whose every layer uses the window (Mistral, Phi-3, …);
/// otherwise (Gemma 2 alternates, and older configs do not say how) no window.
fn sliding_window(scope: &Value, label: &str, model_type: Option<&str>) -> Option<SlidingWindow> {
    let size = scope.get("sliding_window").and_then(Value::as_i64).filter(|&w| w > 0)?;
    if scope.get("use_sliding_window").and_then(Value::as_bool) == Some(false) {
        return None;
    }
    let source = format!("{label}: sliding_window");
    if let Some(types) = scope.get("layer_types").and_then(Value::as_array) {
        let layers: Vec<usize> =
            types.iter().enumerate().filter(|(_, t)| t.as_str() == Some("sliding_attention")).map(|(i, _)| i).collect();
        return (!layers.is_empty()).then_some(SlidingWindow { size, source, layers: Some(layers) });
    }
    let n = scope.get("num_hidden_layers").and_then(Value::as_u64).unwrap_or(0) as usize;
    match model_type? {
        "qwen2" | "qwen2_moe" | "qwen3" | "qwen3_moe" => {
            // transformers: layer i slides when i >= max_window_layers.
            let first = scope.get("max_window_layers").and_then(Value::as_u64)? as usize;
            let layers: Vec<usize> = (first..n).collect();
            (!layers.is_empty()).then_some(SlidingWindow { size, source, layers: Some(layers) })
        }
        "mistral" | "mixtral" | "phi3" | "starcoder2" => Some(SlidingWindow { size, source, layers: None }),
        _ => None,
    }
}

impl ModelConfig {
    /// What `config.json` states (`text_config` of multimodal configs
    /// fills what the top level lacks).
    pub fn from_value(v: &Value, file: &str) -> ModelConfig {
        let mut c = ModelConfig {
            model_type: v.get("model_type").and_then(Value::as_str).map(str::to_string),
            ..Default::default()
        };
        let scopes: Vec<(&Value, String)> = std::iter::once((v, file.to_string()))
            .chain(v.get("text_config").map(|t| (t, format!("{file}: text_config"))))
            .collect();
        for (name, keys) in KEYS {
            'found: for (scope, label) in &scopes {
                for key in *keys {
                    if let Some(value) = scope.get(*key).and_then(int) {
                        c.sizes.insert(name.to_string(), Size { value, source: format!("{label}: {key}") });
                        break 'found;
                    }
                }
            }
        }
        // Derived, and said so: head_dim = hidden / heads, kv_heads = heads.
        if !c.sizes.contains_key("head_dim") {
            if let (Some(h), Some(n)) = (c.get("hidden"), c.get("heads")) {
                if n > 0 && h % n == 0 {
                    let source =
                        format!("{file}: {} / {}", c.sizes["hidden"].source_key(), c.sizes["heads"].source_key());
                    c.sizes.insert("head_dim".into(), Size { value: h / n, source });
                }
            }
        }
        // MLA configs without `qk_head_dim`: the key is its unrotated part plus its rotary part.
        if !c.sizes.contains_key("key_dim") {
            let part = |k: &str| scopes.iter().find_map(|(s, label)| Some((s.get(k).and_then(int)?, label.clone())));
            if let (Some((a, label)), Some((b, _))) = (part("qk_nope_head_dim"), part("qk_rope_head_dim")) {
                let source = format!("{label}: qk_nope_head_dim + qk_rope_head_dim");
                c.sizes.insert("key_dim".into(), Size { value: a + b, source });
            }
        }
        if !c.sizes.contains_key("kv_heads") {
            if let Some(s) = c.sizes.get("heads").cloned() {
                c.sizes.insert("kv_heads".into(), s);
            }
        }
        c.sliding_window =
            scopes.iter().find_map(|(scope, label)| sliding_window(scope, label, c.model_type.as_deref()));
        c.attention_layers = scopes.iter().find_map(|(scope, label)| attention_layers(scope, label));
        c.tokens = scopes.iter().flat_map(|(scope, label)| token_ids(scope, label)).collect();
        c.fed_tokens = scopes.iter().flat_map(|(scope, label)| fed_ids(scope, label)).collect();
        // MusicGen states its codebooks in the decoder's own sub-config.
        if let (false, Some(k)) = (c.sizes.contains_key("codebooks"), v.pointer("/decoder/num_codebooks").and_then(int))
        {
            c.sizes.insert("codebooks".into(), Size { value: k, source: format!("{file}: decoder: num_codebooks") });
        }
        c
    }

    /// Reads `dir/config.json` (and `dir/generation_config.json`, whose
    /// tokens win); `Ok(None)` when the folder has no config.json.
    pub fn read(dir: &Path) -> Result<Option<ModelConfig>, ConfigError> {
        let path = dir.join("config.json");
        if !path.is_file() {
            return Ok(None);
        }
        let mut c = ModelConfig::from_value(&read_json(&path)?, "config.json");
        let gen_path = dir.join("generation_config.json");
        if gen_path.is_file() {
            let g = read_json(&gen_path)?;
            c.tokens.extend(token_ids(&g, "generation_config.json"));
            c.fed_tokens.extend(fed_ids(&g, "generation_config.json"));
            for (name, key) in [("decoder_start", "decoder_start_token_id"), ("eos", "eos_token_id")] {
                if let Some(value) = g.get(key).and_then(int) {
                    c.sizes.insert(name.into(), Size { value, source: format!("generation_config.json: {key}") });
                }
            }
        }
        Ok(Some(c))
    }

    /// The value of size `name`.
    pub fn get(&self, name: &str) -> Option<i64> {
        self.sizes.get(name).map(|s| s.value)
    }
}

impl Size {
    /// `d_model` from `config.json: d_model`.
    fn source_key(&self) -> &str {
        self.source.rsplit(": ").next().unwrap_or(&self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn folder(name: &str) -> ModelConfig {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models").join(name);
        ModelConfig::read(&dir).unwrap().unwrap_or_else(|| panic!("{name} has a config.json"))
    }

    fn sizes(c: &ModelConfig) -> Vec<(&str, i64)> {
        ["layers", "heads", "kv_heads", "head_dim", "hidden", "vocab"]
            .iter()
            .map(|k| (*k, c.get(k).unwrap_or(-1)))
            .collect()
    }

    #[test]
    fn sizes_of_every_family_with_their_keys() {
        let m = folder("marian-tiny");
        assert_eq!(m.model_type.as_deref(), Some("marian"));
        assert_eq!(
            sizes(&m),
            [("layers", 6), ("heads", 8), ("kv_heads", 8), ("head_dim", 4), ("hidden", 32), ("vocab", 1000)]
        );
        assert_eq!(m.sizes["hidden"].source, "config.json: d_model");
        assert_eq!(m.sizes["head_dim"].source, "config.json: d_model / decoder_attention_heads");
        assert_eq!(m.get("decoder_start"), Some(999));
        let t5 = folder("t5-tiny");
        assert_eq!(t5.sizes["head_dim"].source, "config.json: d_kv");
        assert_eq!(t5.sizes["layers"].source, "config.json: num_decoder_layers");
        assert_eq!(
            sizes(&folder("bart-tjs")),
            [("layers", 3), ("heads", 6), ("kv_heads", 6), ("head_dim", 8), ("hidden", 48), ("vocab", 1200)]
        );
        assert_eq!(folder("whisper-tiny").get("num_mel_bins"), Some(80));
        assert_eq!(
            folder("whisper-tiny").sizes["decoder_start"].source,
            "generation_config.json: decoder_start_token_id"
        );
        assert_eq!(
            sizes(&folder("gpt2-tiny")),
            [("layers", 2), ("heads", 4), ("kv_heads", 4), ("head_dim", 8), ("hidden", 32), ("vocab", 1000)]
        );
        assert_eq!(sizes(&folder("llama-tiny"))[2], ("kv_heads", 2));
        // Gemma states head_dim explicitly, and it is not hidden / heads.
        let g = folder("gemma-tiny");
        assert_eq!(
            (g.get("head_dim"), g.get("hidden"), g.get("heads"), g.get("kv_heads")),
            (Some(16), Some(32), Some(4), Some(1))
        );
        // Mistral's `"head_dim": null` is not a size: derived instead.
        assert_eq!(folder("mistral-tiny").sizes["head_dim"].source, "config.json: hidden_size / num_attention_heads");
    }

    #[test]
    fn sliding_windows_are_read_with_their_layers_never_guessed() {
        let w = folder("mistral-sliding-window").sliding_window.unwrap();
        assert_eq!((w.size, w.source.as_str(), w.layers), (4, "config.json: sliding_window", None));
        assert_eq!(folder("mistral-tiny").sliding_window.unwrap().size, 16);
        // Qwen2 states the window off; llama states none.
        assert_eq!(folder("qwen2-tiny").sliding_window, None);
        assert_eq!(folder("llama-tiny").sliding_window, None);
        let v = |j: serde_json::Value| ModelConfig::from_value(&j, "config.json").sliding_window;
        let typed = v(serde_json::json!({"model_type": "gemma3", "sliding_window": 512,
            "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]}));
        assert_eq!(typed.unwrap().layers, Some(vec![0, 2]));
        // Gemma 2 without layer_types: which layers slide is not stated, so nothing is claimed.
        assert_eq!(v(serde_json::json!({"model_type": "gemma2", "sliding_window": 4096})), None);
        let q = v(serde_json::json!({"model_type": "qwen2", "sliding_window": 8, "use_sliding_window": true,
            "max_window_layers": 1, "num_hidden_layers": 3}));
        assert_eq!(q.unwrap().layers, Some(vec![1, 2]));
    }

    #[test]
    fn broken_configs_name_the_file_and_the_place() {
        let tmp = std::env::temp_dir().join(format!("onnx-contract-config-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        std::fs::write(tmp.join("config.json"), "{\n  \"d_model\": 32,\n  oops\n}").unwrap();
        let e = ModelConfig::read(&tmp).unwrap_err().to_string();
        assert!(e.contains("config.json: not valid JSON") && e.contains("line 3"), "{e}");
        std::fs::write(tmp.join("config.json"), "[1, 2]").unwrap();
        assert!(ModelConfig::read(&tmp).unwrap_err().to_string().contains("not a JSON object"));
        std::fs::remove_file(tmp.join("config.json")).unwrap();
        assert_eq!(ModelConfig::read(&tmp).unwrap(), None);
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
