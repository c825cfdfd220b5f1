//! Writes a contract from a known-good export: per-layer tensors folded into
//! `{layer}` templates, model sizes lifted into `params`, dim symbols into
//! variables pinned to the exact names the export used.

use crate::model::fold::fold;
use crate::model::signature::{Dim, Port, Signature};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Sizes read off the signature, by the role of the axis they sit on.
#[derive(Debug, Default, Clone)]
pub struct Params {
    /// Decoder layers.
    pub layers: Option<i64>,
    /// Heads on the cache's head axis (KV heads for GQA).
    pub heads: Option<i64>,
    /// Size of one head.
    pub head_dim: Option<i64>,
    /// Model width.
    pub hidden: Option<i64>,
    /// Vocabulary size.
    pub vocab: Option<i64>,
}

impl Params {
    fn list(&self) -> Vec<(&'static str, i64, &'static str)> {
        [
            ("layers", self.layers, "decoder layers (the {layer} in names)"),
            ("heads", self.heads, "attention heads in the cache (KV heads for GQA models)"),
            ("head_dim", self.head_dim, "size of one head"),
            ("hidden", self.hidden, "model width (d_model)"),
            ("vocab", self.vocab, "vocabulary size (last axis of logits)"),
        ]
        .into_iter()
        .filter_map(|(n, v, doc)| v.map(|v| (n, v, doc)))
        .collect()
    }
}

fn is_cache(name: &str) -> bool {
    name.starts_with("past_key_values")
        || name.starts_with("present")
        || name.contains(".past_")
        || name.contains("present.")
}

fn layer_index(name: &str) -> Option<i64> {
    name.split('.').find(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))?.parse().ok()
}

/// The sizes the signature fixes.
pub fn infer_params(sig: &Signature) -> Params {
    let mut p = Params::default();
    let ports = || sig.inputs.iter().chain(&sig.outputs);
    p.layers = ports().filter(|x| is_cache(&x.name)).filter_map(|x| layer_index(&x.name)).max().map(|m| m + 1);
    let fixed = |port: &Port, axis: usize| match port.ty.tensor_parts() {
        Some((_, Some(d))) => match d.get(axis) {
            Some(Dim::Fixed(v)) => Some(*v),
            _ => None,
        },
        _ => None,
    };
    let rank = |port: &Port| port.ty.tensor_parts().and_then(|(_, s)| s.map(|s| s.len()));
    if let Some(cache) = ports().find(|x| is_cache(&x.name) && rank(x) == Some(4)) {
        p.heads = fixed(cache, 1);
        p.head_dim = fixed(cache, 3);
    }
    if let Some(e) = sig.input("encoder_hidden_states").or_else(|| sig.input("inputs_embeds")) {
        p.hidden = fixed(e, 2);
    }
    if let Some(l) = sig.output("logits") {
        p.vocab = rank(l).and_then(|r| fixed(l, r.checked_sub(1)?));
    }
    p
}

/// The axis role that a fixed size on it is a parameter of, if any.
fn param_for(port: &Port, axis: usize, rank: usize, params: &Params) -> Option<&'static str> {
    let pick = |name: &'static str, v: Option<i64>| v.map(|_| name);
    if is_cache(&port.name) && rank == 4 {
        return match axis {
            1 => pick("heads", params.heads),
            3 => pick("head_dim", params.head_dim),
            _ => None,
        };
    }
    if axis + 1 == rank {
        return match port.name.as_str() {
            "logits" => pick("vocab", params.vocab),
            "encoder_hidden_states" | "inputs_embeds" | "last_hidden_state" => pick("hidden", params.hidden),
            _ => None,
        };
    }
    None
}

fn sanitize(symbol: &str) -> String {
    let mut s: String = symbol.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) || s == "_" || s == "any" {
        s.insert_str(0, "d_");
    }
    s
}

/// Turns model symbols into contract variables, keeping one name per symbol.
#[derive(Default)]
struct Vars {
    by_symbol: BTreeMap<String, String>,
    /// Some symbol was exporter noise (written as `_`).
    noise: bool,
}

/// A dim name an exporter invented rather than chose: a number spelled as a
/// symbol, torch's `Concat…_dim_N` / `Reshape…_dim_N`, onnx's `unk__N`, or a
/// name embedding a tensor's own name.
pub fn is_exporter_noise(symbol: &str) -> bool {
    symbol.trim().parse::<i64>().is_ok()
        || symbol.starts_with("unk__")
        || (symbol.contains("_dim_") && symbol.rsplit("_dim_").next().is_some_and(|n| n.parse::<u32>().is_ok()))
}

impl Vars {
    fn var(&mut self, symbol: &str) -> String {
        if let Some(v) = self.by_symbol.get(symbol) {
            return v.clone();
        }
        let base = sanitize(symbol);
        let mut name = base.clone();
        let mut n = 2;
        while self.by_symbol.values().any(|v| *v == name) {
            name = format!("{base}_{n}");
            n += 1;
        }
        self.by_symbol.insert(symbol.to_string(), name.clone());
        name
    }

    fn dim(&mut self, symbol: &str) -> String {
        // Symbols exporters make up (`"1"`, `Concat…_dim_1`, `unk__12`) carry no
        // meaning another export of the same model would share: any symbol.
        if is_exporter_noise(symbol) {
            self.noise = true;
            return "_".into();
        }
        // `past + new` becomes a sum of variables, so the relation is checked.
        let terms: Vec<&str> = symbol.split('+').map(str::trim).collect();
        let simple = |t: &str| !t.is_empty() && (t.parse::<i64>().is_ok() || crate::contract::is_variable(t));
        if terms.len() > 1 && terms.iter().all(|t| simple(t)) {
            let parts: Vec<String> =
                terms.iter().map(|t| if t.parse::<i64>().is_ok() { t.to_string() } else { self.var(t) }).collect();
            return parts.join(" + ");
        }
        self.var(symbol)
    }
}

fn yaml_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn spec_line(port: &Port, params: &Params, vars: &mut Vars) -> String {
    match port.ty.tensor_parts() {
        None => format!("{{dtype: float32}}  # declared as {}: not a tensor, edit by hand", port.ty),
        Some((elem, None)) => format!("{{dtype: {elem}}}"),
        Some((elem, Some(dims))) => {
            let rank = dims.len();
            let parts: Vec<String> = dims
                .iter()
                .enumerate()
                .map(|(axis, d)| match d {
                    Dim::Fixed(v) => match param_for(port, axis, rank, params) {
                        Some(p) => format!("${p}"),
                        None => v.to_string(),
                    },
                    Dim::Symbolic(s) => vars.dim(s),
                    Dim::Unknown => "any".to_string(),
                })
                .map(|s| if s.contains(['[', ']', ',', '{', '}', '#', ':']) { yaml_quote(&s) } else { s })
                .collect();
            format!("{{dtype: {elem}, shape: [{}]}}", parts.join(", "))
        }
    }
}

/// Renders the contract text for `sig`. `source` names the model in the header.
pub fn init(sig: &Signature, source: &str) -> String {
    let params = infer_params(sig);
    let mut vars = Vars::default();
    let mut sections = String::new();
    let mut input_keys: Vec<String> = Vec::new();
    for (title, ports) in [("inputs", &sig.inputs), ("outputs", &sig.outputs)] {
        let specs: Vec<(String, String)> =
            ports.iter().map(|p| (p.name.clone(), spec_line(p, &params, &mut vars))).collect();
        let _ = writeln!(sections, "{title}:");
        for group in fold(&specs) {
            let spec = &specs[group.members[0]].1;
            let key = if let Some(t) = layer_template(&group.label, params.layers) {
                t
            } else if group.members.len() > 1 && has_number_group(&group.label) {
                // A partial layer range: list each tensor so the contract stays exact.
                for &m in &group.members {
                    let _ = writeln!(sections, "  {}: {}", yaml_quote(&specs[m].0), specs[m].1);
                    if title == "inputs" {
                        input_keys.push(specs[m].0.clone());
                    }
                }
                continue;
            } else {
                group.label.clone()
            };
            let _ = writeln!(sections, "  {}: {spec}", yaml_quote(&key));
            if title == "inputs" {
                input_keys.push(key);
            }
        }
    }
    sections.push_str(&cache_section(sig, &input_keys));

    let mut out = String::new();
    let _ = writeln!(out, "# Contract written by `onnx-contract init` from {source}");
    let _ = writeln!(
        out,
        "# ({}; IR {}; opsets {}).",
        if sig.producer.is_empty() {
            "unknown producer".to_string()
        } else {
            format!("{} {}", sig.producer, sig.producer_version).trim().to_string()
        },
        sig.ir_version.map(|v| v.to_string()).unwrap_or_else(|| "-".into()),
        sig.opsets
            .iter()
            .map(|o| format!("{}:{}", if o.domain.is_empty() { "ai.onnx" } else { &o.domain }, o.version))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(out, "# Shapes: integers are fixed sizes, $name a parameter, other names are variables");
    let _ = writeln!(out, "# that must bind to the same model dim everywhere; `_` is any symbol, `any` anything.");
    let _ = writeln!(out, "name: {}", yaml_quote(&contract_name(source)));
    let listed = params.list();
    if !listed.is_empty() {
        let _ = writeln!(out, "params:");
        for (n, v, doc) in listed {
            let _ = writeln!(out, "  {n}: {v}  # {doc}");
        }
    }
    if vars.noise {
        let _ = writeln!(
            out,
            "# Dims written `_` were named by the exporter, not chosen (\"1\", Concat…_dim_N, unk__N): any symbol."
        );
    }
    let pinned = &vars.by_symbol;
    if !pinned.is_empty() {
        let _ = writeln!(out, "# Exact dim names of this export; delete a line to accept any name for it.");
        let _ = writeln!(out, "dims:");
        for (symbol, var) in pinned {
            let _ = writeln!(out, "  {var}: {}", yaml_quote(symbol));
        }
    }
    let _ = writeln!(out, "order: false         # ONNX Runtime binds by name; set true to check the order too");
    let _ = writeln!(out, "extra_inputs: error  # error | warn | allow");
    let _ = writeln!(out, "extra_outputs: warn");
    out.push_str(&sections);
    out
}

/// The `cache` section for optimum-style names: self-attention past refreshed
/// every step, cross-attention (`.encoder.`) past kept from step 0.
fn cache_section(sig: &Signature, input_keys: &[String]) -> String {
    let past: Vec<&String> = input_keys.iter().filter(|k| k.starts_with("past_key_values")).collect();
    if past.is_empty() {
        return String::new();
    }
    let list = |keys: Vec<&&String>| keys.iter().map(|k| yaml_quote(k)).collect::<Vec<_>>().join(", ");
    let cross: Vec<&&String> = past.iter().filter(|k| k.contains(".encoder.")).collect();
    let own: Vec<&&String> = past.iter().filter(|k| !k.contains(".encoder.")).collect();
    let seq2seq = !cross.is_empty() || sig.input("encoder_hidden_states").is_some();
    let mut out = String::from("# How the runtime check drives the KV cache.\ncache:\n");
    if sig.input("use_cache_branch").is_some() {
        out.push_str("  branch_flag: use_cache_branch\n");
    }
    let _ = writeln!(out, "  self_past: [{}]  # refreshed from present.* every step", list(own));
    if !cross.is_empty() {
        let _ = writeln!(out, "  cross_past: [{}]  # taken once from step 0, then reused", list(cross));
    }
    if seq2seq && sig.input("use_cache_branch").is_some() {
        out.push_str("  step0_past_lengths: [0, 1]  # optimum today feeds 0, older optimum 1: both must work\n");
    } else if seq2seq {
        // No branch flag: a dummy past slot would be attended to.
        out.push_str("  step0_past_lengths: [0]  # without a branch flag every past slot is attended to\n");
    } else {
        out.push_str("  step0_past_lengths: [0]  # length 1 runs but shifts the logits unless masked\n");
    }
    out.push_str("  parity_tolerance: 1.0e-4\n");
    out
}

/// `a.{0..5}.b` -> `a.{layer}.b` when the range is exactly every layer.
fn layer_template(label: &str, layers: Option<i64>) -> Option<String> {
    let layers = layers?;
    let every_layer = |seg: &str| -> bool {
        let inner = seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')).unwrap_or(seg);
        let values: Option<Vec<i64>> = match inner.split_once("..") {
            Some((a, b)) => match (a.parse::<i64>(), b.parse::<i64>()) {
                (Ok(a), Ok(b)) => Some((a..=b).collect()),
                _ => None,
            },
            None => inner.split(',').map(|v| v.parse().ok()).collect(),
        };
        values == Some((0..layers).collect())
    };
    let segs = crate::model::fold::label_segments(label);
    let at = segs.iter().position(|s| every_layer(s))?;
    let out: Vec<&str> = segs.iter().enumerate().map(|(i, s)| if i == at { "{layer}" } else { s }).collect();
    Some(out.join("."))
}

fn has_number_group(label: &str) -> bool {
    crate::model::fold::label_segments(label)
        .iter()
        .any(|s| s.starts_with('{') && s[1..].starts_with(|c: char| c.is_ascii_digit()))
}

fn contract_name(source: &str) -> String {
    let p = std::path::Path::new(source);
    let stem = p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    match p.parent().and_then(|d| d.file_name()) {
        Some(dir) => format!("{}/{stem}", dir.to_string_lossy()),
        None => stem,
    }
}
