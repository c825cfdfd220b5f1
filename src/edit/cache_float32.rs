//! A float16 model whose float32 island reaches a cache output: that present
//! is handed out in float32 and its past taken in float32, so the values the
//! island keeps (beyond float16's range) survive the trip through the
//! caller's cache. This changes the interface: the caller feeds float32
//! pasts for those layers. Readers of the past other than the island's own
//! Casts to float32 (and shape reads) get it through a Cast to float16, as
//! they read it before.

use crate::diagnose::graph_edit::{self as ge, GRAPH_NODE, GRAPH_OUTPUT, GRAPH_VALUE_INFO, MODEL_GRAPH};
use crate::edit::{cast_node, GRAPH_INPUT, NODE_INPUT};
use crate::model::onnx_proto as pb;
use prost::Message;

const FLOAT: i32 = 1;
const FLOAT16: i32 = 10;

/// `pairs` are `(past input, present output)`; each present must be written
/// by a Cast (the island's way back to float16), which now writes float32.
pub fn hand_out_float32(model: &[u8], pairs: &[(String, String)]) -> Result<Vec<u8>, String> {
    let model_fields = ge::fields(model)?;
    let graph_field = model_fields.iter().find(|f| f.number == MODEL_GRAPH).ok_or("model has no graph")?;
    let graph = &model[graph_field.payload.clone()];
    let graph_fields = ge::fields(graph)?;
    let is_past = |t: &str| pairs.iter().any(|(p, _)| p == t);
    let is_present = |t: &str| pairs.iter().any(|(_, q)| q == t);
    let narrow = |past: &str| format!("{past}__fp16");
    // Which pasts some node still reads as float16, and which presents a Cast writes.
    let mut narrowed: Vec<String> = Vec::new();
    let mut cast_written: Vec<String> = Vec::new();
    for f in graph_fields.iter().filter(|f| f.number == GRAPH_NODE) {
        let n = pb::NodeProto::decode(&graph[f.payload.clone()]).map_err(|e| e.to_string())?;
        if is_float_cast(&n) || matches!(n.op_type.as_deref(), Some("Shape" | "Size")) {
            continue;
        }
        if n.op_type.as_deref() == Some("Cast") {
            cast_written.extend(n.output.iter().filter(|o| is_present(o)).cloned());
        }
        for i in n.input.iter().filter(|i| is_past(i)) {
            if !narrowed.contains(i) {
                narrowed.push(i.clone());
            }
        }
    }
    if let Some((_, q)) = pairs.iter().find(|(_, q)| !cast_written.contains(q)) {
        return Err(format!("`{q}` is not written by a Cast back to float16: no float32 island reaches it"));
    }
    let mut out = Vec::with_capacity(graph.len() + 512);
    let mut casts_written = false;
    for f in &graph_fields {
        let payload = &graph[f.payload.clone()];
        match f.number {
            GRAPH_NODE => {
                if !casts_written {
                    // The pasts' float16 copies, first: every later node may read them.
                    for p in &narrowed {
                        ge::len_field(
                            &mut out,
                            GRAPH_NODE,
                            &cast_node(&format!("{p}/CastFp16"), p, &narrow(p), FLOAT16),
                        );
                    }
                    casts_written = true;
                }
                let n = pb::NodeProto::decode(payload).map_err(|e| e.to_string())?;
                let name = n.name.clone().unwrap_or_default();
                if n.op_type.as_deref() == Some("Cast") && n.output.first().is_some_and(|o| is_present(o)) {
                    let (input, output) = (n.input.first().cloned().unwrap_or_default(), n.output[0].clone());
                    ge::len_field(&mut out, GRAPH_NODE, &cast_node(&name, &input, &output, FLOAT));
                } else if !is_float_cast(&n)
                    && !matches!(n.op_type.as_deref(), Some("Shape" | "Size"))
                    && n.input.iter().any(|i| is_past(i))
                {
                    let mut rewritten = Vec::with_capacity(payload.len());
                    for nf in ge::fields(payload)? {
                        let text = String::from_utf8_lossy(&payload[nf.payload.clone()]).into_owned();
                        if nf.number == NODE_INPUT && is_past(&text) {
                            ge::len_field(&mut rewritten, NODE_INPUT, narrow(&text).as_bytes());
                        } else {
                            rewritten.extend_from_slice(&payload[nf.all.clone()]);
                        }
                    }
                    ge::len_field(&mut out, GRAPH_NODE, &rewritten);
                } else {
                    out.extend_from_slice(&graph[f.all.clone()]);
                }
            }
            GRAPH_INPUT | GRAPH_OUTPUT | GRAPH_VALUE_INFO => {
                let mut v = pb::ValueInfoProto::decode(payload).map_err(|e| e.to_string())?;
                let name = v.name.clone().unwrap_or_default();
                let ours = (f.number == GRAPH_INPUT && is_past(&name))
                    || (f.number == GRAPH_OUTPUT && is_present(&name))
                    || (f.number == GRAPH_VALUE_INFO && (is_past(&name) || is_present(&name)));
                match v.r#type.as_mut().and_then(|t| t.value.as_mut()) {
                    Some(pb::type_proto::Value::TensorType(t)) if ours => {
                        t.elem_type = Some(FLOAT);
                        ge::len_field(&mut out, f.number, &v.encode_to_vec());
                    }
                    _ => out.extend_from_slice(&graph[f.all.clone()]),
                }
            }
            _ => out.extend_from_slice(&graph[f.all.clone()]),
        }
    }
    Ok(ge::with_graph(model, &model_fields, &out))
}

/// A Cast to float32 (the island's way in: it takes a float32 past as it is).
fn is_float_cast(n: &pb::NodeProto) -> bool {
    n.op_type.as_deref() == Some("Cast")
        && n.attribute.iter().any(|a| a.name.as_deref() == Some("to") && a.i == Some(i64::from(FLOAT)))
}
