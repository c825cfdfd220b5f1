//! A recorded call's feeds re-created for `replay`'s re-run, honest about
//! where each value comes from. A trace holds dtypes, shapes, digests and
//! the values of small integer tensors only, so: small values are fed as
//! recorded, and so are zeros (their digest says so); a tensor whose digest
//! equals an output of an earlier re-run
//! call is that output (a past is the present the re-run itself produced,
//! swapped, stale or kept exactly as the caller's digests say); positions
//! and cache slots continue the past the call feeds (the protocol); the
//! rest is seeded, the same values for the same digest.

use crate::engine::feeds::{self, Feed, Outputs, Rng};
use crate::model::signature::ElemType;
use crate::plan::Plan;
use ndarray::{ArrayD, IxDyn};
use std::collections::HashMap;

mod hypotheses;
mod kept;

pub use crate::engine::events::FeedSource;

/// A re-run call's float outputs by name, and its rows' scores.
type LastCall = (HashMap<String, ArrayD<f32>>, Vec<crate::engine::events::RowScores>);

/// What the re-run produced, by the digest the trace recorded for it (and
/// row by row, by the rows' digests of a format-2 trace).
#[derive(Default)]
pub(crate) struct Chain {
    produced: HashMap<String, ArrayD<f32>>,
    /// The digests of `produced`, oldest first.
    order: Vec<String>,
    rows: HashMap<String, ArrayD<f32>>,
    seeded: HashMap<String, feeds::Values>,
    /// Calls of the job's model re-run so far (the first has no cache).
    pub(crate) decoder_calls: usize,
    /// A format-1 trace (no row digests): the last own call's outputs and
    /// scores, and the beams' running scores, to find a past the caller
    /// reordered by gathering the rows the beams chose.
    last: Option<LastCall>,
    beams: usize,
    running: Vec<f64>,
    /// The running scores before this call's beams, and the tokens it fed:
    /// to carry the scores on from origins found by digest instead.
    before: Vec<f64>,
    tokens: Vec<i64>,
    /// The digests the trace recorded for the last own call's outputs: whether
    /// the re-run's present is bit-exact with the caller's.
    last_digests: HashMap<String, String>,
    /// Buffers the caller keeps (presents of the new rows only), as the last own call left them.
    pub(crate) buffers: kept::Buffers,
    /// What this call's caller-kept buffers were shown to be: `kept:NAME`
    /// (the update a correct caller makes) or `unkept:NAME`, with the words.
    pub(crate) kept: crate::engine::events::ComputedRows,
}

impl Chain {
    /// Keeps call `c`'s outputs under the digests the trace recorded for them.
    pub(crate) fn remember(&mut self, c: &crate::engine::options::ReplayCall, out: &Outputs) {
        for (name, digest) in &c.outputs {
            if let Some(v) = out.floats.get(name) {
                if self.produced.insert(digest.clone(), v.clone()).is_none() {
                    self.order.push(digest.clone());
                }
            }
        }
        for (name, rows) in &c.output_rows {
            let Some(v) = out.floats.get(name).filter(|v| v.ndim() >= 2 && v.shape()[0] == rows.len()) else {
                continue;
            };
            for (i, d) in rows.iter().enumerate() {
                self.rows.entry(d.clone()).or_insert_with(|| v.index_axis(ndarray::Axis(0), i).to_owned());
            }
        }
    }

    /// After an own call of a format-1 trace: its outputs and scores, for the next call's gathers.
    pub(crate) fn keep_last(
        &mut self,
        c: &crate::engine::options::ReplayCall,
        out: &Outputs,
        scores: &[crate::engine::events::RowScores],
    ) {
        self.last = Some((out.floats.clone(), scores.to_vec()));
        self.last_digests = c.outputs.iter().cloned().collect();
    }

    /// A fed tensor whose every row is a row the re-run produced (a beam
    /// reorder, an expansion per beam): those rows, stacked.
    fn gathered(&self, rows: &[String], dims: &[usize]) -> Option<ArrayD<f32>> {
        if rows.is_empty() || dims.first() != Some(&rows.len()) {
            return None;
        }
        let parts: Vec<&ArrayD<f32>> = rows.iter().map(|d| self.rows.get(d)).collect::<Option<_>>()?;
        if parts.iter().any(|p| p.shape() != &dims[1..]) {
            return None;
        }
        let views: Vec<_> = parts.iter().map(|p| p.view()).collect();
        ndarray::stack(ndarray::Axis(0), &views).ok()
    }
}

/// A format-1 trace's own call of a beam search: the origins the beams it
/// feeds came from (from the previous call's scores and this call's tokens),
/// with the running scores carried on; `None` when there is nothing to gather.
fn beam_origins(plan: &Plan, c: &crate::engine::options::ReplayCall, chain: &mut Chain) -> Option<Vec<usize>> {
    let own = c.model.is_none();
    let v1 = c.feeds.iter().all(|f| f.rows.is_none());
    // This call's scores to carry on, none until its origins are known.
    chain.before.clear();
    chain.tokens.clear();
    let ids = c.feeds.iter().find(|f| f.name == plan.input_ids)?;
    let (rows, per) = (usize::try_from(*ids.shape.first()?).ok()?, usize::try_from(*ids.shape.get(1)?).ok()?);
    let toks = ids.value.as_ref().filter(|v| v.len() == rows * per)?;
    if !own || !v1 {
        return None;
    }
    let past = plan
        .self_past
        .iter()
        .find_map(|p| c.feeds.iter().find(|f| f.name == p.past)?.shape.get(plan.seq_axis).copied());
    if past.unwrap_or(0) == 0 {
        chain.beams = crate::engine::rows::group_size(toks, per);
        chain.running = crate::engine::rows::start_scores(rows, chain.beams);
        return None;
    }
    let scores = &chain.last.as_ref()?.1;
    if chain.beams < 2 || per != 1 || scores.len() != rows || chain.running.len() != rows {
        return None;
    }
    let (origin, running) = crate::engine::rows::assign(chain.beams, &chain.running, toks, scores);
    chain.before = std::mem::replace(&mut chain.running, running);
    chain.tokens = toks.clone();
    Some(origin)
}

/// A fed float tensor of a format-1 trace that is the previous call's output
/// with its rows gathered to the beams' origins, checked by its digest.
fn reordered(
    chain: &Chain,
    origin: Option<&[usize]>,
    f: &crate::engine::options::ReplayFeed,
    dims: &[usize],
) -> Option<ArrayD<f32>> {
    let (origin, digest) = (origin?, f.digest.as_ref()?);
    let (outputs, _) = chain.last.as_ref()?;
    outputs
        .values()
        .filter(|a| a.shape() == dims)
        .find_map(|a| crate::engine::rows::gather_matching(a, origin, &f.dtype, digest))
}

/// Row digests the trace lacks, computed from the re-run where it is
/// bit-exact with the caller's run (the whole tensor's digest is the one the
/// trace recorded): the call's chained feeds and its outputs.
pub(crate) fn computed_rows(
    c: &crate::engine::options::ReplayCall,
    fed: &[Feed],
    out: &Outputs,
) -> Vec<(String, Vec<String>)> {
    use crate::engine::rows::{digest_of, row_digests};
    if c.feeds.iter().any(|f| f.rows.is_some()) || !c.output_rows.is_empty() {
        return Vec::new();
    }
    let mut rows = Vec::new();
    for f in &c.feeds {
        let Some(feeds::Values::Float(a)) = fed.iter().find(|x| x.name == f.name).map(|x| &x.values) else { continue };
        if a.ndim() >= 2 && f.digest.is_some() && digest_of(&f.dtype, a) == f.digest {
            rows.extend(row_digests(&f.dtype, a).map(|r| (format!("feed:{}", f.name), r)));
        }
    }
    for (name, digest) in &c.outputs {
        let Some(a) = out.floats.get(name).filter(|a| a.ndim() >= 2) else { continue };
        let dtype = ["float32", "float16"].into_iter().find(|d| digest_of(d, a).as_ref() == Some(digest));
        if let Some(d) = dtype {
            rows.extend(row_digests(d, a).map(|r| (format!("output:{name}"), r)));
        }
    }
    rows
}

/// Each row's log-probabilities at its last position: the argmax and the
/// `watch`ed tokens (what the next call fed), for judging the strategy.
pub(crate) fn row_scores(logits: &ArrayD<f32>, watch: &[i64]) -> Vec<crate::engine::events::RowScores> {
    if logits.ndim() != 3 || logits.shape()[1] == 0 {
        return Vec::new();
    }
    let last = logits.shape()[1] - 1;
    (0..logits.shape()[0])
        .map(|r| {
            let row = logits.slice(ndarray::s![r, last, ..]);
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let sum: f64 = row.iter().map(|&x| f64::from(x - max).exp()).sum();
            let lse = f64::from(max) + sum.ln();
            let argmax = row
                .iter()
                .enumerate()
                .fold((0usize, f32::NEG_INFINITY), |b, (i, &x)| if x > b.1 { (i, x) } else { b })
                .0;
            let lp = |t: i64| {
                let v = usize::try_from(t).ok().and_then(|t| row.get(t)).map(|&x| f64::from(x) - lse);
                v.filter(|v| v.is_finite()).unwrap_or(-1e30)
            };
            let mut watched: Vec<(i64, f64)> = Vec::new();
            for &t in watch {
                if !watched.iter().any(|(w, _)| *w == t) {
                    watched.push((t, lp(t)));
                }
            }
            // Enough candidates for any group of these rows: a beam search's
            // top 2 × beams come at most 2 × beams from one row.
            let k = (2 * logits.shape()[0] + 2).min(64);
            let mut order: Vec<(usize, f32)> = row.iter().copied().enumerate().collect();
            let k = k.min(order.len());
            if k > 0 {
                order.select_nth_unstable_by(k - 1, |a, b| b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal));
            }
            order.truncate(k);
            order.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal).then(a.0.cmp(&b.0)));
            let top = order.iter().map(|&(t, _)| (t as i64, lp(t as i64))).collect();
            crate::engine::events::RowScores { argmax: argmax as i64, watched, top }
        })
        .collect()
}

/// A recorded call's feeds and where each came from.
pub(crate) fn feeds(
    plan: &Plan,
    c: &crate::engine::options::ReplayCall,
    rng: &mut Rng,
    chain: &mut Chain,
) -> Vec<(Feed, FeedSource)> {
    let first = chain.decoder_calls == 0;
    let reorder = beam_origins(plan, c, chain);
    let mut tried = None;
    // The rows of the previous call this call's cache is, once one past's digest showed them.
    let mut shown: Option<Vec<usize>> = None;
    // The past length this call feeds: the first self past's length on the sequence axis.
    let past_len = plan
        .self_past
        .iter()
        .find_map(|p| c.feeds.iter().find(|f| f.name == p.past).and_then(|f| f.shape.get(plan.seq_axis).copied()))
        .filter(|_| plan.buffer.is_none())
        .unwrap_or(0)
        .max(0);
    // Buffers the caller keeps: found by hashing each update of the previous one.
    chain.kept.clear();
    let mut kept_values: HashMap<String, ArrayD<f32>> = HashMap::new();
    let (mut shown_slot, mut budget) = (None, kept::MAX_HASHED);
    for f in c.feeds.iter().filter(|_| c.model.is_none()) {
        let dims: Vec<usize> = f.shape.iter().map(|&d| d.max(0) as usize).collect();
        let (key, words, value) = match kept::found(plan, chain, f, &dims, &mut shown_slot, &mut budget) {
            Some(kept::Found::Right(a, w)) => ("kept", w, Some(a)),
            Some(kept::Found::Wrong(a, w)) => ("unkept", w, Some(a)),
            Some(kept::Found::Other(w)) => ("unkept", w, None),
            None => continue,
        };
        chain.kept.push((format!("{key}:{}", f.name), vec![words]));
        if let Some(a) = value {
            kept_values.insert(f.name.clone(), a);
        }
    }
    let fed = c
        .feeds
        .iter()
        .map(|f| {
            let dims: Vec<usize> = f.shape.iter().map(|&d| d.max(0) as usize).collect();
            if let Some(a) = kept_values.remove(&f.name) {
                let elem = ElemType::from_name(&f.dtype).unwrap_or(ElemType::F32);
                return (Feed { name: f.name.clone(), elem, values: feeds::Values::Float(a) }, FeedSource::Kept);
            }
            let n: usize = dims.iter().product();
            let elem = ElemType::from_name(&f.dtype).unwrap_or(ElemType::F32);
            let given = f.value.as_ref().filter(|v| v.len() == n);
            let digest = f.digest.as_ref();
            let whole = digest.and_then(|d| chain.produced.get(d)).filter(|a| a.shape() == dims.as_slice()).cloned();
            if let Some(a) = &whole {
                // The previous call's own present, as it came out: its rows in order.
                let present = plan.self_past.iter().find(|p| p.past == f.name).map(|p| p.present.as_str());
                let last = chain.last.as_ref().and_then(|(o, _)| o.get(present?));
                if last == Some(a) {
                    if let Some(&rows) = dims.first() {
                        shown.get_or_insert_with(|| (0..rows).collect());
                    }
                }
            }
            let chained = whole
                .or_else(|| f.rows.as_ref().and_then(|r| chain.gathered(r, &dims)))
                .or_else(|| {
                    let g = reordered(chain, reorder.as_deref(), f, &dims);
                    if g.is_some() {
                        shown = reorder.clone();
                    }
                    g
                })
                .or_else(|| {
                    let g = hypotheses::searched(plan, chain, f, &dims, &mut tried);
                    if let (Some(_), Some(Some(o))) = (&g, &tried) {
                        shown = Some(o.clone());
                    }
                    g
                });
            // An earlier output repeated per beam or cropped: found by its digest, said as such.
            let (chained, hypothesised) = match chained {
                Some(a) => (Some(a), false),
                None if given.is_none() && elem.is_float() => match hypotheses::expanded_or_cropped(chain, f, &dims) {
                    Some(a) => (Some(a), true),
                    None => (None, false),
                },
                None => (None, false),
            };
            let (values, source) = if f.zeros && elem.is_float() {
                (feeds::Values::Float(ArrayD::zeros(IxDyn(&dims))), FeedSource::Recorded)
            } else if let Some(a) = chained.filter(|_| given.is_none() && elem.is_float()) {
                let source = if hypothesised { FeedSource::Hypothesis } else { FeedSource::Chained };
                (feeds::Values::Float(a), source)
            } else if let Some(v) = digest.filter(|_| given.is_none()).and_then(|d| chain.seeded.get(d)) {
                (v.clone(), FeedSource::Seeded)
            } else {
                // A control-flow input is never seeded: a branch flag the trace holds no value
                // of takes the branch the protocol does (cached after the first call).
                let flag = given.is_none() && Some(f.name.as_str()) == plan.branch_flag.as_deref();
                let (v, s) = if flag {
                    let cached = !first && past_len > 0;
                    (feeds::Values::Bool(ArrayD::from_elem(IxDyn(&dims), cached)), FeedSource::Protocol)
                } else {
                    build(plan, &f.name, elem, &dims, given, past_len, rng)
                };
                if let (Some(d), FeedSource::Seeded) = (digest, s) {
                    chain.seeded.insert(d.clone(), v.clone());
                }
                (v, s)
            };
            (Feed { name: f.name.clone(), elem, values }, source)
        })
        .collect::<Vec<_>>();
    if let Some(Some(origin)) = tried {
        hypotheses::rescore(chain, &origin);
    }
    match shown {
        Some(origin) => hypotheses::same_rows(plan, chain, fed, &origin),
        None => fed,
    }
}

/// Values for a feed the chain does not hold.
fn build(
    plan: &Plan,
    name: &str,
    elem: ElemType,
    dims: &[usize],
    given: Option<&Vec<i64>>,
    past_len: i64,
    rng: &mut Rng,
) -> (feeds::Values, FeedSource) {
    let n: usize = dims.iter().product();
    let shaped = |v| ArrayD::from_shape_vec(IxDyn(dims), v).expect("shape");
    if elem == ElemType::BOOL {
        let source = if given.is_some() { FeedSource::Recorded } else { FeedSource::Seeded };
        let v = given.map_or(vec![false; n], |v| v.iter().map(|&x| x != 0).collect());
        return (feeds::Values::Bool(ArrayD::from_shape_vec(IxDyn(dims), v).expect("shape")), source);
    }
    if elem.is_float() {
        return (feeds::Values::Float(shaped((0..n).map(|_| rng.normal()).collect())), FeedSource::Seeded);
    }
    // A digest-only trace holds no values: positions and cache slots continue
    // the past the call feeds, as the protocol has them (never invented ids
    // that would make a right call fail).
    let continuing = Some(name) == plan.position_ids.as_deref() || Some(name) == plan.cache_position.as_deref();
    let (v, source) = match given {
        Some(v) => (v.clone(), FeedSource::Recorded),
        None if name.contains("mask") => (vec![1; n], FeedSource::Protocol),
        None if continuing => {
            let new = dims.last().copied().unwrap_or(1).max(1);
            ((0..n).map(|i| past_len + (i % new) as i64).collect(), FeedSource::Protocol)
        }
        None => ((0..n).map(|_| rng.below(plan.vocab)).collect(), FeedSource::Seeded),
    };
    (feeds::Values::Int(ArrayD::from_shape_vec(IxDyn(dims), v).expect("shape")), source)
}
