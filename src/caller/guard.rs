//! The feed guard: called before each run with what is about to be fed (and
//! after it with what came back), stateful across calls, it names what this
//! caller does wrong against the model's signature and the cache protocol of
//! the runtime's plan. `replay` runs the same guard over a recorded trace.

use super::trace::TensorRecord;
use crate::finding::{Code, Finding, Severity};
use crate::model::fold::fold_names;
use crate::model::signature::{Dim, Signature};
use crate::plan::{Family, Plan};
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

/// Stateful across the calls of one generation.
pub struct FeedGuard {
    models: Vec<Watched>,
    /// Outputs of the last decoder call (its presents become the next past).
    prev: Option<Tensors>,
    /// Outputs of the first decoder call (its cross-attention presents are kept).
    step0: Option<Tensors>,
    prev_ids_len: Option<usize>,
    decoder_calls: usize,
    /// Decoder calls that re-fed a prefix one token longer on the no-cache path.
    no_cache_growing: usize,
    calls: usize,
    /// Every decoder call's outputs with its call index: where a fed tensor came from.
    history: Vec<(usize, Tensors)>,
}

impl FeedGuard {
    /// A guard for one model.
    pub fn new(name: &str, sig: Signature, plan: Option<Plan>) -> Self {
        Self::for_models(vec![(name.to_string(), sig, plan)])
    }

    /// A guard for one model file: its signature (no weights read) and the
    /// plan of its family's protocol, from the folder around it.
    pub fn for_file(path: &std::path::Path) -> Result<Self, crate::error::Error> {
        use crate::folder::layout::Layout;
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
        let layout = Layout::read(dir, Some(path), None).or_else(|_| Layout::single(path, None))?;
        let e = layout
            .entries
            .iter()
            .find(|e| e.file.path == path)
            .ok_or_else(|| crate::error::Error::Internal(format!("{}: not found in its folder", path.display())))?;
        let plan = layout.contract_for(e).and_then(|c| c.ok()).and_then(|c| crate::plan::build(&e.sig, &c, 1).ok());
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        Ok(Self::new(&name, e.sig.clone(), plan))
    }

    /// A guard for the models of one application (encoder, decoders).
    pub fn for_models(models: Vec<(String, Signature, Option<Plan>)>) -> Self {
        FeedGuard {
            models: models.into_iter().map(|(name, sig, plan)| Watched { name, sig, plan }).collect(),
            prev: None,
            step0: None,
            prev_ids_len: None,
            decoder_calls: 0,
            no_cache_growing: 0,
            calls: 0,
            history: Vec::new(),
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

    /// Every departure of call `call` of `model` with these feeds.
    pub fn check(&mut self, call: usize, model: &str, feeds: &Tensors) -> Vec<Finding> {
        self.calls = call + 1;
        let Some(w) =
            self.models.iter().find(|m| m.name == model).or_else(|| (self.models.len() == 1).then(|| &self.models[0]))
        else {
            return vec![];
        };
        let mut out = signature_rules(&w.sig, feeds);
        let Some(plan) = &w.plan else { return at(out, call) };
        if out.iter().any(|f| f.code == Code::CallerSignature && f.severity == Severity::Error) {
            return at(out, call);
        }
        self.decoder_calls += 1;
        let seq = plan.seq_axis;
        let past_len = plan.self_past.iter().find_map(|c| feeds.get(&c.past)).and_then(|r| r.shape.get(seq).copied());
        let flag =
            plan.branch_flag.as_ref().and_then(|f| feeds.get(f)).and_then(|r| r.value.as_ref()?.first().copied());
        let ids_len = feeds.get(&plan.input_ids).and_then(|r| r.shape.get(1).copied()).map(|n| n as usize);
        let cached = match flag {
            Some(f) => f != 0,
            None => plan.branch_flag.is_none() && past_len.unwrap_or(0) > 0,
        };
        let first = self.decoder_calls == 1;
        let prefix_grows = matches!((self.prev_ids_len, ids_len), (Some(p), Some(n)) if n == p + 1);

        // Branch flag against the past.
        if let (Some(f), Some(l)) = (flag, past_len) {
            if f != 0 && l == 0 && self.step0.is_none() {
                out.push(Finding::error(
                    Code::CallerFlag,
                    format!(
                        "`{}` is true (cached branch) with an empty past (length 0): step 0 runs the no-cache branch",
                        plan.branch_flag.as_deref().unwrap_or("")
                    ),
                ));
            }
            if f == 0 && !first && (l > 1 || fed_back(plan, feeds, self.prev.as_ref())) {
                out.push(Finding::error(Code::CallerFlag, format!(
                    "`{}` is false after step 0 while a past of length {l} is fed: the no-cache branch ignores it, the cache is not used",
                    plan.branch_flag.as_deref().unwrap_or("")
                )));
            }
        }
        if !cached && !first && prefix_grows {
            self.no_cache_growing += 1;
        }
        if cached {
            // Self-attention past: the previous call's present.
            if let Some(prev) = &self.prev {
                let mut wrong = Vec::new();
                let mut detail = String::new();
                for c in &plan.self_past {
                    let (Some(fed), Some(present)) = (feeds.get(&c.past), prev.get(&c.present)) else { continue };
                    let differs = fed.shape != present.shape
                        || (fed.digest.is_some() && present.digest.is_some() && fed.digest != present.digest);
                    if let Some(p) = self.provenance(&c.past, &c.present, fed).filter(|_| differs && detail.is_empty())
                    {
                        detail = p;
                    }
                    if fed.shape != present.shape {
                        if detail.is_empty() {
                            detail = format!(
                                "length {} on axis {seq} where the previous present has {}",
                                fed.shape.get(seq).copied().unwrap_or(-1),
                                present.shape.get(seq).copied().unwrap_or(-1)
                            );
                        }
                        wrong.push(c.past.clone());
                    } else if fed.digest.is_some() && present.digest.is_some() && fed.digest != present.digest {
                        if detail.is_empty() {
                            detail = format!(
                                "same shape {:?}, other values (fresh zeros, or another call's present)",
                                fed.shape
                            );
                        }
                        wrong.push(c.past.clone());
                    }
                }
                if !wrong.is_empty() {
                    out.push(
                        Finding::error(
                            Code::CallerPast,
                            format!("{} is not the previous call's present: {detail}", fold_names(&wrong).join(", ")),
                        )
                        .names(wrong),
                    );
                }
            }
            // Cross-attention past: step 0's present, kept.
            let mut dummy = Vec::new();
            let mut other = Vec::new();
            for c in &plan.cross_past {
                let Some(fed) = feeds.get(&c.past) else { continue };
                if fed.shape.first() == Some(&0) {
                    dummy.push(c.past.clone());
                } else if let Some(kept) = self.step0.as_ref().and_then(|s| s.get(&c.present)) {
                    if fed.digest.is_some() && kept.digest.is_some() && fed.digest != kept.digest {
                        other.push(c.past.clone());
                    }
                }
            }
            if let Some(first_dummy) = dummy.first() {
                let shape = feeds.get(first_dummy).map(|r| r.shape.clone()).unwrap_or_default();
                // Where it came from, when the trace's digests say.
                let from = feeds.get(first_dummy).and_then(|f| self.origin(f)).map_or(String::new(), |(call, name)| {
                    let kept = self.history.first().map_or(0, |(c, _)| *c);
                    format!(" (`{first_dummy}` = `{name}` of call {call}, which the cache branch returns as a placeholder; feed call {kept}'s encoder presents for every later call)")
                });
                out.push(Finding::error(Code::CallerCrossPast, format!(
                    "{} is {shape:?}: the cached branch's dummy present.*.encoder.* fed back as the cross-attention past; keep step 0's{from}",
                    fold_names(&dummy).join(", ")
                )).names(dummy));
            } else if !other.is_empty() {
                out.push(Finding::error(Code::CallerCrossPast, format!(
                    "{} is not step 0's present.*.encoder.*: the cross-attention past is taken once, at step 0, and kept",
                    fold_names(&other).join(", ")
                )).names(other));
            }
            // The whole prefix re-fed on top of the past.
            if let (Some(n), Some(l)) = (ids_len, past_len) {
                if n > 1 && l > 0 && prefix_grows {
                    out.push(Finding::error(Code::CallerPrefix, format!(
                        "`{}` feeds {n} tokens on top of a past of length {l}: the whole prefix again (only the new token goes with a cache)",
                        plan.input_ids
                    )));
                }
            }
        }
        // Decoder-only: mask over past + new, positions continuing the past.
        if plan.family == Family::DecoderOnly {
            let (l, n) = (past_len.unwrap_or(0), ids_len.unwrap_or(0) as i64);
            if let Some(m) = plan.attention_mask.as_ref().and_then(|m| feeds.get(m).map(|r| (m, r))) {
                let len = m.1.shape.get(1).copied().unwrap_or(-1);
                if len != l + n {
                    out.push(Finding::error(Code::CallerMask, format!(
                        "`{}` covers {len} positions; the past ({l}) + the new tokens ({n}) are {}: the mask covers past AND new, whatever the dim name says",
                        m.0, l + n
                    )));
                }
            }
            if let Some((p, r)) = plan.position_ids.as_ref().and_then(|p| feeds.get(p).map(|r| (p, r))) {
                let want: Vec<i64> = (l..l + n).collect();
                if let Some(v) = r.value.as_ref().filter(|v| v.len() as i64 == n && **v != want) {
                    out.push(Finding::error(
                        Code::CallerPositions,
                        format!(
                            "`{p}` is {v:?}; after a past of {l} the positions are {want:?}: they continue the past"
                        ),
                    ));
                }
            }
        }
        self.prev_ids_len = ids_len;
        at(out, call)
    }

    /// Takes in what a call returned (`None` when it failed).
    pub fn after(&mut self, model: &str, outputs: Option<&Tensors>) {
        let decoder = self
            .models
            .iter()
            .find(|m| m.name == model)
            .or_else(|| (self.models.len() == 1).then(|| &self.models[0]))
            .is_some_and(|w| w.plan.is_some());
        if !decoder {
            return;
        }
        if let Some(o) = outputs {
            if self.step0.is_none() {
                self.step0 = Some(o.clone());
            }
            self.prev = Some(o.clone());
            self.history.push((self.calls.saturating_sub(1), o.clone()));
        }
    }

    /// The earlier call output `fed` equals (by digest), newest first.
    fn origin(&self, fed: &TensorMeta) -> Option<(usize, String)> {
        let d = fed.digest.as_ref()?;
        self.history.iter().rev().find_map(|(call, outs)| {
            outs.iter().find(|(_, o)| o.digest.as_ref() == Some(d)).map(|(name, _)| (*call, name.clone()))
        })
    }

    /// Where the past `past` (which should be `present` of the last call) came from, in words.
    fn provenance(&self, past: &str, present: &str, fed: &TensorMeta) -> Option<String> {
        let (call, name) = self.origin(fed)?;
        let last = self.history.last().map(|(c, _)| *c)?;
        let slot = |n: &str| crate::model::names::cache_slot(n).map(|(layer, kind, _)| (layer, kind));
        let (want, got) = (slot(present), slot(&name));
        let why = if call < last {
            format!("a present from {} calls back: a stale cache", last - call + 1)
        } else if want.map(|w| w.0) != got.map(|g| g.0) {
            "another layer's present: the layers are swapped".to_string()
        } else if want.map(|w| w.1) != got.map(|g| g.1) {
            "the other half of the pair: key and value are swapped".to_string()
        } else {
            "another output of that call".to_string()
        };
        Some(format!("`{past}` = `{name}` of call {call} ({why}); feed `{present}` of call {last}"))
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

/// Whether the past fed is exactly the previous call's present.
fn fed_back(plan: &Plan, feeds: &Tensors, prev: Option<&Tensors>) -> bool {
    let Some(prev) = prev else { return false };
    plan.self_past.iter().any(|c| match (feeds.get(&c.past), prev.get(&c.present)) {
        (Some(a), Some(b)) => a.digest.is_some() && a.digest == b.digest,
        _ => false,
    })
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

/// Inputs fed that the model lacks, inputs it needs that are not fed, and
/// every fed input's dtype, rank, fixed sizes and symbols.
fn signature_rules(sig: &Signature, feeds: &Tensors) -> Vec<Finding> {
    // A past's symbols are bound by what the protocol feeds (an empty dummy at
    // step 0 shares `encoder_sequence_length` with the mask): only the batch
    // axis binds across pasts and the other inputs.
    let is_past = |n: &str| crate::model::names::is_past_name(n);
    let mut out = Vec::new();
    let extra: Vec<String> = feeds.keys().filter(|n| sig.input(n).is_none()).cloned().collect();
    if !extra.is_empty() {
        out.push(
            Finding::error(
                Code::CallerSignature,
                format!(
                    "you feed {} input{} this model does not have: {}",
                    extra.len(),
                    if extra.len() == 1 { "" } else { "s" },
                    fold_names(&extra).join(", ")
                ),
            )
            .names(extra),
        );
    }
    let missing: Vec<String> = sig.inputs.iter().map(|p| p.name.clone()).filter(|n| !feeds.contains_key(n)).collect();
    if !missing.is_empty() {
        out.push(
            Finding::error(
                Code::CallerSignature,
                format!(
                    "you do not feed {} input{} the model requires: {}",
                    missing.len(),
                    if missing.len() == 1 { "" } else { "s" },
                    fold_names(&missing).join(", ")
                ),
            )
            .names(missing),
        );
    }
    let mut symbols: BTreeMap<String, (i64, String)> = BTreeMap::new();
    // (symbol, first size, first input) -> (other size, inputs)
    let mut conflicts: BTreeMap<(String, i64, String), (i64, Vec<String>)> = BTreeMap::new();
    for p in &sig.inputs {
        let (Some(r), Some((elem, dims))) = (feeds.get(&p.name), p.ty.tensor_parts()) else { continue };
        if r.dtype != elem.to_string() {
            out.push(
                Finding::error(
                    Code::CallerSignature,
                    format!("`{}` is fed {}; the model declares {elem}", p.name, r.dtype),
                )
                .tensor(&p.name),
            );
            continue;
        }
        let Some(dims) = dims else { continue };
        if r.shape.len() != dims.len() {
            out.push(
                Finding::error(
                    Code::CallerSignature,
                    format!(
                        "`{}` is fed with rank {} {:?}; the model declares rank {}",
                        p.name,
                        r.shape.len(),
                        r.shape,
                        dims.len()
                    ),
                )
                .tensor(&p.name),
            );
            continue;
        }
        for (axis, (d, v)) in dims.iter().zip(&r.shape).enumerate() {
            match d {
                Dim::Fixed(f) if f != v => out.push(
                    Finding::error(
                        Code::CallerSignature,
                        format!("`{}` axis {axis} is {v}; the model fixes it at {f}", p.name),
                    )
                    .tensor(&p.name),
                ),
                // A cached branch's [0, h, 1, d] dummy fed back is the cache rules' to name.
                Dim::Symbolic(_) if is_past(&p.name) && (axis > 0 || *v == 0) => {}
                Dim::Symbolic(s) if !s.contains('+') => match symbols.get(s) {
                    Some((size, first)) if size != v => {
                        conflicts
                            .entry((s.clone(), *size, first.clone()))
                            .or_insert((*v, Vec::new()))
                            .1
                            .push(p.name.clone());
                    }
                    Some(_) => {}
                    None => {
                        symbols.insert(s.clone(), (*v, p.name.clone()));
                    }
                },
                _ => {}
            }
        }
    }
    for ((s, size, first), (v, names)) in conflicts {
        out.push(
            Finding::error(
                Code::CallerSignature,
                format!(
                    "`{s}` is {size} in `{first}` and {v} in {} within one call: one symbol, two sizes",
                    fold_names(&names).join(", ")
                ),
            )
            .names(names),
        );
    }
    out
}
