//! Reads a [`Signature`] from an `.onnx` file without loading its weights.
//!
//! The file is decoded through `FileBuf` with the trimmed schema in
//! `onnx_proto`, so weight bytes are skipped by seeking, never read.

pub use crate::error::ModelError;
use crate::model::file_buf::FileBuf;
use crate::model::onnx_proto as pb;
use crate::model::signature::{Dim, ElemType, ExternalRef, Opset, Port, Signature, ValueType};
use bytes::Buf;
use prost::Message;
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// How much to trust an arbitrary protobuf before calling it a model.
fn looks_like_model(m: &pb::ModelProto) -> Result<(), String> {
    if m.graph.is_none() {
        return Err("no graph in the protobuf (is this an ONNX ModelProto?)".into());
    }
    match m.ir_version {
        None => Err("no ir_version field (is this an ONNX ModelProto?)".into()),
        Some(v) if !(1..=1000).contains(&v) => Err(format!("implausible ir_version {v}")),
        Some(_) => Ok(()),
    }
}

/// Reads a model's signature without loading its weights.
pub fn read_signature(path: &Path) -> Result<Signature, ModelError> {
    let io_err = |source| ModelError::Io { path: path.to_path_buf(), source };
    let file = std::fs::File::open(path).map_err(io_err)?;
    let meta = file.metadata().map_err(io_err)?;
    if meta.is_dir() {
        return Err(ModelError::NotOnnx { path: path.to_path_buf(), reason: "is a directory".into() });
    }
    if meta.len() == 0 {
        return Err(ModelError::Empty { path: path.to_path_buf() });
    }
    let mut buf = FileBuf::new(&file, meta.len());
    let not_onnx = |reason| ModelError::NotOnnx { path: path.to_path_buf(), reason };
    let head = buf.chunk();
    if let Some(kind) = sniff_text(&head[..head.len().min(512)]) {
        return Err(not_onnx(format!("this is a {kind} file, not a binary ONNX protobuf")));
    }
    let decoded = pb::ModelProto::decode(&mut buf);
    if let Some(source) = buf.error.take() {
        return Err(io_err(source));
    }
    let model = decoded.map_err(|e| not_onnx(describe_decode_error(&e, meta.len())))?;
    let mut sig = signature_from_model(&model).map_err(not_onnx)?;
    sig.file_size = meta.len();
    Ok(sig)
}

/// prost's errors name the whole field path; say first what they mean for a
/// person, then where it happened (innermost field) and prost's reason.
fn describe_decode_error(e: &prost::DecodeError, len: u64) -> String {
    let text = e.to_string();
    let body = text.strip_prefix("failed to decode Protobuf message: ").unwrap_or(&text);
    let parts: Vec<&str> = body.split(": ").collect();
    let reason = parts.last().copied().unwrap_or(body);
    let at = if parts.len() > 1 { format!("at {}: ", parts[0]) } else { String::new() };
    if reason.contains("buffer underflow") {
        format!("truncated or corrupt: a field runs past the end of the file ({len} bytes) ({at}{reason})")
    } else if reason.contains("recursion limit") {
        "subgraphs nested too deeply (more than 100 levels of messages, about 30 levels of If/Loop bodies)".to_string()
    } else if reason.contains("UTF-8") {
        format!("a name or string field is not valid UTF-8 ({at}{reason})")
    } else {
        format!("not an ONNX ModelProto: the bytes do not follow onnx.proto ({at}{reason})")
    }
}

/// Graph input and output names must be unique: a runtime binds feeds by name.
fn check_unique(what: &str, ports: &[Port]) -> Result<(), String> {
    let mut seen: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, p) in ports.iter().enumerate() {
        if let Some(first) = seen.insert(p.name.as_str(), i) {
            return Err(format!("duplicate graph {what} name `{}` ({what}s #{first} and #{i})", p.name));
        }
    }
    Ok(())
}

/// Decodes a serialized `ModelProto` held in memory. The error is a sentence for a person.
pub fn signature_from_bytes(bytes: &[u8]) -> Result<Signature, String> {
    if let Some(kind) = sniff_text(&bytes[..bytes.len().min(512)]) {
        return Err(format!("this is a {kind} file, not a binary ONNX protobuf"));
    }
    let model = pb::ModelProto::decode(bytes).map_err(|e| describe_decode_error(&e, bytes.len() as u64))?;
    let mut sig = signature_from_model(&model)?;
    sig.file_size = bytes.len() as u64;
    Ok(sig)
}

fn signature_from_model(model: &pb::ModelProto) -> Result<Signature, String> {
    looks_like_model(model)?;
    let graph = model.graph.as_ref().expect("checked by looks_like_model");

    let initializers: HashSet<&str> = graph
        .initializer
        .iter()
        .filter_map(|t| t.name.as_deref())
        .chain(graph.sparse_initializer.iter().filter_map(|s| s.values.as_ref()?.name.as_deref()))
        .collect();
    // IR < 4 lists every initializer as a graph input too; callers never feed those.
    let inputs: Vec<Port> =
        graph.input.iter().filter(|v| !initializers.contains(v.name.as_deref().unwrap_or(""))).map(port).collect();
    let outputs: Vec<Port> = graph.output.iter().map(port).collect();
    check_unique("input", &inputs)?;
    check_unique("output", &outputs)?;

    let mut counts = SubgraphCounts::default();
    for node in &graph.node {
        counts.visit_node(node);
    }
    let input_reach = reach(graph, &inputs, &counts.subgraph_readers);
    let input_readers = direct_readers(graph, &inputs, &counts.subgraph_readers);
    let if_branches = if_branches(graph, &inputs);
    let token_rows = token_rows(graph, &inputs);
    let rotary_rows = rotary_rows(graph);
    let mut weight_elements = std::collections::BTreeMap::new();
    for t in &graph.initializer {
        let n: u64 = t.dims.iter().map(|&d| d.max(0) as u64).product();
        *weight_elements.entry(ElemType::from_code(t.data_type.unwrap_or(0)).to_string()).or_insert(0) += n;
    }

    let mut external_data = Vec::new();
    collect_external(graph, &mut external_data);

    Ok(Signature {
        ir_version: model.ir_version,
        opsets: model
            .opset_import
            .iter()
            .map(|o| Opset { domain: o.domain.clone().unwrap_or_default(), version: o.version.unwrap_or(0) })
            .collect(),
        producer: model.producer_name.clone().unwrap_or_default(),
        producer_version: model.producer_version.clone().unwrap_or_default(),
        inputs,
        outputs,
        node_count: graph.node.len(),
        subgraph_node_count: counts.subgraph_nodes,
        if_node_count: counts.if_nodes,
        op_types: counts.op_types,
        attention_windows: counts.attention_windows,
        weight_elements,
        initializer_count: graph.initializer.len() + graph.sparse_initializer.len(),
        external_data,
        file_size: 0,
        input_reach,
        input_readers,
        if_branches,
        token_rows,
        rotary_rows,
    })
}

/// The rows of every rank-2 initializer (an embedding or a rotary table), by name.
fn table_rows(graph: &pb::GraphProto) -> HashMap<&str, i64> {
    graph
        .initializer
        .iter()
        .filter(|t| t.dims.len() == 2)
        .filter_map(|t| Some((t.name.as_deref()?, t.dims[0])))
        .collect()
}

/// Which inputs of a node hold its precomputed rotary (cos, sin) tables:
/// GroupQueryAttention's 7 and 8, com.microsoft RotaryEmbedding's 2 and 3,
/// ONNX RotaryEmbedding's 1 and 2 (its position ids come last).
pub fn rotary_table_inputs(op_type: &str, domain: &str) -> Option<(usize, usize)> {
    match (op_type, domain) {
        ("GroupQueryAttention", _) => Some((7, 8)),
        ("RotaryEmbedding", "com.microsoft") => Some((2, 3)),
        ("RotaryEmbedding", "" | "ai.onnx") => Some((1, 2)),
        _ => None,
    }
}

/// The fewest rows of a precomputed cos table any attention or rotary node
/// reads, when the table is an initializer.
fn rotary_rows(graph: &pb::GraphProto) -> Option<(String, i64)> {
    let rows = table_rows(graph);
    graph
        .node
        .iter()
        .filter_map(|n| {
            let (at, _) = rotary_table_inputs(n.op_type.as_deref()?, n.domain.as_deref().unwrap_or_default())?;
            let table = n.input.get(at)?;
            Some((table.clone(), *rows.get(table.as_str())?))
        })
        .min_by_key(|(_, r)| *r)
}

/// For each graph input that indexes an embedding table (a main-graph
/// `Gather` of a rank-2 initializer, the input fed directly or through one
/// Cast/Reshape/Unsqueeze/Squeeze): the table and its rows. A quantized or
/// computed table is not read (no entry).
fn token_rows(graph: &pb::GraphProto, inputs: &[Port]) -> std::collections::BTreeMap<String, (String, i64)> {
    let tables = table_rows(graph);
    // A tensor that is a graph input, or one light op away from one.
    let mut from_input: HashMap<&str, &str> = inputs.iter().map(|p| (p.name.as_str(), p.name.as_str())).collect();
    for n in &graph.node {
        let op = n.op_type.as_deref().unwrap_or_default();
        if matches!(op, "Cast" | "Reshape" | "Unsqueeze" | "Squeeze") {
            if let (Some(src), Some(out)) =
                (n.input.first().and_then(|i| from_input.get(i.as_str()).copied()), n.output.first())
            {
                from_input.insert(out.as_str(), src);
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    for n in graph.node.iter().filter(|n| n.op_type.as_deref() == Some("Gather")) {
        let (Some(data), Some(indices)) = (n.input.first(), n.input.get(1)) else { continue };
        if let (Some(&rows), Some(&input)) = (tables.get(data.as_str()), from_input.get(indices.as_str())) {
            out.entry(input.to_string()).or_insert((data.clone(), rows));
        }
    }
    out
}

/// Text files renamed to `.onnx` are a common mistake; name them instead of
/// printing a protobuf wire-type error.
fn sniff_text(head: &[u8]) -> Option<&'static str> {
    let text = std::str::from_utf8(head).ok().or_else(|| {
        // A multi-byte character may be cut at 512.
        std::str::from_utf8(&head[..head.len().saturating_sub(3)]).ok()
    })?;
    let t = text.trim_start();
    if t.starts_with("version https://git-lfs") {
        return Some("Git LFS pointer");
    }
    if t.starts_with('{') || t.starts_with('[') {
        return Some("JSON or text");
    }
    if t.starts_with('<') {
        return Some("HTML/XML");
    }
    // Printable text with a YAML/INI-like key or a comment is not protobuf.
    let printable = t.chars().all(|c| !c.is_control() || c.is_whitespace());
    if printable
        && (t.starts_with('#')
            || t.starts_with("---")
            || t.lines().next().is_some_and(|l| l.contains(": ") || l.ends_with(':')))
    {
        return Some("YAML or text");
    }
    None
}

fn port(v: &pb::ValueInfoProto) -> Port {
    Port { name: v.name.clone().unwrap_or_default(), ty: value_type(v.r#type.as_ref()) }
}

fn value_type(t: Option<&pb::TypeProto>) -> ValueType {
    use pb::type_proto::Value;
    match t.and_then(|t| t.value.as_ref()) {
        None => ValueType::Missing,
        Some(Value::TensorType(t)) => {
            ValueType::Tensor { elem: ElemType::from_code(t.elem_type.unwrap_or(0)), shape: t.shape.as_ref().map(dims) }
        }
        Some(Value::SparseTensorType(t)) => ValueType::SparseTensor {
            elem: ElemType::from_code(t.elem_type.unwrap_or(0)),
            shape: t.shape.as_ref().map(dims),
        },
        Some(Value::SequenceType(s)) => ValueType::Sequence(Box::new(value_type(s.elem_type.as_deref()))),
        Some(Value::OptionalType(o)) => ValueType::Optional(Box::new(value_type(o.elem_type.as_deref()))),
        Some(Value::MapType(m)) => ValueType::Map {
            key: ElemType::from_code(m.key_type.unwrap_or(0)),
            value: Box::new(value_type(m.value_type.as_deref())),
        },
        Some(Value::OpaqueType(o)) => {
            ValueType::Opaque { domain: o.domain.clone().unwrap_or_default(), name: o.name.clone().unwrap_or_default() }
        }
    }
}

fn dims(shape: &pb::TensorShapeProto) -> Vec<Dim> {
    use pb::tensor_shape_proto::dimension::Value;
    shape
        .dim
        .iter()
        .map(|d| match &d.value {
            Some(Value::DimValue(v)) => Dim::Fixed(*v),
            Some(Value::DimParam(p)) => Dim::Symbolic(p.clone()),
            None => Dim::Unknown,
        })
        .collect()
}

/// How many nodes deep `input_reach` follows an input through the main graph.
const REACH_DEPTH: usize = 4;

/// For every graph input, the op types of the nodes that read it, and of the
/// nodes that read those nodes' outputs, up to [`REACH_DEPTH`] hops.
fn reach(
    graph: &pb::GraphProto,
    inputs: &[Port],
    subgraph_readers: &HashMap<String, std::collections::BTreeSet<String>>,
) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let mut readers: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, n) in graph.node.iter().enumerate() {
        for input in &n.input {
            readers.entry(input.as_str()).or_default().push(i);
        }
    }
    let mut out = std::collections::BTreeMap::new();
    for port in inputs {
        let mut ops = std::collections::BTreeSet::new();
        let mut frontier: Vec<&str> = vec![port.name.as_str()];
        let mut seen: HashSet<usize> = HashSet::new();
        for _ in 0..REACH_DEPTH {
            let mut next = Vec::new();
            for tensor in frontier {
                for &i in readers.get(tensor).map(Vec::as_slice).unwrap_or(&[]) {
                    if seen.insert(i) {
                        let n = &graph.node[i];
                        ops.insert(n.op_type.clone().unwrap_or_default());
                        next.extend(n.output.iter().map(String::as_str));
                    }
                }
            }
            frontier = next;
        }
        if let Some(sub) = subgraph_readers.get(&port.name) {
            ops.extend(sub.iter().cloned());
        }
        out.insert(port.name.clone(), ops);
    }
    out
}

/// The graph inputs each branch of every `If` on a graph input reads.
fn if_branches(graph: &pb::GraphProto, inputs: &[Port]) -> Vec<crate::model::signature::IfBranches> {
    fn names(g: &pb::GraphProto, out: &mut HashSet<String>) {
        for n in &g.node {
            out.extend(n.input.iter().cloned());
            for a in &n.attribute {
                for sub in a.g.iter().chain(a.graphs.iter()) {
                    names(sub, out);
                }
            }
        }
    }
    let is_input = |s: &str| inputs.iter().any(|p| p.name == s);
    let branch = |n: &pb::NodeProto, which: &str| {
        let mut read = HashSet::new();
        if let Some(g) = n.attribute.iter().find(|a| a.name.as_deref() == Some(which)).and_then(|a| a.g.as_ref()) {
            names(g, &mut read);
        }
        read.into_iter().filter(|s| is_input(s)).collect()
    };
    graph
        .node
        .iter()
        .filter(|n| n.op_type.as_deref() == Some("If"))
        .filter_map(|n| {
            let cond = n.input.first().filter(|c| is_input(c))?;
            Some(crate::model::signature::IfBranches {
                cond: cond.clone(),
                then_reads: branch(n, "then_branch"),
                else_reads: branch(n, "else_branch"),
            })
        })
        .collect()
}

/// For every graph input, the op types of the nodes that read it directly.
fn direct_readers(
    graph: &pb::GraphProto,
    inputs: &[Port],
    subgraph_readers: &HashMap<String, std::collections::BTreeSet<String>>,
) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let mut out: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        inputs.iter().map(|p| (p.name.clone(), subgraph_readers.get(&p.name).cloned().unwrap_or_default())).collect();
    for n in &graph.node {
        for input in &n.input {
            if let Some(ops) = out.get_mut(input.as_str()) {
                ops.insert(n.op_type.clone().unwrap_or_default());
            }
        }
    }
    out
}

#[derive(Default)]
struct SubgraphCounts {
    /// Op types of subgraph nodes reading each outer-scope name directly.
    subgraph_readers: HashMap<String, std::collections::BTreeSet<String>>,
    subgraph_nodes: usize,
    if_nodes: usize,
    op_types: std::collections::BTreeSet<String>,
    attention_windows: Vec<i64>,
}

impl SubgraphCounts {
    fn visit_node(&mut self, node: &pb::NodeProto) {
        if node.op_type.as_deref() == Some("If") {
            self.if_nodes += 1;
        }
        if node.op_type.as_deref() == Some("GroupQueryAttention") {
            let window = node.attribute.iter().find(|a| a.name.as_deref() == Some("local_window_size"));
            self.attention_windows.push(window.and_then(|a| a.i).unwrap_or(-1));
        }
        if let Some(op) = &node.op_type {
            if !self.op_types.contains(op) {
                self.op_types.insert(op.clone());
            }
        }
        for attr in &node.attribute {
            for g in attr.g.iter().chain(attr.graphs.iter()) {
                self.subgraph_nodes += g.node.len();
                for n in &g.node {
                    for input in &n.input {
                        let op = n.op_type.clone().unwrap_or_default();
                        self.subgraph_readers.entry(input.clone()).or_default().insert(op);
                    }
                    self.visit_node(n);
                }
            }
        }
    }
}

fn collect_external(graph: &pb::GraphProto, out: &mut Vec<ExternalRef>) {
    for t in &graph.initializer {
        if t.data_location != Some(pb::DATA_LOCATION_EXTERNAL) {
            continue;
        }
        let get =
            |key: &str| t.external_data.iter().find(|e| e.key.as_deref() == Some(key)).and_then(|e| e.value.clone());
        out.push(ExternalRef {
            tensor: t.name.clone().unwrap_or_default(),
            location: get("location").unwrap_or_default(),
            offset: get("offset").and_then(|s| s.parse().ok()),
            length: get("length").and_then(|s| s.parse().ok()),
        });
    }
}

/// Whether an external-data `location` (the untrusted model file's word) is
/// a plain relative path inside the model's folder: the only kind looked at.
pub fn plain_location(location: &str) -> bool {
    use std::path::Component;
    !location.is_empty()
        && Path::new(location).components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// What is wrong with the external-data references of `sig`, read from
/// `model`: each `location` comes from the untrusted model file, so only a
/// plain relative path inside the model's folder is accepted; the file must
/// exist and be long enough for every `offset + length`. Only file sizes are
/// looked at, never the data.
pub fn external_data_problems(model: &Path, sig: &Signature) -> Vec<String> {
    let dir = model.parent().unwrap_or(Path::new("."));
    let mut problems = Vec::new();
    let mut sizes: HashMap<String, Option<u64>> = HashMap::new();
    for r in &sig.external_data {
        if !plain_location(&r.location) {
            problems.push(format!(
                "tensor `{}`: external data location `{}` is refused (only a relative path inside the model's folder is allowed; it was not read)",
                r.tensor, r.location
            ));
            continue;
        }
        let path = dir.join(&r.location);
        let size = *sizes
            .entry(r.location.clone())
            .or_insert_with(|| std::fs::metadata(&path).ok().filter(|m| m.is_file()).map(|m| m.len()));
        let (offset, shown) = (r.offset.unwrap_or(0), path.display());
        let end = r.length.map(|l| offset.saturating_add(l)).unwrap_or(offset);
        match size {
            None => problems.push(format!("tensor `{}`: external data file `{shown}` is missing", r.tensor)),
            Some(size) if end > size => problems.push(format!(
                "tensor `{}`: external data file `{shown}` has {size} bytes, the tensor needs bytes {offset}..{end}",
                r.tensor
            )),
            Some(_) => {}
        }
    }
    problems
}

/// The signature of a model that can actually be loaded: its external-data
/// references are checked too (a model whose weights are missing is unusable).
pub fn read_usable_signature(model: &Path) -> Result<Signature, crate::error::Error> {
    let sig = read_signature(model)?;
    let problems = external_data_problems(model, &sig);
    if !problems.is_empty() {
        return Err(crate::error::Error::ExternalData { path: model.to_path_buf(), problems: problems.join("; ") });
    }
    Ok(sig)
}
