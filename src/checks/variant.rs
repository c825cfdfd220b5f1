//! A numeric variant (`_fp16`, `_q4`, `_quantized`, …) against the folder's
//! fp32 model on the same tokens, and, when it departs beyond what its form
//! explains, the first node where it does. A variant can agree with itself
//! (cached = uncached) and still be wrong: only fp32 shows it.

use crate::checks::step;
use crate::diagnose::cause::first_line;
use crate::diagnose::diverge::{first_divergent, relative, Divergence};
use crate::engine::context::{open, Ctx};
use crate::engine::events::{Event, StepIssue};
use crate::engine::feeds::{self, Cache, Feed, Rng, Uncached};
use crate::engine::session::run;
use crate::finding::{Code, Repair};
use crate::plan::numeric::NumericForm;
use crate::plan::Plan;
use crate::repro::{reproduce, Problem};
use ndarray::ArrayD;
use std::path::Path;

/// A numeric variant and the folder's fp32 model on the same tokens, without
/// a cache: the prompt plus 7 seeded tokens, compared at every generated position.
pub(crate) fn compare(ctx: &mut Ctx<'_>, reference: &Path, ref_plan: &Plan, emit: &mut dyn FnMut(Event)) {
    let plan = &ctx.job.plan;
    let extra: Vec<i64> = (0..7).map(|_| ctx.rng.below(plan.vocab)).collect();
    let mut tokens = ctx.prompt.clone();
    tokens[0].extend(&extra);
    tokens.truncate(1);
    let start = ctx.prompt[0].len().saturating_sub(1);
    let row0 = |s: &ArrayD<f32>| s.index_axis(ndarray::Axis(0), 0).insert_axis(ndarray::Axis(0)).to_owned();
    let states = ctx.encoder_states.as_ref().map(row0);
    let file = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut name = file(reference);
    // A seq2seq variant runs as a pair (encoder_X → decoder_X), as applications
    // load them: the fp32 decoder reads the fp32 encoder's states of the same source.
    let opts = &ctx.job.options;
    let pair = match (&opts.compare_encoder, &opts.encoder) {
        (Some(fp32), Some(ours)) if fp32 != ours => {
            name = format!("{} → {name}", file(fp32));
            let fp32_states = crate::engine::encoder::states(ctx.env, fp32, plan, opts, &mut Rng::seeded(opts.seed));
            Some((ours.clone(), fp32.clone(), fp32_states))
        }
        _ => None,
    };
    let ref_states = match &pair {
        Some((_, _, Ok((_, s)))) => Some(row0(s)),
        _ => states.clone(),
    };
    let empty = Cache::empty(plan, 0);
    let ours = feeds::uncached(plan, &tokens, states.as_ref(), ctx.enc_len, Uncached::SameModel { dummy: 0 }, &empty);
    let ref_empty = Cache::empty(ref_plan, 0);
    let theirs = feeds::uncached(
        ref_plan,
        &tokens,
        ref_states.as_ref(),
        ctx.enc_len,
        Uncached::SameModel { dummy: 0 },
        &ref_empty,
    );
    let result = (|| -> Result<(ArrayD<f32>, ArrayD<f32>), String> {
        if let Some((_, fp32, Err(e))) = &pair {
            return Err(format!("{}: {e}", fp32.display()));
        }
        let a = run(&mut ctx.session, &ours)?.floats.get(&plan.logits).cloned().ok_or("no logits")?;
        let mut s = open(ctx.env, reference, &ctx.job.options)?;
        let b = run(&mut s, &theirs)?.floats.get(&ref_plan.logits).cloned().ok_or("no logits from the fp32 model")?;
        Ok((a, b))
    })();
    let (a, b) = match result {
        Ok(x) => x,
        Err(e) => {
            let issue = StepIssue::error(
                Code::VariantDivergence,
                format!("could not compare with {name}: {}", first_line(&e)),
                None,
            );
            return emit(Event::Variant { reference: name, positions: Vec::new(), issues: vec![issue] });
        }
    };
    let (bound, what) = crate::plan::numeric::variant_bound(&plan.tolerance.form);
    let mut positions = Vec::new();
    let n = a.shape().get(1).copied().unwrap_or(0).min(b.shape().get(1).copied().unwrap_or(0));
    for pos in start..n {
        let at = |x: &ArrayD<f32>| x.slice(ndarray::s![0..1, pos..pos + 1, ..]).to_owned().into_dyn();
        let g = step::gap(&at(&a), &at(&b));
        positions.push((pos - start, g.abs, g.rel, g.greedy_agrees));
    }
    let worst = positions.iter().cloned().fold(None, |w: Option<(usize, f64, f64, bool)>, p| match w {
        Some(w) if w.2 >= p.2 || p.2.is_nan() && w.2.is_nan() => Some(w),
        _ => Some(p),
    });
    let mut issues = Vec::new();
    let mut repros = Vec::new();
    let opts = &ctx.job.options;
    // A pair's encoder is judged on its own output: a decoder that reads its
    // encoder little (bart-tjs: random states move its logits by 0.016) would
    // hide a broken encoder in the logits.
    let encoder = match (&pair, &states, &ref_states) {
        (Some((enc, fp32, Ok((feeds, _)))), Some(a), Some(b)) => {
            relative(a, b).map(|(abs, rel)| (enc, fp32, feeds, abs, rel))
        }
        _ => None,
    };
    let encoder_departs = encoder.filter(|e| e.4.is_nan() || e.4 > bound);
    if let Some((enc, fp32, feeds, abs, rel)) = encoder_departs {
        let mut i = StepIssue::error(
            Code::VariantDivergence,
            format!(
                "{} departs from {} (fp32) by relative {rel:.2} (max |Δ| {abs:.3e}) on the same source: the states every decoder step of this pair reads",
                file(enc),
                file(fp32)
            ),
            None,
        );
        let mut cause = format!(
            "a {what} encoder is expected within {bound} relative of fp32; far beyond it the conversion itself is wrong (a bad quantization recipe or scale layout)"
        );
        let d = locate(ctx.env, (enc, feeds), (fp32, feeds), opts, bound, &file(fp32), &mut cause);
        repros.extend(
            d.and_then(|d| point(ctx.env, &mut i, d, (enc, feeds), (fp32, feeds), bound, &plan.tolerance.form, opts)),
        );
        i.cause = Some(cause);
        issues.push(i);
    }
    if let Some((pos, abs, rel, _)) = worst.filter(|w| w.2.is_nan() || w.2 > bound) {
        let agree = positions.iter().filter(|p| p.3).count();
        let first = positions.iter().find(|p| p.2.is_nan() || p.2 > bound).map_or(pos, |p| p.0);
        let mut i = StepIssue::error(
            Code::VariantDivergence,
            format!(
                "departs from {name} (fp32) by relative {rel:.2} (max |Δ| {abs:.3e}) at generated position {pos}, first beyond {bound} at position {first}; top-1 agrees at {agree} of {} positions",
                positions.len()
            ),
            Some(&plan.logits),
        );
        let mut cause = format!(
            "a {what} variant is expected within {bound} relative of fp32; far beyond it the conversion itself is wrong (a bad quantization recipe or scale layout), even though the variant agrees with itself (cached = uncached)"
        );
        match encoder_departs {
            Some(_) => cause.push_str("; the pair's encoder already departs (the encoder finding names where)"),
            // Where: the same tokens through both graphs, every tensor exposed.
            None => {
                let (model, env) = (&ctx.job.model, ctx.env);
                let d = locate(env, (model, &ours), (reference, &theirs), opts, bound, &file(reference), &mut cause);
                let form = &plan.tolerance.form;
                repros.extend(
                    d.and_then(|d| point(env, &mut i, d, (model, &ours), (reference, &theirs), bound, form, opts)),
                );
            }
        }
        i.cause = Some(cause);
        issues.push(i);
    }
    emit(Event::Variant { reference: name, positions, issues });
    for r in repros {
        emit(Event::Repro(r));
    }
}

/// Points the finding at the diverging node, says what a remedy would change
/// (float16: keep the node in float32; quantized: take it back from fp32),
/// and writes its reproduction when asked.
#[allow(clippy::too_many_arguments)]
fn point(
    env: &ort::environment::Environment,
    issue: &mut StepIssue,
    d: Divergence,
    ours: (&Path, &[Feed]),
    fp32: (&Path, &[Feed]),
    bound: f64,
    form: &NumericForm,
    opts: &crate::engine::options::Options,
) -> Option<crate::engine::events::Repro> {
    issue.node = Some(d.replaced_by.clone().unwrap_or_else(|| d.node.clone()));
    issue.repair = match form {
        NumericForm::Quantized { .. } => Some(Repair::Unquantize {
            tensor: d.tensor.clone(),
            node: d.node_name.clone(),
            reference: fp32.0.display().to_string(),
        }),
        NumericForm::Float16 => Some(Repair::KeepFloat32 { node: d.writer_name.clone(), float16: d.float16.clone() }),
        _ => None,
    };
    let problem = Problem::Departs {
        reference: fp32.0,
        reference_feeds: fp32.1,
        reference_node: &d.node_name,
        tensor: &d.tensor,
        bound,
    };
    reproduce(env, ours.0, ours.1, &d.writer_name, Code::VariantDivergence, problem, opts)
}

/// The first node where `ours` departs from `fp32` (appended to `cause`), or why it is not named.
fn locate(
    env: &ort::environment::Environment,
    ours: (&Path, &[Feed]),
    fp32: (&Path, &[Feed]),
    opts: &crate::engine::options::Options,
    bound: f64,
    fp32_name: &str,
    cause: &mut String,
) -> Option<Divergence> {
    match first_divergent(env, ours, fp32, opts, bound) {
        Ok(Some(d)) => {
            let by = d.replaced_by.as_ref().map(|r| format!(", written in the variant by {r}")).unwrap_or_default();
            cause.push_str(&format!(
                "; first node departing from {fp32_name} by more than {bound}: {}{by}, `{}` relative {:.2} (max |Δ| {:.3e}), after {} matched tensors within it",
                d.node, d.tensor, d.rel, d.abs, d.compared
            ));
            Some(d)
        }
        Ok(None) => {
            cause.push_str(&format!(
                "; no single tensor departs from {fp32_name} by more than {bound}: the error accumulates across nodes"
            ));
            None
        }
        Err(e) => {
            cause.push_str(&format!("; the diverging node could not be located: {}", first_line(&e)));
            None
        }
    }
}
