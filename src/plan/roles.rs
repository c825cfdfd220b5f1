//! What the protocol inference says about a model: the role of every input,
//! which output refreshes which past, the cache form, and for each the
//! evidence it was read from. Plain serde data: `protocol` prints it, and
//! the plan, the engine, `replay` and the feed guard read it.

use serde::{Deserialize, Serialize};

/// What an input is for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum InputRole {
    /// Token ids of the new tokens.
    TokenIds,
    /// Embeddings of the new tokens (an `embed_tokens` model computes them).
    InputsEmbeds,
    /// The decoder's attention mask.
    AttentionMask,
    /// Positions of the new tokens (rank 2, or rank 3 for M-RoPE).
    PositionIds,
    /// Where the new tokens are written in a fixed cache buffer.
    CachePosition,
    /// How many trailing positions get logits (a scalar; 0 = all).
    LogitsToKeep,
    /// The merged decoder's branch flag (`use_cache_branch`).
    BranchFlag,
    /// A self-attention cache tensor, refreshed from its present every step.
    Past,
    /// A cross-attention cache tensor, taken once from step 0 (or the encoder).
    CrossPast,
    /// A fixed-size state (convolution or recurrent), carried, never grown.
    State,
    /// The encoder's output states.
    EncoderStates,
    /// The encoder's mask, fed to the decoder.
    EncoderMask,
    /// Raw audio samples.
    AudioSamples,
    /// Audio features (log-mel frames).
    AudioFeatures,
    /// Image pixels.
    PixelValues,
    /// The inference could not place it; `evidence` says why.
    Unplaced,
}

/// What the attention mask spans.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum MaskSpan {
    /// The past and the new tokens (the standard decoder mask).
    PastAndNew,
    /// The new tokens only: a standard caller's mask does not fit it.
    NewOnly,
    /// The whole fixed cache buffer (static or shared-buffer caches).
    Buffer,
    /// A 4-D float mask the caller builds itself.
    FourD,
    /// Its length is not tied to anything the graph declares.
    Unknown,
}

/// How the cache is kept between calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum CacheForm {
    /// Pasts grow by the new tokens every call (optimum, transformers.js, dynamo).
    Growing,
    /// Fixed buffers written at `cache_position`; present shape = past shape.
    StaticBuffer,
    /// onnxruntime-genai's shared past/present buffers of `max_length`.
    SharedBuffer,
    /// Fixed buffers the graph reads whole while its presents hold only the
    /// new tokens' rows: the caller writes them in at `cache_position`
    /// (microsoft/winml-cli's static cache).
    CallerWritten,
    /// Fixed buffers the graph reads whole while its presents hold only the
    /// new rows: the caller drops as many of the oldest rows and appends
    /// them at the end, the mask right-aligned (winml-cli's sliding window).
    CallerRolled,
    /// Only fixed-size states (convolution or recurrent), no growing cache.
    FixedState,
    /// No cache input at all.
    None,
}

/// One input, its role and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PlacedInput {
    /// The input.
    pub name: String,
    /// What it is for.
    pub role: InputRole,
    /// What in the graph or the configs says so.
    pub evidence: String,
}

/// A past input and the output that refreshes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Pairing {
    /// The past input.
    pub past: String,
    /// The output fed back as that past on the next call.
    pub present: String,
    /// The axis that grows, for a growing cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grows_on: Option<usize>,
    /// How they were matched.
    pub evidence: String,
}

/// The decoding protocol read from one model's graph and configs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Inferred {
    /// Every input, in the graph's order.
    pub inputs: Vec<PlacedInput>,
    /// The logits output and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logits: Option<(String, String)>,
    /// Every past with its present.
    pub pairs: Vec<Pairing>,
    /// How the cache is kept.
    pub cache_form: CacheForm,
    /// Why that form.
    pub cache_form_evidence: String,
    /// What the attention mask spans, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mask_span: Option<MaskSpan>,
    /// Symbols of the model bound to the protocol's quantities
    /// (`total_seq` = past + new), each with its reason.
    pub bindings: Vec<(String, String)>,
}

impl Inferred {
    /// The first input with `role`.
    pub fn input(&self, role: InputRole) -> Option<&PlacedInput> {
        self.inputs.iter().find(|p| p.role == role)
    }

    /// Every input with `role`.
    pub fn all(&self, role: InputRole) -> impl Iterator<Item = &PlacedInput> {
        self.inputs.iter().filter(move |p| p.role == role)
    }

    /// The pairing of past input `past`.
    pub fn pair_of(&self, past: &str) -> Option<&Pairing> {
        self.pairs.iter().find(|p| p.past == past)
    }
}
