//! Running the folder's encoder: the states every seq2seq decoder check
//! starts from (the cache steps, and a variant pair against the fp32 pair).

use crate::engine::context::open;
use crate::engine::feeds::{self, Feed, Rng};
use crate::engine::options::Options;
use crate::engine::session::{declared_inputs, run};
use crate::model::signature::ElemType;
use crate::plan::Plan;
use ndarray::{ArrayD, IxDyn};
use ort::session::Session;
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
    let mut s = open(env, path, opts).map_err(|e| format!("{}: {e}", path.display()))?;
    states_on(&mut s, path, plan, opts, rng)
}

/// [`states`] on an open session (kept by the job for its later encoder runs).
pub(crate) fn states_on(
    s: &mut Session,
    path: &Path,
    plan: &Plan,
    opts: &Options,
    rng: &mut Rng,
) -> Result<(Vec<Feed>, ArrayD<f32>), String> {
    let b = opts.batch.max(1) as usize;
    let len = opts.encoder_len.max(1) as usize;
    let mut feeds = Vec::new();
    // A reference generation feeds the caller's source ids (or features).
    let given = opts.reference.as_ref();
    let len = given.map_or(len, |r| r.ids.len().max(1));
    for (name, elem, dims) in declared_inputs(s) {
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
        let values = if let (true, Some(path)) = (elem.is_float(), given.and_then(|r| r.features.as_ref())) {
            let mut a = crate::engine::npy::read_f32(path)?;
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
    let out = run(s, &feeds)?;
    let states =
        out.infos.iter().find_map(|i| out.floats.get(&i.name).filter(|a| a.ndim() == 3).cloned()).ok_or_else(|| {
            format!("{}: the encoder returned no [batch, length, hidden] float tensor", path.display())
        })?;
    Ok((feeds, states))
}
