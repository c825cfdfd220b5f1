//! How to drive a model with a KV cache: which input gets what at each step.
//! Built from the contract's `cache` section, with gaps filled from the
//! signature for the families we know (optimum seq2seq merged decoders and
//! decoder-only exports). Read by everything that drives or explains a
//! model: the engine and its checks, `protocol`, `replay` and the feed guard.
//! `numeric` is the graph's numeric form and the parity tolerance it sets.

pub mod faults;
mod forms;
pub use forms::ENCODER_TOKENS;
pub mod infer;
pub mod numeric;
pub mod roles;

use crate::contract::{Contract, DimRule};
use crate::model::names::{is_past_name, present_by_convention};
use crate::model::signature::{Dim, ElemType, Signature};
use roles::{CacheForm, InputRole, MaskSpan};
use serde::{Deserialize, Serialize};

/// How the model is driven.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Family {
    /// Encoder-decoder: encoder states in, cross-attention past kept from step 0.
    Seq2Seq,
    /// GPT-2 / Llama / Qwen2: attention_mask over past + new, position_ids.
    DecoderOnly,
    /// An encoder alone (embeddings, feature extraction): token ids in,
    /// hidden states out (`logits` names them), no cache.
    EncoderOnly,
}

/// One past input and the present output that feeds it next step.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CacheTensor {
    /// The past input.
    pub past: String,
    /// The present output that becomes it next step.
    pub present: String,
    /// Past shape with the sequence axis left at 0, e.g. [batch, heads, 0, head_dim].
    pub shape: Vec<i64>,
    /// The past's declared element type (what it is fed as).
    pub dtype: ElemType,
    /// How the present was paired with the past (name convention, or shape and order).
    #[serde(default)]
    pub matched_by: String,
    /// A fixed-size state (convolution or recurrent): zero-filled at step 0,
    /// carried from its present, never grown; `shape` is its whole shape.
    #[serde(default)]
    pub fixed: bool,
    /// A fixed buffer of a static or shared cache: `fixed` too, and written
    /// in place at the past length (the other slots stay as they were).
    #[serde(default)]
    pub buffer: bool,
    /// The present's declared element type, when it is this model's output:
    /// what a caller feeds back as the next past (float16 presents into a
    /// float32 past fail at the first cached step).
    #[serde(default)]
    pub present_dtype: Option<ElemType>,
}

/// Fixed cache buffers written in place: a static cache at `cache_position`,
/// or onnxruntime-genai's shared past/present buffers.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Buffer {
    /// Slots on the sequence axis.
    pub len: i64,
    /// Static (at `cache_position`) or shared (genai).
    pub form: CacheForm,
    /// The attention mask spans the whole buffer (ones up to the real
    /// length, zeros after) rather than only the tokens so far.
    pub mask_over_buffer: bool,
}

/// Everything the driver needs; serialized to the child process.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Plan {
    /// Seq2seq or decoder-only.
    pub family: Family,
    /// The token input.
    pub input_ids: String,
    /// Its declared type (int64 or int32).
    pub input_ids_dtype: ElemType,
    /// The logits output.
    pub logits: String,
    /// Vocabulary size (last axis of logits).
    pub vocab: i64,
    /// The merged decoder's `use_cache_branch`, if any.
    pub branch_flag: Option<String>,
    /// Self-attention pasts: refreshed from the presents every step.
    pub self_past: Vec<CacheTensor>,
    /// Cross-attention pasts: taken once from step 0.
    pub cross_past: Vec<CacheTensor>,
    /// The sequence axis of the pasts.
    pub seq_axis: usize,
    /// Past lengths fed at step 0, one run each.
    pub step0_past_lengths: Vec<i64>,
    /// How far cached logits may depart from uncached ones, by numeric form.
    pub tolerance: numeric::Tolerance,
    /// Decoder-only: the mask over past + new tokens.
    pub attention_mask: Option<String>,
    /// Positions continuing the past, when the model takes them.
    pub position_ids: Option<String>,
    /// Seq2seq: the encoder's output fed to the decoder.
    pub encoder_hidden_states: Option<String>,
    /// Seq2seq: the encoder mask.
    pub encoder_attention_mask: Option<String>,
    /// Width of the encoder states.
    pub hidden: Option<i64>,
    /// Inputs the plan cannot fill; the driver refuses to guess.
    pub unknown_inputs: Vec<String>,
    /// Every input's declared element type.
    pub dtypes: Vec<(String, ElemType)>,
    /// Fixed cache buffers, when the cache is not a growing one.
    #[serde(default)]
    pub buffer: Option<Buffer>,
    /// Where the new tokens are written in the buffers (`cache_position`).
    #[serde(default)]
    pub cache_position: Option<String>,
    /// A scalar count of trailing positions to get logits for: fed 0 (every position).
    #[serde(default)]
    pub logits_to_keep: Option<String>,
    /// The decoder takes embeddings here instead of token ids: the driver
    /// feeds token ids as `input_ids` and the engine turns them into this
    /// input (through the folder's embedding model) just before each run.
    #[serde(default)]
    pub inputs_embeds: Option<String>,
    /// The embeddings' width, when fixed.
    #[serde(default)]
    pub embeds_width: Option<i64>,
    /// Tokens per call when the graph fixes it (a static export traced at
    /// one token takes exactly one, the prompt included).
    #[serde(default)]
    pub tokens_per_call: Option<i64>,
    /// Rows of a rank-3 position input (`[3, batch, seq]`: multimodal rotary
    /// sections, each row the text positions for text tokens); `None`: `[batch, seq]`.
    #[serde(default)]
    pub position_rows: Option<usize>,
    /// Token rows per batch item (MusicGen: batch × codebooks); the caches and encoder keep the batch.
    #[serde(default)]
    pub codebooks: Option<i64>,
}

/// The shared buffers' length when genai_config.json states no `max_length`.
const SHARED_BUFFER_LEN: i64 = 256;

impl Plan {
    /// The declared element type of input `name` (int64 when undeclared).
    pub fn dtype_of(&self, name: &str) -> ElemType {
        self.dtypes.iter().find(|(n, _)| n == name).map(|(_, d)| *d).unwrap_or(ElemType::I64)
    }
}

fn fixed_from(sig_dim: Option<&Dim>, rule: Option<&DimRule>) -> Option<i64> {
    match (sig_dim, rule) {
        (Some(Dim::Fixed(v)), _) => Some(*v),
        (_, Some(DimRule::Fixed(v, _))) => Some(*v),
        _ => None,
    }
}

fn param(contract: &Contract, name: &str) -> Option<i64> {
    contract.params.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
}

/// The present output a past input is refreshed from, and how it was
/// matched: the contract's `present_prefix`, else the naming conventions in
/// the wild (`past_key_values.N` → `present.N`, `past…` → `present…`), else
/// the first unmatched output of the past's dtype and rank, in order.
fn present_for(
    sig: &Signature,
    past: &str,
    prefix: Option<&(String, String)>,
    taken: &[String],
) -> Option<(String, String)> {
    if let Some((from, to)) = prefix {
        let p = past.replacen(from.as_str(), to, 1);
        return sig.output(&p).is_some().then(|| (p, format!("contract present_prefix {from} → {to}")));
    }
    if let Some((p, how)) = present_by_convention(past, |p| sig.output(p).is_some()) {
        return Some((p, how.into()));
    }
    let parts = |name: &str| {
        sig.input(name)
            .or_else(|| sig.output(name))
            .and_then(|p| p.ty.tensor_parts())
            .map(|(e, d)| (e, d.map(<[Dim]>::len)))
    };
    let want = parts(past)?;
    let pasts: Vec<&str> = sig.inputs.iter().map(|p| p.name.as_str()).filter(|n| is_past_name(n)).collect();
    let k = pasts.iter().position(|n| *n == past)?;
    let presents: Vec<&str> = sig
        .outputs
        .iter()
        .map(|p| p.name.as_str())
        .filter(|n| !n.contains("logits") && parts(n) == Some(want))
        .collect();
    let p = presents.get(k).filter(|p| !taken.iter().any(|t| t == **p))?;
    Some((p.to_string(), "shape and order: the k-th past and the k-th output of its dtype and rank".into()))
}

/// Builds the plan, or says in one sentence why the model cannot be driven.
pub fn build(sig: &Signature, contract: &Contract, batch: i64) -> Result<Plan, String> {
    build_with(sig, contract, batch, &infer::Hints::default())
}

/// [`build`], with what the folder's configs say (genai's shared buffers and their length).
pub fn build_with(sig: &Signature, contract: &Contract, batch: i64, hints: &infer::Hints) -> Result<Plan, String> {
    let cache = contract.cache.clone().unwrap_or_default();
    let has = |n: &str| sig.input(n).is_some();
    // Only what the model declares is fed: a contract may name an optional
    // input (position_ids) that this export computes inside the graph.
    let pick = |given: &Option<String>, default: &str| -> Option<String> {
        let name = given.as_deref().unwrap_or(default);
        has(name).then(|| name.to_string())
    };
    // What the graph itself says, for every name the contract and the
    // conventions leave open (a dynamo export's `k0` and `linear_14`).
    let inferred = infer::infer(sig, hints);
    let inferred_name = |role: InputRole| inferred.input(role).map(|p| p.name.clone());
    let input_ids = cache
        .input_ids
        .clone()
        .or_else(|| (!has("input_ids")).then(|| inferred_name(InputRole::TokenIds)).flatten())
        .unwrap_or_else(|| "input_ids".into());
    // Embeddings in place of ids (an embeddings-split export): ids are fed
    // under `input_ids` and embedded by the engine before every run.
    let inputs_embeds = match sig.input(&input_ids) {
        Some(_) => None,
        None => inferred_name(InputRole::InputsEmbeds),
    };
    let embeds_width = inputs_embeds.as_ref().and_then(|n| match sig.input(n)?.ty.tensor_parts()?.1?.last()? {
        Dim::Fixed(v) => Some(*v),
        _ => None,
    });
    let input_ids_dtype = match sig.input(&input_ids).and_then(|p| p.ty.tensor_parts()) {
        Some((e, _)) => e,
        None if inputs_embeds.is_some() => ElemType::I64,
        None => return Err(format!("the model has no `{input_ids}` input to feed tokens to")),
    };
    let logits = cache
        .logits
        .clone()
        .or_else(|| sig.output("logits").is_none().then(|| inferred.logits.as_ref().map(|l| l.0.clone())).flatten())
        .unwrap_or_else(|| "logits".into());
    let logits_port = sig.output(&logits).ok_or_else(|| format!("the model has no `{logits}` output"))?;
    let vocab = match logits_port.ty.tensor_parts() {
        Some((_, Some(d))) => match d.last() {
            Some(Dim::Fixed(v)) => Some(*v),
            _ => None,
        },
        _ => None,
    }
    .or_else(|| param(contract, "vocab"))
    .ok_or("the vocabulary size is neither a fixed last axis of logits nor a `vocab` parameter")?;

    let encoder_hidden_states = pick(&cache.encoder_hidden_states, "encoder_hidden_states");
    // Cross-attention pasts make it a seq2seq decoder, encoder states or not
    // (onnxruntime-genai's Whisper takes its cross cache from the encoder).
    let crossed = inferred.all(InputRole::CrossPast).next().is_some();
    let family =
        if encoder_hidden_states.is_some() || crossed || sig.inputs.iter().any(|p| p.name.contains(".encoder.")) {
            Family::Seq2Seq
        } else {
            Family::DecoderOnly
        };
    let branch_flag = pick(&cache.branch_flag, "use_cache_branch");

    let expand = |templates: &[String]| -> Vec<String> {
        let mut names = Vec::new();
        for t in templates {
            for input in &contract.inputs {
                if input.template == *t || input.name == *t {
                    names.push(input.name.clone());
                }
            }
        }
        names
    };
    // The contract's cache names, where the model has them.
    let mut self_names = expand(&cache.self_past);
    let mut cross_names = expand(&cache.cross_past);
    self_names.retain(|n| has(n));
    cross_names.retain(|n| has(n));
    let from_contract = !self_names.is_empty() || !cross_names.is_empty();
    let mut seq_axis = if from_contract { cache.seq_axis } else { None };
    if !from_contract {
        for p in &sig.inputs {
            if is_past_name(&p.name) {
                if p.name.contains(".encoder.") {
                    cross_names.push(p.name.clone());
                } else {
                    self_names.push(p.name.clone());
                }
            }
        }
        // No past by any naming convention: the pasts the graph pairs with a growing present.
        if self_names.is_empty() && cross_names.is_empty() {
            self_names = inferred.all(InputRole::Past).map(|p| p.name.clone()).collect();
            cross_names = inferred.all(InputRole::CrossPast).map(|p| p.name.clone()).collect();
        }
        // The axis the graph grows (GPT-BigCode's fused cache grows on axis 1),
        // or the one a caller-kept buffer takes its new rows on.
        seq_axis = self_names
            .first()
            .and_then(|n| inferred.pair_of(n).and_then(|p| p.grows_on.or_else(|| infer::new_rows_axis(sig, p))))
            .or(cache.seq_axis);
    }
    let seq_axis = seq_axis.unwrap_or(2);
    let buffer = match inferred.cache_form {
        // A static cache: its buffers' fixed size on the sequence axis.
        CacheForm::StaticBuffer | CacheForm::CallerWritten | CacheForm::CallerRolled => self_names
            .first()
            .and_then(|n| sig.input(n)?.ty.tensor_parts()?.1?.get(seq_axis).cloned())
            .and_then(|d| if let Dim::Fixed(v) = d { Some(v) } else { None }),
        CacheForm::SharedBuffer => Some(hints.max_length.unwrap_or(SHARED_BUFFER_LEN)),
        _ => None,
    }
    .map(|len| Buffer {
        len,
        form: inferred.cache_form,
        mask_over_buffer: inferred.mask_span == Some(MaskSpan::Buffer),
    });
    // Fixed-size states (LFM2's conv states) ride along with the cache, whatever the contract names.
    for s in inferred.all(InputRole::State) {
        if !self_names.contains(&s.name) {
            self_names.push(s.name.clone());
        }
    }
    // A cross-attention past needs no present of its own: with-past decoders
    // take it from step 0's outputs (the no-past decoder's) and keep it.
    let prefix = cache.present_prefix.as_ref();
    let mut taken: Vec<String> = Vec::new();
    let mut tensor = |past: &str, cross: bool| -> Result<CacheTensor, String> {
        let port = sig.input(past).ok_or_else(|| format!("cache input `{past}` is not in the model"))?;
        let by_graph = || {
            let p = inferred.pair_of(past).filter(|p| !taken.contains(&p.present))?;
            Some((p.present.clone(), p.evidence.clone()))
        };
        let (present, matched_by) = match present_for(sig, past, prefix, &taken).or_else(by_graph) {
            Some(m) => m,
            // A cross past without its own present is taken from step 0's outputs.
            // (onnxruntime-genai's `past_key_cross_N` comes from the encoder's `present_key_cross_N`.)
            None if cross && !past.starts_with("past_key_values") && past.starts_with("past") => {
                (past.replacen("past", "present", 1), "name (the encoder's output of that name)".into())
            }
            None if cross => {
                (past.replacen("past_key_values", "present", 1), "name (taken from step 0's outputs)".into())
            }
            None => {
                return Err(format!(
                    "cache input `{past}` has no matching present output (by name, or by dtype, rank and order)"
                ))
            }
        };
        taken.push(present.clone());
        let (elem, dims) = port.ty.tensor_parts().ok_or_else(|| format!("`{past}` is not a tensor"))?;
        let dims = dims.ok_or_else(|| format!("`{past}` declares no shape"))?;
        let rule = contract.inputs.iter().find(|r| r.name == past).and_then(|r| r.shape.clone());
        let state = inferred.inputs.iter().any(|i| i.name == past && i.role == InputRole::State);
        let in_buffer = buffer.as_ref().filter(|_| !state && !cross);
        let fixed = state || in_buffer.is_some();
        let mut shape = Vec::with_capacity(dims.len());
        for (axis, d) in dims.iter().enumerate() {
            let v = if axis == 0 {
                batch
            } else if let (true, Some(b)) = (axis == seq_axis, in_buffer) {
                b.len
            } else if let (true, true, Dim::Fixed(v)) = (axis == seq_axis, cross, d) {
                // A cross past of a fixed encoder length (genai Whisper's 1500 frames).
                *v
            } else if axis == seq_axis && !fixed {
                0
            } else {
                fixed_from(Some(d), rule.as_ref().and_then(|r| r.get(axis))).ok_or_else(|| {
                    format!(
                        "`{past}` axis {axis} is `{d}`: give it a fixed size in the contract so the cache can be built"
                    )
                })?
            };
            shape.push(v);
        }
        let present_dtype = sig.output(&present).and_then(|o| o.ty.tensor_parts()).map(|(e, _)| e);
        Ok(CacheTensor {
            past: past.to_string(),
            present,
            shape,
            dtype: elem,
            matched_by,
            fixed,
            buffer: in_buffer.is_some(),
            present_dtype,
        })
    };
    let self_past = self_names.iter().map(|n| tensor(n, false)).collect::<Result<Vec<_>, _>>()?;
    let cross_past = cross_names.iter().map(|n| tensor(n, true)).collect::<Result<Vec<_>, _>>()?;
    // A decoder-only model without any past is driven by re-feeding its prefix
    // (`Plan::is_cacheless`); every other form needs a cache to drive.
    let has_past = sig.inputs.iter().any(|p| crate::model::names::is_past_name(&p.name));
    if self_past.is_empty() && (family != Family::DecoderOnly || has_past || !cross_past.is_empty()) {
        return Err("no past inputs (past_key_values.*) to drive a cache with".into());
    }

    let hidden = encoder_hidden_states.as_ref().and_then(|e| {
        let port = sig.input(e)?;
        match port.ty.tensor_parts() {
            Some((_, Some(d))) => match d.last() {
                Some(Dim::Fixed(v)) => Some(*v),
                _ => param(contract, "hidden"),
            },
            _ => param(contract, "hidden"),
        }
    });
    let attention_mask = pick(&cache.attention_mask, "attention_mask");
    let position_ids = pick(&cache.position_ids, "position_ids").or_else(|| inferred_name(InputRole::PositionIds));
    let encoder_attention_mask = pick(&cache.encoder_attention_mask, "encoder_attention_mask");

    let (position_rows, codebooks) =
        (forms::position_rows(sig, position_ids.as_deref()), forms::codebooks(sig, &input_ids, hints));
    let cache_position = inferred_name(InputRole::CachePosition);
    let logits_to_keep = inferred_name(InputRole::LogitsToKeep);
    // Only a static cache is driven a fixed number of tokens per call (its
    // form); a growing cache with a fixed token axis has a size baked in, and
    // a standard caller feeding its prompt at once finds out (a finding).
    let static_cache = buffer.as_ref().is_some_and(|b| b.form != CacheForm::SharedBuffer);
    let tokens_per_call = match sig.input(&input_ids).and_then(|p| p.ty.tensor_parts()) {
        Some((_, Some(d))) if static_cache => match d.get(1) {
            Some(Dim::Fixed(v)) => Some(*v),
            _ => None,
        },
        _ => None,
    };
    let ids = Some(inputs_embeds.clone().unwrap_or_else(|| input_ids.clone()));
    let known: Vec<&str> = [
        &ids,
        &branch_flag,
        &attention_mask,
        &position_ids,
        &encoder_hidden_states,
        &encoder_attention_mask,
        &cache_position,
        &logits_to_keep,
    ]
    .into_iter()
    .filter_map(|o| o.as_deref())
    .chain(self_past.iter().chain(&cross_past).map(|c| c.past.as_str()))
    .collect();
    let unknown_inputs =
        sig.inputs.iter().filter(|p| !known.contains(&p.name.as_str())).map(|p| p.name.clone()).collect();
    let dtypes = sig.inputs.iter().filter_map(|p| p.ty.tensor_parts().map(|(e, _)| (p.name.clone(), e))).collect();
    // Without a branch flag every past slot is attended to: only an empty
    // past is right at step 0, whatever the contract's list says.
    let given = cache.step0_past_lengths.clone().map(|l| {
        let kept: Vec<i64> = l.into_iter().filter(|&n| branch_flag.is_some() || n == 0).collect();
        if kept.is_empty() {
            vec![0]
        } else {
            kept
        }
    });
    let step0_past_lengths = given.unwrap_or_else(|| match (family, &branch_flag) {
        // Current optimum and transformers.js feed 0, older optimum 1: both must work
        // (the flag-false branch ignores the dummy past).
        (Family::Seq2Seq, Some(_)) => vec![0, 1],
        // Without a flag every past slot is attended to: only an empty past is right.
        _ => vec![0],
    });
    Ok(Plan {
        family,
        input_ids,
        input_ids_dtype,
        logits,
        vocab,
        branch_flag,
        self_past,
        cross_past,
        seq_axis,
        step0_past_lengths,
        tolerance: numeric::tolerance(numeric::form(sig), cache.parity_tolerance),
        attention_mask,
        position_ids,
        encoder_hidden_states,
        encoder_attention_mask,
        hidden,
        unknown_inputs,
        dtypes,
        buffer,
        cache_position,
        logits_to_keep,
        tokens_per_call,
        position_rows,
        codebooks,
        inputs_embeds,
        embeds_width,
    })
}
