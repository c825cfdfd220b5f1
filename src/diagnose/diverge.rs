//! The first node where a numeric variant departs from its fp32 sibling.
//! Both models run on the same tokens with every intermediate tensor exposed;
//! tensors are matched by name (converters keep the names of the tensors they
//! do not remove: a `MatMulNBits` named `…/MatMul_Q4` writes the output of the
//! `MatMul` it replaced, an inserted `Cast` writes a new name), and the first
//! reference node in execution order whose output departs by more than the
//! variant's numeric form explains is the one named.

use crate::diagnose::exposed::exposed_run;
use crate::diagnose::graph_edit::FlatNode;
use crate::engine::feeds::Feed;
use crate::engine::options::Options;
use ndarray::ArrayD;
use std::collections::HashMap;
use std::path::Path;

/// Where the variant first departs: the fp32 node, the variant's node that
/// writes the same tensor when it is another one, and the departure.
#[derive(Debug)]
pub(crate) struct Divergence {
    /// `path (Op)` of the fp32 node.
    pub(crate) node: String,
    /// `path (Op)` of the variant's node writing the same tensor, when it differs.
    pub(crate) replaced_by: Option<String>,
    /// The fp32 node's own name.
    pub(crate) node_name: String,
    /// The variant's node writing the tensor (its own name).
    pub(crate) writer_name: String,
    /// The variant writer's computed inputs that ran as float16.
    pub(crate) float16: Vec<String>,
    /// The tensor compared.
    pub(crate) tensor: String,
    /// max |Δ| over the tensor.
    pub(crate) abs: f64,
    /// max |Δ| / max |fp32 value|.
    pub(crate) rel: f64,
    /// Tensors compared before it (all within the bound).
    pub(crate) compared: usize,
}

/// max |Δ| and max |Δ| / max |b| over the elements finite on both sides
/// (masked attention scores hold -inf or the lowest float on purpose).
pub(crate) fn relative(a: &ArrayD<f32>, b: &ArrayD<f32>) -> Option<(f64, f64)> {
    if a.shape() != b.shape() || a.is_empty() {
        return None;
    }
    let (mut abs, mut scale) = (0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b.iter()) {
        let (x, y) = (f64::from(*x), f64::from(*y));
        // Saturated values (a mask's -3.4e38 in fp32, -65504 in fp16) are not activations.
        if !x.is_finite() || !y.is_finite() || y.abs() > 6.0e4 {
            continue;
        }
        abs = abs.max((x - y).abs());
        scale = scale.max(y.abs());
    }
    Some((abs, if scale > 0.0 { abs / scale } else { abs }))
}

/// Tiny tensors (a scalar, a shape-sized value) say nothing about precision.
const MIN_ELEMENTS: usize = 16;

/// The first fp32 node whose output the variant departs from by more than
/// `bound` (relative), or `None` when every matched tensor stays within it.
pub(crate) fn first_divergent(
    env: &ort::environment::Environment,
    variant: (&Path, &[Feed]),
    reference: (&Path, &[Feed]),
    opts: &Options,
    bound: f64,
) -> Result<Option<Divergence>, String> {
    let (v_nodes, v_out) = exposed_run(env, variant.0, variant.1, opts)?;
    let (r_nodes, r_out) = exposed_run(env, reference.0, reference.1, opts)?;
    let writer: HashMap<&str, &FlatNode> =
        v_nodes.iter().flat_map(|n| n.outputs.iter().map(move |o| (o.as_str(), n))).collect();
    let mut compared = 0;
    for n in r_nodes.iter().filter(|n| !matches!(n.op_type.as_str(), "Constant" | "ConstantOfShape" | "Shape")) {
        for o in n.outputs.iter().filter(|o| !o.is_empty()) {
            let (Some(b), Some(a)) = (r_out.floats.get(o), v_out.floats.get(o)) else { continue };
            if b.len() < MIN_ELEMENTS {
                continue;
            }
            let Some((abs, rel)) = relative(a, b) else { continue };
            if rel > bound || rel.is_nan() {
                let replaced_by = writer
                    .get(o.as_str())
                    .filter(|w| w.path != n.path || w.op_type != n.op_type)
                    .map(|w| format!("{} ({})", w.path, w.op_type));
                let w = writer.get(o.as_str());
                let float16 = w
                    .map(|w| {
                        w.inputs
                            .iter()
                            .chain(&w.outputs)
                            .filter(|i| {
                                v_out
                                    .infos
                                    .iter()
                                    .any(|x| &x.name == *i && x.dtype == crate::model::signature::ElemType::F16)
                            })
                            .cloned()
                            .collect()
                    })
                    .unwrap_or_default();
                return Ok(Some(Divergence {
                    node: format!("{} ({})", n.path, n.op_type),
                    node_name: n.name.clone(),
                    writer_name: w.map_or_else(|| n.name.clone(), |w| w.name.clone()),
                    float16,
                    replaced_by,
                    tensor: o.clone(),
                    abs,
                    rel,
                    compared,
                }));
            }
            compared += 1;
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::IxDyn;

    #[test]
    fn relative_error_skips_saturated_mask_values_and_scales_by_the_reference() {
        let b = ArrayD::from_shape_vec(IxDyn(&[4]), vec![1.0, -2.0, f32::MIN, 4.0]).unwrap();
        let a = ArrayD::from_shape_vec(IxDyn(&[4]), vec![1.5, -2.0, -65504.0, 4.0]).unwrap();
        let (abs, rel) = relative(&a, &b).unwrap();
        assert_eq!(abs, 0.5);
        assert_eq!(rel, 0.125);
        let other = ArrayD::from_shape_vec(IxDyn(&[2, 2]), vec![0.0; 4]).unwrap();
        assert!(relative(&other, &b).is_none(), "shapes differ");
    }
}
