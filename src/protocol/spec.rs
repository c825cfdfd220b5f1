//! What every emitter reads off a protocol loop and its plan: one recipe of
//! the decoder's feeds and caches, each with its value rule, so that the
//! Python, Rust and JavaScript programs are three renderings of one plan
//! (the table reads the same plan through `forms`).

use super::table::Loop;
use crate::plan::{CacheTensor, Plan};

/// How one decoder input's value is made at a call. `rows` is the batch
/// (1, or the beams), `n` the tokens of this call, `past_len` the tokens
/// already in the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rule {
    /// The tokens of this call, `[rows × codebooks, n]`.
    Ids,
    /// The embedding model's output for the tokens of this call.
    Embeds,
    /// The merged decoder's branch flag: `[step > 0]`.
    Flag,
    /// The encoder's first output (its rows repeated per beam).
    States,
    /// Ones `[rows, enc_len]`.
    EncoderMask,
    /// Ones `[rows, past_len + n]`: the past AND the new tokens.
    Mask,
    /// `[rows, len]` over the whole buffer: ones up to `past_len + n`, zeros
    /// after; right-aligned (`true`: zeros, then ones over the last
    /// `past_len + n` slots) where the caller rolls the buffer.
    MaskOverBuffer(i64, bool),
    /// `arange(past_len, past_len + n)`, `[n]`: the buffer slots written.
    CachePosition,
    /// The scalar 1: logits for the last position only.
    LogitsToKeep,
    /// `[rows, n]` continuing the past.
    Positions,
    /// `[k, rows, n]`: every rotary section's row the text positions.
    Positions3(usize),
}

/// One decoder input: its name, element type and value rule.
pub(crate) struct Feed {
    pub(crate) name: String,
    pub(crate) dtype: String,
    pub(crate) rule: Rule,
}

/// One cache tensor as the programs carry it.
pub(crate) struct Cache {
    pub(crate) past: String,
    pub(crate) present: String,
    pub(crate) dtype: String,
    /// Its shape after the batch axis: the past axis 0 when it grows, the
    /// whole shape when fixed.
    pub(crate) dims: Vec<i64>,
    /// Zeros of the whole shape at the start, carried, never grown
    /// (convolution states, static and shared buffers).
    pub(crate) fixed: bool,
}

/// What every emitter needs, read off a loop and its plan.
pub(crate) struct Spec<'a> {
    pub(crate) l: &'a Loop,
    pub(crate) plan: &'a Plan,
    pub(crate) seq2seq: bool,
    pub(crate) pair: bool,
    /// `(name, dtype, dims)` of the encoder's inputs.
    pub(crate) encoder_inputs: &'a [(String, String, Vec<i64>)],
    /// The step-0 file's input names (a split pair's no-past decoder).
    pub(crate) step0_inputs: &'a [String],
    /// Beams the program runs by default (generation_config.json's `num_beams`, else 1).
    pub(crate) beams: i64,
}

impl Spec<'_> {
    pub(crate) fn audio(&self) -> bool {
        self.encoder_inputs.iter().any(|(_, t, _)| t.starts_with("float"))
    }
    /// The encoder states' element type: declared by the plan's model, else
    /// (a split pair's no-past decoder) the cache's float type.
    pub(crate) fn states_dtype(&self) -> String {
        match &self.plan.encoder_hidden_states {
            Some(n) => self.plan.dtype_of(n).to_string(),
            None => self.plan.self_past.first().map_or("float32".into(), |c| c.dtype.to_string()),
        }
    }
    /// The encoder-states input name at step 0 (the pair's no-past decoder has one the plan lacks).
    pub(crate) fn states_name(&self) -> Option<String> {
        self.plan.encoder_hidden_states.clone().or_else(|| {
            (self.pair && self.step0_inputs.iter().any(|n| n == "encoder_hidden_states"))
                .then(|| "encoder_hidden_states".to_string())
        })
    }
    /// Why this export cannot run more than one beam, if it cannot.
    pub(crate) fn single_row(&self) -> Option<String> {
        single_row(self.l)
    }
    /// The cross caches come from the encoder's outputs (genai's Whisper), not from step 0.
    pub(crate) fn cross_from_encoder(&self) -> bool {
        self.l.form == "cross-from-encoder"
    }
    /// Every decoder input but the caches, in the order the programs build them.
    pub(crate) fn feeds(&self) -> Vec<Feed> {
        let p = self.plan;
        let mut out = Vec::new();
        let mut push = |name: &str, rule: Rule| {
            out.push(Feed { name: name.to_string(), dtype: p.dtype_of(name).to_string(), rule });
        };
        match &p.inputs_embeds {
            Some(x) => push(x, Rule::Embeds),
            None => push(&p.input_ids, Rule::Ids),
        }
        if let Some(f) = &p.branch_flag {
            push(f, Rule::Flag);
        }
        if let Some(m) = &p.encoder_attention_mask {
            push(m, Rule::EncoderMask);
        }
        match (&p.attention_mask, p.buffer.as_ref().filter(|b| b.mask_over_buffer)) {
            (Some(m), Some(b)) => {
                let right = p.caller_kept() == Some(crate::plan::roles::CacheForm::CallerRolled);
                push(m, Rule::MaskOverBuffer(b.len, right))
            }
            (Some(m), None) => push(m, Rule::Mask),
            _ => {}
        }
        if let Some(c) = &p.cache_position {
            push(c, Rule::CachePosition);
        }
        if let Some(k) = &p.logits_to_keep {
            push(k, Rule::LogitsToKeep);
        }
        match (&p.position_ids, p.position_rows) {
            (Some(m), Some(k)) => push(m, Rule::Positions3(k)),
            (Some(m), None) => push(m, Rule::Positions),
            _ => {}
        }
        if let Some(name) = self.states_name() {
            let dtype = self.states_dtype();
            out.push(Feed { name, dtype, rule: Rule::States });
        }
        out
    }
    /// Whether any feed reads the tokens already in the cache.
    pub(crate) fn tracks_past_len(&self) -> bool {
        self.feeds().iter().any(|f| {
            matches!(
                f.rule,
                Rule::Mask | Rule::MaskOverBuffer(..) | Rule::CachePosition | Rule::Positions | Rule::Positions3(_)
            )
        })
    }
    /// How the caller puts a call's presents into the buffers it keeps
    /// (`write` at the tokens' slots, `roll`: drop the oldest, append), when
    /// this export's presents hold only the new rows.
    pub(crate) fn keep(&self) -> Option<&'static str> {
        self.plan.caller_kept().map(|f| if f == crate::plan::roles::CacheForm::CallerRolled { "roll" } else { "write" })
    }
    /// The self-attention caches (and states), refreshed from the presents every call.
    pub(crate) fn self_caches(&self) -> Vec<Cache> {
        self.plan.self_past.iter().map(cache).collect()
    }
    /// The cross-attention caches: step 0's presents (or the encoder's), then kept.
    pub(crate) fn cross_caches(&self) -> Vec<Cache> {
        self.plan.cross_past.iter().map(cache).collect()
    }
    /// The element type of the logits and caches the programs read as floats.
    pub(crate) fn uses_float16(&self) -> bool {
        self.plan.self_past.iter().chain(&self.plan.cross_past).any(|c| c.dtype.to_string() == "float16")
            || self.states_dtype() == "float16"
    }
}

/// Why loop `l` cannot run more than one beam, if it cannot.
fn single_row(l: &Loop) -> Option<String> {
    if l.plan.as_ref().is_some_and(|p| p.codebooks.is_some()) {
        return Some("beam search over codebook rows is not written: --num-beams 1".into());
    }
    l.fixed_batch.map(|b| format!("the graph fixes the batch at {b}: beam search needs a row per beam"))
}

/// The beams the programs (and the reference they are tested against) run
/// by default: the folder's `num_beams`, where the loop can run more than one.
pub(crate) fn default_beams(l: &Loop) -> i64 {
    match single_row(l) {
        Some(_) => 1,
        None => l.beams.0.filter(|&b| b > 1).unwrap_or(1),
    }
}

fn cache(c: &CacheTensor) -> Cache {
    Cache {
        past: c.past.clone(),
        present: c.present.clone(),
        dtype: c.dtype.to_string(),
        dims: c.shape.iter().skip(1).copied().collect(),
        fixed: c.fixed,
    }
}

/// The language of an emitted program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Lang {
    /// onnxruntime + numpy.
    Python,
    /// ort 2 + ndarray.
    Rust,
    /// onnxruntime-node.
    Js,
}

/// The beam search every program runs, in words (the programs' comments cite it).
pub(crate) const BEAM_RULE: &str = "each step, every beam's running score plus each token's log-probability; \
the best 2×beams candidates in order (ties: lower beam, then lower id); an end token among the first \
`beams` of them finishes a hypothesis (score / new tokens ^ LENGTH_PENALTY), the others continue until \
`beams` are kept; the cache rows follow each kept beam's origin. Done when `beams` hypotheses are \
finished or the tokens run out; the best finished or running hypothesis wins.";
