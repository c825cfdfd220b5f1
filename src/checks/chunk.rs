//! A multi-token chunk after a non-empty cache: a second prefill in a chat,
//! speculative decoding's verification of drafted tokens, chunked prefill of
//! a long prompt. 3 tokens are fed at once onto a cache of 4, and each of
//! their logits is compared with the same position recomputed without a
//! cache. Exports traced with one new token can lose the causal order among
//! several new tokens when a past is present (optimum PR #1257,
//! transformers #42017); one-token steps never show it.

use crate::checks::batch::{run_calls_fed, Padded};
use crate::diagnose::cause::first_line;
use crate::engine::context::Ctx;
use crate::engine::events::{Event, StepIssue};
use crate::finding::Code;
use ndarray::{ArrayD, Axis};

/// Tokens already in the cache, and tokens fed at once onto it.
pub(crate) const PAST: usize = 4;
/// Tokens of the chunk.
pub(crate) const CHUNK: usize = 3;

/// The last call's logits of `chunks` fed one after the other onto the cache, batch 1.
fn run_chunks(ctx: &mut Ctx<'_>, chunks: &[Vec<i64>]) -> Result<ArrayD<f32>, String> {
    let batch = Padded::new(vec![chunks.concat()]);
    let calls: Vec<Vec<Vec<i64>>> = chunks.iter().map(|c| vec![c.clone()]).collect();
    run_calls_fed(ctx, &batch, &calls)?.0.pop().ok_or_else(|| "no chunk".into())
}

/// Feeds 3 tokens onto a cache of 4 and compares each position with the
/// uncached run of all 7 tokens.
/// `one_token_held`: the cache run's one-token steps agreed with the uncached run.
pub(crate) fn check(ctx: &mut Ctx<'_>, one_token_held: bool, emit: &mut dyn FnMut(Event)) {
    let vocab = ctx.job.plan.vocab;
    let prefix: Vec<i64> = (0..PAST).map(|_| ctx.rng.below(vocab)).collect();
    let chunk: Vec<i64> = (0..CHUNK).map(|_| ctx.rng.below(vocab)).collect();
    let cached = run_chunks(ctx, &[prefix.clone(), chunk.clone()]);
    let chunks = [prefix.clone(), chunk.clone()];
    let whole = run_chunks(ctx, &[[prefix, chunk].concat()]);
    let (cached, whole) = match (cached, whole) {
        (Ok(c), Ok(w)) => (c, w),
        (Err(e), _) | (_, Err(e)) => {
            let issue = StepIssue::error(
                Code::ChunkAfterPast,
                format!("{CHUNK} tokens fed at once onto a cache of {PAST} could not run: {}", first_line(&e)),
                None,
            );
            return emit(Event::Chunk { rows: Vec::new(), issues: vec![issue] });
        }
    };
    let job = ctx.job;
    let plan = &job.plan;
    let mut rows = Vec::new();
    // The chunk's positions are the last CHUNK rows of the uncached run.
    let n = whole.shape().get(1).copied().unwrap_or(0);
    for k in 0..CHUNK {
        let at = |a: &ArrayD<f32>, i: usize| a.index_axis(Axis(1), i).insert_axis(Axis(1)).to_owned();
        let got = cached.shape().get(1).is_some_and(|&m| m > k) && n >= CHUNK;
        let g = if got {
            crate::checks::step::gap(&at(&cached, k), &at(&whole, n - CHUNK + k))
        } else {
            crate::checks::step::Gap { abs: f64::INFINITY, rel: f64::INFINITY, greedy_agrees: false }
        };
        rows.push((k, g.abs, g.rel, g.greedy_agrees));
    }
    let mut issues = Vec::new();
    let bad: Vec<&(usize, f64, f64, bool)> = rows.iter().filter(|r| plan.tolerance.exceeded(r.1, r.2)).collect();
    if let Some(worst) = bad.iter().max_by(|a, b| a.1.total_cmp(&b.1)) {
        let mut i = StepIssue::error(
            Code::ChunkAfterPast,
            format!(
                "{CHUNK} tokens fed at once onto a cache of {PAST} depart from recomputing all {} without cache: {} of {CHUNK} positions beyond the tolerance, worst max |Δ| {:.3e} (relative {:.2e}) > {}",
                PAST + CHUNK,
                bad.len(),
                worst.1,
                worst.2,
                plan.tolerance.describe()
            ),
            Some(&plan.logits),
        );
        // Measured: the chunk runs only when the cache run held, one token at a time onto a past.
        i.cause = Some(if !one_token_held {
            "the one-token steps depart too (see the cache run's finding): a chunk inherits that mechanism".into()
        } else {
            "measured: one token per call onto a past agrees with the uncached run (parity held at every step), several tokens in one call onto the same kind of past do not: the graph handles a call's new tokens as if there were one (a mask or positions traced for one new token or for an empty cache: optimum PR #1257, transformers #42017); a second prefill, speculative verification or chunked prefill gets wrong logits".into()
        });
        // NaN/Inf in the chunk: the node that made it, as for a step.
        if !worst.1.is_finite() {
            let batch = Padded::new(vec![chunks.concat()]);
            let calls: Vec<Vec<Vec<i64>>> = chunks.iter().map(|c| vec![c.clone()]).collect();
            if let Ok((_, feeds)) = run_calls_fed(ctx, &batch, &calls) {
                let job = ctx.job;
                if let Some(n) =
                    crate::diagnose::non_finite::first_non_finite(ctx.env, &job.model, &feeds, &job.options)
                {
                    i.node = Some(n.display);
                    i.cause = Some(n.cause);
                }
            }
        }
        issues.push(i);
    }
    emit(Event::Chunk { rows, issues });
}
