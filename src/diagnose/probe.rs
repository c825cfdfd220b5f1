//! Named tensors of a decoder at the last position of one uncached run (the
//! prompt, then given tokens): what `--source` compares, layer by layer,
//! with the checkpoint's hidden states to find where a departure starts.

use crate::diagnose::graph_edit;
use crate::engine::context::Ctx;
use crate::engine::feeds::{self, Cache, Uncached, Values};
use crate::engine::options::Probe;
use crate::engine::session::{commit_edited, run, with_threads};
use ndarray::{ArrayD, Axis};

/// Row 0's values at the last position of each of `probe.names` (a
/// `[batch, positions, width]` tensor; one of rank 2 is `[batch, width]`).
pub(crate) fn last_position(ctx: &mut Ctx<'_>, probe: &Probe) -> Result<Vec<(String, Vec<f32>)>, String> {
    let plan = &ctx.job.plan;
    let mut tokens = ctx.prompt.clone();
    tokens.first_mut().ok_or("no prompt")?.extend(&probe.tokens);
    let mut empty = Cache::empty(plan, 0);
    if !ctx.encoder_cross.is_empty() && ctx.encoder_cross.len() == empty.cross_past.len() {
        empty.cross_past = ctx.encoder_cross.clone();
    }
    // The file the uncached recompute runs: the pair's no-past half, else the model itself.
    let (model, how) = match &ctx.job.options.no_cache_model {
        Some(p) => (p.clone(), Uncached::SeparateModel),
        None => (ctx.job.model.clone(), Uncached::SameModel { dummy: 0 }),
    };
    let mut fed = feeds::uncached(plan, &tokens, ctx.encoder_states.as_ref(), ctx.enc_len, how, &empty);
    feeds::noise_unwritten(plan, &mut fed, 0);
    let bytes = std::fs::read(&model).map_err(|e| format!("{}: {e}", model.display()))?;
    // The branch the run takes: a merged decoder's flag as fed.
    let flag = |cond: &str| -> Option<bool> {
        fed.iter().find(|f| f.name == cond).and_then(|f| match &f.values {
            Values::Bool(a) => a.iter().next().copied(),
            _ => None,
        })
    };
    let (path, _) = graph_edit::flatten(&bytes, &flag)?;
    let edited = graph_edit::expose(&bytes, &path, &probe.names)?;
    // Optimizations off: each tensor as its node writes it.
    let builder = with_threads(ort::session::Session::builder(ctx.env), ctx.job.options.threads)
        .and_then(|b| Ok(b.with_optimization_level(ort::session::builder::GraphOptimizationLevel::Disable)?));
    let mut s = commit_edited(builder, &edited, &model).map_err(|e| e.to_string())?;
    let declared: Vec<String> = s.inputs().iter().map(|i| i.name().to_string()).collect();
    let kept: Vec<feeds::Feed> = fed.into_iter().filter(|f| declared.contains(&f.name)).collect();
    let out = run(&mut s, &kept)?;
    Ok(probe.names.iter().filter_map(|n| Some((n.clone(), last_row(out.floats.get(n)?)?))).collect())
}

fn last_row(a: &ArrayD<f32>) -> Option<Vec<f32>> {
    let row = a.index_axis(Axis(0), 0);
    let last = match row.ndim() {
        1 => row,
        2 => row.index_axis(Axis(0), row.shape()[0].checked_sub(1)?),
        _ => return None,
    };
    Some(last.iter().copied().collect())
}
