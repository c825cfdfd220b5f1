//! The cache run: `steps` greedy steps from a step-0 past, every output
//! checked against what must hold after its step (cache growth, shapes,
//! finite values), the logits against the same position recomputed without
//! the cache (parity), step 0 run twice (repeatability), and the first
//! non-finite node named when NaN/Inf appears.

use crate::checks::experiments::{self, Departure};
use crate::checks::repeatability;
use crate::checks::step::{self, Expect};
use crate::diagnose::cause::{failure_cause, first_line};
use crate::diagnose::failing_node::diagnose;
use crate::engine::context::Ctx;
use crate::engine::driver::{inject_fault, recompute};
use crate::engine::events::Event;
use crate::engine::feeds::{Cache, Feed, StepInput};
use crate::engine::session::run;
use crate::finding::{Code, Repair};
use crate::repro::{reproduce, Problem};
use std::time::Instant;

/// One run of `steps` steps from a step-0 past of length `dummy`.
pub(crate) fn run_steps(ctx: &mut Ctx<'_>, dummy: i64, emit: &mut dyn FnMut(Event)) {
    let (plan, opts) = (&ctx.job.plan, &ctx.job.options);
    let mut cache = Cache::empty(plan, dummy);
    let has_step0 = ctx.has_step0();
    // Owned for the run: the step routing borrows the job's sessions.
    let states = ctx.encoder_states.clone();
    if !has_step0 && plan.branch_flag.is_none() && !plan.cross_past.is_empty() {
        // A with-past decoder driven alone: no step 0 gives it a cross past.
        // The encoder's own cross caches when it computes them (genai Whisper), else seeded.
        if ctx.encoder_cross.len() == plan.cross_past.len() {
            cache.cross_past = ctx.encoder_cross.clone();
        } else {
            cache.seed_cross(plan, ctx.enc_len, &mut ctx.rng);
        }
    }
    let mut tokens = ctx.prompt.clone();
    let mut new_tokens = ctx.prompt.clone();
    // The first departure's mechanism, found by experiment (step, cause).
    let mut verdict: Option<(usize, String)> = None;
    // A decoder without any cache: every call re-feeds the whole prefix, as
    // its callers must (no parity to check: there is no cached path).
    let no_cache = plan.is_cacheless();
    for step in 0..opts.steps {
        if no_cache {
            new_tokens = tokens.clone();
        }
        // A fixed buffer holds so many tokens: the run ends where it is full.
        let n_next = new_tokens.first().map_or(0, Vec::len) as i64;
        if plan.buffer.as_ref().is_some_and(|b| cache.past_len + n_next > b.len) {
            return;
        }
        let input = StepInput { step, new_tokens: &new_tokens, encoder_states: states.as_ref(), enc_len: ctx.enc_len };
        // Step 0 of a split pair runs the no-past decoder on the prompt.
        let pair_step0 = step == 0 && has_step0;
        let cached = input.cached(plan) && !pair_step0;
        let (feeds, session, model) = match ctx.step(&input, &cache) {
            Ok(s) => s,
            Err(message) => {
                let cause = Some("the folder's embedding model did not run on the token ids".to_string());
                return emit(Event::Failure { variant: dummy, step, message, node: None, cause });
            }
        };
        emit(Event::Feeds { variant: dummy, step, feeds: feeds.iter().map(Feed::info).collect() });
        inject_fault(step);
        // A decoder crash's bisection: this step runs cut, and says what it computed.
        if opts.cut_step == Some((step, dummy)) {
            // Or the crash's reproduction, written and run (this process dies when it reproduces).
            if let Some((node, depth)) = &opts.crash_repro {
                return crate::repro::crash(ctx.env, &model, &feeds, node, *depth, opts, emit);
            }
            if let Some(wanted) = &opts.cut {
                match open_cut(ctx.env, &model, wanted, opts).and_then(|mut cut| run(&mut cut, &feeds)) {
                    Ok(out) => emit(Event::Cut { outputs: out.infos }),
                    Err(message) => emit(Event::Failure { variant: dummy, step, message, node: None, cause: None }),
                }
                return;
            }
        }

        let t = Instant::now();
        let out = match run(session, &feeds) {
            Ok(o) => o,
            Err(message) => {
                let node = diagnose(ctx.env, &model, &message, &feeds, opts);
                let cause = failure_cause(&message, step, cache.past_len, node.as_ref());
                let repro = node.as_ref().and_then(|n| {
                    let problem = Problem::Fails { message: &message };
                    reproduce(ctx.env, &model, &feeds, &n.name, Code::RunFailed, problem, opts)
                });
                emit(Event::Failure { variant: dummy, step, message, node, cause });
                return repro.into_iter().for_each(|r| emit(Event::Repro(r)));
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
        let mut issues = step::step_outputs(plan, &out, &expect);
        // What config.json says the logits are: capped at ± final_logit_softcapping (said once).
        if let (Some(cap), 0) = (opts.softcap, step) {
            issues.extend(out.floats.get(&plan.logits).and_then(|l| step::softcap_issue(l, cap, &plan.logits)));
        }
        if plan.buffer.is_some() && cached {
            issues.extend(crate::checks::buffer::writes(plan, &feeds, &out, cache.past_len as usize, n_new));
        }
        // A session must give the same answer twice (onnxruntime#22723): step 0, first run only.
        if step == 0 && Some(&dummy) == plan.step0_past_lengths.first() && !pair_step0 {
            issues.extend(repeatability::check(&mut ctx.session, &feeds, &out, &plan.logits));
        }

        // Parity: the same position recomputed without the cache.
        let mut parity = None;
        let mut reference = None;
        let mut recompute_seconds = None;
        if step > 0 && !no_cache {
            let t = Instant::now();
            let full = recompute(ctx, &tokens, dummy, &cache);
            recompute_seconds = Some(t.elapsed().as_secs_f64());
            match full {
                Ok(full) => {
                    parity = out.floats.get(&plan.logits).map(|c| step::gap(c, &full));
                    reference = Some(full);
                }
                Err(message) => issues.push(crate::engine::events::StepIssue::error(
                    Code::Parity,
                    format!("recomputing without cache failed: {}", first_line(&message)),
                    None,
                )),
            }
        }
        issues.extend(parity.and_then(|p| step::parity_issue(plan, p)));
        // The first departing step: counterfactual runs find the mechanism;
        // later departures of the same run share it.
        let departs = |i: &crate::engine::events::StepIssue| matches!(i.code, Code::Parity | Code::CacheGrowth);
        if let (None, Some(reference)) = (&verdict, reference.as_ref().filter(|_| issues.iter().any(departs))) {
            let d = Departure {
                step,
                feeds: &feeds,
                out: &out,
                reference,
                past_len: cache.past_len,
                new_tokens: &new_tokens,
                cache: &cache,
            };
            let v = experiments::explain(ctx, &d);
            if !v.tried.is_empty() {
                emit(Event::Probe {
                    what: format!("experiments at step {step}: {}", v.tried.join("; ")),
                    issues: vec![],
                });
            }
            verdict = Some((step, v.cause));
        }
        if let Some((at, cause)) = &verdict {
            for i in issues.iter_mut().filter(|i| departs(i) && i.cause.is_none()) {
                i.cause = Some(if *at == step { cause.clone() } else { format!("as at step {at}: {cause}") });
            }
        }
        // NaN/Inf: name the first node that produced it, on the first such finding.
        let mut repro = None;
        if let Some(i) = issues.iter_mut().find(|i| i.code == Code::NonFinite) {
            if let Some(n) = crate::diagnose::non_finite::first_non_finite(ctx.env, &model, &feeds, opts) {
                i.node = Some(n.display);
                i.cause = Some(n.cause);
                let half = !n.float16.is_empty() || plan.tolerance.form == crate::plan::numeric::NumericForm::Float16;
                if half {
                    i.repair = Some(Repair::KeepFloat32 { node: n.name.clone(), float16: n.float16 });
                }
                repro = reproduce(ctx.env, &model, &feeds, &n.name, Code::NonFinite, Problem::NonFinite, opts);
            }
        }
        let failed_hard = issues.iter().any(|i| i.code != Code::Parity);
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
        if let Some(r) = repro {
            emit(Event::Repro(r));
        }
        let Some(logits) = out.floats.get(&plan.logits).filter(|_| !failed_hard) else { return };
        if opts.deep && !pair_step0 && Some(&dummy) == plan.step0_past_lengths.first() {
            ctx.recorded.push((step, feeds.clone(), logits.clone()));
        }

        // Next step: greedy token, self cache from presents, cross cache kept from step 0.
        let next: Vec<i64> =
            (0..new_tokens.len()).map(|i| step::argmax_last(logits, i).clamp(0, plan.vocab - 1)).collect();
        for (row, t) in tokens.iter_mut().zip(&next) {
            row.push(*t);
        }
        new_tokens = next.iter().map(|t| vec![*t]).collect();
        if !no_cache {
            cache.advance(plan, &out, step, present_len);
        }
    }
}

/// A session on `path` cut to the tensors `wanted` (a crash bisection).
pub(crate) fn open_cut(
    env: &ort::environment::Environment,
    path: &std::path::Path,
    wanted: &[String],
    opts: &crate::engine::options::Options,
) -> Result<ort::session::Session, String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let (flat, _) = crate::diagnose::graph_edit::flatten(&bytes, &|_| Some(false))?;
    let cut = crate::diagnose::graph_edit::expose(&bytes, &flat, wanted)?;
    let builder = crate::engine::session::with_threads(ort::session::Session::builder(env), opts.threads);
    crate::engine::session::commit_edited(builder, &cut, path).map_err(|e| e.to_string())
}
