//! Rewrites a model so that the inputs of a failing node become graph
//! outputs, also when the node sits inside an `If` branch.
//!
//! Works on protobuf fields as byte ranges: the weights are copied as they
//! are, never decoded, and our trimmed schema is only used to read node
//! names and edges. A branch cannot expose its tensors through the main
//! graph's outputs ("Graph output … does not exist in the graph"), so the
//! taken branch is lifted into the main graph in place of its `If` node;
//! it reads outer-scope names, which the main graph still provides.

use crate::model::onnx_proto as pb;
use prost::Message;
use std::collections::HashSet;
use std::ops::Range;

/// One top-level field of a serialized message.
#[derive(Clone, Debug)]
pub(crate) struct Field {
    pub(crate) number: u32,
    /// The whole field, tag included.
    pub(crate) all: Range<usize>,
    /// The payload of a length-delimited field (empty range otherwise).
    pub(crate) payload: Range<usize>,
}

pub(crate) fn varint(buf: &[u8], pos: &mut usize) -> Result<u64, String> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos).ok_or("truncated varint")?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("varint too long".into())
}

pub(crate) fn fields(buf: &[u8]) -> Result<Vec<Field>, String> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let start = pos;
        let key = varint(buf, &mut pos)?;
        let (number, wire) = ((key >> 3) as u32, key & 7);
        let mut payload = pos..pos;
        match wire {
            0 => {
                varint(buf, &mut pos)?;
            }
            1 => pos += 8,
            5 => pos += 4,
            2 => {
                let len = varint(buf, &mut pos)? as usize;
                let end = pos.checked_add(len).filter(|e| *e <= buf.len()).ok_or("length past the end")?;
                payload = pos..end;
                pos = end;
            }
            w => return Err(format!("unsupported wire type {w}")),
        }
        if pos > buf.len() {
            return Err("field past the end".into());
        }
        out.push(Field { number, all: start..pos, payload });
    }
    Ok(out)
}

pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(crate) fn len_field(out: &mut Vec<u8>, number: u32, payload: &[u8]) {
    put_varint(out, (u64::from(number) << 3) | 2);
    put_varint(out, payload.len() as u64);
    out.extend_from_slice(payload);
}

/// A `ValueInfoProto` with only a name: ONNX Runtime infers its type.
pub(crate) fn name_only_value_info(name: &str) -> Vec<u8> {
    let mut v = Vec::new();
    len_field(&mut v, 1, name.as_bytes());
    v
}

pub(crate) const GRAPH_NODE: u32 = 1;
pub(crate) const GRAPH_INITIALIZER: u32 = 5;
pub(crate) const GRAPH_OUTPUT: u32 = 12;
pub(crate) const GRAPH_VALUE_INFO: u32 = 13;
pub(crate) const MODEL_GRAPH: u32 = 7;
pub(crate) const NODE_ATTRIBUTE: u32 = 5;
pub(crate) const ATTR_NAME: u32 = 1;
pub(crate) const ATTR_G: u32 = 6;

/// Where a node lives: the `If` nodes and branches on the way, then the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePath {
    /// `(If node name, branch attribute)` from the main graph inwards.
    pub branches: Vec<(String, String)>,
    /// The node's name.
    pub name: String,
    /// Its operator.
    pub op_type: String,
    /// Its input tensor names.
    pub inputs: Vec<String>,
}

impl NodePath {
    /// `optimum::if/then_branch → /model/decoder/layers.0/self_attn/Reshape`.
    pub fn display(&self) -> String {
        let mut parts: Vec<String> = self.branches.iter().map(|(n, b)| format!("{n} ({b})")).collect();
        parts.push(self.name.clone());
        parts.join(" → ")
    }
}

/// Finds a node by name. `prefer` decides between branches of an `If` whose
/// condition is a graph input: `prefer(cond_name)` = the value fed.
pub fn find_node(model: &[u8], name: &str, prefer: &dyn Fn(&str) -> Option<bool>) -> Option<NodePath> {
    let m = pb::ModelProto::decode(model).ok()?;
    let g = m.graph?;
    let mut found = Vec::new();
    search(&g, name, &mut Vec::new(), &mut found);
    // Prefer the path whose branches match the fed conditions.
    found.sort_by_key(|(p, conds)| {
        let mismatches = p
            .branches
            .iter()
            .zip(conds)
            .filter(|((_, branch), cond)| match cond.as_deref().and_then(prefer) {
                Some(v) => (branch == "then_branch") != v,
                None => false,
            })
            .count();
        mismatches
    });
    found.into_iter().next().map(|(p, _)| p)
}

fn search(
    g: &pb::GraphProto,
    name: &str,
    trail: &mut Vec<(String, String, Option<String>)>,
    out: &mut Vec<(NodePath, Vec<Option<String>>)>,
) {
    for n in &g.node {
        if n.name.as_deref() == Some(name) {
            out.push((
                NodePath {
                    branches: trail.iter().map(|(a, b, _)| (a.clone(), b.clone())).collect(),
                    name: name.to_string(),
                    op_type: n.op_type.clone().unwrap_or_default(),
                    inputs: n.input.clone(),
                },
                trail.iter().map(|(_, _, c)| c.clone()).collect(),
            ));
        }
        for a in &n.attribute {
            if let Some(sub) = &a.g {
                trail.push((
                    n.name.clone().unwrap_or_default(),
                    a.name.clone().unwrap_or_default(),
                    n.input.first().cloned(),
                ));
                search(sub, name, trail, out);
                trail.pop();
            }
        }
    }
}

/// One node of the graph as it runs: the taken branch of each top-level `If`
/// spliced in place of the `If`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlatNode {
    /// `optimum::if (then_branch) → /Gemm` inside a branch, else the name.
    pub path: String,
    /// The node's own name.
    pub name: String,
    /// Its operator.
    pub op_type: String,
    /// Its operator's domain (`com.microsoft`; empty for ONNX's own).
    pub domain: String,
    /// Its inputs.
    pub inputs: Vec<String>,
    /// Its outputs.
    pub outputs: Vec<String>,
}

/// Every node in execution order (graph order is topological), with each
/// top-level `If` whose condition is a graph input replaced by the branch
/// `prefer(cond)` takes; and the path that lifts those branches for [`expose`].
pub fn flatten(model: &[u8], prefer: &dyn Fn(&str) -> Option<bool>) -> Result<(NodePath, Vec<FlatNode>), String> {
    let m = pb::ModelProto::decode(model).map_err(|e| e.to_string())?;
    let g = m.graph.ok_or("model has no graph")?;
    let mut branches = Vec::new();
    let mut out = Vec::new();
    let flat = |n: &pb::NodeProto, prefix: &str| FlatNode {
        path: format!("{prefix}{}", n.name.clone().unwrap_or_default()),
        name: n.name.clone().unwrap_or_default(),
        op_type: n.op_type.clone().unwrap_or_default(),
        domain: n.domain.clone().unwrap_or_default(),
        inputs: n.input.clone(),
        outputs: n.output.clone(),
    };
    for n in &g.node {
        let taken = (n.op_type.as_deref() == Some("If"))
            .then(|| n.input.first().and_then(|c| prefer(c)))
            .flatten()
            .map(|v| if v { "then_branch" } else { "else_branch" });
        let branch = taken.and_then(|b| {
            n.attribute.iter().find(|a| a.name.as_deref() == Some(b)).and_then(|a| a.g.as_ref()).map(|g| (b, g))
        });
        match branch {
            Some((b, sub)) => {
                let name = n.name.clone().unwrap_or_default();
                let prefix = format!("{name} ({b}) → ");
                out.extend(sub.node.iter().map(|s| flat(s, &prefix)));
                branches.push((name, b.to_string()));
            }
            None => out.push(flat(n, "")),
        }
    }
    Ok((NodePath { branches, name: String::new(), op_type: String::new(), inputs: Vec::new() }, out))
}

/// Names a node reads, including outer-scope names read inside its subgraphs.
pub(crate) fn reads(n: &pb::NodeProto, out: &mut HashSet<String>) {
    out.extend(n.input.iter().filter(|s| !s.is_empty()).cloned());
    for a in &n.attribute {
        for g in a.g.iter().chain(&a.graphs) {
            for sub in &g.node {
                reads(sub, out);
            }
        }
    }
}

/// The main graph's nodes with each `If` on `path` replaced by its taken
/// branch: byte ranges into the model, decoded nodes, and the branches'
/// own initializers and value infos (ranges) that now belong to the main graph.
pub(crate) struct Lifted {
    /// The model's top-level fields.
    pub(crate) model_fields: Vec<Field>,
    /// The main graph's payload range.
    pub(crate) graph: Range<usize>,
    /// Node fields in execution order (absolute ranges), decoded.
    pub(crate) nodes: Vec<(Range<usize>, pb::NodeProto)>,
    /// Initializer and value-info fields of the lifted branches.
    pub(crate) extra_graph_fields: Vec<Range<usize>>,
}

/// Lifts the branches on `path` into the main graph (see [`Lifted`]).
pub(crate) fn lift(model: &[u8], path: &NodePath) -> Result<Lifted, String> {
    let model_fields = fields(model)?;
    let graph_field = model_fields.iter().find(|f| f.number == MODEL_GRAPH).ok_or("model has no graph")?.clone();
    let graph_bytes = &model[graph_field.payload.clone()];

    // Flatten: start from the main graph's node entries (as byte ranges into
    // `model`), and splice each branch on the path in place of its If.
    let mut nodes: Vec<(Range<usize>, pb::NodeProto)> = node_entries(graph_field.payload.start, graph_bytes)?;
    let mut extra_graph_fields: Vec<Range<usize>> = Vec::new();
    for (if_name, branch) in &path.branches {
        let idx = nodes
            .iter()
            .position(|(_, n)| n.name.as_deref() == Some(if_name.as_str()))
            .ok_or_else(|| format!("If node `{if_name}` not found"))?;
        let (if_range, _) = nodes.remove(idx);
        let sub = branch_graph(model, if_range.clone(), branch)?;
        let sub_bytes = &model[sub.clone()];
        let sub_nodes = node_entries(sub.start, sub_bytes)?;
        for f in fields(sub_bytes)? {
            if f.number == GRAPH_INITIALIZER || f.number == GRAPH_VALUE_INFO {
                extra_graph_fields.push(sub.start + f.all.start..sub.start + f.all.end);
            }
        }
        for (k, entry) in sub_nodes.into_iter().enumerate() {
            nodes.insert(idx + k, entry);
        }
    }
    Ok(Lifted { model_fields, graph: graph_field.payload.clone(), nodes, extra_graph_fields })
}

/// The model bytes with `wanted` exposed as the only graph outputs, keeping
/// only the nodes they depend on. For a node inside branches, each `If` on
/// `path` is replaced by the branch taken.
pub fn expose(model: &[u8], path: &NodePath, wanted: &[String]) -> Result<Vec<u8>, String> {
    let Lifted { model_fields, graph: graph_range, nodes, extra_graph_fields } = lift(model, path)?;
    let graph_bytes = &model[graph_range];

    // Keep only the ancestors of what we want (the failing node must not run).
    let mut needed: HashSet<String> = wanted.iter().cloned().collect();
    let mut keep = vec![false; nodes.len()];
    for i in (0..nodes.len()).rev() {
        let n = &nodes[i].1;
        if n.output.iter().any(|o| needed.contains(o)) {
            keep[i] = true;
            reads(n, &mut needed);
        }
    }

    let mut graph = Vec::with_capacity(graph_bytes.len());
    for f in fields(graph_bytes)? {
        if f.number != GRAPH_NODE && f.number != GRAPH_OUTPUT {
            graph.extend_from_slice(&graph_bytes[f.all.clone()]);
        }
    }
    for r in &extra_graph_fields {
        graph.extend_from_slice(&model[r.clone()]);
    }
    for (i, (range, _)) in nodes.iter().enumerate() {
        if keep[i] {
            graph.extend_from_slice(&model[range.clone()]);
        }
    }
    for w in wanted {
        len_field(&mut graph, GRAPH_OUTPUT, &name_only_value_info(w));
    }

    Ok(with_graph(model, &model_fields, &graph))
}

/// The model's top-level fields (`model_fields`, read from `model`) with its
/// graph replaced by `graph`: every other field (IR version, opsets,
/// functions, metadata) copied as it is.
pub(crate) fn with_graph(model: &[u8], model_fields: &[Field], graph: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(model.len().max(graph.len()) + 64);
    for f in model_fields {
        if f.number == MODEL_GRAPH {
            len_field(&mut out, MODEL_GRAPH, graph);
        } else {
            out.extend_from_slice(&model[f.all.clone()]);
        }
    }
    out
}

/// Node entries of a graph: (absolute byte range of the whole field, decoded node).
pub(crate) fn node_entries(base: usize, graph_bytes: &[u8]) -> Result<Vec<(Range<usize>, pb::NodeProto)>, String> {
    let mut out = Vec::new();
    for f in fields(graph_bytes)? {
        if f.number == GRAPH_NODE {
            let node = pb::NodeProto::decode(&graph_bytes[f.payload.clone()]).map_err(|e| e.to_string())?;
            out.push((base + f.all.start..base + f.all.end, node));
        }
    }
    Ok(out)
}

/// The absolute range of the payload of `branch` (a graph attribute) of the
/// node whose whole field is `node_field`.
fn branch_graph(model: &[u8], node_field: Range<usize>, branch: &str) -> Result<Range<usize>, String> {
    let field_bytes = &model[node_field.clone()];
    let outer = fields(field_bytes)?;
    let node_payload = outer.first().ok_or("empty node field")?.payload.clone();
    let node_base = node_field.start + node_payload.start;
    let node_bytes = &model[node_base..node_field.start + node_payload.end];
    for f in fields(node_bytes)? {
        if f.number != NODE_ATTRIBUTE {
            continue;
        }
        let attr = &node_bytes[f.payload.clone()];
        let attr_fields = fields(attr)?;
        let name = attr_fields.iter().find(|a| a.number == ATTR_NAME).map(|a| &attr[a.payload.clone()]);
        if name == Some(branch.as_bytes()) {
            let g = attr_fields.iter().find(|a| a.number == ATTR_G).ok_or("branch attribute has no graph")?;
            let start = node_base + f.payload.start + g.payload.start;
            return Ok(start..start + g.payload.len());
        }
    }
    Err(format!("no `{branch}` attribute"))
}
