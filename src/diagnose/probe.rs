//! Named tensors of a decoder at the last position of one uncached run (the
//! prompt, then given tokens): what `--source` compares, layer by layer,
//! with the checkpoint's hidden states to find where a departure starts.

use crate::engine::context::Ctx;
use crate::engine::feeds::{self, Cache, Uncached};
use crate::engine::options::Probe;
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
    let names = |_: &[crate::diagnose::graph_edit::FlatNode]| probe.names.clone();
    let (_, out) = crate::diagnose::exposed::exposing(ctx.env, &model, &fed, &ctx.job.options, &names)?;
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
