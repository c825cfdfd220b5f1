//! The rotary audit: what the graph rotates by, held against what
//! `config.json` says the model computes. Exporters fold the frequencies
//! into a `Constant`, select them at run time (`Where` on the sequence
//! length: longrope), or drop the scaling altogether, so they are measured,
//! not read: the least subgraph computing the angles a `Cos` node takes
//! (`position × inv_freq`, from the position inputs only) is cut out and run
//! on each side of every switch, and the frequencies and the cos/sin scale
//! are read off its outputs. A tiny model of a handful of nodes: no forward
//! pass of the decoder, whatever its size. Precomputed tables (genai) are
//! read by `rotary_tables`.

use crate::diagnose::graph_edit::{self, FlatNode};
use crate::edit::extract;
use crate::engine::context::Ctx;
use crate::engine::events::{Event, StepIssue};
use crate::engine::feeds::{self, Cache, Uncached};
use crate::engine::session::{run, with_threads};
use crate::finding::Code;
use crate::folder::rope::{Rope, Scaling};
use ort::session::Session;

/// The angles and cos/sin scale one chain of the graph applies at `len` positions.
struct Measured {
    /// `position × inv_freq` at the last position, over the last position: the frequencies.
    freqs: Vec<f64>,
    /// cos at position 0 (the attention scale), when the chain multiplies it.
    scale: f64,
    /// Relative tolerance for the element type the angles are computed in.
    tol: f64,
}

/// The longest position sequence run through the rotary subgraph (and
/// scanned for the first position where two rotations differ).
const MAX_POSITIONS: i64 = 1 << 17;

/// Runs the audit and reports it as a probe with its figure.
/// `model` is the graph's file as read (once, for this audit and the config audit).
pub(crate) fn audit(ctx: &mut Ctx<'_>, rope: &Rope, model: &Result<Vec<u8>, String>, emit: &mut dyn FnMut(Event)) {
    let (what, issues) = match model.as_ref().map_err(Clone::clone).and_then(|bytes| measure_all(ctx, rope, bytes)) {
        Ok(r) => r,
        Err(why) => (
            format!("rotary audit: {why}"),
            vec![StepIssue::info(Code::RotaryUnaudited, format!("{}; not audited: {why}", rope.source), None)],
        ),
    };
    emit(Event::Probe { what, issues });
}

/// The sequence lengths to measure at: both sides of longrope's switch, else one.
fn lengths(rope: &Rope) -> Vec<i64> {
    match rope.switch() {
        Some(omp) if omp <= MAX_POSITIONS => vec![omp.max(2), omp + 1],
        Some(_) => vec![63],
        // Odd, so that the position axis cannot be taken for a head dim or a
        // width (64 positions against head_dim 64 read the wrong axis).
        None => vec![rope.max_positions.map_or(63, |m| (m.clamp(3, 64) - 1) | 1)],
    }
}

fn measure_all(ctx: &mut Ctx<'_>, rope: &Rope, bytes: &[u8]) -> Result<(String, Vec<StepIssue>), String> {
    let flag = ctx.job.plan.branch_flag.clone();
    // The no-cache branch of a merged decoder: the one every prompt runs.
    let (path, nodes) = graph_edit::flatten(bytes, &|c| (Some(c) == flag.as_deref()).then_some(false))?;
    let chains = chains(&nodes);
    if chains.is_empty() {
        let dir = ctx.job.model.parent().unwrap_or(std::path::Path::new(".")).to_path_buf();
        return tables(rope, bytes, &dir, &nodes);
    }
    let mut checked = Vec::new();
    let (mut global, mut local) = (false, false);
    let mut mismatch = None;
    for len in lengths(rope) {
        let expected = rope.inv_freq(len);
        for (angles, scaled) in &chains {
            let m = measure(ctx, bytes, &path, &nodes, angles, scaled.as_deref(), len)?;
            match compare(rope, len, &m, &expected) {
                None => global = true,
                // Gemma 3's sliding layers: unscaled, their own base.
                Some(_)
                    if rope
                        .local_theta
                        .is_some_and(|t| all_close(&m.freqs, &Rope::default_freqs(t, rope.dim), m.tol)) =>
                {
                    local = true
                }
                Some(i) => {
                    mismatch.get_or_insert((len, i));
                }
            }
            checked.push(len);
        }
    }
    if let Some((len, i)) = mismatch {
        return Ok((format!("rotary audit at {len} positions: {}", i.message), vec![i]));
    }
    if let (Some(t), false) = (rope.local_theta, local) {
        let i = StepIssue::error(
            Code::Rotary,
            format!("no rotary chain of the graph applies rope_local_base_freq {t}: the sliding-window layers rotate with the global base ({}), another model than {}", rope.theta, rope.source),
            None,
        );
        return Ok((format!("rotary audit: {}", i.message), vec![i]));
    }
    let _ = global;
    checked.dedup();
    let what = format!(
        "rotary audit: {} frequencies and cos/sin scale {:.6} of {} chain(s) match {} at sequence lengths {checked:?}",
        rope.dim / 2,
        rope.attention_scaling(),
        chains.len(),
        rope.source,
    );
    Ok((what, Vec::new()))
}

/// The audit of precomputed cos/sin tables (genai), when the graph has them.
fn tables(
    rope: &Rope,
    bytes: &[u8],
    dir: &std::path::Path,
    nodes: &[FlatNode],
) -> Result<(String, Vec<StepIssue>), String> {
    let found = crate::checks::rotary_tables::measured(bytes, dir, nodes);
    if found.is_empty() {
        return Err("no `Cos` node and no cos/sin tables read by a rotary operator in the graph".into());
    }
    // A table is the short regime's (the first switch side) unless the config has no switch.
    let len = rope.switch().unwrap_or(2).max(2);
    let expected = rope.inv_freq(len);
    for (names, freqs, scale) in &found {
        let m = Measured { freqs: freqs.clone(), scale: *scale, tol: 2e-4 };
        if let Some(i) = compare(rope, len, &m, &expected) {
            let i = StepIssue { message: format!("{} (tables {names})", i.message), ..i };
            return Ok((format!("rotary audit of precomputed tables: {}", i.message), vec![i]));
        }
    }
    let what = format!(
        "rotary audit: {} frequencies and cos/sin scale {:.6} of {} precomputed table pair(s) ({}) match {}",
        rope.dim / 2,
        rope.attention_scaling(),
        found.len(),
        found.iter().map(|f| f.0.clone()).collect::<Vec<_>>().join(", "),
        rope.source
    );
    Ok((what, Vec::new()))
}

/// Each distinct angle tensor a `Cos` reads, with the `Mul` that scales the cos (if any).
fn chains(nodes: &[FlatNode]) -> Vec<(String, Option<String>)> {
    let mut out: Vec<(String, Option<String>)> = Vec::new();
    for n in nodes.iter().filter(|n| n.op_type == "Cos") {
        let (Some(angles), Some(cos)) = (n.inputs.first(), n.outputs.first()) else { continue };
        if out.iter().any(|(a, _)| a == angles) {
            continue;
        }
        let scaled = nodes
            .iter()
            .find(|m| m.op_type == "Mul" && m.inputs.contains(cos))
            .and_then(|m| m.outputs.first().cloned());
        out.push((angles.clone(), scaled));
    }
    out
}

fn measure(
    ctx: &mut Ctx<'_>,
    bytes: &[u8],
    path: &graph_edit::NodePath,
    nodes: &[FlatNode],
    angles: &str,
    scaled: Option<&str>,
    len: i64,
) -> Result<Measured, String> {
    let plan = &ctx.job.plan;
    // The node to cut around: the scaling Mul when there is one (its ancestors hold the angles too).
    let target_out = scaled.unwrap_or(angles);
    let target = nodes.iter().find(|n| n.outputs.iter().any(|o| o == target_out)).ok_or("no node writes the angles")?;
    let mut sel = extract::select(bytes, path, &target.name, 256)?;
    let inputs: Vec<String> = plan.dtypes.iter().map(|(n, _)| n.clone()).collect();
    if let Some(x) = sel.inputs.iter().find(|i| !inputs.contains(i)) {
        return Err(format!("the rotary angles depend on `{x}`, computed beyond the subgraph cut out"));
    }
    sel.outputs = vec![angles.to_string()];
    if let Some(s) = scaled {
        sel.outputs.push(s.to_string());
    }
    // The prompt's feeds at `len` positions (positions 0 … len − 1, no past).
    let tokens = vec![vec![1i64.min(plan.vocab - 1); len as usize]];
    let cache = Cache::empty(plan, 0);
    let all = feeds::uncached(plan, &tokens, None, 0, Uncached::SameModel { dummy: 0 }, &cache);
    let kept: Vec<feeds::Feed> = all.into_iter().filter(|f| sel.inputs.contains(&f.name)).collect();
    if kept.len() != sel.inputs.len() {
        return Err(format!("the rotary angles read {:?}, not all of which a prompt feeds", sel.inputs));
    }
    let shape_of = |name: &str| kept.iter().find(|f| f.name == name).map(|f| (f.elem.code(), f.shape()));
    let model_dir = ctx.job.model.parent().unwrap_or(std::path::Path::new("."));
    let reduced = extract::build(bytes, path, &sel, model_dir, &shape_of, &|_| None)?;
    let mut session: Session = with_threads(Session::builder(ctx.env), 1)
        .and_then(|mut b| b.commit_from_memory(&reduced))
        .map_err(|e| e.to_string())?;
    let out = run(&mut session, &kept)?;
    let a = out.floats.get(angles).ok_or("the angles were not computed")?;
    // [.., len, width]: the position axis is the one of length `len`, the last is the width.
    let pos_axis = a.shape()[..a.ndim().saturating_sub(1)]
        .iter()
        .rposition(|&d| d as i64 == len)
        .ok_or_else(|| format!("the angles {:?} have no axis of {len} positions", a.shape()))?;
    let mut row = a.view();
    // Down to [positions, width]: index 0 on every other axis, highest first.
    for ax in (0..a.ndim() - 1).rev().filter(|&ax| ax != pos_axis) {
        row = row.index_axis_move(ndarray::Axis(ax), 0);
    }
    let last = (len - 1) as usize;
    let width = row.shape()[1];
    // emb = cat(freqs, freqs): the first half holds every frequency once;
    // interleaved (Cohere, GPT-J: repeat_interleave): every other does.
    let even = width % 2 == 0;
    let freqs = if even && (0..width / 2).all(|i| row[[last, i]] == row[[last, i + width / 2]]) {
        (0..width / 2).map(|i| f64::from(row[[last, i]]) / last as f64).collect()
    } else if even && (0..width / 2).all(|i| row[[last, 2 * i]] == row[[last, 2 * i + 1]]) {
        (0..width / 2).map(|i| f64::from(row[[last, 2 * i]]) / last as f64).collect()
    } else {
        (0..width).map(|i| f64::from(row[[last, i]]) / last as f64).collect()
    };
    let scale = match scaled.and_then(|s| out.floats.get(s)) {
        Some(c) => f64::from(*c.iter().next().ok_or("an empty cos")?),
        None => 1.0,
    };
    // Angles computed in float16 (a converted variant) carry its precision.
    let dtype = out.infos.iter().find(|i| i.name == angles).map(|i| i.dtype);
    let tol: f64 = match dtype {
        Some(crate::model::signature::ElemType::F16) => 4e-3,
        Some(crate::model::signature::ElemType::BF16) => 3e-2,
        _ => 1e-4,
    };
    // Frequencies stored in float16 and cast up carry its rounding too.
    let tol = tol.max(crate::checks::constants::stored_tolerance(&reduced));
    Ok(Measured { freqs, scale, tol })
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * b.abs().max(1e-9)
}

fn all_close(a: &[f64], b: &[f64], tol: f64) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| close(*x, *y, tol))
}

/// The first position where frequencies `g` and `e` rotate a pair differently (beyond 1e-3).
fn first_position(g: &[f64], e: &[f64], limit: i64) -> Option<i64> {
    (1..=limit).find(|&p| {
        let p = p as f64;
        g.iter()
            .zip(e)
            .any(|(a, b)| ((a * p).cos() - (b * p).cos()).abs() > 1e-3 || ((a * p).sin() - (b * p).sin()).abs() > 1e-3)
    })
}

/// What the measured chain applies against what the config asks, as an error when they differ.
fn compare(rope: &Rope, len: i64, m: &Measured, e: &[f64]) -> Option<StepIssue> {
    let g = &m.freqs;
    let limit = rope.max_positions.unwrap_or(MAX_POSITIONS).max(len).min(MAX_POSITIONS);
    if g.len() != e.len() {
        return Some(StepIssue::error(
            Code::Rotary,
            format!("the graph rotates {} dims per head where {} gives {}", 2 * g.len(), rope.source, rope.dim),
            None,
        ));
    }
    if all_close(g, e, m.tol) {
        let s = rope.attention_scaling();
        return (!close(m.scale, s, m.tol)).then(|| {
            StepIssue::error(
                Code::Rotary,
                format!("cos and sin are scaled by {:.6} where {} gives an attention factor of {s:.6}: every position's rotation is off in magnitude", m.scale, rope.source),
                None,
            )
        });
    }
    let default = Rope::default_freqs(rope.theta, rope.dim);
    let mechanism = match &rope.scaling {
        Scaling::LongRope { short, omp, .. } if len > *omp && all_close(g, &default.iter().zip(short).map(|(f, s)| f / s).collect::<Vec<_>>(), m.tol) => {
            format!("longrope: the graph holds the short factors only; from position {omp} (original_max_position_embeddings) it computes another model (the long factors apply to every position of a sequence longer than {omp})")
        }
        s if *s != Scaling::Default && all_close(g, &default, m.tol) => format!(
            "the graph applies unscaled frequencies (rope_theta {}) where config.json asks for rope_scaling {}: the scaling was dropped at export; from position {} it computes another model",
            rope.theta,
            s.describe().unwrap_or_default(),
            first_position(g, e, limit).map_or("?".into(), |p| p.to_string())
        ),
        _ => {
            // A different base: g[1] = theta^(-2/dim).
            let theta = g.get(1).map(|f| f.powf(-(rope.dim as f64) / 2.0)).unwrap_or(f64::NAN);
            let rounded = (theta / 10.0).round() * 10.0;
            let scaled = Rope { theta: rounded, ..rope.clone() }.inv_freq(len);
            let from = first_position(g, e, limit).map_or("?".into(), |p| p.to_string());
            if theta.is_finite() && all_close(g, &scaled, m.tol) {
                format!("the graph applies rope_theta {rounded} where config.json says {}: from position {from} it computes another model", rope.theta)
            } else {
                let (i, _) = g.iter().zip(e).enumerate().map(|(i, (a, b))| (i, ((a - b) / b).abs())).fold((0, 0.0), |w, x| if x.1 > w.1 { x } else { w });
                format!("the graph's inverse frequency {i} is {:.6e} where {} gives {:.6e}: from position {from} it computes another model", g[i], rope.source, e[i])
            }
        }
    };
    Some(StepIssue::error(Code::Rotary, mechanism, None))
}
