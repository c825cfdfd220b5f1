//! A quantized variant with some nodes taken back from its fp32 sibling:
//! the variant's writer of a tensor (a `MatMulNBits`, or a dynamic
//! quantization chain) replaced by the fp32 node writing the same tensor,
//! with its fp32 weights — what the quantizer's `nodes_to_exclude` makes
//! when the model is quantized again, done on the file so that the remedy
//! can be run before it is suggested.

use crate::diagnose::graph_edit::{self as ge, GRAPH_INITIALIZER, GRAPH_NODE, GRAPH_OUTPUT, MODEL_GRAPH};
use crate::edit::{tensor_name_and_type, GRAPH_INPUT};
use crate::model::onnx_proto as pb;
use prost::Message;
use std::collections::{HashMap, HashSet};

/// One graph's top-level pieces: nodes and initializers as byte fields.
struct Pieces<'a> {
    bytes: &'a [u8],
    fields: Vec<ge::Field>,
    nodes: Vec<(ge::Field, pb::NodeProto)>,
    initializers: HashMap<String, ge::Field>,
    inputs: HashSet<String>,
    outputs: HashSet<String>,
}

fn pieces(model: &[u8]) -> Result<(Vec<ge::Field>, Pieces<'_>), String> {
    let model_fields = ge::fields(model)?;
    let g = model_fields.iter().find(|f| f.number == MODEL_GRAPH).ok_or("model has no graph")?;
    let bytes = &model[g.payload.clone()];
    let fields = ge::fields(bytes)?;
    let mut p = Pieces {
        bytes,
        fields: fields.clone(),
        nodes: Vec::new(),
        initializers: HashMap::new(),
        inputs: HashSet::new(),
        outputs: HashSet::new(),
    };
    for f in fields {
        let payload = &bytes[f.payload.clone()];
        match f.number {
            GRAPH_NODE => p.nodes.push((f.clone(), pb::NodeProto::decode(payload).map_err(|e| e.to_string())?)),
            GRAPH_INITIALIZER => {
                p.initializers.insert(tensor_name_and_type(payload)?.0, f);
            }
            GRAPH_INPUT | GRAPH_OUTPUT => {
                let name = pb::ValueInfoProto::decode(payload).map_err(|e| e.to_string())?.name.unwrap_or_default();
                if f.number == GRAPH_INPUT {
                    p.inputs.insert(name)
                } else {
                    p.outputs.insert(name)
                };
            }
            _ => {}
        }
    }
    Ok((model_fields, p))
}

/// The variant with each `(tensor, fp32 node)` swapped: the variant's nodes
/// that only served the old writer of `tensor` removed, the fp32 node (by
/// name, main graph) inserted in its place with the fp32 initializers it reads.
/// Fails when the fp32 node reads a computed tensor the variant does not have.
pub fn take_from_reference(variant: &[u8], reference: &[u8], swaps: &[(String, String)]) -> Result<Vec<u8>, String> {
    let (model_fields, v) = pieces(variant)?;
    let (_, r) = pieces(reference)?;
    let mut nodes: Vec<(Vec<u8>, pb::NodeProto, bool)> =
        v.nodes.iter().map(|(f, n)| (v.bytes[f.all.clone()].to_vec(), n.clone(), false)).collect();
    let mut added_init: Vec<Vec<u8>> = Vec::new();
    let mut added_names: HashSet<String> = HashSet::new();
    for (tensor, ref_node) in swaps {
        let (rf, rn) = r
            .nodes
            .iter()
            .find(|(_, n)| n.name.as_deref() == Some(ref_node.as_str()))
            .ok_or_else(|| format!("the fp32 model has no node `{ref_node}` in its main graph"))?;
        let writer = nodes
            .iter()
            .position(|(_, n, _)| n.output.iter().any(|o| o == tensor))
            .ok_or_else(|| format!("the variant has no node writing `{tensor}` in its main graph"))?;
        let produced: HashSet<&str> = nodes.iter().flat_map(|(_, n, _)| n.output.iter().map(String::as_str)).collect();
        for i in rn.input.iter().filter(|i| !i.is_empty()) {
            if let Some(init) = r.initializers.get(i) {
                if !v.initializers.contains_key(i) && added_names.insert(i.clone()) {
                    added_init.push(r.bytes[init.all.clone()].to_vec());
                }
            } else if !produced.contains(i.as_str()) && !v.inputs.contains(i) && !v.initializers.contains_key(i) {
                return Err(format!("the variant has no tensor `{i}`, which the fp32 `{ref_node}` reads"));
            }
        }
        nodes[writer] = (r.bytes[rf.all.clone()].to_vec(), rn.clone(), true);
    }
    // Drop what only fed the replaced writers: nodes none of whose outputs is read.
    loop {
        let mut read: HashSet<String> = v.outputs.clone();
        for (_, n, _) in &nodes {
            ge::reads(n, &mut read);
        }
        let before = nodes.len();
        nodes.retain(|(_, n, swapped)| *swapped || n.output.iter().any(|o| !o.is_empty() && read.contains(o)));
        if nodes.len() == before {
            break;
        }
    }
    let mut read: HashSet<String> = HashSet::new();
    for (_, n, _) in &nodes {
        ge::reads(n, &mut read);
    }
    let mut graph = Vec::with_capacity(v.bytes.len() + added_init.iter().map(Vec::len).sum::<usize>());
    for (bytes, _, _) in &nodes {
        graph.extend_from_slice(bytes);
    }
    for f in &v.fields {
        match f.number {
            GRAPH_NODE => {}
            GRAPH_INITIALIZER => {
                let (name, _) = tensor_name_and_type(&v.bytes[f.payload.clone()])?;
                if read.contains(&name) || v.outputs.contains(&name) {
                    graph.extend_from_slice(&v.bytes[f.all.clone()]);
                }
            }
            _ => graph.extend_from_slice(&v.bytes[f.all.clone()]),
        }
    }
    for i in added_init {
        graph.extend_from_slice(&i);
    }
    Ok(ge::with_graph(variant, &model_fields, &graph))
}
