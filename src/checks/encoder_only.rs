//! An encoder alone (an embeddings model, feature extraction): no decoder in
//! the folder, so it is its own product. Run at batch 1, then as a
//! right-padded batch of 2 whose every row's unpadded positions must equal
//! the same row run alone (the mask honoured), with finite outputs
//! throughout. Right padding keeps each row at its own positions, so absolute
//! position embeddings do not move a correct row.

use crate::engine::context::Ctx;
use crate::engine::events::{Event, StepIssue};
use crate::engine::feeds::{Feed, Values};
use crate::engine::session::{declared_inputs, run};
use crate::finding::Code;
use ndarray::{ArrayD, Axis, IxDyn};
use std::time::Instant;

/// The feeds for `rows` of token ids right-padded to the longest: ids
/// (padding 0), the mask over the real tokens, zeros for token types,
/// positions counting the row's tokens, for whatever the encoder declares.
fn feeds(ctx: &Ctx<'_>, rows: &[Vec<i64>]) -> Vec<Feed> {
    let (b, n) = (rows.len(), rows.iter().map(Vec::len).max().unwrap_or(0));
    let cell = |f: &dyn Fn(usize, usize) -> i64| -> Vec<i64> {
        (0..b).flat_map(|r| (0..n).map(move |i| (r, i))).map(|(r, i)| f(r, i)).collect()
    };
    let mut out = Vec::new();
    for (name, elem, _) in declared_inputs(&ctx.session) {
        let values = if name == ctx.job.plan.input_ids {
            cell(&|r, i| rows[r].get(i).copied().unwrap_or(0))
        } else if name.contains("attention_mask") {
            cell(&|r, i| i64::from(i < rows[r].len()))
        } else if name.contains("position_ids") {
            cell(&|_, i| i as i64)
        } else {
            // token_type_ids and any other integer input: the first segment.
            vec![0; b * n]
        };
        out.push(Feed {
            name,
            elem,
            values: Values::Int(ArrayD::from_shape_vec(IxDyn(&[b, n]), values).expect("shape")),
        });
    }
    out
}

/// The encoder's states (the plan's output) for `rows`, and the run time.
fn states(
    ctx: &mut Ctx<'_>,
    rows: &[Vec<i64>],
) -> Result<(ArrayD<f32>, Vec<crate::engine::events::TensorInfo>, f64), String> {
    let f = feeds(ctx, rows);
    let t = Instant::now();
    let out = run(&mut ctx.session, &f)?;
    let seconds = t.elapsed().as_secs_f64();
    let name = &ctx.job.plan.logits;
    let a = out.floats.get(name).cloned().ok_or_else(|| format!("no `{name}` among the outputs"))?;
    Ok((a, out.infos, seconds))
}

/// Batch 1, then a right-padded batch of 2 against each row alone.
pub(crate) fn check(ctx: &mut Ctx<'_>, emit: &mut dyn FnMut(Event)) {
    let vocab = ctx.job.plan.vocab.max(2);
    let long: Vec<i64> = (0..crate::plan::ENCODER_TOKENS).map(|_| 1 + ctx.rng.below(vocab - 1)).collect();
    let short: Vec<i64> = (0..4).map(|_| 1 + ctx.rng.below(vocab - 1)).collect();
    let shown = feeds(ctx, std::slice::from_ref(&long)).iter().map(Feed::info).collect();
    emit(Event::Feeds { variant: 0, step: 0, feeds: shown });
    let (alone0, infos, seconds) = match states(ctx, std::slice::from_ref(&long)) {
        Ok(r) => r,
        Err(message) => {
            return emit(Event::Failure { variant: 0, step: 0, message, node: None, cause: None });
        }
    };
    let mut issues = Vec::new();
    if alone0.iter().any(|x| !x.is_finite()) {
        issues.push(StepIssue::error(
            Code::NonFinite,
            "the encoder's output holds NaN or Inf".into(),
            Some(&ctx.job.plan.logits),
        ));
    }
    emit(Event::Step {
        variant: 0,
        step: 0,
        outputs: infos,
        seconds,
        parity: None,
        parity_rel: None,
        greedy_agrees: None,
        recompute_seconds: None,
        issues,
    });
    let runs = [states(ctx, std::slice::from_ref(&short)), states(ctx, &[long.clone(), short.clone()])];
    let [Ok((alone1, _, _)), Ok((both, _, _))] = runs else {
        let e = runs.into_iter().find_map(Result::err).unwrap_or_default();
        return emit(crate::checks::batch::not_run("a right-padded batch of 2", &e));
    };
    let tol = &ctx.job.plan.tolerance;
    let mut rows = Vec::new();
    let mut issues = Vec::new();
    for (r, (alone, len)) in [(&alone0, long.len()), (&alone1, short.len())].into_iter().enumerate() {
        let batched = both.index_axis(Axis(0), r);
        let real = batched.slice_axis(Axis(0), (0..len).into());
        let own = alone.index_axis(Axis(0), 0);
        let own = own.slice_axis(Axis(0), (0..len).into());
        let (abs, scale) = real
            .iter()
            .zip(own.iter())
            .fold((0.0f64, 0.0f64), |(m, s), (a, b)| (m.max(f64::from((a - b).abs())), s.max(f64::from(b.abs()))));
        let rel = abs / scale.max(1e-12);
        rows.push((r, 0, abs, rel, true));
        if tol.exceeded(abs, rel) && issues.is_empty() {
            issues.push(StepIssue::error(
                Code::BatchPadding,
                format!(
                    "row {r} of a right-padded batch of 2 departs from the same input run alone on its {len} real positions: max |Δ| {abs:.3e} (relative {rel:.2e}) > tolerance {}",
                    tol.describe()
                ),
                Some(&ctx.job.plan.logits),
            ));
        }
    }
    emit(Event::Batch { rows, issues });
}
