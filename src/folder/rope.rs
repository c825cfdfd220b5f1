//! What `config.json` says the rotary position embedding computes: the base
//! (`rope_theta`), the rotated width (`head_dim` × `partial_rotary_factor`)
//! and the scaling of `rope_scaling` / `rope_parameters`, turned into the
//! inverse frequencies transformers 4.57 applies (`ROPE_INIT_FUNCTIONS` in
//! `modeling_rope_utils.py`, followed formula by formula), so that the graph's
//! own frequencies can be held against them. Pure: no graph, no runtime.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A rotary embedding as a config states it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rope {
    /// The base of the frequencies.
    pub theta: f64,
    /// Rotated dimensions per head (head_dim × partial_rotary_factor).
    pub dim: usize,
    /// The scaling.
    pub scaling: Scaling,
    /// `max_position_embeddings`.
    pub max_positions: Option<i64>,
    /// `rope_local_base_freq`: the unscaled base of the sliding-window
    /// layers (Gemma 3), when `layer_types` has such layers.
    pub local_theta: Option<f64>,
    /// Where it was read: `config.json: rope_theta 500000, rope_scaling llama3 (factor 8)`.
    pub source: String,
}

/// `rope_scaling`'s type and its parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Scaling {
    /// Unscaled.
    Default,
    /// Frequencies divided by `factor`.
    Linear {
        /// `factor`.
        factor: f64,
    },
    /// NTK scaling past `max_position_embeddings` only: unscaled below it.
    Dynamic {
        /// `factor`.
        factor: f64,
    },
    /// YaRN: a ramp between interpolated and extrapolated frequencies.
    Yarn {
        /// `factor`.
        factor: f64,
        /// `original_max_position_embeddings` (else `max_position_embeddings`).
        omp: f64,
        /// `beta_fast` (32 by default).
        beta_fast: f64,
        /// `beta_slow` (1 by default).
        beta_slow: f64,
        /// `truncate` (true by default).
        truncate: bool,
        /// The cos/sin scale: `attention_factor`, or from `mscale` and the factor.
        attention: f64,
    },
    /// LongRoPE: short factors up to `omp` positions, long factors beyond.
    LongRope {
        /// `short_factor`.
        short: Vec<f64>,
        /// `long_factor`.
        long: Vec<f64>,
        /// `original_max_position_embeddings`: the switch.
        omp: i64,
        /// The cos/sin scale.
        attention: f64,
    },
    /// Llama 3.1: low frequencies divided by `factor`, a smooth band between.
    Llama3 {
        /// `factor`.
        factor: f64,
        /// `low_freq_factor`.
        low: f64,
        /// `high_freq_factor`.
        high: f64,
        /// `original_max_position_embeddings`.
        omp: f64,
    },
}

fn num(v: &Value, field: &str) -> Result<Option<f64>, String> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x.as_f64().map(Some).ok_or_else(|| format!("`{field}` is {x}, not a number")),
    }
}

fn need(v: &Value, field: &str, kind: &str) -> Result<f64, String> {
    num(v, field)?.ok_or_else(|| format!("`{field}` is missing, and a `{kind}` rope_scaling needs it"))
}

fn factors(v: &Value, field: &str, half: usize) -> Result<Vec<f64>, String> {
    let list = v.get(field).and_then(Value::as_array).ok_or_else(|| format!("`{field}` is not a list of numbers"))?;
    let out: Option<Vec<f64>> = list.iter().map(Value::as_f64).collect();
    let out = out.ok_or_else(|| format!("`{field}` holds something that is not a number"))?;
    if out.len() != half {
        return Err(format!("`{field}` has {} factors, but the rotated width {} needs {half}", out.len(), 2 * half));
    }
    Ok(out)
}

/// The rotary embedding `dir/config.json` states (the top level, or the
/// text model's entry of a multimodal config): `None` without a config or a
/// rotary, else the embedding or what is malformed in it. An unreadable
/// config.json is the config reader's finding, not this one's.
pub fn read(dir: &std::path::Path) -> Option<Result<Rope, String>> {
    let text = std::fs::read(dir.join("config.json")).ok()?;
    let v: Value = serde_json::from_slice(&text).ok()?;
    let states = |s: &Value| {
        ["rope_theta", "rope_scaling", "rope_parameters"].iter().any(|k| s.get(k).is_some_and(|x| !x.is_null()))
    };
    let scope = std::iter::once(&v)
        .chain(["text_config", "language_config", "llm_config"].iter().filter_map(|k| v.get(*k)))
        .find(|s| states(s))?;
    Some(Rope::from_config(scope).transpose()?.map_err(|e| format!("config.json: {e}")))
}

/// `final_logit_softcapping` of `dir/config.json` (Gemma 2): every logit
/// must lie within ± it.
pub fn logit_softcap(dir: &std::path::Path) -> Option<f64> {
    let text = std::fs::read(dir.join("config.json")).ok()?;
    let v: Value = serde_json::from_slice(&text).ok()?;
    let scope = v.get("text_config").filter(|t| t.get("final_logit_softcapping").is_some()).unwrap_or(&v);
    scope.get("final_logit_softcapping")?.as_f64().filter(|c| *c > 0.0 && c.is_finite())
}

impl Rope {
    /// The rotary embedding `config` states, `None` when it states none
    /// (no `rope_theta`, `rope_scaling` or `rope_parameters`), or what is
    /// malformed in it, naming the field.
    pub fn from_config(config: &Value) -> Result<Option<Rope>, String> {
        let params = config.get("rope_parameters").filter(|v| v.is_object());
        // transformers 5's per-layer-type form: the full-attention layers' entry.
        let params = params.map(|p| p.get("full_attention").filter(|v| v.is_object()).unwrap_or(p));
        let scaling_v = config.get("rope_scaling").filter(|v| v.is_object()).or(params);
        let theta = match (num(config, "rope_theta")?, params.map(|p| num(p, "rope_theta")).transpose()?.flatten()) {
            (Some(t), _) | (None, Some(t)) => t,
            (None, None) if scaling_v.is_some() => 10000.0,
            (None, None) => return Ok(None),
        };
        if !(theta > 1.0 && theta.is_finite()) {
            return Err(format!("`rope_theta` is {theta}: a rotary base must be a finite number above 1"));
        }
        let first = |keys: &[&str]| -> Result<Option<f64>, String> {
            for k in keys {
                if let Some(v) = num(config, k)? {
                    return Ok(Some(v));
                }
            }
            Ok(None)
        };
        let heads = first(&[
            "num_attention_heads",
            "decoder_num_attention_heads",
            "decoder_attention_heads",
            "num_heads",
            "n_head",
        ])?;
        let hidden = first(&["hidden_size", "d_model", "n_embd"])?;
        let head_dim = match (num(config, "head_dim")?, hidden, heads) {
            (Some(d), _, _) => d,
            (None, Some(h), Some(n)) if n > 0.0 => (h / n).floor(),
            _ => {
                return Err(
                    "neither `head_dim` nor `hidden_size` and `num_attention_heads`: the rotated width is unknown"
                        .into(),
                )
            }
        };
        let partial = num(config, "partial_rotary_factor")?.unwrap_or(1.0);
        if !(partial > 0.0 && partial <= 1.0) {
            return Err(format!("`partial_rotary_factor` is {partial}: it must be in (0, 1]"));
        }
        let dim = (head_dim * partial).clamp(0.0, 65536.0) as usize;
        if !(2.0..=65536.0).contains(&(head_dim * partial)) {
            return Err(format!(
                "the rotated width head_dim × partial_rotary_factor is {}: not a head's width",
                head_dim * partial
            ));
        }
        let max_positions = num(config, "max_position_embeddings")?.map(|m| m as i64);
        let top_omp = num(config, "original_max_position_embeddings")?;
        let scaling = match scaling_v {
            None => Scaling::Default,
            Some(s) => Self::scaling(s, dim, max_positions, top_omp)?,
        };
        let mut source = format!("config.json: rope_theta {theta}");
        if partial < 1.0 {
            source.push_str(&format!(", partial_rotary_factor {partial} ({dim} of {head_dim} dims)"));
        }
        if let Some(kind) = scaling.describe() {
            source.push_str(&format!(", rope_scaling {kind}"));
        }
        let sliding = config
            .get("layer_types")
            .and_then(Value::as_array)
            .is_some_and(|t| t.iter().any(|x| x.as_str().is_some_and(|s| s.contains("sliding"))));
        let local_theta = num(config, "rope_local_base_freq")?.filter(|_| sliding);
        if let Some(l) = local_theta {
            source.push_str(&format!(", rope_local_base_freq {l} (sliding layers)"));
        }
        Ok(Some(Rope { theta, dim, scaling, max_positions, local_theta, source }))
    }

    fn scaling(s: &Value, dim: usize, max_pos: Option<i64>, top_omp: Option<f64>) -> Result<Scaling, String> {
        let kind = s.get("rope_type").or_else(|| s.get("type")).and_then(Value::as_str).unwrap_or("default");
        let omp_of =
            |s: &Value| -> Result<Option<f64>, String> { Ok(num(s, "original_max_position_embeddings")?.or(top_omp)) };
        Ok(match kind {
            "default" => Scaling::Default,
            "linear" => Scaling::Linear { factor: need(s, "factor", kind)? },
            "dynamic" => Scaling::Dynamic { factor: need(s, "factor", kind)? },
            "yarn" => {
                let factor = need(s, "factor", kind)?;
                let omp = omp_of(s)?.or(max_pos.map(|m| m as f64)).ok_or("yarn needs `original_max_position_embeddings` or `max_position_embeddings`")?;
                let mscale = |scale: f64, m: f64| if scale <= 1.0 { 1.0 } else { 0.1 * m * scale.ln() + 1.0 };
                let attention = match (num(s, "attention_factor")?, num(s, "mscale")?, num(s, "mscale_all_dim")?) {
                    (Some(a), _, _) => a,
                    (None, Some(m), Some(a)) if m != 0.0 && a != 0.0 => mscale(factor, m) / mscale(factor, a),
                    _ => mscale(factor, 1.0),
                };
                Scaling::Yarn {
                    factor,
                    omp,
                    beta_fast: num(s, "beta_fast")?.filter(|b| *b != 0.0).unwrap_or(32.0),
                    beta_slow: num(s, "beta_slow")?.filter(|b| *b != 0.0).unwrap_or(1.0),
                    truncate: s.get("truncate").and_then(Value::as_bool).unwrap_or(true),
                    attention,
                }
            }
            "longrope" | "su" => {
                let half = dim / 2;
                let (short, long) = (factors(s, "short_factor", half)?, factors(s, "long_factor", half)?);
                // Phi-3's convention: the top-level original length, the factor their ratio.
                let (omp, factor) = match top_omp {
                    Some(o) => (o, max_pos.map_or(1.0, |m| m as f64 / o)),
                    None => (max_pos.ok_or("longrope needs `max_position_embeddings`")? as f64, num(s, "factor")?.unwrap_or(1.0)),
                };
                let attention = match num(s, "attention_factor")? {
                    Some(a) => a,
                    None if factor <= 1.0 => 1.0,
                    None => (1.0 + factor.ln() / omp.ln()).sqrt(),
                };
                Scaling::LongRope { short, long, omp: omp as i64, attention }
            }
            "llama3" => Scaling::Llama3 {
                factor: need(s, "factor", kind)?,
                low: need(s, "low_freq_factor", kind)?,
                high: need(s, "high_freq_factor", kind)?,
                omp: need(s, "original_max_position_embeddings", kind)?,
            },
            other => return Err(format!("`rope_scaling` type `{other}` is not one transformers implements (default, linear, dynamic, yarn, longrope, llama3)")),
        })
    }

    /// The unscaled frequencies of base `theta`.
    pub fn default_freqs(theta: f64, dim: usize) -> Vec<f64> {
        (0..dim / 2).map(|i| 1.0 / theta.powf((2 * i) as f64 / dim as f64)).collect()
    }

    /// The inverse frequencies transformers applies when the sequence is
    /// `seq_len` long (the largest position + 1).
    pub fn inv_freq(&self, seq_len: i64) -> Vec<f64> {
        let base = Self::default_freqs(self.theta, self.dim);
        match &self.scaling {
            Scaling::Default | Scaling::Dynamic { .. } => base,
            Scaling::Linear { factor } => base.iter().map(|f| f / factor).collect(),
            Scaling::LongRope { short, long, omp, .. } => {
                let ext = if seq_len > *omp { long } else { short };
                base.iter().zip(ext).map(|(f, e)| f / e).collect()
            }
            Scaling::Llama3 { factor, low, high, omp } => {
                let (low_wl, high_wl) = (omp / low, omp / high);
                base.iter()
                    .map(|&f| {
                        let wl = 2.0 * std::f64::consts::PI / f;
                        if wl < high_wl {
                            f
                        } else if wl > low_wl {
                            f / factor
                        } else {
                            let smooth = (omp / wl - low) / (high - low);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect()
            }
            Scaling::Yarn { factor, omp, beta_fast, beta_slow, truncate, .. } => {
                let (dim, theta) = (self.dim as f64, self.theta);
                let corr = |rot: f64| dim * (omp / (rot * 2.0 * std::f64::consts::PI)).ln() / (2.0 * theta.ln());
                let (mut low, mut high) = (corr(*beta_fast), corr(*beta_slow));
                if *truncate {
                    (low, high) = (low.floor(), high.ceil());
                }
                let (low, mut high) = (low.max(0.0), high.min(dim - 1.0));
                if low == high {
                    high += 0.001;
                }
                base.iter()
                    .enumerate()
                    .map(|(i, &f)| {
                        let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                        let extrapolate = 1.0 - ramp;
                        (f / factor) * (1.0 - extrapolate) + f * extrapolate
                    })
                    .collect()
            }
        }
    }

    /// The factor cos and sin are multiplied by.
    pub fn attention_scaling(&self) -> f64 {
        match &self.scaling {
            Scaling::Yarn { attention, .. } | Scaling::LongRope { attention, .. } => *attention,
            _ => 1.0,
        }
    }

    /// Sequence lengths where the frequencies switch (longrope's original length).
    pub fn switch(&self) -> Option<i64> {
        match &self.scaling {
            Scaling::LongRope { omp, .. } => Some(*omp),
            _ => None,
        }
    }
}

impl Scaling {
    /// `llama3 (factor 8)`, or `None` when unscaled.
    pub fn describe(&self) -> Option<String> {
        Some(match self {
            Scaling::Default => return None,
            Scaling::Linear { factor } => format!("linear (factor {factor})"),
            Scaling::Dynamic { factor } => {
                format!("dynamic (factor {factor}, unscaled within max_position_embeddings)")
            }
            Scaling::Yarn { factor, omp, .. } => {
                format!("yarn (factor {factor}, original_max_position_embeddings {omp})")
            }
            Scaling::LongRope { omp, .. } => format!("longrope (original_max_position_embeddings {omp})"),
            Scaling::Llama3 { factor, .. } => format!("llama3 (factor {factor})"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-6 * y.abs().max(1e-12))
    }

    #[test]
    fn default_and_partial_widths() {
        let r = Rope::from_config(&json!({"rope_theta": 10000.0, "hidden_size": 64, "num_attention_heads": 4}))
            .unwrap()
            .unwrap();
        assert_eq!(r.dim, 16);
        // transformers: 1 / 10000^(arange(0, 16, 2) / 16).
        assert!((r.inv_freq(5)[1] - 10000f64.powf(-0.125)).abs() < 1e-12);
        let p = Rope::from_config(&json!({"rope_theta": 10000.0, "head_dim": 16, "partial_rotary_factor": 0.5}))
            .unwrap()
            .unwrap();
        assert_eq!(p.inv_freq(5).len(), 4);
        assert_eq!(Rope::from_config(&json!({"n_embd": 32})).unwrap(), None, "GPT-2 states no rope");
    }

    #[test]
    fn scalings_follow_transformers() {
        let base = json!({"rope_theta": 10000.0, "head_dim": 16, "max_position_embeddings": 128});
        let with = |s: Value| {
            let mut c = base.clone();
            c["rope_scaling"] = s;
            Rope::from_config(&c).unwrap().unwrap()
        };
        let d = Rope::default_freqs(10000.0, 16);
        let lin = with(json!({"rope_type": "linear", "factor": 2.0}));
        assert!(close(&lin.inv_freq(5), &d.iter().map(|f| f / 2.0).collect::<Vec<_>>()));
        // llama3: the highest frequency kept, the lowest divided by the factor.
        let l3 = with(
            json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
        );
        let f = l3.inv_freq(5);
        assert_eq!(f[0], d[0]);
        assert!((f[7] - d[7] / 8.0).abs() < 1e-15);
        // longrope: short factors up to the original length, long beyond.
        let lr = with(json!({"type": "longrope", "short_factor": vec![1.0; 8], "long_factor": vec![2.0; 8]}));
        let mut c = base.clone();
        c["original_max_position_embeddings"] = json!(32);
        c["rope_scaling"] = json!({"type": "longrope", "short_factor": vec![1.0; 8], "long_factor": vec![2.0; 8]});
        let phi = Rope::from_config(&c).unwrap().unwrap();
        assert!(close(&phi.inv_freq(32), &d));
        assert!(close(&phi.inv_freq(33), &d.iter().map(|f| f / 2.0).collect::<Vec<_>>()));
        // Phi-3: factor 128/32 = 4, attention sqrt(1 + ln 4 / ln 32).
        assert!((phi.attention_scaling() - (1.0 + 4f64.ln() / 32f64.ln()).sqrt()).abs() < 1e-12);
        assert_eq!(lr.switch(), Some(128));
        // yarn: attention 0.1 ln(factor) + 1.
        let y = with(json!({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}));
        assert!((y.attention_scaling() - (0.1 * 4f64.ln() + 1.0)).abs() < 1e-12);
        assert_eq!(y.inv_freq(5)[0], d[0]);
    }

    #[test]
    fn malformed_fields_are_named() {
        let bad = |c: Value| Rope::from_config(&c).unwrap_err();
        assert!(bad(json!({"rope_theta": "big", "head_dim": 16})).contains("`rope_theta`"));
        assert!(
            bad(json!({"rope_theta": 1e4, "head_dim": 16, "rope_scaling": {"rope_type": "wild"}})).contains("`wild`")
        );
        assert!(bad(json!({"rope_theta": 1e4, "head_dim": 16, "rope_scaling": {"rope_type": "linear"}}))
            .contains("`factor` is missing"));
        assert!(bad(json!({"rope_theta": 1e4, "head_dim": 16, "max_position_embeddings": 64, "rope_scaling": {"type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}})).contains("8"));
        assert!(bad(json!({"rope_theta": 1e4})).contains("rotated width"));
    }
}
