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
    for n in &nodes {
        if matches!(n.op_type.as_str(), "Constant" | "ConstantOfShape") {
            continue;
        }
        let bad = n.outputs.iter().any(|o| !finite(o));
        if bad && n.inputs.iter().all(|i| i.is_empty() || finite(i)) {
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
            let cause = format!(
                "the first node whose output is NaN/Inf while its inputs are finite: {}{remedy}",
                ranges.join(", ")
            );
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
