//! The step driver's pieces every job shares: the uncached recompute of a
//! prefix (the parity reference), greedy generation without a cache (the
//! reference an emitted program must match) and the test-only fault
//! injection. The checks that drive steps
//! are in `checks/`; what the child runs in order is `checks::job`.

use crate::engine::context::Ctx;
use crate::engine::feeds::{self, Cache, Uncached};
use crate::engine::session::run;
use ndarray::ArrayD;

/// Greedy generation without any cache: every step recomputes the whole
/// prefix (the reference an emitted program's cached loop must match).
pub(crate) fn generate(
    ctx: &mut Ctx<'_>,
    r: &crate::engine::options::Reference,
) -> Result<crate::engine::events::Generated, String> {
    // An encoder alone: one call on the ids; the last token's first hidden values.
    if ctx.job.plan.family == crate::plan::Family::EncoderOnly {
        let plan = &ctx.job.plan;
        let ids =
            ArrayD::from_shape_vec(ndarray::IxDyn(&[1, r.ids.len()]), r.ids.clone()).map_err(|e| e.to_string())?;
        let feeds: Vec<feeds::Feed> = crate::engine::session::declared_inputs(&ctx.session)
            .into_iter()
            .map(|(name, elem, _)| {
                let fill = if name == plan.input_ids {
                    None
                } else {
                    Some(i64::from(Some(&name) == plan.attention_mask.as_ref()))
                };
                let values = match fill {
                    None => ids.clone(),
                    Some(v) => ids.mapv(|_| v),
                };
                feeds::Feed { name, elem, values: feeds::Values::Int(values) }
            })
            .collect();
        let out = run(&mut ctx.session, &feeds)?;
        let states = out.floats.get(&plan.logits).ok_or_else(|| format!("no `{}`", plan.logits))?;
        let last = states.index_axis(ndarray::Axis(0), 0);
        let last = last.index_axis(ndarray::Axis(0), last.shape()[0].saturating_sub(1));
        return Ok((
            Vec::new(),
            vec![last.iter().take(5).enumerate().map(|(i, v)| (i as i64, f64::from(*v))).collect()],
            0.0,
        ));
    }
    let mut empty = Cache::empty(&ctx.job.plan, 0);
    // The cross caches the encoder computed, when it computes them (genai Whisper).
    if !ctx.encoder_cross.is_empty() && ctx.encoder_cross.len() == empty.cross_past.len() {
        empty.cross_past = ctx.encoder_cross.clone();
    }
    if r.beams > 1 {
        return beam_search(ctx, r, &empty);
    }
    let mut tokens = ctx.prompt.clone();
    let (mut ids, mut top5, mut score) = (Vec::new(), Vec::new(), 0.0);
    for _ in 0..r.max_new_tokens {
        let logits = last_logits(ctx, &tokens, &empty)?;
        let row: Vec<f64> = logits.index_axis(ndarray::Axis(0), 0).iter().map(|v| f64::from(*v)).collect();
        let mut order: Vec<(usize, f64)> = row.iter().copied().enumerate().collect();
        // Highest first; equal logits by lower id (numpy's stable argsort of -logits).
        order.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal).then(a.0.cmp(&b.0)));
        let token = order[0].0 as i64;
        score += crate::engine::beam::log_softmax(&row)[order[0].0];
        top5.push(order.iter().take(5).map(|(i, v)| (*i as i64, *v)).collect());
        ids.push(token);
        tokens[0].push(token);
        // Codebook rows (MusicGen) take their own greedy tokens; row 0's are the ones reported.
        for (r, row) in tokens.iter_mut().enumerate().skip(1) {
            let l = logits.index_axis(ndarray::Axis(0), r.min(logits.shape()[0] - 1));
            let mut best = (0usize, f32::NEG_INFINITY);
            for (i, v) in l.iter().enumerate() {
                if *v > best.1 {
                    best = (i, *v);
                }
            }
            row.push(best.0 as i64);
        }
        if !r.ignore_eos && Some(token) == r.eos {
            break;
        }
    }
    Ok((ids, top5, score))
}

/// Every row's logits at the last position of `tokens`, recomputed without a cache.
fn last_logits(ctx: &mut Ctx<'_>, tokens: &[Vec<i64>], empty: &Cache) -> Result<ndarray::Array2<f32>, String> {
    // A fixed-shape export takes no whole prefix: the prefix again, call by call, from fresh buffers.
    let logits = match ctx.job.plan.tokens_per_call {
        Some(k) => prefix_by_calls(ctx, tokens, k.max(1) as usize)?,
        None => recompute(ctx, tokens, 0, empty)?,
    };
    let last = logits.shape().get(1).map_or(0, |n| n.saturating_sub(1));
    logits
        .index_axis(ndarray::Axis(1), last)
        .to_owned()
        .into_dimensionality()
        .map_err(|e| format!("logits of rank {}: {e}", logits.ndim()))
}

/// The programs' beam search (`engine::beam`) without a cache: every beam's
/// whole prefix recomputed at every step, one row at a time.
fn beam_search(
    ctx: &mut Ctx<'_>,
    r: &crate::engine::options::Reference,
    empty: &Cache,
) -> Result<crate::engine::events::Generated, String> {
    if ctx.prompt.len() != 1 {
        return Err("beam search over several token rows (codebooks) is not written".into());
    }
    let prompt = ctx.prompt[0].clone();
    let mut beams = crate::engine::beam::Beams::new(r.beams, r.length_penalty);
    let eos = if r.ignore_eos { None } else { r.eos };
    for step in 0..r.max_new_tokens {
        let mut logp: Vec<Vec<f64>> = Vec::new();
        for seq in beams.seqs.clone() {
            // The beams start as one: step 0's rows are all row 0's.
            if step == 0 && !logp.is_empty() {
                logp.push(logp[0].clone());
                continue;
            }
            let tokens = vec![[prompt.clone(), seq].concat()];
            let logits = last_logits(ctx, &tokens, empty)?;
            let row: Vec<f64> = logits.index_axis(ndarray::Axis(0), 0).iter().map(|v| f64::from(*v)).collect();
            logp.push(crate::engine::beam::log_softmax(&row));
        }
        beams.step(&logp, eos);
        if beams.done() {
            break;
        }
    }
    let (_, ids, score) = beams.best();
    Ok((ids, Vec::new(), score))
}

/// Logits of the whole prefix without cache: the separate no-cache model
/// when there is one, else the same model with an empty past (fixed
/// buffers: fresh ones, or this very call when the model takes one token).
pub(crate) fn recompute(
    ctx: &mut Ctx<'_>,
    tokens: &[Vec<i64>],
    dummy: i64,
    cache: &Cache,
) -> Result<ArrayD<f32>, String> {
    let plan = &ctx.job.plan;
    let logits = plan.logits.clone();
    let out = uncached_outputs(ctx, tokens, dummy, cache)?;
    out.floats.get(&logits).cloned().ok_or_else(|| format!("no `{logits}` from the uncached run"))
}

/// Every output of the whole prefix run without cache (see [`recompute`]).
pub(crate) fn uncached_outputs(
    ctx: &mut Ctx<'_>,
    tokens: &[Vec<i64>],
    dummy: i64,
    cache: &Cache,
) -> Result<crate::engine::feeds::Outputs, String> {
    let plan = &ctx.job.plan;
    let states = ctx.encoder_states.as_ref();
    let out = match ctx.no_cache.as_mut() {
        Some(side) => {
            let feeds = side.keep(feeds::uncached(plan, tokens, states, ctx.enc_len, Uncached::SeparateModel, cache));
            run(&mut side.session, &feeds)?
        }
        // A fixed-shape export takes no whole prefix: the reference is this
        // call on the same cache with every slot not yet written filled with
        // noise (a correct mask never reads them).
        None if plan.buffer.is_some() && plan.tokens_per_call.is_some_and(|k| (k as usize) < prefix_len(tokens)) => {
            let k = plan.tokens_per_call.unwrap_or(1).max(1) as usize;
            let new: Vec<Vec<i64>> = tokens.iter().map(|r| r[r.len().saturating_sub(k)..].to_vec()).collect();
            let input = feeds::StepInput { step: 1, new_tokens: &new, encoder_states: states, enc_len: ctx.enc_len };
            let mut feeds = feeds::cached_step(plan, &input, cache);
            feeds::noise_unwritten(plan, &mut feeds, cache.past_len.max(0) as usize);
            let feeds = ctx.embedded(feeds)?;
            run(&mut ctx.session, &feeds)?
        }
        None => {
            let mut feeds = feeds::uncached(plan, tokens, states, ctx.enc_len, Uncached::SameModel { dummy }, cache);
            // Fixed buffers: the whole prefix from fresh buffers, their slots noise until written.
            feeds::noise_unwritten(plan, &mut feeds, 0);
            let feeds = ctx.embedded(feeds)?;
            run(&mut ctx.session, &feeds)?
        }
    };
    Ok(out)
}

/// The last logits of `tokens` fed `k` per call onto fresh (zeroed) buffers.
fn prefix_by_calls(ctx: &mut Ctx<'_>, tokens: &[Vec<i64>], k: usize) -> Result<ArrayD<f32>, String> {
    let plan = &ctx.job.plan;
    let mut cache = Cache::empty(plan, 0);
    let n = prefix_len(tokens);
    let mut last = None;
    for (step, from) in (0..n).step_by(k).enumerate() {
        let new: Vec<Vec<i64>> = tokens.iter().map(|r| r[from..(from + k).min(r.len())].to_vec()).collect();
        let input = feeds::StepInput { step, new_tokens: &new, encoder_states: None, enc_len: 0 };
        let feeds = feeds::cached_step(plan, &input, &cache);
        let out = run(&mut ctx.session, &feeds)?;
        let fed = new.first().map_or(0, Vec::len) as i64;
        cache.advance(plan, &out, step, cache.past_len + fed);
        last = out.floats.get(&plan.logits).cloned();
    }
    last.ok_or_else(|| format!("no `{}` from the prefix", plan.logits))
}

fn prefix_len(tokens: &[Vec<i64>]) -> usize {
    tokens.first().map_or(0, Vec::len)
}

/// Test-only fault injection: `ONNX_CONTRACT_FAULT=segv@2` (or `abort@2`)
/// kills the child just before step 2, as a runtime crash would.
pub(crate) fn inject_fault(step: usize) {
    let Ok(spec) = std::env::var("ONNX_CONTRACT_FAULT") else { return };
    let Some((kind, at)) = spec.split_once('@') else { return };
    if at.parse::<usize>().ok() != Some(step) {
        return;
    }
    match kind {
        #[cfg(unix)]
        // SAFETY: raising a signal on ourselves is the point.
        // Rust's own SIGSEGV handler (stack-overflow detection) swallows a
        // raised signal once; restore the default so this one kills, as a
        // real fault inside ONNX Runtime would.
        "segv" => unsafe {
            libc::signal(libc::SIGSEGV, libc::SIG_DFL);
            libc::raise(libc::SIGSEGV);
        },
        "abort" => std::process::abort(),
        // A bug of ours in a job: the process running it must name it at that job.
        "panic" => panic!("ONNX_CONTRACT_FAULT=panic@{step}"),
        _ => {}
    }
}
