//! What `config.json` says the model multiplies by beyond rope: constants
//! transformers applies in the forward pass, read per family from its
//! `modeling_*.py` (transformers 4.57), so that the graph's own constants
//! can be held against them. Pure: no graph, no runtime.
//!
//! - Granite (`modeling_granite.py`, `GraniteModel.forward`:
//!   `inputs_embeds * embedding_multiplier`; `GraniteForCausalLM.forward`:
//!   `logits / logits_scaling`).
//! - Cohere (`modeling_cohere.py`, `CohereForCausalLM.forward`:
//!   `logits * logit_scale`).
//! - Gemma, Gemma 2, Gemma 3 (`GemmaModel.forward`: `hidden_states *
//!   normalizer`, `normalizer = hidden_size ** 0.5` in the embeddings'
//!   dtype; Gemma 3's `Gemma3TextScaledWordEmbedding`, the same).
//! - MiniCPM (`modeling_minicpm.py`: `embed_tokens(ids) * scale_emb`).
//! - ALiBi: BLOOM and Falcon (`build_alibi_tensor`), MPT (`build_alibi_bias`
//!   with `alibi_bias_max`): one slope per head, from the head count alone.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where in the graph a multiplier applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Site {
    /// Between the token embedding's `Gather` and the first layer.
    Embedding,
    /// Between the language-model head's `MatMul` and `logits`.
    Logits,
    /// On the attention scores, between `Q·Kᵀ` and the `Softmax` (every layer).
    Attention,
    /// On the attention branch, between its output projection and the residual `Add`.
    Residual,
}

/// A multiplier the config says the model applies at `site`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Scale {
    /// Where.
    pub site: Site,
    /// The factor the values are multiplied by (a division is its inverse).
    pub factor: f64,
    /// The field and what the family does with it: `config.json: logits_scaling 8 (Granite divides the logits by it)`.
    pub source: String,
}

/// The ALiBi slopes a config implies: one per head.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Alibi {
    /// The slope of each head, in head order.
    pub slopes: Vec<f64>,
    /// `config.json: n_head 6 (BLOOM's build_alibi_tensor)`.
    pub source: String,
}

/// Every constant the config states beyond rope.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Scales {
    /// Multipliers at the embedding and the logits.
    pub scales: Vec<Scale>,
    /// ALiBi slopes, for a family that biases attention by distance.
    pub alibi: Option<Alibi>,
    /// The head size the config states (`head_dim`, else hidden / heads):
    /// a fused attention op without a `scale` attribute scales by its
    /// inverse square root.
    #[serde(default)]
    pub head_dim: Option<f64>,
    /// Fields the config states that change what the model computes but
    /// that no audit reads here: (field, why), said as information.
    #[serde(default)]
    pub unread: Vec<(String, String)>,
}

impl Scales {
    /// Whether the config states nothing to audit.
    pub fn is_empty(&self) -> bool {
        self.scales.is_empty() && self.alibi.is_none() && self.unread.is_empty()
    }
}

fn num(v: &Value, key: &str) -> Option<f64> {
    v.get(key)?.as_f64().filter(|x| x.is_finite())
}

fn fmt(x: f64) -> String {
    format!("{x}")
}

/// The constants `config` (a config.json object) states.
pub fn from_config(config: &Value) -> Scales {
    // A multimodal config states the text model's fields in `text_config`.
    let v = config.get("text_config").filter(|t| t.get("model_type").is_some()).unwrap_or(config);
    let model_type = v.get("model_type").and_then(Value::as_str).unwrap_or("");
    let mut out = Scales::default();
    let mut scale = |site, factor: f64, source: String| {
        if factor.is_finite() && factor != 0.0 {
            out.scales.push(Scale { site, factor, source });
        }
    };
    match model_type {
        t if t.starts_with("granite") => {
            if let Some(m) = num(v, "embedding_multiplier") {
                scale(
                    Site::Embedding,
                    m,
                    format!(
                        "config.json: embedding_multiplier {} (Granite multiplies the token embeddings by it)",
                        fmt(m)
                    ),
                );
            }
            if let Some(s) = num(v, "logits_scaling") {
                scale(
                    Site::Logits,
                    1.0 / s,
                    format!("config.json: logits_scaling {} (Granite divides the logits by it)", fmt(s)),
                );
            }
            // `GraniteAttention.__init__`: `self.scaling = config.attention_multiplier`.
            if let Some(m) = num(v, "attention_multiplier") {
                scale(
                    Site::Attention,
                    m,
                    format!("config.json: attention_multiplier {} (Granite scales the attention scores by it, not by 1/√head_dim)", fmt(m)),
                );
            }
            // `GraniteDecoderLayer.forward`: `residual + hidden_states * self.residual_multiplier`.
            if let Some(m) = num(v, "residual_multiplier") {
                scale(
                    Site::Residual,
                    m,
                    format!("config.json: residual_multiplier {} (Granite multiplies each branch's output by it before the residual Add)", fmt(m)),
                );
            }
        }
        "cohere" | "cohere2" => {
            if let Some(s) = num(v, "logit_scale") {
                scale(
                    Site::Logits,
                    s,
                    format!("config.json: logit_scale {} (Cohere multiplies the logits by it)", fmt(s)),
                );
            }
        }
        "gemma" | "gemma2" | "gemma3" | "gemma3_text" => {
            if let Some(h) = num(v, "hidden_size") {
                let n = h.sqrt();
                scale(Site::Embedding, n, format!("config.json: hidden_size {} (Gemma multiplies the token embeddings by its square root, {n:.6})", fmt(h)));
            }
            // `Gemma2Attention.__init__` / `Gemma3Attention.__init__`:
            // `self.scaling = config.query_pre_attn_scalar**-0.5` (Gemma 1 has no such field).
            if let Some(q) = num(v, "query_pre_attn_scalar").filter(|q| *q > 0.0) {
                let f = q.powf(-0.5);
                scale(
                    Site::Attention,
                    f,
                    format!("config.json: query_pre_attn_scalar {} (Gemma scales the attention scores by its inverse square root, {f:.6})", fmt(q)),
                );
            }
        }
        "minicpm" => {
            if let Some(s) = num(v, "scale_emb") {
                scale(
                    Site::Embedding,
                    s,
                    format!("config.json: scale_emb {} (MiniCPM multiplies the token embeddings by it)", fmt(s)),
                );
            }
            // Applied by MiniCPM's own (remote) modeling code, which the
            // pinned transformers does not ship: no export of it could be
            // compared with PyTorch, so the constant is not read — said.
            for (key, what) in [
                ("scale_depth", "each layer's residual branch scaled by scale_depth / √num_hidden_layers"),
                ("dim_model_base", "the last hidden state divided by hidden_size / dim_model_base before the head"),
            ] {
                if let Some(x) = num(v, key) {
                    out.unread.push((
                        format!("config.json: {key} {} ({what})", fmt(x)),
                        "MiniCPM's modeling code is remote (trust_remote_code), not in transformers 4.57, so no MiniCPM export was compared with PyTorch to learn where the graph applies it; compare with `--source` instead".into(),
                    ));
                }
            }
        }
        _ => {}
    }
    out.alibi = alibi(v, model_type);
    out.head_dim = num(v, "head_dim")
        .or_else(|| Some(num(v, "hidden_size")? / num(v, "num_attention_heads")?))
        .filter(|h| *h > 0.0);
    out
}

/// The ALiBi slopes of `v`'s family, when it uses ALiBi.
fn alibi(v: &Value, model_type: &str) -> Option<Alibi> {
    let heads = |keys: &[&str]| keys.iter().find_map(|k| v.get(*k)?.as_u64()).filter(|n| (1..=4096).contains(n));
    match model_type {
        "bloom" => {
            let n = heads(&["n_head", "num_attention_heads"])?;
            Some(Alibi {
                slopes: bloom_slopes(n as usize),
                source: format!("config.json: n_head {n} (BLOOM's build_alibi_tensor)"),
            })
        }
        "falcon" if v.get("alibi").and_then(Value::as_bool) == Some(true) => {
            let n = heads(&["num_attention_heads", "n_head"])?;
            Some(Alibi {
                slopes: bloom_slopes(n as usize),
                source: format!("config.json: alibi true, num_attention_heads {n} (Falcon's build_alibi_tensor)"),
            })
        }
        "mpt" => {
            let attn = v.get("attn_config");
            if attn.and_then(|a| a.get("alibi")).and_then(Value::as_bool) != Some(true) {
                return None;
            }
            let n = heads(&["n_heads", "num_attention_heads"])?;
            let max = attn.and_then(|a| num(a, "alibi_bias_max")).unwrap_or(8.0);
            Some(Alibi {
                slopes: mpt_slopes(n as usize, max),
                source: format!("config.json: n_heads {n}, alibi_bias_max {} (MPT's build_alibi_bias)", fmt(max)),
            })
        }
        _ => None,
    }
}

/// BLOOM's `build_alibi_tensor`: 2^(−8/p)^k for k = 1 … p, p the largest
/// power of two ≤ n; the heads beyond p take 2^(−4/p)^k for odd k.
pub fn bloom_slopes(n: usize) -> Vec<f64> {
    let p = 1usize << (usize::BITS - 1 - n.max(1).leading_zeros());
    let base = 2f64.powf(-8.0 / p as f64);
    let mut slopes: Vec<f64> = (1..=p).map(|k| base.powi(k as i32)).collect();
    if p != n {
        let extra = 2f64.powf(-4.0 / p as f64);
        let remaining = (n - p).min(p);
        slopes.extend((0..remaining).map(|i| extra.powi(2 * i as i32 + 1)));
    }
    slopes
}

/// MPT's `gen_slopes`: 1 / 2^(k · max / q) for k = 1 … q, q the power of
/// two ≥ n; for other n the odd-indexed slopes first, then the even, cut to n.
pub fn mpt_slopes(n: usize, max: f64) -> Vec<f64> {
    let q = n.max(1).next_power_of_two();
    let all: Vec<f64> = (1..=q).map(|k| 1.0 / 2f64.powf(k as f64 * max / q as f64)).collect();
    if q == n {
        return all;
    }
    all.iter().skip(1).step_by(2).chain(all.iter().step_by(2)).take(n).copied().collect()
}

/// What `dir/config.json` states beyond rope, when it states anything.
pub fn read(dir: &std::path::Path) -> Option<Scales> {
    let path = dir.join("config.json");
    if !std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.len() <= 16 << 20) {
        return None;
    }
    let v = crate::folder::config::read_json(&path).ok()?;
    Some(from_config(&v)).filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bloom_slopes_follow_build_alibi_tensor() {
        // transformers' build_alibi_tensor for 4 heads: 2^-2, 2^-4, 2^-6, 2^-8.
        assert_eq!(bloom_slopes(4), vec![0.25, 0.0625, 0.015625, 0.00390625]);
        // 6 heads: the 4 above, then 2^-1 and 2^-3 (base 2^-1, odd powers 1 and 3).
        let s = bloom_slopes(6);
        assert_eq!(s.len(), 6);
        assert!((s[4] - 0.5).abs() < 1e-12 && (s[5] - 0.125).abs() < 1e-12, "{s:?}");
    }

    #[test]
    fn mpt_slopes_interleave_for_other_head_counts() {
        assert_eq!(mpt_slopes(4, 8.0), bloom_slopes(4));
        // 6 heads: q = 8, slopes 2^-1 … 2^-8; odd indices (2^-2, 2^-4, 2^-6, 2^-8) then even (2^-1, 2^-3).
        let s = mpt_slopes(6, 8.0);
        assert_eq!(s, vec![0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125]);
    }

    #[test]
    fn granite_and_cohere_state_their_multipliers() {
        let v: Value =
            serde_json::json!({"model_type": "granite", "embedding_multiplier": 12.0, "logits_scaling": 8.0});
        let s = from_config(&v);
        assert_eq!(s.scales.len(), 2);
        assert_eq!((s.scales[1].site, s.scales[1].factor), (Site::Logits, 0.125));
        let v: Value = serde_json::json!({"model_type": "llama", "logits_scaling": 8.0});
        assert!(from_config(&v).is_empty(), "only a family that applies the field");
    }

    #[test]
    fn minicpm_s_depth_scale_is_said_unread_not_guessed() {
        let v: Value =
            serde_json::json!({"model_type": "minicpm", "scale_emb": 12, "scale_depth": 1.4, "dim_model_base": 256});
        let s = from_config(&v);
        assert_eq!(s.scales.len(), 1);
        let unread: Vec<&str> = s.unread.iter().map(|(w, _)| w.as_str()).collect();
        assert!(
            unread[0].starts_with("config.json: scale_depth 1.4")
                && unread[1].starts_with("config.json: dim_model_base 256"),
            "{unread:?}"
        );
    }
}
