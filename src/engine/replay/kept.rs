//! Buffers a caller keeps itself, where the model's presents hold only the
//! new tokens' rows (microsoft/winml-cli's static cache and sliding window;
//! a convolution state whose present is its newest column, rolled in):
//! the past a correct caller feeds is its previous buffer with the previous
//! call's present written at the slots those tokens fill, or appended after
//! dropping as many of the oldest rows. A trace keeps the buffer as a digest
//! only, so each candidate — the form's own update first, then the other
//! form and every other slot (a caller's mistake, named exactly) — is
//! rebuilt from the re-run and hashed with the trace's scheme.

use super::Chain;
use crate::engine::feeds::{rolled_in as rolled, written_in as written};
use crate::engine::options::{ReplayCall, ReplayFeed};
use crate::engine::rows::digest_of;
use crate::plan::roles::CacheForm;
use crate::plan::Plan;
use ndarray::ArrayD;

/// The most bytes hashed for one call's wrong-slot candidates (a real
/// buffer of 4,096 slots is tried at its expected slot first, a slot another
/// layer showed next, then slot 0 and the last; the rest stop here).
pub(crate) const MAX_HASHED: usize = 1 << 30;

/// A kept buffer as the last call fed it, that call's present rows, and
/// whether the re-run's present is bit-exact with the caller's (its digest
/// the one recorded; `None`: the trace recorded no digest of it).
type Left = (ArrayD<f32>, ArrayD<f32>, Option<bool>);

/// What the last own call left of each caller-kept buffer.
#[derive(Default)]
pub(crate) struct Buffers {
    /// Past name → what the last call left of it.
    last: std::collections::HashMap<String, Left>,
    /// The slot the last call's first token was written to (its `cache_position`, else the tokens before it).
    slot: usize,
    /// Tokens fed by own calls so far.
    tokens: usize,
}

/// A caller-kept buffer fed at a call, as its digest shows it.
pub(crate) enum Found {
    /// The buffer a correct caller feeds (in words, how it was updated).
    Right(ArrayD<f32>, String),
    /// The caller's buffer, updated otherwise than the form says (in words).
    Wrong(ArrayD<f32>, String),
    /// The previous present is bit-exact, so a correct buffer's digest is
    /// known, and the one fed is not it nor any other update tried.
    Other(String),
}

impl Buffers {
    /// After own call `c` ran on `fed` and gave `out`: its buffers and presents.
    pub(crate) fn keep(
        &mut self,
        plan: &Plan,
        c: &ReplayCall,
        fed: &[crate::engine::feeds::Feed],
        out: &crate::engine::feeds::Outputs,
    ) {
        let n = c.feeds.iter().find(|f| f.name == plan.input_ids).and_then(|f| f.shape.get(1)).copied().unwrap_or(1);
        let written = plan
            .cache_position
            .as_ref()
            .and_then(|p| c.feeds.iter().find(|f| &f.name == p)?.value.as_ref()?.first().copied())
            .and_then(|v| usize::try_from(v).ok());
        self.slot = written.unwrap_or(self.tokens);
        self.tokens += usize::try_from(n).unwrap_or(1);
        self.last.clear();
        for p in plan.self_past.iter().filter(|p| p.fixed) {
            let buffer = fed.iter().find(|f| f.name == p.past).and_then(|f| match &f.values {
                crate::engine::feeds::Values::Float(a) => Some(a),
                _ => None,
            });
            // Only a present that is not the whole tensor leaves the caller anything to keep.
            let (Some(buffer), Some(present)) = (buffer, out.floats.get(&p.present)) else { continue };
            if present.shape() == buffer.shape() {
                continue;
            }
            let buffer = buffer.clone();
            let recorded = c.outputs.iter().find(|(name, _)| *name == p.present).map(|(_, d)| d);
            let exact =
                recorded.map(|r| ["float32", "float16"].iter().any(|d| digest_of(d, present).as_ref() == Some(r)));
            self.last.insert(p.past.clone(), (buffer, present.clone(), exact));
        }
    }
}

/// The buffer fed as `f` at this call, tested against every update of the
/// previous one: `None` where nothing can be told (no previous call, a
/// present that is not bit-exact, a digest-less feed).
/// `shown` is the wrong slot another buffer of this call was found written
/// at (tried first), `budget` the bytes this call may still hash.
pub(crate) fn found(
    plan: &Plan,
    chain: &Chain,
    f: &ReplayFeed,
    dims: &[usize],
    shown: &mut Option<usize>,
    budget: &mut usize,
) -> Option<Found> {
    let digest = f.digest.as_ref().filter(|_| f.value.is_none() && !f.zeros)?;
    let (buffer, present, exact) = chain.buffers.last.get(&f.name)?;
    let p = plan.self_past.iter().find(|p| p.past == f.name)?;
    let present_name = p.present.as_str();
    if buffer.shape() != dims || present.ndim() != dims.len() {
        return None;
    }
    // A buffer the plan says the caller keeps; else a state whose present is
    // only its newest rows (a convolution window the caller rolls itself).
    let form = plan.caller_kept().filter(|_| p.buffer).unwrap_or(CacheForm::CallerRolled);
    let differ: Vec<usize> = (0..dims.len()).filter(|&a| present.shape()[a] != dims[a]).collect();
    let [axis] = differ[..] else { return None };
    let (len, n) = (dims[axis], present.shape()[axis]);
    if n == 0 || n > len || (0..dims.len()).any(|a| a != axis && present.shape()[a] != dims[a]) {
        return None;
    }
    let expected = chain.buffers.slot.min(len - n);
    let matches = |a: &ArrayD<f32>| digest_of(&f.dtype, a).as_ref() == Some(digest);
    let at_slot = |s: usize| if n == 1 { format!("slot {s}") } else { format!("slots {s}..={}", s + n - 1) };
    // The form's own update first: what a correct caller feeds.
    let right = match form {
        CacheForm::CallerRolled => (
            rolled(buffer, present, axis),
            format!("the previous buffer with its {n} oldest row(s) dropped and `{present_name}` appended"),
        ),
        _ => (
            written(buffer, present, axis, expected),
            format!("the previous buffer with `{present_name}` written at {}", at_slot(expected)),
        ),
    };
    if matches(&right.0) {
        return Some(Found::Right(right.0, right.1));
    }
    // A present the trace shows is not the caller's: nothing rebuilt from it can match.
    if *exact == Some(false) {
        return None;
    }
    // A caller's own mistake, rebuilt exactly: the other form, another slot, no update at all.
    let what = match form {
        CacheForm::CallerRolled => {
            "a window the caller must roll (drop the oldest rows, append the new ones at the end)".to_string()
        }
        _ => format!("the caller must write the new rows at {} (where its tokens are)", at_slot(expected)),
    };
    if matches(buffer) {
        return Some(Found::Wrong(
            buffer.clone(),
            format!("the previous buffer unchanged: `{present_name}` was never put in ({what})"),
        ));
    }
    let bytes = buffer.len() * 4;
    if form != CacheForm::CallerRolled {
        let r = rolled(buffer, present, axis);
        if matches(&r) {
            return Some(Found::Wrong(
                r,
                format!("the previous buffer rolled (oldest rows dropped, `{present_name}` appended): {what}"),
            ));
        }
    }
    // The slot another layer showed, the ends, then every other slot.
    let mut order: Vec<usize> = shown.iter().copied().chain([0, len - n]).filter(|&s| s <= len - n).collect();
    order.extend(0..=len - n);
    let mut tried = std::collections::HashSet::new();
    for s in order.into_iter().filter(|&s| (form == CacheForm::CallerRolled || s != expected) && tried.insert(s)) {
        if *budget < bytes {
            break;
        }
        *budget -= bytes;
        let w = written(buffer, present, axis, s);
        if matches(&w) {
            *shown = Some(s);
            return Some(Found::Wrong(
                w,
                format!("the previous buffer with `{present_name}` written at {}: {what}", at_slot(s)),
            ));
        }
    }
    (*exact == Some(true)).then(|| {
        Found::Other(format!(
            "not {} (the re-run's `{present_name}` is bit-exact with the caller's, so that buffer's digest is known), nor the previous buffer updated any other way tried: other values",
            right.1
        ))
    })
}
