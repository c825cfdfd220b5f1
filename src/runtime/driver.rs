//! Drives a decoder through ONNX Runtime for several cache steps, the way a
//! correct caller would, and reports every step as an [`Event`]. Runs in the
//! child process (or in-process when asked); never prints.

use super::checks::{self, Expect};
use super::context::{open, Ctx, Side};
use super::diagnose::{
    diagnose, failure_cause, first_line, load_error_cause, load_failure_node, runtime_version, session_cause,
};
use super::events::{Event, Stage};
use super::feeds::{self, Cache, Feed, Rng, StepInput, Uncached};
use super::options::Job;
use super::plan::Plan;
use super::session::run;
use crate::model::signature::ElemType;
use ndarray::{ArrayD, IxDyn};
use std::time::Instant;

fn fatal(stage: Stage, message: String, cause: Option<String>) -> Event {
    Event::Fatal { stage, message, cause, node: None }
}

/// A fatal event as the error of [`prepare`] (boxed: events are large).
fn stop(stage: Stage, message: String, cause: Option<String>) -> Box<Event> {
    Box::new(fatal(stage, message, cause))
}

/// Runs the whole check, reporting through `emit`. Errors that stop
/// everything are reported as [`Event::Fatal`].
pub fn drive(job: &Job, emit: &mut dyn FnMut(Event)) {
    let lib = &job.ort_lib;
    let env = match ort::init_from(lib)
        .map(|b| b.with_name("onnx-contract").with_logger(std::sync::Arc::new(|_, _, _, _, _| {})).build())
    {
        Ok(Ok(env)) => env,
        Ok(Err(e)) => return emit(fatal(Stage::Runtime, e.to_string(), None)),
        Err(e) => return emit(fatal(Stage::Runtime, e.to_string(), load_error_cause(&e))),
    };
    emit(Event::Runtime { version: runtime_version(lib), path: lib.display().to_string() });
    let mut ctx = match prepare(&env, job, emit) {
        Ok(ctx) => ctx,
        Err(ev) => return emit(*ev),
    };
    if let Some(calls) = job.options.replay.clone() {
        for c in &calls {
            let feeds = replay_feeds(&ctx.job.plan, c, &mut ctx.rng);
            match run(&mut ctx.session, &feeds) {
                Ok(_) => emit(Event::Replayed { call: c.call, error: None, node: None }),
                Err(message) => {
                    let node = diagnose(ctx.env, &ctx.job.model, &message, &feeds, &ctx.job.options);
                    emit(Event::Replayed { call: c.call, error: Some(message), node });
                    break;
                }
            }
        }
        return emit(Event::Done);
    }
    if let Some(r) = job.options.reference.clone() {
        match generate(&mut ctx, &r) {
            Ok((ids, top5)) => emit(Event::Generated { ids, top5 }),
            Err(message) => emit(fatal(Stage::Plan, format!("reference generation: {message}"), None)),
        }
        return emit(Event::Done);
    }
    let mut cache_failed = false;
    for &dummy in &job.plan.step0_past_lengths {
        run_steps(&mut ctx, dummy, &mut |ev| {
            cache_failed |= matches!(ev, Event::Failure { .. });
            emit(ev)
        });
    }
    if job.options.deep {
        super::levels::compare(&mut ctx, emit);
    }
    if let Some((reference, ref_plan)) = job.options.compare_to.clone() {
        super::variant::compare(&mut ctx, &reference, &ref_plan, emit);
    }
    // A cache that fails at batch 1 fails batched and probed the same way: said once.
    if job.options.batch_check && !cache_failed {
        match job.plan.family {
            super::plan::Family::DecoderOnly => super::batch::check(&mut ctx, emit),
            super::plan::Family::Seq2Seq => super::source_batch::check(&mut ctx, emit),
        }
    }
    if let Some(w) = job.options.window.clone().filter(|w| w.size <= super::window::MAX_PROBED && !cache_failed) {
        if job.plan.family == super::plan::Family::DecoderOnly {
            match super::window::probe(&mut ctx.session, &ctx.job.plan, &w, &mut ctx.rng) {
                Ok(ev) => emit(ev),
                Err(e) => emit(fatal(Stage::Plan, format!("sliding-window probe: {}", first_line(&e)), None)),
            }
        }
    }
    emit(Event::Done);
}

/// Sessions, encoder states and the prompt, or the event that stops the job.
fn prepare<'a>(
    env: &'a ort::environment::Environment,
    job: &'a Job,
    emit: &mut dyn FnMut(Event),
) -> Result<Ctx<'a>, Box<Event>> {
    let (plan, opts) = (&job.plan, &job.options);
    let t0 = Instant::now();
    let session = open(env, &job.model, opts).map_err(|m| {
        let (node, cause) = match load_failure_node(&job.model, &m) {
            Some((path, cause)) => (Some(path), Some(cause)),
            None => (None, session_cause(&m)),
        };
        Box::new(Event::Fatal { stage: Stage::Session, message: m, cause, node })
    })?;
    emit(Event::Session { model: job.model.display().to_string(), seconds: t0.elapsed().as_secs_f64() });
    if let Some(first) = plan.unknown_inputs.first() {
        return Err(stop(
            Stage::Plan,
            format!(
                "don't know how to feed input `{first}` ({} unknown): describe it in the contract's `cache` section",
                plan.unknown_inputs.len()
            ),
            None,
        ));
    }
    let mut rng = Rng::seeded(opts.seed);
    let b = opts.batch.max(1) as usize;
    let mut enc_len = opts.encoder_len.max(1) as usize;
    // Encoder states: from the real encoder when given, else seeded noise.
    // A with-past decoder takes none itself, but its pair's step 0 does.
    let mut encoder = None;
    let encoder_states = match (&plan.encoder_hidden_states, &opts.encoder) {
        (_, Some(path)) => {
            let mut s =
                open(env, path, opts).map_err(|e| stop(Stage::Encoder, format!("{}: {e}", path.display()), None))?;
            let states = super::encoder::states_on(&mut s, path, plan, opts, &mut rng)
                .map(|(_, states)| states)
                .map_err(|m| stop(Stage::Encoder, m, None))?;
            encoder = Some(s);
            enc_len = states.shape().get(1).copied().unwrap_or(enc_len);
            Some(states)
        }
        (None, None) => None,
        (Some(name), None) => {
            let hidden = plan.hidden.ok_or_else(|| {
                stop(
                    Stage::Plan,
                    format!("`{name}` has no fixed hidden size: set a `hidden` parameter in the contract"),
                    None,
                )
            })? as usize;
            let n = b * enc_len * hidden;
            Some(
                ArrayD::from_shape_vec(IxDyn(&[b, enc_len, hidden]), (0..n).map(|_| rng.normal()).collect())
                    .expect("shape"),
            )
        }
    };
    let side = |p: &Option<std::path::PathBuf>| -> Result<Option<Side>, Box<Event>> {
        p.as_ref().map(|p| Side::open(env, p, opts).map_err(|m| stop(Stage::NoCacheModel, m, None))).transpose()
    };
    let no_cache = side(&opts.no_cache_model)?;
    let step0_is_no_cache = opts.step0_model.is_some() && opts.step0_model == opts.no_cache_model;
    let step0 = if step0_is_no_cache { None } else { side(&opts.step0_model)? };
    let start = opts.start_token.unwrap_or(plan.vocab - 1).clamp(0, plan.vocab - 1);
    let mut prompt = feeds::prompt(plan, b, opts.prompt_len.max(1) as usize, start, &mut rng);
    if let (Some(r), super::plan::Family::DecoderOnly) = (&opts.reference, plan.family) {
        prompt = vec![r.ids.clone(); b];
    }
    Ok(Ctx {
        env,
        job,
        session,
        no_cache,
        step0,
        step0_is_no_cache,
        encoder_states,
        enc_len,
        prompt,
        rng,
        recorded: Vec::new(),
        encoder,
    })
}

/// One run of `steps` steps from a step-0 past of length `dummy`.
fn run_steps(ctx: &mut Ctx<'_>, dummy: i64, emit: &mut dyn FnMut(Event)) {
    let (plan, opts) = (&ctx.job.plan, &ctx.job.options);
    let mut cache = Cache::empty(plan, dummy);
    let has_step0 = ctx.has_step0();
    // Owned for the run: the step routing borrows the job's sessions.
    let states = ctx.encoder_states.clone();
    if !has_step0 && plan.branch_flag.is_none() && !plan.cross_past.is_empty() {
        // A with-past decoder driven alone: no step 0 gives it a cross past.
        cache.seed_cross(plan, ctx.enc_len, &mut ctx.rng);
    }
    let mut tokens = ctx.prompt.clone();
    let mut new_tokens = ctx.prompt.clone();
    for step in 0..opts.steps {
        let input = StepInput { step, new_tokens: &new_tokens, encoder_states: states.as_ref(), enc_len: ctx.enc_len };
        // Step 0 of a split pair runs the no-past decoder on the prompt.
        let pair_step0 = step == 0 && has_step0;
        let cached = input.cached(plan) && !pair_step0;
        let (feeds, session, model) = ctx.step(&input, &cache);
        emit(Event::Feeds { variant: dummy, step, feeds: feeds.iter().map(Feed::info).collect() });
        inject_fault(step);

        let t = Instant::now();
        let out = match run(session, &feeds) {
            Ok(o) => o,
            Err(message) => {
                let node = diagnose(ctx.env, &model, &message, &feeds, opts);
                let cause = failure_cause(&message, step, cache.past_len, node.as_ref());
                return emit(Event::Failure { variant: dummy, step, message, node, cause });
            }
        };
        let seconds = t.elapsed().as_secs_f64();
        let n_new = new_tokens.first().map_or(0, Vec::len);
        let present_len = if cached { cache.past_len + n_new as i64 } else { n_new as i64 };
        let cross_presents = step == 0 && (pair_step0 || plan.branch_flag.is_some());
        let expect = Expect {
            batch: new_tokens.len(),
            new_tokens: n_new,
            present_len,
            enc_len: ctx.enc_len as i64,
            step,
            cross_presents,
        };
        let mut issues = checks::step_outputs(plan, &out, &expect);
        // A session must give the same answer twice (onnxruntime#22723): step 0, first run only.
        if step == 0 && Some(&dummy) == plan.step0_past_lengths.first() && !pair_step0 {
            if let Ok(again) = run(&mut ctx.session, &feeds) {
                if let (Some(a), Some(b)) = (out.floats.get(&plan.logits), again.floats.get(&plan.logits)) {
                    // Bit for bit (NaN where NaN was is the same answer).
                    let same = a.shape() == b.shape()
                        && a.iter()
                            .zip(b.iter())
                            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()));
                    let g = checks::gap(a, b);
                    if !same {
                        issues.push(super::events::StepIssue::error(
                            crate::finding::Code::Repeatability,
                            format!(
                                "step 0 run twice on one session: the logits differ by {:.3e} the second time",
                                g.abs
                            ),
                            Some(&plan.logits),
                        ));
                    }
                }
            }
        }

        // Parity: the same position recomputed without the cache.
        let mut parity = None;
        let mut recompute_seconds = None;
        if step > 0 {
            let t = Instant::now();
            let full = recompute(ctx, &tokens, dummy, &cache);
            recompute_seconds = Some(t.elapsed().as_secs_f64());
            match full {
                Ok(full) => parity = out.floats.get(&plan.logits).map(|c| checks::gap(c, &full)),
                Err(message) => issues.push(super::events::StepIssue::error(
                    crate::finding::Code::Parity,
                    format!("recomputing without cache failed: {}", first_line(&message)),
                    None,
                )),
            }
        }
        issues.extend(parity.and_then(|p| checks::parity_issue(plan, p)));
        // NaN/Inf: name the first node that produced it, on the first such finding.
        if let Some(i) = issues.iter_mut().find(|i| i.code == crate::finding::Code::NonFinite) {
            if let Some((node, cause)) = super::diagnose::first_non_finite(ctx.env, &model, &feeds, opts) {
                i.node = Some(node);
                i.cause = Some(cause);
            }
        }
        let failed_hard = issues.iter().any(|i| i.code != crate::finding::Code::Parity);
        emit(Event::Step {
            variant: dummy,
            step,
            outputs: out.infos.clone(),
            seconds,
            parity: parity.map(|g| g.abs),
            parity_rel: parity.map(|g| g.rel),
            greedy_agrees: parity.map(|g| g.greedy_agrees),
            recompute_seconds,
            issues,
        });
        let Some(logits) = out.floats.get(&plan.logits).filter(|_| !failed_hard) else { return };
        if opts.deep && !pair_step0 && Some(&dummy) == plan.step0_past_lengths.first() {
            ctx.recorded.push((step, feeds.clone(), logits.clone()));
        }

        // Next step: greedy token, self cache from presents, cross cache kept from step 0.
        let next: Vec<i64> =
            (0..new_tokens.len()).map(|i| checks::argmax_last(logits, i).clamp(0, plan.vocab - 1)).collect();
        for (row, t) in tokens.iter_mut().zip(&next) {
            row.push(*t);
        }
        new_tokens = next.iter().map(|t| vec![*t]).collect();
        cache.advance(plan, &out, step, present_len);
    }
}

/// A recorded call's feeds: its dtypes, shapes and small values (flags, ids),
/// seeded contents for the rest (ids within the vocabulary, masks of ones).
fn replay_feeds(plan: &Plan, c: &super::options::ReplayCall, rng: &mut Rng) -> Vec<Feed> {
    c.feeds
        .iter()
        .map(|(name, dtype, shape, value)| {
            let dims: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
            let n: usize = dims.iter().product();
            let elem = ElemType::from_name(dtype).unwrap_or(ElemType::F32);
            let given = value.as_ref().filter(|v| v.len() == n);
            let values = if elem == ElemType::BOOL {
                feeds::Values::Bool(
                    ArrayD::from_shape_vec(
                        IxDyn(&dims),
                        given.map_or(vec![false; n], |v| v.iter().map(|&x| x != 0).collect()),
                    )
                    .expect("shape"),
                )
            } else if elem.is_float() {
                feeds::Values::Float(
                    ArrayD::from_shape_vec(IxDyn(&dims), (0..n).map(|_| rng.normal()).collect()).expect("shape"),
                )
            } else {
                let v = match given {
                    Some(v) => v.clone(),
                    None if name.contains("mask") => vec![1; n],
                    None => (0..n).map(|_| rng.below(plan.vocab)).collect(),
                };
                feeds::Values::Int(ArrayD::from_shape_vec(IxDyn(&dims), v).expect("shape"))
            };
            Feed { name: name.clone(), elem, values }
        })
        .collect()
}

/// Greedy generation without any cache: every step recomputes the whole
/// prefix (the reference an emitted program's cached loop must match).
fn generate(ctx: &mut Ctx<'_>, r: &super::options::Reference) -> Result<super::events::Generated, String> {
    let empty = Cache::empty(&ctx.job.plan, 0);
    let mut tokens = ctx.prompt.clone();
    let (mut ids, mut top5) = (Vec::new(), Vec::new());
    for _ in 0..r.max_new_tokens {
        let logits = recompute(ctx, &tokens, 0, &empty)?;
        let last = logits.index_axis(ndarray::Axis(0), 0);
        let row = last.index_axis(ndarray::Axis(0), last.shape()[0] - 1);
        let mut order: Vec<(usize, f64)> = row.iter().map(|v| f64::from(*v)).enumerate().collect();
        // Highest first; equal logits by lower id (numpy's stable argsort of -logits).
        order.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal).then(a.0.cmp(&b.0)));
        let token = order[0].0 as i64;
        top5.push(order.iter().take(5).map(|(i, v)| (*i as i64, *v)).collect());
        ids.push(token);
        tokens[0].push(token);
        if !r.ignore_eos && Some(token) == r.eos {
            break;
        }
    }
    Ok((ids, top5))
}

/// Logits of the whole prefix without cache: the separate no-cache model
/// when there is one, else the same model with an empty past.
fn recompute(ctx: &mut Ctx<'_>, tokens: &[Vec<i64>], dummy: i64, cache: &Cache) -> Result<ArrayD<f32>, String> {
    let plan = &ctx.job.plan;
    let states = ctx.encoder_states.as_ref();
    let out = match ctx.no_cache.as_mut() {
        Some(side) => {
            let feeds = side.keep(feeds::uncached(plan, tokens, states, ctx.enc_len, Uncached::SeparateModel, cache));
            run(&mut side.session, &feeds)?
        }
        None => {
            let feeds = feeds::uncached(plan, tokens, states, ctx.enc_len, Uncached::SameModel { dummy }, cache);
            run(&mut ctx.session, &feeds)?
        }
    };
    out.floats.get(&plan.logits).cloned().ok_or_else(|| format!("no `{}` from the uncached run", plan.logits))
}

/// Test-only fault injection: `ONNX_CONTRACT_FAULT=segv@2` (or `abort@2`)
/// kills the child just before step 2, as a runtime crash would.
fn inject_fault(step: usize) {
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
        _ => {}
    }
}
