//! From a diagnosis to something to file upstream: the failing, non-finite
//! or diverging node cut out of the model with the least upstream graph that
//! still shows the problem, its inputs captured from the real run, and a
//! ten-line script that shows it on plain onnxruntime (`--repro DIR`).
//!
//! The reduction grows one producer level at a time (the node alone first)
//! and stops at the first one that, run here, shows the same thing: the same
//! error text, a NaN/Inf from finite inputs, or the departure from the fp32
//! node. Nothing is written for a reduction that does not show it.

mod crash;
pub(crate) mod npz;
pub(crate) mod raw;
mod script;

use crate::diagnose::graph_edit::{self, NodePath};
use crate::edit::{extract, float32};
use crate::engine::events::Repro;
use crate::engine::feeds::{Feed, Values};
use crate::engine::options::Options;
use crate::engine::session::with_threads;
use crate::finding::Code;
use crate::model::signature::ElemType;
pub(crate) use crash::crash;
use raw::Raw;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// What the reduction must show.
#[derive(Clone, Copy)]
pub(crate) enum Problem<'a> {
    /// ONNX Runtime fails in the node with this message.
    Fails { message: &'a str },
    /// The node writes NaN/Inf from finite inputs.
    NonFinite,
    /// Running the node kills the process (checked by a parent: the child
    /// that writes the reduction runs it and dies).
    Crashes,
    /// A variant's node departs from the fp32 model's node writing the same
    /// tensor by more than `bound` (relative).
    Departs { reference: &'a Path, reference_feeds: &'a [Feed], reference_node: &'a str, tensor: &'a str, bound: f64 },
}

/// How far up the reduction may grow before giving up.
pub(crate) const MAX_DEPTH: usize = 4;

/// Folders written by this process: a finding seen at several steps or
/// step-0 lengths is reproduced once.
static WRITTEN: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Writes the reproduction of `node`'s `problem` under `opts.repro`, when asked.
pub(crate) fn reproduce(
    env: &ort::environment::Environment,
    model: &Path,
    feeds: &[Feed],
    node: &str,
    code: Code,
    problem: Problem<'_>,
    opts: &Options,
) -> Option<Repro> {
    let to = opts.repro.as_ref()?;
    let (dir, mut repro) = started(to, model, node, code);
    {
        let mut written = WRITTEN.lock().unwrap_or_else(|p| p.into_inner());
        if written.contains(&dir) {
            return None;
        }
        written.push(dir.clone());
    }
    if let Err(e) = attempt(env, model, feeds, node, &problem, opts, &dir, &to.command, &mut repro) {
        repro.observed = format!("not written: {e}");
    }
    Some(repro)
}

/// The value fed to a bool condition (which `If` branch the run takes).
fn flag(feeds: &[Feed]) -> impl Fn(&str) -> Option<bool> + '_ {
    move |cond: &str| {
        feeds.iter().find(|f| f.name == cond).and_then(|f| match &f.values {
            Values::Bool(a) => a.iter().next().copied(),
            _ => None,
        })
    }
}

/// A session on `bytes`, graph optimizations as given.
fn session(
    env: &ort::environment::Environment,
    bytes: &[u8],
    opts: &Options,
    optimize: bool,
) -> Result<ort::session::Session, String> {
    let level = if optimize {
        ort::session::builder::GraphOptimizationLevel::All
    } else {
        ort::session::builder::GraphOptimizationLevel::Disable
    };
    with_threads(ort::session::Session::builder(env), opts.threads)
        .and_then(|b| Ok(b.with_optimization_level(level)?))
        .and_then(|mut b| b.commit_from_memory(bytes))
        .map_err(|e| e.to_string())
}

/// A session on `bytes`, an edited copy of the whole model file `model`
/// (its external data still beside it), optimizations off.
fn edited_session(
    env: &ort::environment::Environment,
    bytes: &[u8],
    opts: &Options,
    model: &Path,
) -> Result<ort::session::Session, String> {
    let builder = with_threads(ort::session::Session::builder(env), opts.threads)
        .and_then(|b| Ok(b.with_optimization_level(ort::session::builder::GraphOptimizationLevel::Disable)?));
    crate::engine::session::commit_edited(builder, bytes, model).map_err(|e| e.to_string())
}

/// The values of `names` in a run of the whole model on `feeds`: feeds as
/// fed, the rest exposed as outputs (optimizations off: each tensor as the
/// graph writes it).
fn capture(
    env: &ort::environment::Environment,
    model: &Path,
    bytes: &[u8],
    path: &NodePath,
    names: &[String],
    feeds: &[Feed],
    opts: &Options,
) -> Result<Vec<Raw>, String> {
    let rest: Vec<String> = names.iter().filter(|n| !feeds.iter().any(|f| &f.name == *n)).cloned().collect();
    let mut got: Vec<Raw> = Vec::new();
    if !rest.is_empty() {
        let edited = graph_edit::expose(bytes, path, &rest)?;
        let mut s = edited_session(env, &edited, opts, model)?;
        let declared: HashSet<String> = s.inputs().iter().map(|i| i.name().to_string()).collect();
        let fed: Vec<Raw> = feeds.iter().filter(|f| declared.contains(&f.name)).map(Raw::of_feed).collect();
        got = raw::run(&mut s, &fed).map_err(|e| format!("capturing the node's inputs: {e}"))?;
    }
    names
        .iter()
        .map(|n| match feeds.iter().find(|f| &f.name == n) {
            Some(f) => Ok(Raw::of_feed(f)),
            None => got.iter().find(|r| &r.name == n).cloned().ok_or_else(|| format!("`{n}` was not captured")),
        })
        .collect()
}

/// One reduced model with its captured inputs.
struct Cut {
    bytes: Vec<u8>,
    inputs: Vec<Raw>,
    nodes: usize,
}

/// The reduction of `node` at `depth`, inputs captured from `feeds`.
#[allow(clippy::too_many_arguments)]
fn cut(
    env: &ort::environment::Environment,
    model: &Path,
    bytes: &[u8],
    path: &NodePath,
    node: &str,
    depth: usize,
    feeds: &[Feed],
    opts: &Options,
    crashes: bool,
) -> Result<(Cut, extract::Selection), String> {
    let sel = extract::select(bytes, path, node, depth)?;
    let mut wanted = sel.inputs.clone();
    wanted.extend(sel.outputs.iter().cloned());
    // The target's outputs are captured too where they exist (their types);
    // a failing node has none, so only its inputs are; a crashing one's
    // outputs are never computed (that would run it).
    let captured = if crashes {
        capture(env, model, bytes, path, &sel.inputs, feeds, opts)?
    } else {
        capture(env, model, bytes, path, &wanted, feeds, opts)
            .or_else(|_| capture(env, model, bytes, path, &sel.inputs, feeds, opts))?
    };
    let first_float = captured.iter().find(|r| r.floats().is_some()).or(captured.first()).map(|r| r.dtype.code());
    let base = model.parent().unwrap_or(Path::new("."));
    let reduced = extract::build(
        bytes,
        path,
        &sel,
        base,
        &|n| captured.iter().find(|r| r.name == n).map(|r| (r.dtype.code(), r.shape.clone())),
        &|o| captured.iter().find(|r| r.name == o).map(|r| r.dtype.code()).or(first_float),
    )?;
    let inputs = sel.inputs.iter().filter_map(|n| captured.iter().find(|r| &r.name == n).cloned()).collect();
    Ok((Cut { bytes: reduced, inputs, nodes: sel.nodes }, sel))
}

/// The part of ONNX Runtime's message that says what went wrong, without
/// the node names and source paths around it (a reduced model's error has
/// other wrappers around the same text).
pub(crate) fn core(message: &str) -> String {
    let inner = message.rsplit("Status Message: ").next().unwrap_or(message);
    let inner = inner.rsplit(" was false. ").next().unwrap_or(inner);
    inner.trim().to_string()
}

#[allow(clippy::too_many_arguments)]
fn attempt(
    env: &ort::environment::Environment,
    model: &Path,
    feeds: &[Feed],
    node: &str,
    problem: &Problem<'_>,
    opts: &Options,
    dir: &Path,
    command: &str,
    repro: &mut Repro,
) -> Result<(), String> {
    let bytes = std::fs::read(model).map_err(|e| format!("{}: {e}", model.display()))?;
    // A node ONNX Runtime's optimizer made (`FusedMatMul`) is not in the file:
    // the same feeds with optimizations off fail in the file's own node.
    let unfused;
    let (node, problem) = match (graph_edit::find_node(&bytes, node, &flag(feeds)), problem) {
        (Some(_), _) => (node.to_string(), *problem),
        (None, Problem::Fails { .. }) => {
            let mut s = edited_session(env, &bytes, opts, model)?;
            let declared: HashSet<String> = s.inputs().iter().map(|i| i.name().to_string()).collect();
            let fed: Vec<Raw> = feeds.iter().filter(|f| declared.contains(&f.name)).map(Raw::of_feed).collect();
            match raw::run(&mut s, &fed) {
                Ok(_) => {
                    return Err(format!(
                        "`{node}` is not in the file (ONNX Runtime's optimizer made it) and the model runs without it"
                    ))
                }
                Err(m) => {
                    unfused = m;
                    let (_, name) = crate::diagnose::failing_node::failing_node(&unfused).ok_or_else(|| {
                        format!("`{node}` is not in the file, and with optimizations off no node is named")
                    })?;
                    (name, Problem::Fails { message: &unfused })
                }
            }
        }
        (None, _) => return Err(format!("node `{node}` not found")),
    };
    let (node, problem) = (node.as_str(), &problem);
    let path = graph_edit::find_node(&bytes, node, &flag(feeds)).ok_or_else(|| format!("node `{node}` not found"))?;
    repro.node = format!("{} ({})", path.display(), path.op_type);
    repro.nodes.0 = crate::edit::node_count(&bytes);
    // A variant's reduction grows until it reads only tensors the fp32 model
    // also has: then both sides start from the same place.
    let reference = match problem {
        Problem::Departs { reference, reference_feeds, reference_node, .. } => {
            let rb = std::fs::read(reference).map_err(|e| format!("{}: {e}", reference.display()))?;
            let rp = graph_edit::find_node(&rb, reference_node, &flag(reference_feeds))
                .ok_or_else(|| format!("node `{reference_node}` not found in {}", reference.display()))?;
            Some((rb, rp))
        }
        _ => None,
    };
    let ref_names: HashSet<String> = match &reference {
        Some((rb, rp)) => graph_edit::lift(rb, rp)?.nodes.iter().flat_map(|(_, n)| n.output.clone()).collect(),
        None => HashSet::new(),
    };
    let mut last = String::new();
    for depth in 0..=MAX_DEPTH {
        let (c, sel) = cut(env, model, &bytes, &path, node, depth, feeds, opts, false)?;
        if reference.is_some()
            && depth < MAX_DEPTH
            && !sel.inputs.iter().all(|i| ref_names.contains(i) || feeds.iter().any(|f| &f.name == i))
        {
            continue;
        }
        let shown = match (problem, &reference) {
            (Problem::Fails { message }, _) => judge_failure(env, &c, message, opts)?,
            (Problem::NonFinite, _) => judge_non_finite(env, &c, node, opts)?,
            (Problem::Departs { reference_feeds, reference_node, tensor, bound, .. }, Some((rb, rp))) => {
                let (rc, _) =
                    cut(env, problem_reference(problem), rb, rp, reference_node, 0, reference_feeds, opts, false)?;
                judge_departure(env, &c, &rc, tensor, *bound, opts)?
            }
            (Problem::Departs { .. }, None) => unreachable!("the reference is read above"),
            // Judged by a parent watching the process that runs it (`crash`), never here.
            (Problem::Crashes, _) => return Err("a crash is reproduced by `repro::crash` in a child".into()),
        };
        last = shown.observed.clone();
        if shown.reproduces {
            let ort_version = runtime_version();
            let ctx = script::Context {
                model,
                node: &repro.node,
                problem,
                observed: &shown.observed,
                expected_error: shown.expected_error.as_deref(),
                command,
                ort_version: &ort_version,
                nodes: (repro.nodes.0, c.nodes),
                bytes: (repro.bytes.0, c.bytes.len() as u64),
            };
            write_reduction(dir, &c, shown.reference.as_ref(), &ctx)?;
            repro.nodes.1 = c.nodes;
            repro.bytes.1 = c.bytes.len() as u64;
            repro.observed = shown.observed;
            repro.reproduces = true;
            return Ok(());
        }
    }
    Err(format!("no reduction up to {MAX_DEPTH} producer levels shows it here (last: {last})"))
}

/// Where a reproduction of `code` in `model` is written, and its record so far.
fn started(to: &crate::engine::options::ReproTo, model: &Path, node: &str, code: Code) -> (PathBuf, Repro) {
    let stem = model.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let dir = to.dir.join(format!("{stem}-{}", code.as_str()));
    let repro = Repro {
        dir: dir.display().to_string(),
        code,
        node: node.to_string(),
        nodes: (0, 0),
        bytes: (std::fs::metadata(model).map_or(0, |m| m.len()), 0),
        observed: String::new(),
        reproduces: false,
    };
    (dir, repro)
}

/// A reduction written into `dir`: the model and the values it reads, the
/// fp32 reference beside it when there is one, the script, README and
/// requirements.
fn write_reduction(
    dir: &Path,
    c: &Cut,
    reference: Option<&(Vec<u8>, Option<Vec<Raw>>)>,
    ctx: &script::Context<'_>,
) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let write = |name: &str, data: &[u8]| {
        std::fs::write(dir.join(name), data).map_err(|e| format!("{}: {e}", dir.join(name).display()))
    };
    write("model.onnx", &c.bytes)?;
    npz::write(&dir.join("inputs.npz"), &c.inputs)?;
    if let Some((ref_bytes, ref_inputs)) = reference {
        write("reference_fp32.onnx", ref_bytes)?;
        if let Some(ri) = ref_inputs {
            npz::write(&dir.join("reference_inputs.npz"), ri)?;
        }
    }
    write("repro.py", script::python(ctx).as_bytes())?;
    write("README.md", script::readme(ctx).as_bytes())?;
    write("requirements.txt", script::requirements(ctx.ort_version).as_bytes())
}

fn problem_reference<'a>(p: &'a Problem<'a>) -> &'a Path {
    match p {
        Problem::Departs { reference, .. } => reference,
        _ => Path::new(""),
    }
}

/// The ONNX Runtime version this process loaded, for the README and
/// requirements.txt: reported once per job (`Event::Runtime`), kept here so
/// the checks that reproduce need not carry it.
static VERSION: Mutex<String> = Mutex::new(String::new());

fn runtime_version() -> String {
    VERSION.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Remembers the version the job's runtime reported.
pub(crate) fn set_runtime_version(v: &str) {
    *VERSION.lock().unwrap_or_else(|p| p.into_inner()) = v.to_string();
}

/// What running a reduction showed.
struct Shown {
    reproduces: bool,
    observed: String,
    /// The error text the script looks for.
    expected_error: Option<String>,
    /// The float32 reference model and, when it has its own, its inputs.
    reference: Option<(Vec<u8>, Option<Vec<Raw>>)>,
}

fn judge_failure(env: &ort::environment::Environment, c: &Cut, message: &str, opts: &Options) -> Result<Shown, String> {
    let want = core(message);
    let got = session(env, &c.bytes, opts, true).and_then(|mut s| raw::run(&mut s, &c.inputs).map(|_| ()));
    let (reproduces, observed) = match got {
        Err(e) if core(&e) == want => (true, format!("fails as in the check: {want}")),
        Err(e) => (false, format!("fails otherwise: {}", core(&e))),
        Ok(()) => (false, "runs without error".to_string()),
    };
    Ok(Shown { reproduces, observed, expected_error: Some(want), reference: None })
}

fn non_finite_count(r: &Raw) -> usize {
    r.floats().map_or(0, |v| v.iter().filter(|x| !x.is_finite()).count())
}

fn judge_non_finite(env: &ort::environment::Environment, c: &Cut, node: &str, opts: &Options) -> Result<Shown, String> {
    let mut s = session(env, &c.bytes, opts, true)?;
    let out = raw::run(&mut s, &c.inputs)?;
    let bad: Vec<(String, usize, usize)> = out
        .iter()
        .map(|r| (r.name.clone(), non_finite_count(r), r.shape.iter().product::<i64>().max(0) as usize))
        .filter(|(_, n, _)| *n > 0)
        .collect();
    let Some((name, n, total)) = bad.first().cloned() else {
        return Ok(Shown {
            reproduces: false,
            observed: "every output finite".into(),
            expected_error: None,
            reference: None,
        });
    };
    let mut observed = format!("`{name}` has {n} NaN/Inf of {total} values");
    // Float16 inputs: the same node computed in float32 is the reference.
    let half: HashSet<&str> = c.inputs.iter().filter(|r| r.dtype == ElemType::F16).map(|r| r.name.as_str()).collect();
    let mut reference = None;
    // A reference that cannot be built or run leaves the reproduction without one.
    let widened = (!half.is_empty())
        .then(|| float32::keep_in_float32(&c.bytes, &[node.to_string()], &|t| half.contains(t), false))
        .and_then(Result::ok)
        .and_then(|w| {
            let out = session(env, &w, opts, true).and_then(|mut rs| raw::run(&mut rs, &c.inputs)).ok()?;
            Some((w, out))
        });
    if let Some((widened, wide)) = widened {
        if let Some(w) = wide.iter().find(|r| r.name == name) {
            let peak = w.floats().unwrap_or_default().iter().fold(0.0f64, |m, v| m.max(v.abs()));
            observed.push_str(&format!(
                "; computed in float32 the largest |value| is {peak:.4e} (float16's largest finite is 65504)"
            ));
        }
        reference = Some((widened, None));
    }
    Ok(Shown { reproduces: true, observed, expected_error: None, reference })
}

fn judge_departure(
    env: &ort::environment::Environment,
    c: &Cut,
    rc: &Cut,
    tensor: &str,
    bound: f64,
    opts: &Options,
) -> Result<Shown, String> {
    let mut s = session(env, &c.bytes, opts, true)?;
    let mut rs = session(env, &rc.bytes, opts, true)?;
    let a = raw::run(&mut s, &c.inputs)?;
    let b = raw::run(&mut rs, &rc.inputs)?;
    let get = |o: &[Raw]| o.iter().find(|r| r.name == tensor).and_then(Raw::floats);
    let (Some(x), Some(y)) = (get(&a), get(&b)) else {
        return Err(format!("`{tensor}` is not an output of both reductions"));
    };
    if x.len() != y.len() {
        return Err(format!("`{tensor}` has {} values in the variant and {} in fp32", x.len(), y.len()));
    }
    let abs = x.iter().zip(&y).map(|(p, q)| (p - q).abs()).fold(0.0f64, f64::max);
    let scale = y.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let rel = if scale > 0.0 { abs / scale } else { abs };
    Ok(Shown {
        reproduces: rel > bound || rel.is_nan(),
        observed: format!(
            "`{tensor}` departs from the fp32 node's by relative {rel:.3} (max |Δ| {abs:.3e}); expected within {bound}"
        ),
        expected_error: None,
        reference: Some((rc.bytes.clone(), Some(rc.inputs.clone()))),
    })
}
