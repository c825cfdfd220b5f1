//! Batched, left-padded generation as applications run it: two prompts of
//! different lengths in one batch, the shorter padded on the left (mask zeros,
//! `position_ids = cumsum(mask) - 1` where the model takes them), each row
//! compared at every step with the same row run alone. Exports that derive
//! positions from the past length shift the padded row (optimum PRs #1381, #2326).

use crate::checks::step;
use crate::diagnose::cause::first_line;
use crate::engine::context::Ctx;
use crate::engine::events::Event;
use crate::engine::feeds::{Feed, Values};
use crate::engine::session::run;
use crate::model::signature::ElemType;
use crate::plan::Plan;
use ndarray::{ArrayD, IxDyn};

/// One padded batch: each row's real tokens, padded to the longest.
pub(crate) struct Padded {
    /// Real tokens per row (prompt at step 0, one token per later step).
    pub(crate) rows: Vec<Vec<i64>>,
    /// Padding of each row's prompt.
    pub(crate) pads: Vec<usize>,
    /// The padding follows the prompt (onnxruntime-genai's batches, which
    /// GroupQueryAttention's `seqlens_k = sum(mask) - 1` needs: each row's
    /// tokens first), instead of preceding it (Hugging Face's generate).
    pub(crate) right: bool,
}

impl Padded {
    pub(crate) fn new(prompts: Vec<Vec<i64>>) -> Padded {
        Padded::on_side(prompts, false)
    }

    pub(crate) fn on_side(prompts: Vec<Vec<i64>>, right: bool) -> Padded {
        let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
        let pads = prompts.iter().map(|p| longest - p.len()).collect();
        Padded { rows: prompts, pads, right }
    }

    /// Whether position `i` of row `r`'s whole sequence is a real token
    /// (the prompt call is `rows[r].len() + pads[r]` wide).
    fn real(&self, r: usize, i: usize) -> bool {
        let (len, pad) = (self.rows[r].len(), self.pads[r]);
        if self.right {
            // onnxruntime-genai appends one mask column per step: the pads stay in the middle.
            i < len || i >= len + pad
        } else {
            i >= pad
        }
    }

    /// Row `r`'s logits at its last real token of a prompt call (`[1, 1, vocab]`):
    /// right-padded rows end before the batch's last position.
    fn last_real(&self, logits: &ArrayD<f32>) -> ArrayD<f32> {
        let rows: Vec<ArrayD<f32>> = (0..logits.shape()[0].min(self.rows.len()))
            .map(|r| {
                let at = self.rows[r].len().saturating_sub(1).min(logits.shape()[1].saturating_sub(1));
                logits
                    .index_axis(ndarray::Axis(0), r)
                    .index_axis(ndarray::Axis(0), at)
                    .to_owned()
                    .insert_axis(ndarray::Axis(0))
                    .insert_axis(ndarray::Axis(0))
            })
            .collect();
        let views: Vec<_> = rows.iter().map(|a| a.view()).collect();
        ndarray::concatenate(ndarray::Axis(0), &views).unwrap_or_else(|_| logits.clone())
    }
}

/// The feeds of a batched step: `new` tokens per row on top of `past_len`
/// cache positions (padding included), past tensors as given.
pub(crate) fn padded_step(
    plan: &Plan,
    batch: &Padded,
    new: &[Vec<i64>],
    past_len: usize,
    pasts: &[(String, crate::model::signature::ElemType, ArrayD<f32>)],
    pad_token: i64,
) -> Vec<Feed> {
    let b = new.len();
    let n = new.iter().map(Vec::len).max().unwrap_or(0);
    let mut ids = Vec::with_capacity(b * n);
    for row in new {
        let pads = std::iter::repeat_n(pad_token, n - row.len());
        if batch.right {
            ids.extend(row);
            ids.extend(pads);
        } else {
            ids.extend(pads);
            ids.extend(row);
        }
    }
    let total = past_len + n;
    let mut mask = Vec::with_capacity(b * total);
    let mut pos = Vec::with_capacity(b * n);
    for r in 0..new.len() {
        // Row r: its padding is `pad` positions of the whole sequence, before
        // or after its prompt (at step 0 the row is shorter by exactly that;
        // later rows are equal).
        let row_mask: Vec<i64> = (0..total).map(|i| i64::from(batch.real(r, i))).collect();
        let mut seen = 0i64;
        let cums: Vec<i64> = row_mask
            .iter()
            .map(|m| {
                seen += m;
                (seen - 1).max(0)
            })
            .collect();
        pos.extend(&cums[past_len..]);
        mask.extend(row_mask);
    }
    let mut feeds = vec![Feed {
        name: plan.input_ids.clone(),
        elem: plan.input_ids_dtype,
        values: Values::Int(ArrayD::from_shape_vec(IxDyn(&[b, n]), ids).expect("shape")),
    }];
    crate::engine::feeds::placement(plan, b, n, past_len, mask, pos, &mut feeds);
    for (name, elem, a) in pasts {
        feeds.push(Feed { name: name.clone(), elem: *elem, values: Values::Float(a.clone()) });
    }
    feeds
}

/// How far a batched row may be from the same row alone. Dynamic quantization
/// measures activation ranges over the whole batch, so a batch changes a
/// quantized row's rounding (gpt2-int8: 6.7e-2 relative); a row placed at the
/// wrong positions departs by ~1 (gpt2 without position_ids).
pub(crate) fn bound(plan: &Plan) -> crate::plan::numeric::Tolerance {
    match &plan.tolerance.form {
        crate::plan::numeric::NumericForm::Quantized { .. } => crate::plan::numeric::Tolerance {
            rel: Some(0.5),
            abs: None,
            reason: "quantized: activation ranges are measured over the batch".into(),
            form: plan.tolerance.form.clone(),
        },
        _ => plan.tolerance.clone(),
    }
}

/// (row, step, max |Δ|, relative, greedy agrees) of a batched row against the same row run alone.
pub(crate) type RowGap = (usize, usize, f64, f64, bool);

/// Every row of a batch of 2 against the same row run alone, step by step
/// (step-major). A batch that came back with fewer rows is an infinite gap.
pub(crate) fn against_alone(both: &[ArrayD<f32>], alone: [&[ArrayD<f32>]; 2]) -> Vec<RowGap> {
    let mut rows = Vec::new();
    for (step, batch) in both.iter().enumerate() {
        for (r, alone) in alone.iter().enumerate() {
            let g = match (batch.shape().first().is_some_and(|&n| n > r), alone.get(step)) {
                (true, Some(a)) => {
                    step::gap(&batch.index_axis(ndarray::Axis(0), r).insert_axis(ndarray::Axis(0)).to_owned(), a)
                }
                _ => step::Gap { abs: f64::INFINITY, rel: f64::INFINITY, greedy_agrees: false },
            };
            rows.push((r, step, g.abs, g.rel, g.greedy_agrees));
        }
    }
    rows
}

/// The three runs of a batch check (the batch, each row alone), or the first error.
pub(crate) fn all_three<T>(runs: [Result<T, String>; 3]) -> Result<[T; 3], String> {
    let [a, b, c] = runs;
    Ok([a?, b?, c?])
}

/// The batch event of a check that could not run.
pub(crate) fn not_run(what: &str, e: &str) -> Event {
    Event::Batch {
        rows: Vec::new(),
        issues: vec![crate::engine::events::StepIssue::error(
            crate::finding::Code::BatchPadding,
            format!("{what} could not run: {}", first_line(e)),
            None,
        )],
    }
}

/// The logits of each call of `calls` (new tokens per row) on `batch`, every
/// call onto the cache the previous ones left, starting from an empty one.
pub(crate) fn run_calls(
    ctx: &mut Ctx<'_>,
    batch: &Padded,
    calls: &[Vec<Vec<i64>>],
) -> Result<Vec<ArrayD<f32>>, String> {
    run_calls_fed(ctx, batch, calls).map(|(out, _)| out)
}

/// [`run_calls`], with the last call's feeds (to name a non-finite node in it).
pub(crate) fn run_calls_fed(
    ctx: &mut Ctx<'_>,
    batch: &Padded,
    calls: &[Vec<Vec<i64>>],
) -> Result<(Vec<ArrayD<f32>>, Vec<Feed>), String> {
    let job = ctx.job;
    let plan = &job.plan;
    let mut pasts = empty_pasts(plan, batch.rows.len());
    let mut past_len = 0usize;
    let mut out = Vec::new();
    let mut last = Vec::new();
    for new in calls {
        let n_new = new.iter().map(Vec::len).max().unwrap_or(0);
        let feeds = padded_step(plan, batch, new, past_len, &pasts, 0);
        let feeds = ctx.embedded(feeds)?;
        let o = run(&mut ctx.session, &feeds)?;
        last = feeds;
        let logits = o.floats.get(&plan.logits).cloned().ok_or("no logits")?;
        out.push(if batch.right && past_len == 0 { batch.last_real(&logits) } else { logits });
        for (c, slot) in plan.self_past.iter().zip(pasts.iter_mut()) {
            // Fed back as the present's own element type, as a caller does.
            slot.1 = c.present_dtype.unwrap_or(c.dtype);
            let present = o.floats.get(&c.present).ok_or("no present")?;
            slot.2 = crate::engine::feeds::carried(plan, c, &slot.2, present, (past_len + n_new) as i64);
        }
        past_len += n_new;
    }
    Ok((out, last))
}

/// Two prompts of different lengths in one left-padded batch against each
/// row run alone, teacher-forced on the same tokens for 3 cached steps.
pub(crate) fn check(ctx: &mut Ctx<'_>, emit: &mut dyn FnMut(Event)) {
    let job = ctx.job;
    let plan = &job.plan;
    let long: Vec<i64> = (0..4).map(|_| ctx.rng.below(plan.vocab)).collect();
    let short: Vec<i64> = (0..2).map(|_| ctx.rng.below(plan.vocab)).collect();
    let forced: Vec<i64> = (0..3).map(|_| ctx.rng.below(plan.vocab)).collect();
    // Logits per step, for a batch of `prompts` teacher-forced on `forced`.
    // GroupQueryAttention reads each row's length off its mask (seqlens_k):
    // rows are padded after their tokens, as onnxruntime-genai batches them.
    let right = job.options.gqa;
    let side = if right { "right" } else { "left" };
    let mut run_batch = |prompts: Vec<Vec<i64>>| -> Result<Vec<ArrayD<f32>>, String> {
        let batch = Padded::on_side(prompts, right);
        let b = batch.rows.len();
        let mut calls = vec![batch.rows.clone()];
        // Without a cache there is nothing to continue: the prompt call is the whole check.
        if !plan.is_cacheless() {
            calls.extend(forced.iter().map(|&t| vec![vec![t]; b]));
        }
        run_calls(ctx, &batch, &calls)
    };
    let prompts = vec![long.clone(), short.clone()];
    let runs = [run_batch(vec![long.clone()]), run_batch(vec![short.clone()]), run_batch(vec![long, short])];
    let [alone0, alone1, both] = match all_three(runs) {
        Ok(r) => r,
        Err(e) if right => return emit(gqa_refuses(&e)),
        Err(e) => return emit(not_run("a left-padded batch of 2", &e)),
    };
    let bound = bound(plan);
    let rows = against_alone(&both, [&alone0, &alone1]);
    let mut issues = Vec::new();
    // The padded row; row 0 is not padded.
    if let Some(&(_, step, abs, rel, _)) = rows.iter().find(|g| g.0 == 1 && bound.exceeded(g.2, g.3)) {
        let mut i = crate::engine::events::StepIssue::error(
            crate::finding::Code::BatchPadding,
            format!("row 1 of a batch of 2 ({side}-padded by 2) departs from the same prompt run alone at step {step}: max |Δ| {abs:.3e} (relative {rel:.2e}) > tolerance {}", bound.describe()),
            Some(&plan.logits),
        );
        // Fixed-size states (a convolution's last tokens) take a right-padded
        // row's trailing pads in: onnxruntime-genai's own batch of an LFM2
        // folder departs the same way (its row 1 differs from the row alone
        // from the second token on), so this is the consumer's limit, measured.
        let states = plan.self_past.iter().any(|c| c.fixed && !c.buffer);
        if right && states {
            i.severity = crate::finding::Severity::Warning;
        }
        i.cause = Some(match &plan.position_ids {
            None if right && states => "the fixed-size states (a convolution's last tokens) take the right-padded row's trailing pads in, as onnxruntime-genai's own batches do: its batch of prompts of different lengths departs the same way; generate one prompt at a time, or batch prompts of one length".into(),
            None if right => "fed as onnxruntime-genai batches it (each row's tokens first, mask zeros over the trailing pads, GroupQueryAttention's seqlens_k from the mask), the padded row still departs: the graph does not honour the mask's row lengths".into(),
            None => "the model takes no position_ids: it derives positions from the past length, so every left-padded row is shifted by its padding".into(),
            Some(p) => format!("`{p}` = cumsum(mask) - 1 was fed, yet the padded row differs: the mask or the positions are not honoured inside the graph"),
        });
        // NaN/Inf in the padded row: the node that made it, as for a step.
        if !abs.is_finite() && step == 0 {
            if let Some(n) = non_finite_at_prompt(ctx, prompts, right) {
                i.node = Some(n.display);
                i.cause = Some(n.cause);
            }
        }
        issues.push(i);
    }
    emit(Event::Batch { rows, issues });
}

/// A GroupQueryAttention graph that refuses a padded batch as
/// onnxruntime-genai feeds it (with `sliding_window_cache`, its windowed
/// layers need every row full): a limit genai's own batches meet too, so a
/// warning carrying ONNX Runtime's words, not a defect of the folder.
fn gqa_refuses(e: &str) -> Event {
    let mut event = not_run("a right-padded batch of 2, as onnxruntime-genai feeds it,", e);
    if let (Event::Batch { issues, .. }, true) = (&mut event, e.contains("too small for sequence_length")) {
        for i in issues {
            i.severity = crate::finding::Severity::Warning;
            i.cause = Some("GroupQueryAttention with a windowed cache (sliding_window_cache) takes no padded rows: onnxruntime-genai's own batch of prompts of different lengths fails the same way; generate one prompt at a time, or batch prompts of one length".into());
        }
    }
    event
}

/// Every self past empty, `rows` rows: what a batch's first call is fed.
fn empty_pasts(plan: &Plan, rows: usize) -> Vec<(String, ElemType, ArrayD<f32>)> {
    plan.self_past
        .iter()
        .map(|c| (c.past.clone(), c.dtype, crate::engine::feeds::cache_zeros(c, plan.seq_axis, Some(rows), 0)))
        .collect()
}

/// The first non-finite node of the padded batch's prompt call.
fn non_finite_at_prompt(
    ctx: &mut Ctx<'_>,
    prompts: Vec<Vec<i64>>,
    right: bool,
) -> Option<crate::diagnose::non_finite::NonFiniteNode> {
    let job = ctx.job;
    let plan = &job.plan;
    let batch = Padded::on_side(prompts, right);
    let pasts = empty_pasts(plan, batch.rows.len());
    let feeds = ctx.embedded(padded_step(plan, &batch, &batch.rows, 0, &pasts, 0)).ok()?;
    crate::diagnose::non_finite::first_non_finite(ctx.env, &job.model, &feeds, &job.options)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn left_padding_masks_the_pad_and_positions_count_real_tokens() {
        let plan_path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/gpt2-tiny/model.onnx");
        let sig = crate::model::reader::read_signature(&plan_path).unwrap();
        let c = crate::contract::builtin::load(
            "gpt2",
            &[("layers".into(), 2), ("heads".into(), 4), ("head_dim".into(), 8), ("vocab".into(), 1000)],
        )
        .unwrap()
        .unwrap();
        let plan = crate::plan::build(&sig, &c, 2).unwrap();
        let batch = Padded::new(vec![vec![3, 14, 15, 92], vec![65, 35]]);
        let f = padded_step(&plan, &batch, &batch.rows, 0, &[], 0);
        let ints = |name: &str| match &f.iter().find(|x| x.name == name).unwrap().values {
            Values::Int(a) => a.iter().copied().collect::<Vec<i64>>(),
            _ => panic!(),
        };
        assert_eq!(ints("input_ids"), [3, 14, 15, 92, 0, 0, 65, 35]);
        assert_eq!(ints("attention_mask"), [1, 1, 1, 1, 0, 0, 1, 1]);
        assert_eq!(ints("position_ids"), [0, 1, 2, 3, 0, 0, 0, 1]);
        // A later step: one token per row on a past of 4 (padding included).
        let f = padded_step(&plan, &batch, &[vec![7], vec![8]], 4, &[], 0);
        let ints = |name: &str| match &f.iter().find(|x| x.name == name).unwrap().values {
            Values::Int(a) => a.iter().copied().collect::<Vec<i64>>(),
            _ => panic!(),
        };
        assert_eq!(ints("attention_mask"), [1, 1, 1, 1, 1, 0, 0, 1, 1, 1]);
        assert_eq!(ints("position_ids"), [4, 2]);
    }
}
