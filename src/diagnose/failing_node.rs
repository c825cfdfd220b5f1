//! The failing node: from ONNX Runtime's message to the node (also inside
//! `If` branches, the branch the feeds take) with its real input shapes, by
//! re-running the model with that node's inputs exposed; and the node a load
//! failure names (a float16 conversion's inconsistent Cast).

use crate::diagnose::cause::first_line;
use crate::diagnose::graph_edit;
use crate::engine::events::{FailedNode, TensorInfo};
use crate::engine::feeds::{Feed, Values};
use crate::engine::options::Options;
use crate::engine::session::{run, with_threads};
use crate::model::signature::ElemType;
use ort::session::Session;
use std::path::Path;

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
pub(crate) fn failing_node(message: &str) -> Option<(String, String)> {
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
        let mut s =
            crate::engine::session::commit_edited(with_threads(Session::builder(env), opts.threads), &edited, model)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::cause::tests::BAKED;

    #[test]
    fn the_innermost_node_of_a_nested_failure_is_named() {
        assert_eq!(failing_node(BAKED), Some(("Reshape".to_string(), "/Reshape_5".to_string())));
        assert_eq!(failing_node("Got invalid dimensions for input: x"), None);
    }
}
