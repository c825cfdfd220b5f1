//! Drives a decoder through ONNX Runtime for several cache steps, the way a
//! correct caller would, and reports every step as an [`Event`]. Runs in the
//! child process; never prints.

use super::diagnose::{diagnose, failure_cause, first_line, load_error_cause, runtime_version, session_cause};
use super::events::{Event, StepIssue};
use super::feeds::{run, with_threads, Feed, Outputs, Rng};
use super::plan::{Family, Plan};
use ndarray::{ArrayD, Axis, IxDyn};
use ort::session::Session;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Instant;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Options {
    pub steps: usize,
    pub batch: i64,
    pub seed: u64,
    /// Encoder length for seq2seq models.
    pub encoder_len: i64,
    /// Prompt length at step 0 for decoder-only models.
    pub prompt_len: i64,
    /// Token fed at step 0 of a seq2seq decoder (default: vocab - 1, Marian's pad/start).
    pub start_token: Option<i64>,
    /// Produce encoder_hidden_states with this encoder instead of random values.
    pub encoder: Option<PathBuf>,
    /// Recompute uncached logits with this model (e.g. decoder_model.onnx)
    /// instead of the merged decoder's no-cache branch.
    pub no_cache_model: Option<PathBuf>,
    /// Intra-op threads; 0 leaves ONNX Runtime's default (one per core).
    pub threads: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            steps: 4,
            batch: 1,
            seed: 0,
            encoder_len: 7,
            prompt_len: 4,
            start_token: None,
            encoder: None,
            no_cache_model: None,
            threads: 0,
        }
    }
}

/// The job the parent sends to the child on stdin.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Job {
    pub model: PathBuf,
    pub ort_lib: PathBuf,
    pub plan: Plan,
    pub options: Options,
}

/// Runs the whole check, reporting through `emit`. Errors that stop
/// everything are reported as [`Event::Fatal`].
pub fn drive(job: &Job, emit: &mut dyn FnMut(Event)) {
    let lib = &job.ort_lib;
    let env = match ort::init_from(lib)
        .map(|b| b.with_name("onnx-contract").with_logger(std::sync::Arc::new(|_, _, _, _, _| {})).build())
    {
        Ok(Ok(env)) => env,
        Ok(Err(e)) => return emit(Event::Fatal { stage: "runtime".into(), message: e.to_string(), cause: None }),
        Err(e) => {
            let cause = load_error_cause(&e);
            return emit(Event::Fatal { stage: "runtime".into(), message: e.to_string(), cause });
        }
    };
    emit(Event::Runtime { version: runtime_version(lib), path: lib.display().to_string() });

    let open = |path: &PathBuf| -> Result<Session, String> {
        with_threads(Session::builder(&env), job.options.threads)
            .and_then(|mut b| b.commit_from_file(path))
            .map_err(|e| e.to_string())
    };
    let t0 = Instant::now();
    let mut session = match open(&job.model) {
        Ok(s) => s,
        Err(message) => {
            let cause = session_cause(&message);
            return emit(Event::Fatal { stage: "session".into(), message, cause });
        }
    };
    emit(Event::Session { model: job.model.display().to_string(), seconds: t0.elapsed().as_secs_f64() });

    let plan = &job.plan;
    let opts = &job.options;
    if let Some(first) = plan.unknown_inputs.first() {
        return emit(Event::Fatal {
            stage: "plan".into(),
            message: format!(
                "don't know how to feed input `{first}` ({} unknown): describe it in the contract's `cache` section",
                plan.unknown_inputs.len()
            ),
            cause: None,
        });
    }
    let mut rng = Rng(opts.seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407) | 1);
    let b = opts.batch.max(1) as usize;

    // Encoder states: from the real encoder when given, else seeded noise.
    let mut encoder_states: Option<Feed> = None;
    if let Some(name) = &plan.encoder_hidden_states {
        let states = match &opts.encoder {
            Some(enc_path) => match run_encoder(&env, enc_path, plan, opts, &mut rng) {
                Ok(s) => s,
                Err(message) => return emit(Event::Fatal { stage: "encoder".into(), message, cause: None }),
            },
            None => {
                let hidden = match plan.hidden {
                    Some(h) => h as usize,
                    None => {
                        return emit(Event::Fatal {
                            stage: "plan".into(),
                            message: format!(
                                "`{name}` has no fixed hidden size: set a `hidden` parameter in the contract"
                            ),
                            cause: None,
                        })
                    }
                };
                let n = b * opts.encoder_len as usize * hidden;
                ArrayD::from_shape_vec(
                    IxDyn(&[b, opts.encoder_len as usize, hidden]),
                    (0..n).map(|_| rng.normal()).collect(),
                )
                .expect("shape")
            }
        };
        encoder_states = Some(Feed::F32(states));
    }
    let mut no_cache_session = match &opts.no_cache_model {
        Some(p) => match open(p) {
            Ok(s) => Some(s),
            Err(message) => return emit(Event::Fatal { stage: "no-cache model".into(), message, cause: None }),
        },
        None => None,
    };

    let dtype_of = |name: &str| plan.dtypes.iter().find(|(n, _)| n == name).map(|(_, d)| d.clone()).unwrap_or_default();
    let start = opts.start_token.unwrap_or(plan.vocab - 1).clamp(0, plan.vocab - 1);
    let prompt: Vec<Vec<i64>> = (0..b)
        .map(|_| match plan.family {
            Family::Seq2Seq => vec![start],
            Family::DecoderOnly => (0..opts.prompt_len.max(1)).map(|_| rng.below(plan.vocab)).collect(),
        })
        .collect();
    let enc_len = opts.encoder_len as usize;

    for &dummy in &plan.step0_past_lengths {
        let zeros = |shape: &[i64], len: i64, axis: usize| {
            let mut s: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
            s[axis] = len as usize;
            ArrayD::<f32>::zeros(IxDyn(&s))
        };
        let mut self_cache: Vec<ArrayD<f32>> =
            plan.self_past.iter().map(|c| zeros(&c.shape, dummy, plan.seq_axis)).collect();
        let mut cross_cache: Vec<ArrayD<f32>> =
            plan.cross_past.iter().map(|c| zeros(&c.shape, dummy, plan.seq_axis)).collect();
        let mut tokens = prompt.clone();
        let mut new_tokens: Vec<Vec<i64>> = prompt.clone();
        let mut past_len: i64 = dummy;

        for step in 0..opts.steps {
            let cached = step > 0 || plan.branch_flag.is_none();
            let mut feeds: Vec<(String, Feed)> = Vec::new();
            let n_new = new_tokens[0].len();
            feeds.push((plan.input_ids.clone(), Feed::ints(new_tokens.concat(), &[b, n_new], &plan.input_ids_dtype)));
            if let Some(flag) = &plan.branch_flag {
                feeds.push((flag.clone(), Feed::Bool(ArrayD::from_elem(IxDyn(&[1]), step > 0))));
            }
            if let (Some(name), Some(states)) = (&plan.encoder_hidden_states, &encoder_states) {
                feeds.push((name.clone(), states.clone()));
            }
            if let Some(name) = &plan.encoder_attention_mask {
                feeds.push((name.clone(), Feed::ints(vec![1; b * enc_len], &[b, enc_len], &dtype_of(name))));
            }
            // Decoder-only: the mask covers past + new; positions continue the past.
            let attended = if cached { past_len } else { 0 };
            if let Some(name) = &plan.attention_mask {
                let total = attended as usize + n_new;
                feeds.push((name.clone(), Feed::ints(vec![1; b * total], &[b, total], &dtype_of(name))));
            }
            if let Some(name) = &plan.position_ids {
                let pos: Vec<i64> = (0..b).flat_map(|_| (0..n_new as i64).map(|i| attended + i)).collect();
                feeds.push((name.clone(), Feed::ints(pos, &[b, n_new], &dtype_of(name))));
            }
            for (c, a) in plan.self_past.iter().zip(&self_cache) {
                feeds.push((c.past.clone(), Feed::F32(a.clone())));
            }
            for (c, a) in plan.cross_past.iter().zip(&cross_cache) {
                feeds.push((c.past.clone(), Feed::F32(a.clone())));
            }
            emit(Event::Feeds { variant: dummy, step, feeds: feeds.iter().map(|(n, f)| f.info(n)).collect() });
            inject_fault(step);

            let t = Instant::now();
            let out = match run(&mut session, &feeds) {
                Ok(o) => o,
                Err(message) => {
                    let node = diagnose(&env, &job.model, &message, &feeds, opts);
                    let cause = failure_cause(&message, step, past_len, node.as_ref());
                    emit(Event::Failure { variant: dummy, step, message, node, cause });
                    break;
                }
            };
            let seconds = t.elapsed().as_secs_f64();

            let mut issues = Vec::new();
            let expect_len = if cached { past_len + n_new as i64 } else { n_new as i64 };
            check_outputs(plan, &out, b, n_new, expect_len, enc_len as i64, step, &mut issues);

            // Parity: the same position recomputed without the cache.
            let parity = if step > 0 {
                match recompute(&mut session, no_cache_session.as_mut(), plan, &feeds, &tokens, b, dummy, &dtype_of) {
                    Ok(full) => out.f32s.get(&plan.logits).map(|cached| max_abs_last(cached, &full)),
                    Err(message) => {
                        issues.push(StepIssue {
                            code: "parity".into(),
                            severity: "error".into(),
                            message: format!("recomputing without cache failed: {}", first_line(&message)),
                            tensor: None,
                        });
                        None
                    }
                }
            } else {
                None
            };
            if let Some(p) = parity {
                if p.is_nan() || p > plan.tolerance {
                    issues.push(StepIssue {
                        code: "parity".into(),
                        severity: "error".into(),
                        message: format!(
                            "cached logits differ from recomputing the prefix without cache: max |Δ| {p:.3e} > tolerance {:.0e}",
                            plan.tolerance
                        ),
                        tensor: Some(plan.logits.clone()),
                    });
                }
            }
            let failed_hard = issues.iter().any(|i| i.severity == "error" && i.code != "parity");
            emit(Event::Step { variant: dummy, step, outputs: out.infos.clone(), seconds, parity, issues });
            if failed_hard {
                break;
            }

            // Next step: greedy token, self cache from presents, cross cache kept from step 0.
            let logits = match out.f32s.get(&plan.logits) {
                Some(l) => l,
                None => break,
            };
            let next: Vec<i64> = (0..b).map(|i| argmax_last(logits, i).clamp(0, plan.vocab - 1)).collect();
            for (i, t) in next.iter().enumerate() {
                tokens[i].push(*t);
            }
            new_tokens = next.iter().map(|t| vec![*t]).collect();
            for (c, slot) in plan.self_past.iter().zip(self_cache.iter_mut()) {
                if let Some(p) = out.f32s.get(&c.present) {
                    *slot = p.clone();
                }
            }
            if step == 0 {
                for (c, slot) in plan.cross_past.iter().zip(cross_cache.iter_mut()) {
                    if let Some(p) = out.f32s.get(&c.present) {
                        *slot = p.clone();
                    }
                }
            }
            past_len = expect_len;
        }
    }
    emit(Event::Done);
}

#[allow(clippy::too_many_arguments)]
fn check_outputs(
    plan: &Plan,
    out: &Outputs,
    b: usize,
    n_new: usize,
    expect_len: i64,
    enc_len: i64,
    step: usize,
    issues: &mut Vec<StepIssue>,
) {
    let shape_of = |name: &str| out.infos.iter().find(|i| i.name == name).and_then(|i| i.shape.clone());
    let mut issue = |code: &str, message: String, tensor: &str| {
        issues.push(StepIssue {
            code: code.into(),
            severity: "error".into(),
            message,
            tensor: Some(tensor.to_string()),
        })
    };
    match shape_of(&plan.logits) {
        None => issue("step-output", format!("`{}` was not produced", plan.logits), &plan.logits),
        Some(s) => {
            let want = vec![b as i64, n_new as i64, plan.vocab];
            if s != want {
                issue(
                    "logits-shape",
                    format!("`{}` is {s:?}, expected [batch, new tokens, vocab] = {want:?}", plan.logits),
                    &plan.logits,
                );
            }
        }
    }
    if let Some(l) = out.f32s.get(&plan.logits) {
        let bad = l.iter().filter(|v| !v.is_finite()).count();
        if bad > 0 {
            issue("non-finite", format!("`{}` has {bad} NaN/Inf values", plan.logits), &plan.logits);
        }
    }
    let axis = plan.seq_axis;
    for c in &plan.self_past {
        match shape_of(&c.present) {
            None => issue("step-output", format!("`{}` was not produced", c.present), &c.present),
            Some(s) if s.get(axis) != Some(&expect_len) => issue(
                "cache-growth",
                format!(
                    "`{}` has length {} on axis {axis}, expected {expect_len} (past + {n_new} new): the cache does not grow by the tokens fed",
                    c.present,
                    s.get(axis).map(|v| v.to_string()).unwrap_or("?".into())
                ),
                &c.present,
            ),
            Some(_) => {}
        }
    }
    for c in &plan.cross_past {
        match shape_of(&c.present) {
            None if step == 0 => issue("step-output", format!("`{}` was not produced", c.present), &c.present),
            // Cached steps of optimum merged decoders return [0, heads, 1, head_dim] dummies: not to be fed back.
            Some(s) if step > 0 && s.first() == Some(&0) => {}
            Some(s) if s.get(axis) != Some(&enc_len) => issue(
                "cross-cache",
                format!(
                    "`{}` has length {:?} on axis {axis}, expected the encoder length {enc_len}",
                    c.present,
                    s.get(axis)
                ),
                &c.present,
            ),
            _ => {}
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn recompute(
    session: &mut Session,
    no_cache: Option<&mut Session>,
    plan: &Plan,
    step_feeds: &[(String, Feed)],
    tokens: &[Vec<i64>],
    b: usize,
    dummy: i64,
    dtype_of: &dyn Fn(&str) -> String,
) -> Result<ArrayD<f32>, String> {
    // `tokens` already ends with the token fed at this step.
    let n = tokens[0].len();
    let full: Vec<i64> = tokens.concat();
    let mut feeds: Vec<(String, Feed)> = Vec::new();
    feeds.push((plan.input_ids.clone(), Feed::ints(full, &[b, n], &plan.input_ids_dtype)));
    for (k, f) in step_feeds {
        if plan.encoder_hidden_states.as_deref() == Some(k) || plan.encoder_attention_mask.as_deref() == Some(k) {
            feeds.push((k.clone(), f.clone()));
        }
    }
    if let Some(s) = no_cache {
        let out = run(s, &feeds)?;
        return out
            .f32s
            .get(&plan.logits)
            .cloned()
            .ok_or_else(|| format!("no `{}` from the no-cache model", plan.logits));
    }
    if let Some(flag) = &plan.branch_flag {
        feeds.push((flag.clone(), Feed::Bool(ArrayD::from_elem(IxDyn(&[1]), false))));
    }
    if let Some(name) = &plan.attention_mask {
        feeds.push((name.clone(), Feed::ints(vec![1; b * n], &[b, n], &dtype_of(name))));
    }
    if let Some(name) = &plan.position_ids {
        feeds.push((name.clone(), Feed::ints((0..b).flat_map(|_| 0..n as i64).collect(), &[b, n], &dtype_of(name))));
    }
    let len = if plan.branch_flag.is_some() { dummy } else { 0 };
    for c in plan.self_past.iter().chain(&plan.cross_past) {
        let mut s: Vec<usize> = c.shape.iter().map(|&d| d as usize).collect();
        s[plan.seq_axis] = len as usize;
        feeds.push((c.past.clone(), Feed::F32(ArrayD::zeros(IxDyn(&s)))));
    }
    let out = run(session, &feeds)?;
    out.f32s.get(&plan.logits).cloned().ok_or_else(|| format!("no `{}`", plan.logits))
}

fn max_abs_last(cached: &ArrayD<f32>, full: &ArrayD<f32>) -> f64 {
    let last = |a: &ArrayD<f32>| a.index_axis(Axis(1), a.shape()[1] - 1).to_owned();
    let (x, y) = (last(cached), last(full));
    if x.shape() != y.shape() {
        return f64::INFINITY;
    }
    x.iter().zip(y.iter()).map(|(a, b)| (a - b).abs() as f64).fold(0.0, f64::max)
}

fn argmax_last(logits: &ArrayD<f32>, batch: usize) -> i64 {
    let row = logits.index_axis(Axis(0), batch);
    let last = row.index_axis(Axis(0), row.shape()[0] - 1);
    let mut best = (0usize, f32::NEG_INFINITY);
    for (i, v) in last.iter().enumerate() {
        if *v > best.1 {
            best = (i, *v);
        }
    }
    best.0 as i64
}

fn run_encoder(
    env: &ort::environment::Environment,
    path: &PathBuf,
    plan: &Plan,
    opts: &Options,
    rng: &mut Rng,
) -> Result<ArrayD<f32>, String> {
    let mut s = Session::builder(env)
        .and_then(|mut b| b.commit_from_file(path))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let b = opts.batch.max(1) as usize;
    let len = opts.encoder_len as usize;
    let names: Vec<(String, String)> =
        s.inputs().iter().map(|i| (i.name().to_string(), format!("{:?}", i.dtype()))).collect();
    let mut feeds = Vec::new();
    for (name, dtype) in names {
        let is32 = dtype.contains("Int32");
        let values: Vec<i64> = if name.contains("mask") {
            vec![1; b * len]
        } else {
            (0..b * len).map(|_| rng.below(plan.vocab)).collect()
        };
        feeds.push((name, Feed::ints(values, &[b, len], if is32 { "int32" } else { "int64" })));
    }
    let out = run(&mut s, &feeds)?;
    out.f32s.into_values().next().ok_or_else(|| "the encoder returned no float tensor".into())
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
