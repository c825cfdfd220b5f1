//! A minimal model around one node, to file upstream: the node, the
//! constants it reads, and `depth` levels of the nodes computing its inputs;
//! every other tensor they read becomes a graph input whose value the caller
//! captured from the real run. Initializers are kept only where read, and
//! external data is inlined, so the file stands alone.

use crate::diagnose::graph_edit::{self as ge, lift, NodePath, GRAPH_INITIALIZER};
use crate::edit::{inline_external, tensor_name_and_type, tensor_value_info, GRAPH_INPUT, GRAPH_NAME};
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// Which nodes a reduction keeps and which tensors it needs values for.
#[derive(Clone, Debug)]
pub struct Selection {
    /// Indices into the lifted node list, in execution order.
    kept: Vec<usize>,
    /// Tensors read but not computed inside: the reduced model's inputs.
    pub inputs: Vec<String>,
    /// The target node's outputs: the reduced model's outputs.
    pub outputs: Vec<String>,
    /// How many nodes are kept.
    pub nodes: usize,
}

/// Selects `node` (its name, inside the branches of `path`) with `depth`
/// levels of computing producers above it and every constant producer
/// (Constant nodes and nodes reading only constants) its kept nodes read.
pub fn select(model: &[u8], path: &NodePath, node: &str, depth: usize) -> Result<Selection, String> {
    let lifted = lift(model, path)?;
    let initializers = initializer_names(model, &lifted)?;
    let nodes = &lifted.nodes;
    let target = nodes
        .iter()
        .position(|(_, n)| n.name.as_deref() == Some(node))
        .ok_or_else(|| format!("node `{node}` not found"))?;
    let producer: HashMap<&str, usize> =
        nodes.iter().enumerate().flat_map(|(i, (_, n))| n.output.iter().map(move |o| (o.as_str(), i))).collect();
    // Constant producers: no computed input reaches them.
    let mut constant = vec![false; nodes.len()];
    for (i, (_, n)) in nodes.iter().enumerate() {
        let mut reads = HashSet::new();
        ge::reads(n, &mut reads);
        let op = n.op_type.as_deref().unwrap_or("");
        constant[i] = op == "Constant"
            || (!reads.is_empty()
                && op != "RandomNormal"
                && reads.iter().all(|r| {
                    initializers.contains(r.as_str()) || producer.get(r.as_str()).is_some_and(|p| constant[*p])
                }));
    }
    let mut keep: HashSet<usize> = HashSet::from([target]);
    let mut frontier = vec![target];
    for _ in 0..depth {
        let mut next = Vec::new();
        for i in frontier {
            let mut reads = HashSet::new();
            ge::reads(&nodes[i].1, &mut reads);
            for r in reads {
                if let Some(p) = producer.get(r.as_str()).filter(|p| **p < i) {
                    if keep.insert(*p) {
                        next.push(*p);
                    }
                }
            }
        }
        frontier = next;
    }
    // Constants read by anything kept, transitively.
    let mut stack: Vec<usize> = keep.iter().copied().collect();
    while let Some(i) = stack.pop() {
        let mut reads = HashSet::new();
        ge::reads(&nodes[i].1, &mut reads);
        for r in reads {
            if let Some(p) = producer.get(r.as_str()).filter(|p| constant[**p]) {
                if keep.insert(*p) {
                    stack.push(*p);
                }
            }
        }
    }
    let mut kept: Vec<usize> = keep.into_iter().collect();
    kept.sort_unstable();
    let written: HashSet<&str> = kept.iter().flat_map(|i| nodes[*i].1.output.iter().map(String::as_str)).collect();
    let mut inputs = Vec::new();
    for i in &kept {
        let mut reads = HashSet::new();
        ge::reads(&nodes[*i].1, &mut reads);
        let mut reads: Vec<String> = reads.into_iter().collect();
        // `reads` is a set: the node's own input order first, for a stable file.
        reads.sort_by_key(|r| nodes[*i].1.input.iter().position(|x| x == r).unwrap_or(usize::MAX));
        for r in reads {
            if !written.contains(r.as_str()) && !initializers.contains(r.as_str()) && !inputs.contains(&r) {
                inputs.push(r);
            }
        }
    }
    let outputs = nodes[target].1.output.iter().filter(|o| !o.is_empty()).cloned().collect();
    Ok(Selection { nodes: kept.len(), kept, inputs, outputs })
}

/// The names of the main graph's initializers and of the lifted branches'.
fn initializer_names(model: &[u8], lifted: &ge::Lifted) -> Result<HashSet<String>, String> {
    let mut names = HashSet::new();
    for (field, bytes) in initializer_fields(model, lifted)? {
        names.insert(tensor_name_and_type(&bytes[field.payload.clone()])?.0);
    }
    Ok(names)
}

/// Each initializer field (main graph and lifted branches) with the bytes it indexes.
fn initializer_fields<'a>(model: &'a [u8], lifted: &ge::Lifted) -> Result<Vec<(ge::Field, &'a [u8])>, String> {
    let mut out = Vec::new();
    let graph = &model[lifted.graph.clone()];
    for f in ge::fields(graph)? {
        if f.number == GRAPH_INITIALIZER {
            out.push((f, graph));
        }
    }
    for r in &lifted.extra_graph_fields {
        let bytes = &model[r.clone()];
        for f in ge::fields(bytes)? {
            if f.number == GRAPH_INITIALIZER {
                out.push((f, bytes));
            }
        }
    }
    Ok(out)
}

/// A graph input's element code and shape, by name (the captured value's).
pub type InputType<'a> = &'a dyn Fn(&str) -> Option<(i32, Vec<i64>)>;

/// The reduced model: `sel`'s nodes (their attribute tensors' external data
/// inlined too), the initializers they read (external data read from `base`
/// and inlined), `sel.inputs` as graph inputs typed by
/// `input_type` (element code and shape of the captured value), and the
/// target's outputs typed by `output_type` (element code).
pub fn build(
    model: &[u8],
    path: &NodePath,
    sel: &Selection,
    base: &Path,
    input_type: InputType<'_>,
    output_type: &dyn Fn(&str) -> Option<i32>,
) -> Result<Vec<u8>, String> {
    let lifted = lift(model, path)?;
    let mut read = HashSet::new();
    for i in &sel.kept {
        let (_, n) = lifted.nodes.get(*i).ok_or("selection from another model")?;
        ge::reads(n, &mut read);
    }
    let mut graph = Vec::new();
    let graph_bytes = &model[lifted.graph.clone()];
    for f in ge::fields(graph_bytes)? {
        if f.number == GRAPH_NAME {
            graph.extend_from_slice(&graph_bytes[f.all.clone()]);
        }
    }
    for i in &sel.kept {
        graph.extend_from_slice(&crate::edit::node_field_inlined(&model[lifted.nodes[*i].0.clone()], base)?);
    }
    let mut seen = HashSet::new();
    for (f, bytes) in initializer_fields(model, &lifted)? {
        let tensor = &bytes[f.payload.clone()];
        let (name, _) = tensor_name_and_type(tensor)?;
        if read.contains(&name) && seen.insert(name) {
            ge::len_field(&mut graph, GRAPH_INITIALIZER, &inline_external(tensor, base)?);
        }
    }
    for name in &sel.inputs {
        let (elem, shape) = input_type(name).ok_or_else(|| format!("no captured value for `{name}`"))?;
        ge::len_field(&mut graph, GRAPH_INPUT, &tensor_value_info(name, elem, Some(&shape)));
    }
    for name in &sel.outputs {
        let v = match output_type(name) {
            Some(elem) => tensor_value_info(name, elem, None),
            None => ge::name_only_value_info(name),
        };
        ge::len_field(&mut graph, ge::GRAPH_OUTPUT, &v);
    }
    Ok(ge::with_graph(model, &lifted.model_fields, &graph))
}
