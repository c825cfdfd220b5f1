//! The one finding type every check produces.

use serde::{Deserialize, Serialize};
use std::fmt;

/// How much a finding matters: only errors fail a check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Severity {
    /// Context worth showing; never fails a check.
    Info,
    /// Suspicious but not a violation.
    Warning,
    /// A violation: the check fails.
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        })
    }
}

macro_rules! codes {
    ($($variant:ident = $code:literal: $doc:literal,)*) => {
        /// Stable finding codes. Never renumber or reuse one; docs/findings.md lists them.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Code { $(#[doc = $doc] $variant,)* }

        impl Code {
            /// Every code, in documentation order.
            pub const ALL: &'static [Code] = &[$(Code::$variant,)*];
            /// The stable kebab-case name (`input-count`), as in JSON and SARIF.
            pub fn as_str(self) -> &'static str {
                match self { $(Code::$variant => $code,)* }
            }
            /// One sentence on what the code means.
            pub fn doc(self) -> &'static str {
                match self { $(Code::$variant => $doc,)* }
            }
            /// The code named `name`, if there is one.
            pub fn from_name(name: &str) -> Option<Code> {
                Code::ALL.iter().copied().find(|c| c.as_str() == name)
            }
        }
    };
}

codes! {
    InputCount = "input-count": "The model has a different number of inputs than the contract, or misses required ones.",
    InputMissing = "input-missing": "A required contract input is not in the model.",
    InputExtra = "input-extra": "The model has an input the contract does not list.",
    OutputCount = "output-count": "The model has a different number of outputs than the contract, or misses some.",
    OutputMissing = "output-missing": "A contract output is not in the model.",
    OutputExtra = "output-extra": "The model has an output the contract does not list.",
    NotTensor = "not-tensor": "The contract expects a tensor; the model declares another type.",
    Dtype = "dtype": "Element type differs from the contract.",
    Rank = "rank": "Number of dimensions differs from the contract.",
    DimValue = "dim-value": "A dimension has another fixed size than the contract's.",
    DimStatic = "dim-static": "A dimension the contract wants dynamic is fixed in the model.",
    DimDynamic = "dim-dynamic": "A dimension the contract wants fixed is symbolic in the model.",
    DimUnknown = "dim-unknown": "The model declares no size or symbol for an axis the contract constrains.",
    DimName = "dim-name": "A symbolic dimension is named differently from the contract's pinned name.",
    DimBinding = "dim-binding": "One contract dimension variable binds to two different model dims.",
    Order = "order": "Inputs or outputs are in another order than the contract's.",
    RuntimeLoad = "runtime-load": "The ONNX Runtime library could not be loaded.",
    ModelLoad = "model-load": "ONNX Runtime refused to load the model (IR version, opset, unknown operator).",
    Compat = "runtime-compat": "The model needs a newer ONNX Runtime than the target (IR version or opset).",
    Plan = "plan": "The model cannot be driven as a KV-cache decoder (an input nobody knows how to feed, no fixed size).",
    RunFailed = "run-failed": "ONNX Runtime returned an error at a decoding step.",
    Crash = "crash": "The process running ONNX Runtime died (segfault, abort) or hung.",
    StepOutput = "step-output": "An output was not produced at a step.",
    LogitsShape = "logits-shape": "Logits are not [batch, new tokens, vocab].",
    NonFinite = "non-finite": "Logits contain NaN or Inf.",
    CacheGrowth = "cache-growth": "A self-attention present does not grow by the tokens fed.",
    CacheDtype = "cache-dtype": "A present's element type differs from the past it is fed back as (float16 presents, float32 pasts): a caller's loop fails at the first cached step, or must convert every step.",
    CacheWrite = "cache-write": "A fixed cache buffer (a static cache, a shared past/present buffer) is changed outside the slots of the tokens fed, or not written at them.",
    CrossCache = "cross-cache": "A cross-attention present does not keep the encoder length.",
    Parity = "parity": "Cached logits differ from recomputing the prefix without cache.",
    RuntimeSkipped = "runtime-skipped": "The runtime check did not run (no cache to drive, or a run length cut short).",
    ConfigMismatch = "config-mismatch": "config.json states a size the model does not have (layers, heads, head size, vocabulary, width), an end token the logits cannot produce, or a token a caller feeds (bos, pad, decoder start; config.json, generation_config.json or genai_config.json) that the token embedding table has no row for.",
    CrossFile = "cross-file": "Two files of one export folder disagree (encoder width or dtype, layers, heads, vocabulary).",
    OddFile = "odd-file": "An entry named `.onnx` in the folder is no readable model file: a dangling or looping link, an unreadable file, a fifo, a directory (the rest of the folder is still checked).",
    RoleUnknown = "role-unknown": "A file in the folder is neither a recognised encoder nor decoder: it is still loaded and run once on inputs built from its signature, and the report says what happened.",
    CallerSignature = "caller-signature": "A call feeds inputs the model does not have, misses some, or feeds another dtype, rank or fixed size (replay, feed guard).",
    CallerPast = "caller-past": "A self-attention past is not the previous call's present (fresh values, or another length).",
    CallerCrossPast = "caller-cross-past": "A cross-attention past is not step 0's present (e.g. a cached step's dummy fed back).",
    CallerFlag = "caller-flag": "The branch flag contradicts the past fed (cached branch with an empty past, or the reverse).",
    CallerPrefix = "caller-prefix": "The whole prefix is re-fed on top of a non-empty past.",
    CallerMask = "caller-mask": "The attention mask does not cover past + new tokens.",
    CallerPositions = "caller-positions": "Position ids do not continue from the past length.",
    CallerBatch = "caller-batch": "The batch changes within a generation (the caches hold the rows it started with).",
    CallerEncoder = "caller-encoder": "The encoder states fed change within a generation (one source's states for every call).",
    CallerEmbeds = "caller-embeds": "The embeddings fed are an earlier call's, not those of this call's tokens (an embeddings-split export).",
    CallerBeams = "caller-beams": "Beam search: the cache rows fed are not the rows the beams chose (the cache not reordered to the beams' origins), or the encoder states are not expanded per beam.",
    CallerCrop = "caller-crop": "Several tokens verified in one call (speculative decoding): the cache is not cropped to the accepted length before the next call (the rejected drafts stay in it).",
    CallerNoCache = "caller-no-cache": "The cache is never used: every call re-feeds the growing prefix on the no-cache path.",
    CallerError = "caller-error": "A recorded call failed in ONNX Runtime (what the application saw).",
    PositionRows = "position-rows": "A decoder fed multimodal (3-D) positions whose rotary sections all read the first row: text-only calls are right, every image call is wrong.",
    NoCache = "no-cache": "A decoder-only export without a KV cache: driven by re-feeding the whole prefix every call (correct, but every generated token recomputes all before it; the cost is measured).",
    InputUnread = "input-unread": "An input whose values matter (mask, positions, token ids, a past) reaches no node of the graph, or only its shape is read: what a caller feeds there changes nothing.",
    Rotary = "rotary": "The graph's rotary position embedding is not the one config.json states (rope_theta, partial_rotary_factor, rope_scaling of any transformers type): measured on the graph's own rotary subgraph, with the parameter and the first position where it matters.",
    RotaryUnaudited = "rotary-unaudited": "config.json states a rotary embedding, but the graph's could not be measured (no `Cos` node: precomputed tables or a fused operator) or the config's rope fields cannot be read: said, never guessed.",
    BranchSwapped = "branch-swapped": "A merged decoder's `If` on `use_cache_branch` reads the pasts only in the branch taken when the flag is false: its branches are exchanged (confirmed by running a cached step with the flag inverted).",
    LogitSoftcap = "logit-softcap": "config.json's final_logit_softcapping caps every logit at ± it (tanh(x / cap) · cap), but the run's logits go beyond: the graph does not apply the final softcap.",
    Repeatability = "repeatability": "The same step run twice on one session gives different outputs.",
    VariantDivergence = "variant-divergence": "A numeric variant (fp16, q4, quantized, …) departs from the folder's fp32 model by more than its numeric form explains.",
    ChunkAfterPast = "chunk-after-past": "Several tokens fed at once onto a non-empty cache (second prefill, speculative verification, chunked prefill) give other logits than recomputing the whole prefix.",
    BatchPadding = "batch-padding": "A row of a left-padded batch departs from the same prompt run alone (or the model cannot place padded rows: no position_ids).",
    SlidingWindow = "sliding-window": "config.json asks for a sliding attention window the graph does not implement: a cached token outside the window still moves the logits.",
    OptimizationLevels = "optimization-levels": "`--deep`: the same steps with ONNX Runtime's graph optimizations disabled and at its default level give logits further apart than the model's numeric form explains (a fusion changes what the model computes).",
    ConsumerFile = "consumer-file": "A file the folder's consumer opens is not there: a model genai_config.json names, the dtype variant transformers.js selects, external data under the name the consumer derives. The consumer fails at load.",
    ConsumerLayout = "consumer-layout": "The folder's files are not those its consumer's model class opens (transformers.js 3+ opens onnx/model.onnx for a decoder-only model and a merged decoder for an encoder-decoder; optimum's use_cache needs a file with past inputs).",
    ConsumerName = "consumer-name": "A tensor name or name template the consumer's config gives (genai_config.json's inputs, outputs, past_key_names) is not the graph's, or the graph takes an input the consumer never feeds.",
    ConsumerSize = "consumer-size": "A size the consumer allocates or validates with (genai's vocab_size, head_size) contradicts the graph; a warning where the consumer computes it wrong on a correct export (optimum's first, empty past sized from num_attention_heads for a model type it does not list).",
    ConsumerToken = "consumer-token": "A token id the consumer range-checks or starts from lies outside the vocabulary, or is missing (genai's end tokens; an encoder-decoder with no decoder start token).",
    ConsumerLength = "consumer-length": "The consumer's context or maximum length is past what the graph can hold (the rows of its rotary tables): generation fails once a sequence gets that long.",
    ConsumerRun = "consumer-run": "The consumer itself, run on the folder (onnxruntime-genai's Generator, transformers.js' generate), fails, or its greedy tokens depart from the model's uncached reference from the same prompt (information when they agree).",
    ConsumerNotRun = "consumer-not-run": "The consumer's own generation was not run (not installed here, a form not compared yet): said with how to install it, never a silent pass.",
    ConsumerConfig = "consumer-config": "A consumer config field the consumer does not accept (an unknown genai model type, a malformed transformers.js_config).",
    ConfigScale = "config-scale": "A multiplier config.json says the model applies is not the one the graph applies (Granite's embedding_multiplier, logits_scaling, attention_multiplier and residual_multiplier, Cohere's logit_scale, Gemma's embedding normalizer √hidden_size and query_pre_attn_scalar, MiniCPM's scale_emb): read off the graph's own constants (after the token embedding's Gather, before the logits, on every layer's attention scores, before the residual Add), compared at the precision the graph stores them in.",
    Alibi = "alibi": "The graph's ALiBi slopes (one per head, the attention bias per token of distance) are not those config.json's head count gives (BLOOM's and Falcon's build_alibi_tensor, MPT's build_alibi_bias): read off the graph's own slope constant, with the first head and the bias difference at the model's length.",
    CallerUndecided = "caller-undecided": "What the trace records cannot decide a call (a past with the previous present's shape and other values, whose rows the trace does not keep and a re-run cannot recompute, as a beam search's gathered rows look): said, with what to record to decide it, never an accusation.",
    SourceDeparture = "source-departure": "`--source CHECKPOINT`: the export's logits depart from the transformers checkpoint it came from (run on the same prompt and the export's own tokens) by more than its numeric form explains, from the step named (information when they agree).",
    SourceNotRun = "source-not-run": "`--source CHECKPOINT` was asked for and the checkpoint could not be compared (no config.json, transformers or torch not installed, a form not compared): said, never a silent pass.",
    ConfigUnaudited = "config-unaudited": "config.json states a multiplier or ALiBi, but the graph's could not be read (the values computed at run time, a quantized head, an unknown operator on the way): said with why, never guessed.",
    MemoryBudget = "memory-budget": "A run the check could not fit in its memory budget (`--max-memory`, default what the machine or its cgroup makes available): a runtime job or a consumer's own generation expected to need more than the whole budget was not started (the file, what it needs and the budget named); runs that did not fit beside each other ran one after another (information).",
}

impl Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Code {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Code::from_name(&name).ok_or_else(|| serde::de::Error::custom(format!("unknown finding code `{name}`")))
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One difference between a model and what was expected of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct Finding {
    /// What kind of difference (stable, documented).
    pub code: Code,
    /// Whether it fails the check.
    pub severity: Severity,
    /// One sentence naming the tensor, the values and what was expected.
    pub message: String,
    /// The tensor (or folded tensor family) concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor: Option<String>,
    /// Every tensor name behind a folded `tensor`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// 1-based line of the contract entry that asked for this check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract_line: Option<u64>,
    /// Decoding step (runtime findings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<usize>,
    /// Past length fed at step 0 in the run that produced this finding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step0_past_len: Option<i64>,
    /// Node path, also inside `If` branches (`optimum::if (then_branch) → /Reshape_5`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// One line on what this pattern usually means.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// ONNX Runtime version the finding was seen with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// Index of the recorded call (replay and feed guard findings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<usize>,
    /// The change a remedy would try for this finding (`--remedy` runs it
    /// and re-checks before saying anything of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair: Option<Repair>,
}

/// One remedy tried on one file.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Remedy {
    /// The file repaired, relative to the folder.
    pub file: String,
    /// The finding it answers.
    pub code: Code,
    /// What was changed on the copy.
    pub change: String,
    /// How to make the same change at export or conversion time.
    pub option: String,
    /// Whether the re-check passed the file.
    pub works: bool,
    /// The re-check's result: what it measured, or the error that remains.
    pub result: String,
    /// Checks run on repaired copies for this remedy.
    pub rechecks: usize,
}

/// A change to an export that may remove a finding: what `--remedy` applies
/// to a copy of the folder and re-checks. Never a suggestion by itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Repair {
    /// Compute a float16 model's node in float32, behind Casts.
    KeepFloat32 {
        /// The node's name (main graph).
        node: String,
        /// The node's inputs and outputs the run saw as float16 (initializers are read from the file).
        float16: Vec<String>,
    },
    /// Take a quantized variant's node back from the fp32 model.
    Unquantize {
        /// The tensor both models write.
        tensor: String,
        /// The fp32 model's node writing it (the quantizer's name for it).
        node: String,
        /// The fp32 file, relative to the folder.
        reference: String,
    },
    /// Set a key of a JSON config file to the value the graph has.
    SetConfig {
        /// The file, relative to the folder (`config.json`).
        file: String,
        /// The key.
        key: String,
        /// The value the graph has.
        value: serde_json::Value,
    },
}

impl Finding {
    /// A finding with only a code, severity and message; add the rest with the builders.
    pub fn new(code: Code, severity: Severity, message: impl Into<String>) -> Self {
        Finding {
            code,
            severity,
            message: message.into(),
            tensor: None,
            names: Vec::new(),
            contract_line: None,
            step: None,
            step0_past_len: None,
            node: None,
            cause: None,
            runtime: None,
            call: None,
            repair: None,
        }
    }
    /// The change a remedy would try.
    pub fn repair(mut self, r: Option<Repair>) -> Self {
        self.repair = r;
        self
    }
    /// An error finding.
    pub fn error(code: Code, message: impl Into<String>) -> Self {
        Self::new(code, Severity::Error, message)
    }
    /// A warning finding.
    pub fn warning(code: Code, message: impl Into<String>) -> Self {
        Self::new(code, Severity::Warning, message)
    }
    /// Names the tensor (or folded family) concerned.
    pub fn tensor(mut self, t: impl Into<String>) -> Self {
        self.tensor = Some(t.into());
        self
    }
    /// Every tensor name behind a folded `tensor`.
    pub fn names(mut self, names: Vec<String>) -> Self {
        self.names = names;
        self
    }
    /// The decoding step and the step-0 past length of the run.
    pub fn at_step(mut self, step: usize, step0_past_len: i64) -> Self {
        self.step = Some(step);
        self.step0_past_len = Some(step0_past_len);
        self
    }
    /// The mechanism behind the finding, in one sentence.
    pub fn cause(mut self, cause: Option<String>) -> Self {
        self.cause = cause;
        self
    }
    /// The contract line that asked for the check.
    pub fn line(mut self, line: Option<u64>) -> Self {
        self.contract_line = line;
        self
    }
}

/// True when some finding is an error (the check fails).
pub fn any_error(findings: &[Finding]) -> bool {
    findings.iter().any(|f| f.severity == Severity::Error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for c in Code::ALL {
            assert!(seen.insert(c.as_str()), "duplicate code {}", c.as_str());
        }
    }

    #[test]
    fn findings_round_trip_through_json() {
        let f = Finding::error(Code::RunFailed, "step 2: boom").at_step(2, 0).tensor("logits");
        let text = serde_json::to_string(&f).unwrap();
        assert!(text.contains(r#""code":"run-failed""#), "{text}");
        let back: Finding = serde_json::from_str(&text).unwrap();
        assert_eq!(back, f);
        assert!(serde_json::from_str::<Code>(r#""no-such-code""#).is_err());
    }
}
