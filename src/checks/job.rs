//! What the child process runs for one job: the checks in order (the cache
//! run for every step-0 past length, then `--deep`'s optimization levels, the
//! variant against fp32, the padded batch and the sliding-window probe), or
//! the recorded calls of a `replay`, or a reference generation for
//! `protocol --reference`. Runs in the child (or in-process when asked);
//! never prints but through `emit`.

use crate::checks::cache::run_steps;
use crate::diagnose::cause::{first_line, load_error_cause, runtime_version, session_cause};
use crate::diagnose::failing_node::{diagnose, load_failure_node};
use crate::engine::context::{open, Ctx, Side};
use crate::engine::driver::generate;
use crate::engine::events::{Event, Stage};
use crate::engine::feeds::{self, Rng};
use crate::engine::options::Job;
use crate::engine::runtime_report::{End, RuntimeReport};
use crate::engine::session::run;
use crate::finding::Code;
use ndarray::{ArrayD, IxDyn};
use std::io::{Read, Write};
use std::time::Instant;

fn fatal(stage: Stage, message: String, cause: Option<String>) -> Event {
    Event::Fatal { stage, message, cause, node: None }
}

/// A fatal event as the error of [`prepare`] (boxed: events are large).
fn stop(stage: Stage, message: String, cause: Option<String>) -> Box<Event> {
    Box::new(fatal(stage, message, cause))
}

/// This process's ONNX Runtime environment, from `lib`: created by the
/// first job, shared by every later one (ONNX Runtime allows one per
/// process; a runtime host runs a folder's jobs as threads of one process).
fn environment(lib: &std::path::Path) -> Result<ort::environment::Environment, Box<Event>> {
    static ENV: std::sync::Mutex<Option<(std::path::PathBuf, ort::environment::Environment)>> =
        std::sync::Mutex::new(None);
    let mut held = ENV.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((from, env)) = held.as_ref() {
        if from != lib {
            let m =
                format!("this process already runs ONNX Runtime from {}; one process runs one runtime", from.display());
            return Err(stop(Stage::Runtime, m, None));
        }
        return Ok(env.clone());
    }
    let env = match ort::init_from(lib)
        .map(|b| b.with_name("onnx-contract").with_logger(std::sync::Arc::new(|_, _, _, _, _| {})).build())
    {
        Ok(Ok(env)) => env,
        Ok(Err(e)) => return Err(stop(Stage::Runtime, e.to_string(), None)),
        Err(e) => return Err(stop(Stage::Runtime, e.to_string(), load_error_cause(&e))),
    };
    *held = Some((lib.to_path_buf(), env.clone()));
    Ok(env)
}

/// Runs the whole check, reporting through `emit`. Errors that stop
/// everything are reported as [`Event::Fatal`].
pub(crate) fn drive(job: &Job, emit: &mut dyn FnMut(Event)) {
    let lib = &job.ort_lib;
    let env = match environment(lib) {
        Ok(env) => env,
        Err(ev) => return emit(*ev),
    };
    let version = runtime_version(lib);
    crate::repro::set_runtime_version(&version);
    emit(Event::Runtime { version, path: lib.display().to_string() });
    if job.options.smoke {
        match open(&env, &job.model, &job.options) {
            Ok(mut s) => {
                emit(Event::Session { model: job.model.display().to_string(), seconds: 0.0 });
                let codebooks = job.options.codebooks.unwrap_or(1).max(1) as usize;
                crate::checks::smoke::run_once(&mut s, &job.model, codebooks, emit);
            }
            Err(m) => emit(Event::Fatal { stage: Stage::Session, message: m, cause: None, node: None }),
        }
        return emit(Event::Done);
    }
    let mut ctx = match prepare(&env, job, emit) {
        Ok(ctx) => ctx,
        Err(ev) => return emit(*ev),
    };
    if let Some(calls) = job.options.replay.clone() {
        replay(&mut ctx, &calls, emit);
        return emit(Event::Done);
    }
    if let Some(p) = job.options.reference.as_ref().and_then(|r| r.probe.as_ref()) {
        match crate::diagnose::probe::last_position(&mut ctx, p) {
            Ok(values) => emit(Event::Probed { values }),
            Err(message) => emit(fatal(Stage::Plan, format!("probe: {message}"), None)),
        }
        return emit(Event::Done);
    }
    if let Some(r) = job.options.reference.clone() {
        match generate(&mut ctx, &r) {
            Ok((ids, top5, score)) => emit(Event::Generated { ids, top5, score }),
            Err(message) => emit(fatal(Stage::Plan, format!("reference generation: {message}"), None)),
        }
        return emit(Event::Done);
    }
    if job.plan.family == crate::plan::Family::EncoderOnly {
        crate::checks::encoder_only::check(&mut ctx, emit);
        return emit(Event::Done);
    }
    let (mut cache_failed, mut departed) = (false, false);
    for &dummy in &job.plan.step0_past_lengths {
        run_steps(&mut ctx, dummy, &mut |ev| {
            cache_failed |= matches!(ev, Event::Failure { .. });
            departed |= matches!(&ev, Event::Step { issues, .. } if issues.iter().any(|i| matches!(i.code, Code::Parity | Code::CacheGrowth)));
            emit(ev)
        });
    }
    // A decoder crash's bisection child: the steps up to the cut one, nothing else.
    if job.options.cut_step.is_some() {
        return emit(Event::Done);
    }
    if job.plan.position_rows.is_some() && !cache_failed {
        crate::checks::positions::probe(&mut ctx, emit);
    }
    if job.options.deep {
        crate::checks::levels::compare(&mut ctx, emit);
    }
    // What config.json says the model computes, audited on the graph's file, read once for both audits.
    let audited = job.plan.family != crate::plan::Family::EncoderOnly;
    let (rope, scales) = (job.options.rope.clone().filter(|_| audited), job.options.scales.clone().filter(|_| audited));
    let model = (rope.is_some() || scales.is_some()).then(|| std::fs::read(&job.model).map_err(|e| e.to_string()));
    // The rotary frequencies, measured on the graph.
    if let (Some(rope), Some(model)) = (rope, &model) {
        crate::checks::rotary::audit(&mut ctx, &rope, model, emit);
    }
    // The multipliers and ALiBi slopes, read off the graph's own constants.
    if let (Some(scales), Some(model)) = (scales, &model) {
        let dir = job.model.parent().unwrap_or(std::path::Path::new("."));
        let (what, issues) = match model {
            Ok(bytes) => crate::checks::scales::audit(
                bytes,
                dir,
                job.plan.branch_flag.as_deref(),
                &scales,
                &job.plan.logits,
                &job.plan.input_ids,
                job.options.rope.as_ref().and_then(|r| r.max_positions),
            ),
            Err(e) => (format!("config audit: {}: {e}", job.model.display()), Vec::new()),
        };
        emit(Event::Probe { what, issues });
    }
    if let Some((reference, ref_plan)) = job.options.compare_to.clone() {
        crate::checks::variant::compare(&mut ctx, &reference, &ref_plan, emit);
    }
    // A cache that fails at batch 1 fails batched and probed the same way: said once.
    if job.options.batch_check && !cache_failed {
        match job.plan.family {
            crate::plan::Family::DecoderOnly => crate::checks::batch::check(&mut ctx, emit),
            crate::plan::Family::Seq2Seq => crate::checks::source_batch::check(&mut ctx, emit),
            crate::plan::Family::EncoderOnly => {}
        }
    }
    // A chunk of several tokens onto a cache: the decoder-only form callers prefill in chunks.
    // (A graph that fixes its tokens per call takes no chunk.)
    if !cache_failed
        && job.plan.family == crate::plan::Family::DecoderOnly
        && job.plan.tokens_per_call.is_none()
        && !job.plan.is_cacheless()
    {
        crate::checks::chunk::check(&mut ctx, !departed, emit);
    }
    if let Some(w) = job.options.window.clone().filter(|w| w.size <= crate::checks::window::MAX_PROBED && !cache_failed)
    {
        if job.plan.family == crate::plan::Family::DecoderOnly {
            match crate::checks::window::probe(&mut ctx.session, &ctx.job.plan, &w, &mut ctx.rng) {
                Ok(ev) => emit(ev),
                Err(e) => emit(fatal(Stage::Plan, format!("sliding-window probe: {}", first_line(&e)), None)),
            }
        }
    }
    emit(Event::Done);
}

/// The encoder-states width the split pair's no-past half declares.
fn pair_width(opts: &crate::engine::options::Options) -> Option<i64> {
    let sig = crate::model::reader::read_signature(opts.step0_model.as_ref()?).ok()?;
    let (_, dims) = sig.input("encoder_hidden_states")?.ty.tensor_parts()?;
    match dims?.get(2)? {
        crate::model::signature::Dim::Fixed(w) if *w > 0 => Some(*w),
        _ => None,
    }
}

/// Re-runs a trace's recorded calls in order until one fails: the job's
/// model on its session, a companion file's calls (the encoder whose states
/// the decoder is fed) on a session of their own, every output chained to
/// the later feeds the trace's digests say it became.
fn replay(ctx: &mut Ctx<'_>, calls: &[crate::engine::options::ReplayCall], emit: &mut dyn FnMut(Event)) {
    let mut chain = crate::engine::replay::Chain::default();
    let mut companions: Vec<(std::path::PathBuf, ort::session::Session)> = Vec::new();
    for c in calls {
        let (feeds, sources): (Vec<_>, Vec<_>) =
            crate::engine::replay::feeds(&ctx.job.plan, c, &mut ctx.rng, &mut chain).into_iter().unzip();
        let sources = feeds.iter().map(|f| f.name.clone()).zip(sources).collect();
        let own = c.model.as_ref().is_none_or(|m| *m == ctx.job.model);
        let ran = if own {
            chain.decoder_calls += 1;
            run(&mut ctx.session, &feeds)
        } else {
            let path = c.model.clone().unwrap_or_default();
            let at = match companions.iter().position(|(p, _)| *p == path) {
                Some(i) => Ok(i),
                None => open(ctx.env, &path, &ctx.job.options).map(|s| {
                    companions.push((path.clone(), s));
                    companions.len() - 1
                }),
            };
            at.and_then(|i| run(&mut companions[i].1, &feeds)).map_err(|e| format!("{}: {e}", path.display()))
        };
        match ran {
            Ok(out) => {
                chain.remember(c, &out);
                let scores = match out.floats.get(&ctx.job.plan.logits).filter(|_| own) {
                    Some(logits) => crate::engine::replay::row_scores(logits, &c.watch),
                    None => Vec::new(),
                };
                let mut rows = crate::engine::replay::computed_rows(c, &feeds, &out);
                rows.append(&mut chain.kept);
                if own {
                    chain.buffers.keep(&ctx.job.plan, c, &feeds, &out);
                }
                if own && c.output_rows.is_empty() {
                    chain.keep_last(c, &out, &scores);
                }
                emit(Event::Replayed { call: c.call, error: None, node: None, sources, scores, rows })
            }
            Err(message) => {
                let (model, opts) = (&ctx.job.model, &ctx.job.options);
                let node = own.then(|| diagnose(ctx.env, model, &message, &feeds, opts)).flatten();
                let repro = node.as_ref().and_then(|n| {
                    let problem = crate::repro::Problem::Fails { message: &message };
                    crate::repro::reproduce(ctx.env, model, &feeds, &n.name, Code::RunFailed, problem, opts)
                });
                emit(Event::Replayed {
                    call: c.call,
                    error: Some(message),
                    node,
                    sources,
                    scores: Vec::new(),
                    rows: Vec::new(),
                });
                repro.into_iter().for_each(|r| emit(Event::Repro(r)));
                break;
            }
        }
    }
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
    let mut encoder_cross = Vec::new();
    let encoder_states = match (&plan.encoder_hidden_states, &opts.encoder) {
        (_, Some(path)) => {
            // The encoder runs cut only in its own crash's bisection (not a decoder step's).
            let s = match opts.cut.as_ref().filter(|_| opts.cut_step.is_none()) {
                Some(wanted) => crate::checks::cache::open_cut(env, path, wanted, opts)
                    .map(|s| std::sync::Arc::new(crate::engine::shared::Shared::private(s)))
                    .map_err(|e| format!("{}: {e}", path.display())),
                None => crate::engine::shared::open(env, path, opts).map(|(s, shared)| {
                    let model = path.display().to_string();
                    emit(Event::Companion { model, seconds: s.seconds, shared });
                    s
                }),
            }
            .map_err(|e| stop(Stage::Encoder, e, None))?;
            // A bisected encoder crash's reproduction: written and run on the encoder's feeds (this process dies when it reproduces).
            let mut repro = |feeds: &[crate::engine::feeds::Feed], emit: &mut dyn FnMut(Event)| {
                if let Some((node, depth)) = &opts.crash_repro {
                    crate::repro::crash(env, path, feeds, node, *depth, opts, emit);
                }
            };
            let instead: Option<crate::engine::encoder::Instead<'_>> =
                (opts.crash_repro.is_some() && opts.cut_step.is_none()).then_some(&mut repro);
            let (_, states, cross) = crate::engine::encoder::states_on(&s, path, plan, opts, &mut rng, instead, emit)
                .map_err(|m| stop(Stage::Encoder, m, None))?;
            encoder_cross = cross;
            encoder = Some(s);
            enc_len = states.shape().get(1).copied().unwrap_or(enc_len);
            Some(states)
        }
        // A with-past decoder takes no states, but its pair's no-past half does: seeded at its width.
        (None, None) if pair_width(opts).is_none() => None,
        (name, None) => {
            let name = name.as_deref().unwrap_or("encoder_hidden_states");
            let hidden = plan.hidden.or_else(|| pair_width(opts)).ok_or_else(|| {
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
    // A decoder fed embeddings: the folder's embedding model, else seeded vectors per token id.
    let embed = match (&plan.inputs_embeds, &opts.embed_tokens, plan.embeds_width) {
        (None, _, _) => None,
        (Some(_), Some(path), _) => {
            let s = open(env, path, opts).map_err(|e| stop(Stage::Plan, format!("{}: {e}", path.display()), None))?;
            let embedder = crate::engine::embed::Embedder::model(s).map_err(|m| stop(Stage::Plan, m, None))?;
            match opts.reference.as_ref().and_then(|r| r.image.as_ref()) {
                Some(image) => {
                    Some(embedder.with_image(image_features(env, image, opts).map_err(|m| stop(Stage::Plan, m, None))?))
                }
                None => Some(embedder),
            }
        }
        (Some(_), None, Some(w)) => Some(crate::engine::embed::Embedder::Seeded { width: w.max(1) as usize }),
        (Some(name), None, None) => {
            return Err(stop(
                Stage::Plan,
                format!(
                "`{name}` takes embeddings of no fixed width, and the folder has no embedding model to compute them"
            ),
                None,
            ))
        }
    };
    // The config's start token as stated: it may lie past the logits (MusicGen's is the
    // codebook size, an extra embedding row); without one, the last logit's id.
    let start = opts.start_token.map_or(plan.vocab - 1, |s| s.max(0));
    // A graph that fixes the tokens per call takes its prompt in calls of that size.
    let prompt_len = plan.tokens_per_call.unwrap_or(opts.prompt_len).max(1) as usize;
    let mut prompt = feeds::prompt(plan, b, prompt_len, start, &mut rng);
    if let (Some(r), crate::plan::Family::DecoderOnly) = (&opts.reference, plan.family) {
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
        embed,
        encoder_cross,
    })
}

/// Child side: reads a [`Job`] as JSON on stdin, writes [`Event`]s as JSON lines.
pub(crate) fn child_main() -> i32 {
    let mut input = String::new();
    if std::io::stdin().read_to_string(&mut input).is_err() {
        return 64;
    }
    let job: Job = match serde_json::from_str(&input) {
        Ok(j) => j,
        Err(e) => {
            let ev = Event::Fatal { stage: Stage::Child, message: format!("bad job: {e}"), cause: None, node: None };
            let _ = writeln!(std::io::stdout(), "{}", serde_json::to_string(&ev).unwrap_or_default());
            return 64;
        }
    };
    let mut out = std::io::stdout().lock();
    drive(&job, &mut |ev| {
        // Flushed per line: the parent must see the feeds before a crash.
        let _ = writeln!(out, "{}", serde_json::to_string(&crate::engine::wire::finite(ev)).unwrap_or_default());
        let _ = out.flush();
    });
    0
}

/// In this process, without crash isolation (for hosts that cannot re-run
/// themselves). ONNX Runtime can be loaded only once per process.
pub(crate) fn run_in_process(job: &Job, source: &str) -> RuntimeReport {
    let mut report = RuntimeReport::new(&job.ort_lib, source);
    drive(job, &mut |ev| report.absorb(ev));
    report.finish(End::InProcess);
    report
}

/// The feature rows of `image` (its pixels through its vision encoder):
/// the encoder's first output, `[…, rows, width]` taken as `[rows, width]`.
fn image_features(
    env: &ort::environment::Environment,
    image: &crate::engine::options::Image,
    opts: &crate::engine::options::Options,
) -> Result<crate::engine::embed::Spliced, String> {
    let named = |e: String| format!("{}: {e}", image.encoder.display());
    let mut session = crate::engine::context::open(env, &image.encoder, opts).map_err(named)?;
    let pixels = crate::engine::npy::read_f32(&image.pixels)?;
    let (name, elem, _) = crate::engine::session::declared_inputs(&session)
        .into_iter()
        .find(|(_, e, _)| e.is_float())
        .ok_or_else(|| named("no float input to feed the pixels".into()))?;
    let out = crate::engine::session::run(
        &mut session,
        &[crate::engine::feeds::Feed { name, elem, values: crate::engine::feeds::Values::Float(pixels) }],
    )
    .map_err(|e| named(e.to_string()))?;
    let first = out.infos.first().map(|i| i.name.clone()).ok_or_else(|| named("no output".into()))?;
    let f = out.floats.get(&first).ok_or_else(|| named(format!("`{first}` is not float")))?;
    let width = f.shape().last().copied().unwrap_or(0);
    let rows = f.len().checked_div(width).unwrap_or(0);
    let features = f.to_shape(ndarray::IxDyn(&[rows, width])).map_err(|e| named(e.to_string()))?.to_owned();
    Ok(crate::engine::embed::Spliced { token: image.token, features })
}
