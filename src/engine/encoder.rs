//! Running the folder's encoder: the states every seq2seq decoder check
//! starts from (the cache steps, and a variant pair against the fp32 pair).

use crate::engine::feeds::{self, Feed, Rng};
use crate::engine::options::Options;
use crate::engine::shared::Shared;
use crate::model::dims::Expr;
use crate::model::signature::{Dim, ElemType};
use crate::plan::Plan;
use ndarray::{ArrayD, IxDyn};
use std::path::Path;

/// Encoder states from a real encoder, and the feeds that produced them: ids
/// and masks for text encoders, seeded features of the declared shape for
/// audio encoders. The same seed gives the same feeds, so a numeric variant's
/// encoder and its fp32 sibling read the same source.
pub(crate) fn states(
    env: &ort::environment::Environment,
    path: &Path,
    plan: &Plan,
    opts: &Options,
    rng: &mut Rng,
) -> Result<(Vec<Feed>, ArrayD<f32>), String> {
    let (s, _) = crate::engine::shared::open(env, path, opts)?;
    states_on(&s, path, plan, opts, rng, None, &mut |_| {}).map(|(feeds, states, _)| (feeds, states))
}

/// What an encoder gave: the feeds, its states, and the decoder's
/// cross-attention caches when the encoder computes them itself
/// (onnxruntime-genai's Whisper: `present_key_cross_N` for `past_key_cross_N`),
/// in the plan's cross-past order; empty when it does not give every one.
pub(crate) type Encoded = (Vec<Feed>, ArrayD<f32>, Vec<ArrayD<f32>>);

/// An encoder's states among its outputs: the first float `[batch, length, hidden]`.
pub(crate) fn states_in(out: &feeds::Outputs) -> Option<ArrayD<f32>> {
    out.infos.iter().find_map(|i| out.floats.get(&i.name).filter(|a| a.ndim() == 3).cloned())
}

/// One second at 16 kHz: what speech encoders take when their graph does not say.
const ONE_SECOND: usize = 16_000;

/// Samples a raw-audio encoder needs for `frames` output frames, read from
/// its output's length expression (Moonshine's
/// `( ( ( encoder_sequence_length - 127 ) // 64 + 1 - 7 ) // 3 + 1 - 3 ) // 2 + 1`),
/// at least one second when the expression cannot be read.
pub(crate) fn samples_for(path: &Path, frames: usize) -> usize {
    let Ok(sig) = crate::model::reader::read_signature(path) else { return ONE_SECOND };
    let symbol = sig.inputs.iter().find_map(|p| match p.ty.tensor_parts() {
        Some((e, Some(d))) if e.is_float() && d.len() == 2 => match &d[1] {
            Dim::Symbolic(s) => Some(s.clone()),
            _ => None,
        },
        _ => None,
    });
    let length = sig.outputs.iter().find_map(|p| match p.ty.tensor_parts() {
        Some((e, Some(d))) if e.is_float() && d.len() == 3 => match &d[1] {
            Dim::Symbolic(s) => Some(Expr::parse(s)),
            _ => None,
        },
        _ => None,
    });
    match (symbol, length) {
        (Some(sym), Some(expr)) if expr.symbols() == [sym.clone()] => {
            expr.smallest_input_for(&sym, frames as i64, 100 * ONE_SECOND as i64).map_or(ONE_SECOND, |n| n as usize)
        }
        _ => ONE_SECOND,
    }
}

/// [`states`] on an open session (kept by the job for its later encoder runs).
/// What runs on an encoder's feeds instead of the encoder.
pub(crate) type Instead<'a> = &'a mut dyn FnMut(&[Feed], &mut dyn FnMut(crate::engine::events::Event));

/// `instead`, when given, is run on the feeds in place of the encoder (a
/// bisected crash's reproduction, which lives above this room).
pub(crate) fn states_on(
    s: &Shared,
    path: &Path,
    plan: &Plan,
    opts: &Options,
    rng: &mut Rng,
    instead: Option<Instead<'_>>,
    emit: &mut dyn FnMut(crate::engine::events::Event),
) -> Result<Encoded, String> {
    let b = opts.batch.max(1) as usize;
    let len = opts.encoder_len.max(1) as usize;
    let mut feeds = Vec::new();
    // A reference generation feeds the caller's source ids (or features).
    let given = opts.reference.as_ref();
    let len = given.map_or(len, |r| r.ids.len().max(1));
    let inputs = s.declared_inputs();
    // Raw audio ([batch, samples] floats): as many samples as the encoder's own
    // output-length expression needs for `len` frames (a conv stack refuses fewer).
    let raw_audio = inputs.iter().any(|(_, e, d)| e.is_float() && d.len() == 2);
    let len = if raw_audio && given.is_none() { samples_for(path, len) } else { len };
    // Given features (or samples) set the source length a mask beside them must cover.
    let features = match given.and_then(|r| r.features.as_ref()) {
        Some(p) => Some(crate::engine::npy::read_f32(p)?),
        None => None,
    };
    let len = match (&features, raw_audio) {
        (Some(a), true) => a.shape().last().copied().unwrap_or(len),
        _ => len,
    };
    for (name, elem, dims) in inputs {
        // Symbolic axes: batch first, the sequence (or frames) after.
        let shape: Vec<usize> = dims
            .iter()
            .enumerate()
            .map(|(axis, &d)| {
                if axis == 0 {
                    b
                } else if d > 0 {
                    d as usize
                } else {
                    len
                }
            })
            .collect();
        let n: usize = shape.iter().product();
        let values = if let (true, Some(a)) = (elem.is_float(), features.as_ref()) {
            let mut a = a.clone();
            if a.ndim() + 1 == shape.len() {
                a = a.insert_axis(ndarray::Axis(0));
            }
            feeds::Values::Float(a)
        } else if elem.is_float() {
            feeds::Values::Float(
                ArrayD::from_shape_vec(IxDyn(&shape), (0..n).map(|_| rng.normal()).collect()).expect("shape"),
            )
        } else if name.contains("mask") {
            feeds::Values::Int(ArrayD::from_elem(IxDyn(&shape), 1))
        } else if let Some(r) = given {
            feeds::Values::Int(
                ArrayD::from_shape_vec(IxDyn(&[1, r.ids.len()]), r.ids.clone()).map_err(|e| e.to_string())?,
            )
        } else {
            feeds::Values::Int(
                ArrayD::from_shape_vec(IxDyn(&shape), (0..n).map(|_| rng.below(plan.vocab)).collect()).expect("shape"),
            )
        };
        let elem = if elem == ElemType::Undefined { ElemType::I64 } else { elem };
        feeds.push(Feed { name, elem, values });
    }
    // Said first: if ONNX Runtime dies in the encoder, the crash is the encoder's.
    if let Some(instead) = instead {
        instead(&feeds, emit);
        return Err("the encoder's feeds were taken for another run: no states".into());
    }
    if opts.cut.is_some() && opts.cut_step.is_none() {
        // A crash bisection: the cut graph's outputs are what the parent reads.
        let out = s.run(&feeds)?;
        emit(crate::engine::events::Event::Cut { outputs: out.infos });
        return Err("a crash bisection's cut run: no states".into());
    }
    let model = path.display().to_string();
    emit(crate::engine::events::Event::Encoding { model, feeds: feeds.iter().map(Feed::info).collect() });
    let out = s.run(&feeds)?;
    emit(crate::engine::events::Event::Encoded);
    let states = states_in(&out)
        .ok_or_else(|| format!("{}: the encoder returned no [batch, length, hidden] float tensor", path.display()))?;
    let cross: Option<Vec<ArrayD<f32>>> = plan.cross_past.iter().map(|c| out.floats.get(&c.present).cloned()).collect();
    Ok((feeds, states, cross.unwrap_or_default()))
}
