//! Drives a decoder through ONNX Runtime for several cache steps, the way a
//! correct caller would, and reports every step as an [`Event`]. Runs in the
//! child process; never prints.

use super::events::{Event, FailedNode, StepIssue, TensorInfo};
use super::graph_edit;
use super::plan::{Family, Plan};
use ndarray::{ArrayD, Axis, IxDyn};
use ort::session::Session;
use ort::value::{DynValue, Tensor};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
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

#[derive(Clone)]
enum Feed {
    F32(ArrayD<f32>),
    I64(ArrayD<i64>),
    I32(ArrayD<i32>),
    Bool(ArrayD<bool>),
}

impl Feed {
    fn info(&self, name: &str) -> TensorInfo {
        let (dtype, shape) = match self {
            Feed::F32(a) => ("float32", a.shape()),
            Feed::I64(a) => ("int64", a.shape()),
            Feed::I32(a) => ("int32", a.shape()),
            Feed::Bool(a) => ("bool", a.shape()),
        };
        TensorInfo {
            name: name.to_string(),
            dtype: dtype.into(),
            shape: Some(shape.iter().map(|&d| d as i64).collect()),
        }
    }

    fn value(&self) -> ort::Result<DynValue> {
        Ok(match self {
            Feed::F32(a) => Tensor::from_array(a.clone())?.into_dyn(),
            Feed::I64(a) => Tensor::from_array(a.clone())?.into_dyn(),
            Feed::I32(a) => Tensor::from_array(a.clone())?.into_dyn(),
            Feed::Bool(a) => Tensor::from_array(a.clone())?.into_dyn(),
        })
    }

    /// Integer inputs follow the model's declared dtype.
    fn ints(values: Vec<i64>, shape: &[usize], dtype: &str) -> Feed {
        let a = ArrayD::from_shape_vec(IxDyn(shape), values).expect("shape matches values");
        if dtype == "int32" {
            Feed::I32(a.mapv(|v| v as i32))
        } else {
            Feed::I64(a)
        }
    }
}

/// xorshift64*: reproducible inputs without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: i64) -> i64 {
        (self.next() % n.max(1) as u64) as i64
    }
    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f32 {
        let u1 = ((self.next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        let u2 = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
    }
}

/// Outputs of one run, copied out of the runtime.
struct Outputs {
    f32s: HashMap<String, ArrayD<f32>>,
    infos: Vec<TensorInfo>,
}

/// Our dtype names (`float32`), not ort's short ones (`f32`).
fn dtype_name(v: &DynValue) -> String {
    match v.dtype() {
        ort::value::ValueType::Tensor { ty, .. } => {
            let short = format!("{ty}");
            match short.as_str() {
                "f32" => "float32",
                "f16" => "float16",
                "bf16" => "bfloat16",
                "f64" => "float64",
                "i64" => "int64",
                "i32" => "int32",
                "i16" => "int16",
                "i8" => "int8",
                "u64" => "uint64",
                "u32" => "uint32",
                "u16" => "uint16",
                "u8" => "uint8",
                _ => return short,
            }
            .to_string()
        }
        other => format!("{other}"),
    }
}

fn run(session: &mut Session, feeds: &[(String, Feed)]) -> Result<Outputs, String> {
    let mut inputs: Vec<(String, DynValue)> = Vec::with_capacity(feeds.len());
    for (name, f) in feeds {
        inputs.push((name.clone(), f.value().map_err(|e| format!("cannot build `{name}`: {e}"))?));
    }
    let outputs = session.run(inputs).map_err(|e| e.to_string())?;
    let mut f32s = HashMap::new();
    let mut infos = Vec::new();
    for (name, value) in outputs {
        let shape = match value.dtype() {
            ort::value::ValueType::Tensor { shape, .. } => Some(shape.iter().copied().collect::<Vec<i64>>()),
            _ => None,
        };
        infos.push(TensorInfo { name: name.to_string(), dtype: dtype_name(&value), shape });
        if let Ok(a) = value.try_extract_array::<f32>() {
            f32s.insert(name.to_string(), a.to_owned());
        }
    }
    Ok(Outputs { f32s, infos })
}

fn with_threads(
    builder: ort::Result<ort::session::builder::SessionBuilder>,
    threads: usize,
) -> ort::Result<ort::session::builder::SessionBuilder> {
    match threads {
        0 => builder,
        n => builder.and_then(|b| Ok(b.with_intra_threads(n)?)),
    }
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

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

fn runtime_version(lib: &std::path::Path) -> String {
    if let Some(v) = super::locate::version_from_name(lib) {
        return v;
    }
    // ORT's build info names the release branch: `git-branch=rel-1.31.1`.
    let info = ort::info();
    info.split(|c: char| c == ',' || c.is_whitespace())
        .find_map(|p| p.strip_prefix("git-branch=rel-"))
        .map(str::to_string)
        .unwrap_or_else(|| "unknown".into())
}

fn load_error_cause(e: &ort::LoadDynamicError) -> Option<String> {
    match e {
        ort::LoadDynamicError::Dlopen { error, .. } => {
            let reason = std::error::Error::source(error).map(|s| s.to_string()).unwrap_or_else(|| error.to_string());
            Some(format!("the file could not be loaded as a shared library: {reason}"))
        }
        ort::LoadDynamicError::MissingApi { .. } => {
            Some("the library is not ONNX Runtime (no OrtGetApiBase symbol)".into())
        }
        ort::LoadDynamicError::BadVersion { version_str, .. } => {
            Some(format!("ONNX Runtime {version_str} is older than 1.17, the oldest API this build supports"))
        }
        ort::LoadDynamicError::InvalidVersionString => None,
    }
}

fn session_cause(message: &str) -> Option<String> {
    if message.contains("Unsupported model IR version") || message.contains("IR version") {
        Some("the model's IR version is newer than this ONNX Runtime accepts: re-save it with an older IR or use a newer runtime".into())
    } else if message.contains("not a registered function/op")
        || message.contains("No opset import for domain")
        || message.contains("Could not find an implementation")
    {
        Some("the model uses an operator (or opset) this ONNX Runtime does not implement".into())
    } else if message.contains("opset") && message.contains("is under development")
        || message.contains("ai.onnx") && message.contains("till opset")
    {
        Some("the model's opset is newer than this ONNX Runtime supports".into())
    } else {
        None
    }
}

/// `running Reshape node. Name:'/Reshape_5'`, innermost (last) occurrence.
fn failing_node(message: &str) -> Option<(String, String)> {
    let mut found = None;
    let mut rest = message;
    while let Some(i) = rest.find("while running ") {
        let after = &rest[i + "while running ".len()..];
        let op = after.split_whitespace().next().unwrap_or("").to_string();
        if let Some(n) = after.find("Name:'") {
            let name_part = &after[n + 6..];
            if let Some(end) = name_part.find('\'') {
                found = Some((op, name_part[..end].to_string()));
            }
        }
        rest = after;
    }
    found
}

fn diagnose(
    env: &ort::environment::Environment,
    model: &PathBuf,
    message: &str,
    feeds: &[(String, Feed)],
    opts: &Options,
) -> Option<FailedNode> {
    let (op, name) = failing_node(message)?;
    let bytes = match std::fs::read(model) {
        Ok(b) => b,
        Err(e) => {
            return Some(FailedNode {
                path: name.clone(),
                name,
                op_type: op,
                inputs: vec![],
                trace_error: Some(e.to_string()),
            })
        }
    };
    let flag_value = |cond: &str| -> Option<bool> {
        feeds.iter().find(|(k, _)| k == cond).and_then(|(_, f)| match f {
            Feed::Bool(a) => a.iter().next().copied(),
            _ => None,
        })
    };
    let Some(path) = graph_edit::find_node(&bytes, &name, &flag_value) else {
        return Some(FailedNode {
            path: name.clone(),
            name,
            op_type: op,
            inputs: vec![],
            trace_error: Some("node not found in the graph".into()),
        });
    };
    let wanted: Vec<String> = path.inputs.iter().filter(|s| !s.is_empty()).cloned().collect();
    let mut node = FailedNode {
        path: path.display(),
        name: path.name.clone(),
        op_type: if path.op_type.is_empty() { op } else { path.op_type.clone() },
        inputs: wanted.iter().map(|n| TensorInfo { name: n.clone(), dtype: String::new(), shape: None }).collect(),
        trace_error: None,
    };
    // Inputs that are feeds need no re-run.
    let traced = graph_edit::expose(&bytes, &path, &wanted).and_then(|edited| {
        let mut s = with_threads(Session::builder(env), opts.threads)
            .and_then(|mut b| b.commit_from_memory(&edited))
            .map_err(|e| format!("re-loading the model with the node's inputs exposed failed: {e}"))?;
        let declared: Vec<String> = s.inputs().iter().map(|i| i.name().to_string()).collect();
        let kept: Vec<(String, Feed)> = feeds.iter().filter(|(k, _)| declared.contains(k)).cloned().collect();
        run(&mut s, &kept).map_err(|e| format!("re-running with the node's inputs exposed failed: {}", first_line(&e)))
    });
    match traced {
        Ok(out) => {
            for i in node.inputs.iter_mut() {
                if let Some(info) = out.infos.iter().find(|o| o.name == i.name) {
                    *i = info.clone();
                } else if let Some((_, f)) = feeds.iter().find(|(k, _)| *k == i.name) {
                    *i = f.info(&i.name);
                }
            }
        }
        Err(e) => node.trace_error = Some(e),
    }
    Some(node)
}

/// One line on what the failure pattern usually means.
fn failure_cause(message: &str, step: usize, past_len: i64, node: Option<&FailedNode>) -> Option<String> {
    if message.contains("Missing Input")
        || message.contains("Invalid input name")
        || message.contains("Invalid Feed Input Name")
    {
        return Some(
            "signature mismatch: the model does not have the inputs a correct caller feeds (see the static findings)"
                .into(),
        );
    }
    if message.contains("Got invalid dimensions") {
        return Some(
            "a static axis in the declared signature: the model fixed this input's size at export time".into(),
        );
    }
    let op = node.map(|n| n.op_type.as_str()).unwrap_or("");
    let shape_op =
        matches!(op, "Reshape" | "Expand" | "Concat" | "Add" | "Mul" | "Where" | "MatMul" | "Softmax" | "Sub" | "Div")
            || message.contains("Reshape")
            || message.contains("broadcast")
            || message.contains("Broadcast");
    if shape_op && step > 0 {
        let numbers: Vec<i64> = message.split(|c: char| !c.is_ascii_digit()).filter_map(|s| s.parse().ok()).collect();
        let tracks = numbers.contains(&(past_len + 1)) || numbers.contains(&past_len);
        if tracks {
            return Some(format!(
                "a sequence length fixed at export time: step {step} feeds a past of length {past_len} and the numbers in the error track it; earlier steps worked (a Python int or constant shape captured while tracing)"
            ));
        }
        return Some(format!("a shape mismatch that appears only once the cache has grown (step {step}): suspect a length baked in at export time"));
    }
    None
}
