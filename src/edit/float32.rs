//! A float16 model with some nodes computed in float32: each float16 input
//! read through a `Cast` to float32, each float16 output written by a `Cast`
//! back to float16 — what onnxconverter-common's `node_block_list` makes when
//! the model is converted again, done here on the converted file so that the
//! remedy can be run before it is suggested.

use crate::diagnose::graph_edit::{self as ge, GRAPH_NODE, GRAPH_OUTPUT, MODEL_GRAPH};
use crate::edit::{cast_node, tensor_name_and_type, tensor_value_info, GRAPH_INPUT, NODE_INPUT, NODE_OUTPUT};
use crate::model::onnx_proto as pb;
use prost::Message;
use std::collections::HashSet;

const FLOAT: i32 = 1;
const FLOAT16: i32 = 10;

/// The name part of a Cast back to float16 after island node `N`
/// (`N/OutputCastFp16_1`): a re-check that finds this Cast non-finite means
/// the island must grow to `N`'s consumers.
pub const CAST_BACK: &str = "/OutputCastFp16_";

/// Ops whose outputs are not float whatever they read.
const NOT_FLOAT_OUT: &[&str] = &[
    "Shape",
    "Size",
    "ArgMax",
    "ArgMin",
    "NonZero",
    "Equal",
    "Less",
    "LessOrEqual",
    "Greater",
    "GreaterOrEqual",
    "Not",
    "And",
    "Or",
    "Xor",
    "IsNaN",
    "IsInf",
    "Cast",
    "CastLike",
    "TopK",
];

/// `nodes` (main-graph node names) computed in float32. `float16` names the
/// computed tensors known to be float16 (from a run); float16 initializers
/// and graph inputs are found here. With `cast_back` false the nodes'
/// float16 outputs stay float32 and graph outputs among them are declared
/// float32 (a reproduction's float32 reference of the same node).
pub fn keep_in_float32(
    model: &[u8],
    nodes: &[String],
    float16: &dyn Fn(&str) -> bool,
    cast_back: bool,
) -> Result<Vec<u8>, String> {
    let model_fields = ge::fields(model)?;
    let graph_field = model_fields.iter().find(|f| f.number == MODEL_GRAPH).ok_or("model has no graph")?;
    let graph = &model[graph_field.payload.clone()];
    let graph_fields = ge::fields(graph)?;
    let mut half: HashSet<String> = HashSet::new();
    for f in &graph_fields {
        let payload = &graph[f.payload.clone()];
        match f.number {
            ge::GRAPH_INITIALIZER => {
                let (name, dtype) = tensor_name_and_type(payload)?;
                if dtype == FLOAT16 {
                    half.insert(name);
                }
            }
            GRAPH_INPUT | GRAPH_OUTPUT | ge::GRAPH_VALUE_INFO => {
                let v = pb::ValueInfoProto::decode(payload).map_err(|e| e.to_string())?;
                if elem_of(&v) == Some(FLOAT16) {
                    half.extend(v.name);
                }
            }
            _ => {}
        }
    }
    // A float16 converter's graph: a float op reading float16 writes float16
    // (an `Identity` of a shared float16 weight, a `Cast` to float16).
    for f in graph_fields.iter().filter(|f| f.number == GRAPH_NODE) {
        let n = pb::NodeProto::decode(&graph[f.payload.clone()]).map_err(|e| e.to_string())?;
        let op = n.op_type.as_deref().unwrap_or("");
        let to = n.attribute.iter().find(|a| a.name.as_deref() == Some("to")).and_then(|a| a.i);
        let writes_half = match op {
            "Cast" => to == Some(i64::from(FLOAT16)),
            _ => !NOT_FLOAT_OUT.contains(&op) && n.input.iter().any(|i| half.contains(i) || float16(i)),
        };
        if writes_half {
            half.extend(n.output.iter().filter(|o| !o.is_empty()).cloned());
        }
    }
    // What still needs the float16 value: nodes outside the island and graph outputs.
    let mut outside: HashSet<String> = HashSet::new();
    for f in &graph_fields {
        let payload = &graph[f.payload.clone()];
        match f.number {
            GRAPH_NODE => {
                let n = pb::NodeProto::decode(payload).map_err(|e| e.to_string())?;
                // A shape read takes the float32 value as it is (same shape).
                let shape_only = matches!(n.op_type.as_deref(), Some("Shape" | "Size"));
                if !shape_only && !nodes.iter().any(|x| Some(x.as_str()) == n.name.as_deref()) {
                    ge::reads(&n, &mut outside);
                }
            }
            GRAPH_OUTPUT => {
                outside.extend(pb::ValueInfoProto::decode(payload).map_err(|e| e.to_string())?.name);
            }
            _ => {}
        }
    }
    // Tensors an earlier island node already has in float32.
    let mut wide_of: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    let mut found: HashSet<&str> = HashSet::new();
    let mut out_graph = Vec::with_capacity(graph.len() + 1024);
    let mut widened_outputs: HashSet<String> = HashSet::new();
    // Serializers write fields in number order, so a graph's outputs (12)
    // come after its nodes (1) and are seen after the widened nodes.
    for f in &graph_fields {
        let payload = &graph[f.payload.clone()];
        if f.number == GRAPH_OUTPUT && !cast_back {
            let v = pb::ValueInfoProto::decode(payload).map_err(|e| e.to_string())?;
            let name = v.name.clone().unwrap_or_default();
            if widened_outputs.contains(&name) {
                ge::len_field(&mut out_graph, GRAPH_OUTPUT, &tensor_value_info(&name, FLOAT, None));
                continue;
            }
        }
        if f.number != GRAPH_NODE {
            out_graph.extend_from_slice(&graph[f.all.clone()]);
            continue;
        }
        let node = pb::NodeProto::decode(payload).map_err(|e| e.to_string())?;
        let name = node.name.clone().unwrap_or_default();
        let Some(wanted) = nodes.iter().find(|n| **n == name) else {
            if matches!(node.op_type.as_deref(), Some("Shape" | "Size"))
                && node.input.iter().any(|i| wide_of.contains_key(i))
            {
                let mut rewritten = Vec::with_capacity(payload.len());
                for nf in ge::fields(payload)? {
                    let text = String::from_utf8_lossy(&payload[nf.payload.clone()]).into_owned();
                    match wide_of.get(&text).filter(|_| nf.number == NODE_INPUT) {
                        Some(wide) => ge::len_field(&mut rewritten, NODE_INPUT, wide.as_bytes()),
                        None => rewritten.extend_from_slice(&payload[nf.all.clone()]),
                    }
                }
                ge::len_field(&mut out_graph, GRAPH_NODE, &rewritten);
            } else {
                out_graph.extend_from_slice(&graph[f.all.clone()]);
            }
            continue;
        };
        found.insert(wanted);
        let (mut before, mut after) = (Vec::new(), Vec::new());
        let mut rewritten = Vec::with_capacity(payload.len());
        let (mut k_in, mut k_out) = (0, 0);
        let op = node.op_type.as_deref().unwrap_or("");
        // A float16 converter's graph: a float op reading float16 writes float16.
        let reads_half = node.input.iter().any(|i| half.contains(i) || float16(i) || wide_of.contains_key(i));
        let is_half = |t: &str, output: bool| {
            half.contains(t) || float16(t) || (output && reads_half && !NOT_FLOAT_OUT.contains(&op))
        };
        for nf in ge::fields(payload)? {
            let text = String::from_utf8_lossy(&payload[nf.payload.clone()]).into_owned();
            match nf.number {
                NODE_INPUT if wide_of.contains_key(&text) => {
                    k_in += 1;
                    ge::len_field(&mut rewritten, NODE_INPUT, wide_of[&text].as_bytes());
                }
                NODE_INPUT if !text.is_empty() && is_half(&text, false) => {
                    let wide = format!("{text}__fp32_{name}_{k_in}");
                    k_in += 1;
                    let cast = cast_node(&format!("{name}/InputCastFp32_{k_in}"), &text, &wide, FLOAT);
                    ge::len_field(&mut before, GRAPH_NODE, &cast);
                    ge::len_field(&mut rewritten, NODE_INPUT, wide.as_bytes());
                }
                NODE_OUTPUT if !text.is_empty() && is_half(&text, true) && cast_back => {
                    let wide = format!("{text}__fp32");
                    k_out += 1;
                    // Read only inside the island: no way back to float16 (it may not fit).
                    if outside.contains(&text) {
                        let cast = cast_node(&format!("{name}{CAST_BACK}{k_out}"), &wide, &text, FLOAT16);
                        ge::len_field(&mut after, GRAPH_NODE, &cast);
                    }
                    wide_of.insert(text.clone(), wide.clone());
                    ge::len_field(&mut rewritten, NODE_OUTPUT, wide.as_bytes());
                }
                NODE_OUTPUT if !text.is_empty() && is_half(&text, true) => {
                    widened_outputs.insert(text);
                    rewritten.extend_from_slice(&payload[nf.all.clone()]);
                }
                _ => rewritten.extend_from_slice(&payload[nf.all.clone()]),
            }
        }
        if k_in == 0 {
            return Err(format!("node `{name}` reads no float16 tensor: nothing to keep in float32"));
        }
        out_graph.extend_from_slice(&before);
        ge::len_field(&mut out_graph, GRAPH_NODE, &rewritten);
        out_graph.extend_from_slice(&after);
    }
    if let Some(missing) = nodes.iter().find(|n| !found.contains(n.as_str())) {
        return Err(format!("node `{missing}` is not in the main graph"));
    }
    Ok(ge::with_graph(model, &model_fields, &out_graph))
}

fn elem_of(v: &pb::ValueInfoProto) -> Option<i32> {
    match v.r#type.as_ref()?.value.as_ref()? {
        pb::type_proto::Value::TensorType(t) => t.elem_type,
        _ => None,
    }
}
