//! The YAML contract as written by a person, with the line each part came from.

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_saphyr::Spanned;
use std::fmt;

/// A contract file: what a correct export of one model family looks like.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ContractFile {
    /// Short name shown in reports.
    pub name: Option<String>,
    /// Free text for the reader of the YAML.
    pub description: Option<String>,
    /// Integer parameters (layers, heads, head_dim, hidden, vocab, …), usable as
    /// `$name` in shapes; `{layer}` in names runs over `0..layers`. The command
    /// line can override them (`--param hidden=32`).
    #[serde(default)]
    #[cfg_attr(feature = "schema", schemars(with = "std::collections::BTreeMap<String, i64>"))]
    pub params: OrderedMap<i64>,
    /// Pins a dimension variable to the exact symbol the model must use
    /// (`batch: batch_size`), to catch dim renames between exporter versions.
    #[serde(default)]
    #[cfg_attr(feature = "schema", schemars(with = "std::collections::BTreeMap<String, String>"))]
    pub dims: OrderedMap<String>,
    /// Check that inputs and outputs come in the contract's order (off by default:
    /// ONNX Runtime binds by name).
    #[serde(default)]
    pub order: bool,
    /// What an input that the contract does not list is: error, warn or allow.
    #[serde(default = "default_error")]
    pub extra_inputs: Policy,
    /// What an output that the contract does not list is: error, warn or allow.
    #[serde(default = "default_warn")]
    pub extra_outputs: Policy,
    /// Graph inputs, by name or name template, in the expected order.
    #[cfg_attr(feature = "schema", schemars(with = "std::collections::BTreeMap<String, TensorSpec>"))]
    pub inputs: OrderedMap<Spanned<TensorSpec>>,
    /// Graph outputs, by name or name template, in the expected order.
    #[cfg_attr(feature = "schema", schemars(with = "std::collections::BTreeMap<String, TensorSpec>"))]
    pub outputs: OrderedMap<Spanned<TensorSpec>>,
    /// How to drive the model with a KV cache (used by the runtime check).
    #[cfg_attr(feature = "schema", schemars(with = "Option<CacheSpec>"))]
    pub cache: Option<serde_saphyr::Spanned<CacheSpec>>,
}

fn default_error() -> Policy {
    Policy::Error
}
fn default_warn() -> Policy {
    Policy::Warn
}

/// What a tensor the contract does not list becomes.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// An error finding.
    Error,
    /// A warning finding.
    Warn,
    /// Nothing.
    Allow,
}

/// One input or output (or a family of them, when its name is a template).
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct TensorSpec {
    /// Element type, or alternatives: `float32`, `int32|int64`.
    pub dtype: String,
    /// Dims: an integer, `$param`, a variable name (same model dim everywhere
    /// it appears), `var + var`, `_` (any symbol) or `any`. Omit for any shape.
    pub shape: Option<Vec<DimSpecRaw>>,
    /// The model may lack this input (e.g. `position_ids`).
    #[serde(default)]
    pub optional: bool,
}

/// One dim as written in YAML: an integer or text (validated later).
#[derive(Debug, Deserialize, Clone)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(untagged)]
#[allow(missing_docs)]
pub enum DimSpecRaw {
    Int(i64),
    Text(String),
}

/// The cache protocol; see `runtime` for how each field is used.
#[derive(Debug, Deserialize, Clone, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CacheSpec {
    /// Boolean input selecting the cached branch of a merged decoder.
    pub branch_flag: Option<String>,
    /// Past inputs refreshed from the previous step's present every step
    /// (self-attention): `past_key_values.{layer}.decoder.{key,value}`.
    #[serde(default)]
    pub self_past: Vec<String>,
    /// Past inputs taken once from step 0's present and reused (cross-attention).
    #[serde(default)]
    pub cross_past: Vec<String>,
    /// How a past input's name becomes its present output's name, as
    /// `[from, to]` prefix pairs: `[past_key_values., present.]`.
    pub present_prefix: Option<(String, String)>,
    /// Which axis of a past tensor is the sequence (default 2).
    pub seq_axis: Option<usize>,
    /// Dummy past lengths to try at step 0 (default: `[0, 1]` for seq2seq, `[0]` for decoder-only).
    pub step0_past_lengths: Option<Vec<i64>>,
    /// Max abs difference allowed between cached and uncached logits (default 1e-4).
    pub parity_tolerance: Option<f64>,
    /// Decoder-only models: feed attention_mask over past + new tokens.
    pub attention_mask: Option<String>,
    /// Decoder-only models: feed position_ids = past length + i.
    pub position_ids: Option<String>,
    /// seq2seq models: the encoder output input of the decoder.
    pub encoder_hidden_states: Option<String>,
    /// seq2seq models: the encoder mask input of the decoder.
    pub encoder_attention_mask: Option<String>,
    /// Token ids input (default input_ids).
    pub input_ids: Option<String>,
    /// Logits output (default logits).
    pub logits: Option<String>,
}

/// A YAML mapping kept in file order, with the line of each key.
#[derive(Debug)]
pub struct OrderedMap<V>(pub Vec<(Spanned<String>, V)>);

impl<V> Default for OrderedMap<V> {
    fn default() -> Self {
        OrderedMap(Vec::new())
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for OrderedMap<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V2<V>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for V2<V> {
            type Value = OrderedMap<V>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a mapping")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out: Vec<(Spanned<String>, V)> = Vec::new();
                while let Some((k, v)) = map.next_entry::<Spanned<String>, V>()? {
                    if out.iter().any(|(e, _)| e.value == k.value) {
                        return Err(serde::de::Error::custom(format!("duplicate key `{}`", k.value)));
                    }
                    out.push((k, v));
                }
                Ok(OrderedMap(out))
            }
        }
        d.deserialize_map(V2(std::marker::PhantomData))
    }
}
