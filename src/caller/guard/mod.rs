//! The feed guard: called before each run with what is about to be fed (and
//! after it with what came back), stateful across calls, it names what this
//! caller does wrong against the model's signature and the cache protocol of
//! the runtime's plan: the same plan `check` drives, whatever the cache form
//! (growing, static buffers at `cache_position`, genai's shared buffers,
//! fixed-size states, embeddings chained from an embedding model, several
//! tokens onto a past). `replay` runs the same guard over a recorded trace.

mod origin;
mod pasts;
mod rules;
mod signature;

use super::trace::TensorRecord;
use crate::finding::{Code, Finding, Severity};
use crate::model::signature::Signature;
use crate::plan::Plan;
#[cfg(feature = "runtime")]
pub(crate) use origin::zero_digest;
use origin::History;
use std::collections::BTreeMap;

/// What the guard knows of one tensor: dtype, shape, digest, small values.
pub type TensorMeta = TensorRecord;

/// Feeds or outputs of one call, by name.
pub type Tensors = BTreeMap<String, TensorMeta>;

/// A model the guard watches: its signature and, for a decoder, the plan of
/// the protocol a correct caller follows.
struct Watched {
    name: String,
    sig: Signature,
    plan: Option<Plan>,
}

/// The calls refused by [`FeedGuard::before_run`].
#[derive(Debug, thiserror::Error)]
#[error("{}", findings.iter().map(|f| f.message.clone()).collect::<Vec<_>>().join("; "))]
pub struct GuardError {
    /// Every departure of this call.
    pub findings: Vec<Finding>,
}

/// What one generation (one sequence's decoder calls) has bound so far.
#[derive(Default)]
struct Generation {
    /// Decoder calls in it.
    calls: usize,
    /// The last decoder call: its index and outputs (its presents are the next past).
    prev: Option<(usize, Tensors)>,
    /// The first decoder call's outputs (its cross-attention presents are kept).
    step0: Option<(usize, Tensors)>,
    /// Tokens fed so far: the real length a buffer, a mask and positions continue from.
    tokens: i64,
    /// The previous decoder call's token count and ids (when recorded).
    prev_ids: Option<(usize, Option<Vec<i64>>)>,
    /// The batch the generation started with, and the call that set it.
    batch: Option<(i64, usize)>,
    /// Fixed buffers' length on the sequence axis, as the first call fed them.
    buffer_len: Option<(i64, usize)>,
    /// The encoder states the generation started with (digest, call).
    encoder_states: Option<(String, usize)>,
}

/// Stateful across the calls of one generation.
pub struct FeedGuard {
    models: Vec<Watched>,
    generation: Generation,
    decoder_calls: usize,
    /// Decoder calls that re-fed a prefix one token longer on the no-cache path.
    no_cache_growing: usize,
    calls: usize,
    /// Every call's outputs: where a fed tensor came from.
    history: History,
}

impl FeedGuard {
    /// A guard for one model.
    pub fn new(name: &str, sig: Signature, plan: Option<Plan>) -> Self {
        Self::for_models(vec![(name.to_string(), sig, plan)])
    }

    /// A guard for one model file: its signature (no weights read) and the
    /// plan of its protocol, from the folder around it (as `check` drives it).
    pub fn for_file(path: &std::path::Path) -> Result<Self, crate::error::Error> {
        use crate::folder::layout::Layout;
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
        let layout = Layout::read(dir, Some(path), None).or_else(|_| Layout::single(path, None))?;
        let e = layout
            .entries
            .iter()
            .find(|e| e.file.path == path)
            .ok_or_else(|| crate::error::Error::Internal(format!("{}: not found in its folder", path.display())))?;
        let plan = layout.plan_for(e, 1).and_then(Result::ok);
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        Ok(Self::new(&name, e.sig.clone(), plan))
    }

    /// A guard for the models of one application (encoder, embedding model, decoders).
    pub fn for_models(models: Vec<(String, Signature, Option<Plan>)>) -> Self {
        FeedGuard {
            models: models.into_iter().map(|(name, sig, plan)| Watched { name, sig, plan }).collect(),
            generation: Generation::default(),
            decoder_calls: 0,
            no_cache_growing: 0,
            calls: 0,
            history: History::default(),
        }
    }

    /// Refuses a call that departs from the protocol, before it runs.
    pub fn before_run(&mut self, model: &str, feeds: &Tensors) -> Result<(), GuardError> {
        let call = self.calls;
        let findings: Vec<Finding> =
            self.check(call, model, feeds).into_iter().filter(|f| f.severity == Severity::Error).collect();
        if findings.is_empty() {
            Ok(())
        } else {
            Err(GuardError { findings })
        }
    }

    fn watched(&self, model: &str) -> Option<&Watched> {
        self.models.iter().find(|m| m.name == model).or_else(|| (self.models.len() == 1).then(|| &self.models[0]))
    }

    /// Every departure of call `call` of `model` with these feeds.
    pub fn check(&mut self, call: usize, model: &str, feeds: &Tensors) -> Vec<Finding> {
        self.calls = call + 1;
        let Some(w) = self.watched(model) else { return vec![] };
        // A cached decoder-only mask covers past AND new tokens, whatever its
        // axis is named (optimum's merged decoders call it sequence_length too):
        // the protocol's rules judge its length, not the symbol.
        let spans_past = w
            .plan
            .as_ref()
            .filter(|p| p.family == crate::plan::Family::DecoderOnly && !p.is_cacheless())
            .and_then(|p| p.attention_mask.clone());
        let mut out = signature::signature_rules(&w.sig, feeds, spans_past.as_deref());
        let Some(plan) = w.plan.clone() else { return at(out, call) };
        if out.iter().any(|f| f.code == Code::CallerSignature && f.severity == Severity::Error) {
            return at(out, call);
        }
        self.decoder_calls += 1;
        let mut judged = rules::Call::read(&plan, feeds, call);
        // Judged against the last call before a new sequence resets what is bound.
        let refeed = rules::refeeds(&self.generation, &judged);
        if rules::starts_anew(&plan, &self.generation, &judged, &mut self.history, feeds) {
            let prev_ids = self.generation.prev_ids.take();
            self.generation = Generation { prev_ids, ..Generation::default() };
            judged.first = true;
        }
        let verdict = rules::judge(&plan, &self.generation, &mut self.history, &judged, feeds, refeed);
        out.extend(verdict.findings);
        if verdict.no_cache_refeed {
            self.no_cache_growing += 1;
        }
        let g = &mut self.generation;
        g.calls += 1;
        g.tokens = judged.past_len.filter(|_| plan.buffer.is_none()).unwrap_or(g.tokens) + judged.new_tokens;
        g.prev_ids = Some((judged.new_tokens as usize, judged.ids.clone()));
        g.batch = g.batch.or(judged.batch.map(|b| (b, call)));
        g.buffer_len = g.buffer_len.or(judged.buffer_len.map(|b| (b, call)));
        g.encoder_states = g.encoder_states.clone().or(judged.encoder_states.clone().map(|d| (d, call)));
        at(out, call)
    }

    /// Takes in what call `self.calls - 1` fed and returned (`None` when it failed).
    pub fn after(&mut self, model: &str, outputs: Option<&Tensors>) {
        self.after_call(model, &Tensors::new(), outputs)
    }

    /// [`FeedGuard::after`], with the call's feeds (their small values say
    /// whose tokens an embedding model's output holds).
    pub fn after_call(&mut self, model: &str, feeds: &Tensors, outputs: Option<&Tensors>) {
        // A guard of one model takes any name for it, as `check` does.
        let name = self.watched(model).map_or(model, |w| w.name.as_str()).to_string();
        self.observe(self.calls.saturating_sub(1), &name, feeds, outputs)
    }

    /// Takes in call `call` of any model, watched or not (`replay` shows the
    /// guard every call of a trace: an embedding model's or an encoder's
    /// outputs are where a decoder's feeds come from).
    pub fn observe(&mut self, call: usize, model: &str, feeds: &Tensors, outputs: Option<&Tensors>) {
        self.calls = self.calls.max(call + 1);
        let Some(o) = outputs else { return };
        self.history.push(call, model, feeds, o);
        // A decoder's outputs: from a planned decoder, or from the no-past
        // decoder of a split pair (its presents start the generation).
        let planned = self.models.iter().any(|m| m.name == model && m.plan.is_some());
        let presents = self
            .models
            .iter()
            .filter_map(|m| m.plan.as_ref())
            .any(|p| p.self_past.iter().any(|c| o.contains_key(&c.present)));
        if planned || presents {
            let g = &mut self.generation;
            if g.step0.is_none() {
                g.step0 = Some((call, o.clone()));
            }
            g.prev = Some((call, o.clone()));
        }
    }

    /// Findings about the whole run so far: a cache that is never used.
    pub fn summary(&self) -> Vec<Finding> {
        if self.decoder_calls >= 3 && self.no_cache_growing + 1 >= self.decoder_calls {
            return vec![Finding::error(Code::CallerNoCache, format!(
                "the cache is never used: {} decoder calls each re-feed the whole prefix, one token longer every call, on the no-cache path; the presents each call returns are thrown away",
                self.decoder_calls
            ))];
        }
        Vec::new()
    }
}

fn at(findings: Vec<Finding>, call: usize) -> Vec<Finding> {
    findings
        .into_iter()
        .map(|mut f| {
            f.call = Some(call);
            f
        })
        .collect()
}
