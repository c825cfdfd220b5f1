//! What a failure means: the failing node (also inside `If` branches) with
//! its real input shapes, and a one-line cause for known patterns.

use super::events::{FailedNode, TensorInfo};
use super::feeds::{Feed, Values};
use super::graph_edit;
use super::options::Options;
use super::session::{run, with_threads};
use crate::model::signature::ElemType;
use ort::session::Session;
use std::path::Path;

pub(crate) fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

pub(crate) fn runtime_version(lib: &std::path::Path) -> String {
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

pub(crate) fn load_error_cause(e: &ort::LoadDynamicError) -> Option<String> {
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

pub(crate) fn session_cause(message: &str) -> Option<String> {
    if message.contains("IR version") {
        Some("the model's IR version is newer than this ONNX Runtime accepts: re-save it with an older IR or use a newer runtime".into())
    } else if message.contains("not a registered function/op")
        || message.contains("No opset import for domain")
        || message.contains("Could not find an implementation")
    {
        Some("the model uses an operator (or opset) this ONNX Runtime does not implement".into())
    } else if message.contains("only *guarantees* support for models stamped with official released onnx opset")
        || (message.contains("opset") && message.contains("is under development"))
    {
        Some("the model's opset is newer than this ONNX Runtime supports".into())
    } else {
        None
    }
}

/// A load failure that names a node (type inference inside an `If` branch,
/// the classic broken float16 conversion): the node's path and the cause.
pub(crate) fn load_failure_node(model: &Path, message: &str) -> Option<(String, String)> {
    // `Type Error: Type (tensor(float16)) of output arg (x) of node (Cast_461) does not match expected type (tensor(float))`
    let after = message.split("Type Error: Type (").nth(1)?;
    let got = after.split(')').next()?.trim_start_matches("tensor(").to_string();
    let name = after.split("of node (").nth(1)?.split(')').next()?.to_string();
    let expected = after.split("expected type (").nth(1)?.split(')').next()?.trim_start_matches("tensor(").to_string();
    let bytes = std::fs::read(model).ok()?;
    let path = graph_edit::find_node(&bytes, &name, &|_| None)?;
    let float = |t: &str| t.starts_with("float");
    let cause = if path.op_type == "Cast" && float(&got) && float(&expected) {
        format!(
            "a precision conversion left this Cast inconsistent: it casts to {} while its output is declared {got} \
             (a float16 conversion that kept some Casts, e.g. onnxconverter-common's op_block_list / node_block_list); \
             convert again keeping the Cast nodes and their consumers in one precision, or fix the Cast's `to`",
            if expected == "float" { "float32" } else { &expected }
        )
    } else {
        format!(
            "type inference failed at this {} node: its output is declared {got} but computed as {expected}",
            path.op_type
        )
    };
    Some((format!("{} ({})", path.display(), path.op_type), cause))
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

pub(crate) fn diagnose(
    env: &ort::environment::Environment,
    model: &Path,
    message: &str,
    feeds: &[Feed],
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
        feeds.iter().find(|f| f.name == cond).and_then(|f| match &f.values {
            Values::Bool(a) => a.iter().next().copied(),
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
        inputs: wanted
            .iter()
            .map(|n| TensorInfo { name: n.clone(), dtype: ElemType::Undefined, shape: None })
            .collect(),
        trace_error: None,
    };
    // Inputs that are feeds need no re-run.
    let traced = graph_edit::expose(&bytes, &path, &wanted).and_then(|edited| {
        let mut s = with_threads(Session::builder(env), opts.threads)
            .and_then(|mut b| b.commit_from_memory(&edited))
            .map_err(|e| format!("re-loading the model with the node's inputs exposed failed: {e}"))?;
        let declared: Vec<String> = s.inputs().iter().map(|i| i.name().to_string()).collect();
        let kept: Vec<Feed> = feeds.iter().filter(|f| declared.contains(&f.name)).cloned().collect();
        run(&mut s, &kept).map_err(|e| format!("re-running with the node's inputs exposed failed: {}", first_line(&e)))
    });
    match traced {
        Ok(out) => {
            for i in node.inputs.iter_mut() {
                if let Some(info) = out.infos.iter().find(|o| o.name == i.name) {
                    *i = info.clone();
                } else if let Some(f) = feeds.iter().find(|f| f.name == i.name) {
                    *i = f.info();
                }
            }
        }
        Err(e) => node.trace_error = Some(e),
    }
    Some(node)
}

/// The first node, in execution order, whose output holds NaN or Inf while
/// its inputs are finite: every node output exposed (the taken `If` branch
/// lifted), graph optimizations off so the graph runs as written. Constants
/// that are -inf by design (attention-mask fills) are skipped. Returns the
/// node's path with its op, and the cause with its inputs' finite range.
/// Runs `model` on `feeds` with every intermediate tensor exposed as an
/// output (the branches the feeds take lifted out of their `If`), without
/// graph optimizations so that each node's own output is what is seen.
pub(crate) fn exposed_run(
    env: &ort::environment::Environment,
    model: &Path,
    feeds: &[Feed],
    opts: &Options,
) -> Result<(Vec<graph_edit::FlatNode>, super::feeds::Outputs), String> {
    let bytes = std::fs::read(model).map_err(|e| format!("{}: {e}", model.display()))?;
    let flag = |cond: &str| -> Option<bool> {
        feeds.iter().find(|f| f.name == cond).and_then(|f| match &f.values {
            Values::Bool(a) => a.iter().next().copied(),
            _ => None,
        })
    };
    let (path, nodes) = graph_edit::flatten(&bytes, &flag)?;
    let wanted: Vec<String> = nodes.iter().flat_map(|n| n.outputs.iter().filter(|o| !o.is_empty()).cloned()).collect();
    let edited = graph_edit::expose(&bytes, &path, &wanted)?;
    let mut s = with_threads(Session::builder(env), opts.threads)
        .and_then(|b| Ok(b.with_optimization_level(ort::session::builder::GraphOptimizationLevel::Disable)?))
        .and_then(|mut b| b.commit_from_memory(&edited))
        .map_err(|e| e.to_string())?;
    let declared: Vec<String> = s.inputs().iter().map(|i| i.name().to_string()).collect();
    let kept: Vec<Feed> = feeds.iter().filter(|f| declared.contains(&f.name)).cloned().collect();
    Ok((nodes, run(&mut s, &kept)?))
}

/// The first node in execution order whose output is NaN/Inf while its inputs are finite.
pub(crate) fn first_non_finite(
    env: &ort::environment::Environment,
    model: &Path,
    feeds: &[Feed],
    opts: &Options,
) -> Option<(String, String)> {
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
            let remedy = if float16 {
                format!("; a float16 overflow (max 65504): keep this {} in float32 when converting (onnxconverter-common node_block_list / op_block_list)", n.op_type)
            } else {
                String::new()
            };
            let cause = format!(
                "the first node whose output is NaN/Inf while its inputs are finite: {}{remedy}",
                ranges.join(", ")
            );
            return Some((format!("{} ({})", n.path, n.op_type), cause));
        }
    }
    None
}

/// One line on what the failure pattern usually means.
pub(crate) fn failure_cause(message: &str, step: usize, past_len: i64, node: Option<&FailedNode>) -> Option<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// ORT 1.31.1's message for the baked-past Marian at step 2 (models/marian-baked-past).
    const BAKED: &str = "Non-zero status code returned while running If node. Name:'optimum::if' Status Message: \
        Non-zero status code returned while running Reshape node. Name:'/Reshape_5' Status Message: \
        The input tensor cannot be reshaped to the requested shape. Input shape:{1,8,3,4}, requested shape:{1,8,2,4}";

    fn node(op: &str) -> FailedNode {
        FailedNode { path: "p".into(), name: "n".into(), op_type: op.into(), inputs: vec![], trace_error: None }
    }

    #[test]
    fn the_innermost_node_of_a_nested_failure_is_named() {
        assert_eq!(failing_node(BAKED), Some(("Reshape".to_string(), "/Reshape_5".to_string())));
        assert_eq!(failing_node("Got invalid dimensions for input: x"), None);
    }

    #[test]
    fn cause_rules_name_the_mechanism() {
        // Numbers tracking the past length at a cached step: a length baked in at export.
        let c = failure_cause(BAKED, 2, 2, Some(&node("Reshape"))).unwrap();
        assert!(c.contains("fixed at export time") && c.contains("step 2"), "{c}");
        // A shape error after the cache grew, numbers not tracking it: still the grown cache.
        let c =
            failure_cause("running Expand node ... invalid expand shape {7}", 3, 40, Some(&node("Expand"))).unwrap();
        assert!(c.contains("only once the cache has grown"), "{c}");
        // At step 0 a shape error is not blamed on the cache.
        assert_eq!(failure_cause(BAKED, 0, 0, Some(&node("Reshape"))), None);
        // Feeding inputs the model does not have: the signature.
        let c = failure_cause("Invalid input name: use_cache_branch", 0, 0, None).unwrap();
        assert!(c.starts_with("signature mismatch"), "{c}");
        // A fixed axis refused by the runtime's input check.
        let c =
            failure_cause("Got invalid dimensions for input: input_ids for the following indices", 1, 1, None).unwrap();
        assert!(c.contains("static axis"), "{c}");
        assert_eq!(failure_cause("out of memory", 2, 2, Some(&node("Gemm"))), None);
    }

    #[test]
    fn load_failures_measured_here_get_their_cause() {
        // Messages from ONNX Runtime 1.31.1, 1.20.1 and 1.22.0.
        let ir = "Unsupported model IR version: 14, max supported IR version: 13";
        assert!(session_cause(ir).unwrap().contains("IR version is newer"));
        let op = "Fatal error: com.example:NoSuchOp(-1) is not a registered function/op";
        assert!(session_cause(op).unwrap().contains("does not implement"));
        let opset = "ONNX Runtime only *guarantees* support for models stamped with official released onnx opset versions. Opset 22 is under development";
        assert!(session_cause(opset).unwrap().contains("opset is newer"));
        assert_eq!(session_cause("something else"), None);
    }
}
