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

pub use crate::engine::events::FeedSource;

/// What the re-run produced, by the digest the trace recorded for it.
#[derive(Default)]
pub(crate) struct Chain {
    produced: HashMap<String, ArrayD<f32>>,
    seeded: HashMap<String, feeds::Values>,
}

impl Chain {
    /// Keeps call `c`'s outputs under the digests the trace recorded for them.
    pub(crate) fn remember(&mut self, c: &crate::engine::options::ReplayCall, out: &Outputs) {
        for (name, digest) in &c.outputs {
            if let Some(v) = out.floats.get(name) {
                self.produced.insert(digest.clone(), v.clone());
            }
        }
    }
}

/// A recorded call's feeds and where each came from.
pub(crate) fn feeds(
    plan: &Plan,
    c: &crate::engine::options::ReplayCall,
    rng: &mut Rng,
    chain: &mut Chain,
) -> Vec<(Feed, FeedSource)> {
    // The past length this call feeds: the first self past's length on the sequence axis.
    let past_len = plan
        .self_past
        .iter()
        .find_map(|p| c.feeds.iter().find(|f| f.name == p.past).and_then(|f| f.shape.get(plan.seq_axis).copied()))
        .filter(|_| plan.buffer.is_none())
        .unwrap_or(0)
        .max(0);
    c.feeds
        .iter()
        .map(|f| {
            let dims: Vec<usize> = f.shape.iter().map(|&d| d.max(0) as usize).collect();
            let n: usize = dims.iter().product();
            let elem = ElemType::from_name(&f.dtype).unwrap_or(ElemType::F32);
            let given = f.value.as_ref().filter(|v| v.len() == n);
            let digest = f.digest.as_ref();
            let chained = digest.and_then(|d| chain.produced.get(d)).filter(|a| a.shape() == dims.as_slice());
            let (values, source) = if f.zeros && elem.is_float() {
                (feeds::Values::Float(ArrayD::zeros(IxDyn(&dims))), FeedSource::Recorded)
            } else if let Some(a) = chained.filter(|_| given.is_none()) {
                (feeds::Values::Float(a.clone()), FeedSource::Chained)
            } else if let Some(v) = digest.filter(|_| given.is_none()).and_then(|d| chain.seeded.get(d)) {
                (v.clone(), FeedSource::Seeded)
            } else {
                let (v, s) = build(plan, &f.name, elem, &dims, given, past_len, rng);
                if let (Some(d), FeedSource::Seeded) = (digest, s) {
                    chain.seeded.insert(d.clone(), v.clone());
                }
                (v, s)
            };
            (Feed { name: f.name.clone(), elem, values }, source)
        })
        .collect()
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
