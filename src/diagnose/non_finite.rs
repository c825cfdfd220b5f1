//! The first non-finite node: where a NaN or Inf in the logits or presents
//! was first produced, with its inputs' ranges and, for float16, the
//! conversion remedy.

use crate::diagnose::exposed::exposed_run;
use crate::engine::feeds::Feed;
use crate::engine::options::Options;
use std::path::Path;

/// The first non-finite node: `path (Op)`, the cause, its own name and
/// its computed inputs that ran as float16.
pub(crate) struct NonFiniteNode {
    pub(crate) display: String,
    pub(crate) cause: String,
    pub(crate) name: String,
    pub(crate) float16: Vec<String>,
}

/// The first node, in execution order, whose output holds NaN or Inf while
/// its inputs are finite: every node output exposed (the taken `If` branch
/// lifted), graph optimizations off so the graph runs as written. Constants
/// that are -inf by design (attention-mask fills) are skipped. Returns the
/// node's path with its op, and the cause with its inputs' finite range.
pub(crate) fn first_non_finite(
    env: &ort::environment::Environment,
    model: &Path,
    feeds: &[Feed],
    opts: &Options,
) -> Option<NonFiniteNode> {
    let (nodes, out) = exposed_run(env, model, feeds, opts).ok()?;
    let finite = |name: &str| out.floats.get(name).is_none_or(|a| a.iter().all(|v| v.is_finite()));
    let no_nan = |name: &str| out.floats.get(name).is_none_or(|a| !a.iter().any(|v| v.is_nan()));
    // First a node that makes NaN/Inf from finite inputs (an overflow); else
    // one that makes NaN from inputs without NaN: -inf by design (a mask
    // fill) turned into NaN, as a softmax over a fully masked row does.
    let first = |n: &&crate::diagnose::graph_edit::FlatNode| {
        !matches!(n.op_type.as_str(), "Constant" | "ConstantOfShape")
            && n.outputs.iter().any(|o| !finite(o))
            && n.inputs.iter().all(|i| i.is_empty() || finite(i))
    };
    let nan_source = |n: &&crate::diagnose::graph_edit::FlatNode| {
        n.outputs.iter().any(|o| !no_nan(o)) && n.inputs.iter().all(|i| i.is_empty() || no_nan(i))
    };
    if let Some(n) = nodes.iter().find(first).or_else(|| nodes.iter().find(nan_source)) {
        {
            let mut ranges = Vec::new();
            for i in n.inputs.iter().filter(|i| !i.is_empty()) {
                if let Some(a) = out.floats.get(i) {
                    let (lo, hi) =
                        a.iter().fold((f32::INFINITY, f32::NEG_INFINITY), |(l, h), v| (l.min(*v), h.max(*v)));
                    ranges.push(format!("{i} in [{lo}, {hi}]"));
                } else if let Some(f) = feeds.iter().find(|f| &f.name == i) {
                    ranges.push(format!("{i} (fed {:?})", f.shape()));
                } else {
                    ranges.push(format!("{i} (a weight)"));
                }
            }
            let float16 = feeds.iter().any(|f| f.elem == crate::model::signature::ElemType::F16)
                || out.infos.iter().any(|i| i.dtype == crate::model::signature::ElemType::F16);
            // Not a remedy: `--remedy` runs the float32 island and says whether it works.
            let remedy = if float16 { "; a float16 overflow (float16's largest finite is 65504)" } else { "" };
            let half: Vec<String> = n
                .inputs
                .iter()
                .chain(&n.outputs)
                .filter(|i| {
                    out.infos.iter().any(|o| &o.name == *i && o.dtype == crate::model::signature::ElemType::F16)
                })
                .cloned()
                .collect();
            let masked = (n.op_type == "Softmax")
                .then(|| n.inputs.first().and_then(|i| out.floats.get(i)).map(fully_masked_rows))
                .flatten()
                .filter(|&k| k > 0);
            let cause = match masked {
                Some(k) => format!(
                    "a softmax over fully masked rows: {k} row(s) of its scores are -inf at every position ({}), so softmax gives 0/0 = NaN, and the NaN spreads to every later position of the batch row through 0 × NaN; the mask is filled with float32's minimum, which is -inf in float16: fill it with the compute type's lowest finite value (float16: -65504, torch.finfo(dtype).min)",
                    ranges.join(", ")
                ),
                None if n.inputs.iter().all(|i| i.is_empty() || finite(i)) => format!(
                    "the first node whose output is NaN/Inf while its inputs are finite: {}{remedy}",
                    ranges.join(", ")
                ),
                None => format!("the first node whose output is NaN while no input is NaN (an input holds -inf): {}", ranges.join(", ")),
            };
            return Some(NonFiniteNode {
                display: format!("{} ({})", n.path, n.op_type),
                cause,
                name: n.name.clone(),
                float16: half,
            });
        }
    }
    None
}

/// Rows (along the last axis) whose every entry is -inf: a query that may
/// attend to nothing.
fn fully_masked_rows(a: &ndarray::ArrayD<f32>) -> usize {
    let Some(&width) = a.shape().last() else { return 0 };
    if width == 0 {
        return 0;
    }
    a.as_standard_layout()
        .as_slice()
        .map_or(0, |s| s.chunks(width).filter(|row| row.iter().all(|v| *v == f32::NEG_INFINITY)).count())
}
