//! The graph's constants as the config audits read them: the few ONNX
//! fields they need (weights skipped unread), every node with the no-cache
//! branch of a merged decoder inlined, who writes and who reads each
//! tensor, and a constant's values on demand (an initializer, its external
//! data read from the model's folder, or a `Constant` node), with the
//! precision it is stored in.

use prost::Message;
use std::collections::HashMap;
use std::path::Path;

pub(crate) mod proto {
    //! The few ONNX fields the audit reads; weights are skipped unread.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Model {
        #[prost(message, optional, tag = "7")]
        pub graph: Option<Graph>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Graph {
        #[prost(message, repeated, tag = "1")]
        pub node: Vec<Node>,
        #[prost(message, repeated, tag = "5")]
        pub initializer: Vec<Meta>,
        #[prost(message, repeated, tag = "12")]
        pub output: Vec<Named>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Named {
        #[prost(string, optional, tag = "1")]
        pub name: Option<String>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Node {
        #[prost(string, repeated, tag = "1")]
        pub input: Vec<String>,
        #[prost(string, repeated, tag = "2")]
        pub output: Vec<String>,
        #[prost(string, optional, tag = "3")]
        pub name: Option<String>,
        #[prost(string, optional, tag = "4")]
        pub op_type: Option<String>,
        #[prost(message, repeated, tag = "5")]
        pub attribute: Vec<Attr>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Attr {
        #[prost(string, optional, tag = "1")]
        pub name: Option<String>,
        #[prost(float, optional, tag = "2")]
        pub f: Option<f32>,
        #[prost(message, optional, tag = "5")]
        pub t: Option<Tensor>,
        #[prost(message, optional, tag = "6")]
        pub g: Option<Graph>,
        #[prost(float, repeated, tag = "7")]
        pub floats: Vec<f32>,
    }
    /// An initializer's name and shape, its values skipped.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Meta {
        #[prost(int64, repeated, tag = "1")]
        pub dims: Vec<i64>,
        #[prost(int32, optional, tag = "2")]
        pub data_type: Option<i32>,
        #[prost(string, optional, tag = "8")]
        pub name: Option<String>,
    }
    /// A constant with its values.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Tensor {
        #[prost(int64, repeated, tag = "1")]
        pub dims: Vec<i64>,
        #[prost(int32, optional, tag = "2")]
        pub data_type: Option<i32>,
        #[prost(float, repeated, tag = "4")]
        pub float_data: Vec<f32>,
        #[prost(int32, repeated, tag = "5")]
        pub int32_data: Vec<i32>,
        #[prost(bytes = "vec", optional, tag = "9")]
        pub raw_data: Option<Vec<u8>>,
        #[prost(double, repeated, tag = "10")]
        pub double_data: Vec<f64>,
    }
}

/// ONNX element types the constants come in.
pub(crate) const FLOAT: i32 = 1;
const FLOAT16: i32 = 10;
const DOUBLE: i32 = 11;
const BFLOAT16: i32 = 16;

/// A float constant's values (as f64) and its stored type.
#[derive(Clone, Debug)]
pub(crate) struct Const {
    pub(crate) values: Vec<f64>,
    pub(crate) dtype: i32,
}

impl Const {
    /// The single value of a scalar (or a tensor of one repeated value).
    pub(crate) fn scalar(&self) -> Option<f64> {
        let first = *self.values.first()?;
        self.values.iter().all(|v| *v == first).then_some(first)
    }
}

/// Relative tolerance for a value stored as `dtype`: half its rounding step, doubled.
pub(crate) fn tolerance(dtype: i32) -> f64 {
    match dtype {
        FLOAT16 => 1e-3,
        BFLOAT16 => 8e-3,
        _ => 1e-5,
    }
}

/// The relative tolerance of the least precise float type `model`'s
/// constants are stored in (its initializers and `Constant` nodes, its
/// subgraphs' too): a float16 constant cast up to float32 keeps its rounding.
pub(crate) fn stored_tolerance(model: &[u8]) -> f64 {
    fn walk(g: &proto::Graph, worst: &mut f64) {
        for i in &g.initializer {
            *worst = worst.max(tolerance(i.data_type.unwrap_or(FLOAT)));
        }
        for a in g.node.iter().flat_map(|n| &n.attribute) {
            if let Some(t) = &a.t {
                *worst = worst.max(tolerance(t.data_type.unwrap_or(FLOAT)));
            }
            if let Some(sub) = &a.g {
                walk(sub, worst);
            }
        }
    }
    let mut worst = tolerance(FLOAT);
    if let Some(g) = proto::Model::decode(model).ok().and_then(|m| m.graph) {
        walk(&g, &mut worst);
    }
    worst
}

fn decode(t: &proto::Tensor) -> Option<Const> {
    let dtype = t.data_type?;
    let raw = t.raw_data.as_deref();
    let values: Vec<f64> = match (dtype, raw) {
        (FLOAT, Some(r)) => {
            r.chunks_exact(4).map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect()
        }
        (FLOAT, None) => t.float_data.iter().map(|v| f64::from(*v)).collect(),
        (DOUBLE, Some(r)) => r.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect(),
        (DOUBLE, None) => t.double_data.clone(),
        (FLOAT16, Some(r)) => {
            r.chunks_exact(2).map(|c| f64::from(half::f16::from_le_bytes([c[0], c[1]]).to_f32())).collect()
        }
        (FLOAT16, None) => t.int32_data.iter().map(|v| f64::from(half::f16::from_bits(*v as u16).to_f32())).collect(),
        (BFLOAT16, Some(r)) => {
            r.chunks_exact(2).map(|c| f64::from(half::bf16::from_le_bytes([c[0], c[1]]).to_f32())).collect()
        }
        (BFLOAT16, None) => t.int32_data.iter().map(|v| f64::from(half::bf16::from_bits(*v as u16).to_f32())).collect(),
        _ => return None,
    };
    Some(Const { values, dtype })
}

/// The graph as the audit reads it: nodes in order (the no-cache branch of a
/// merged decoder inlined), who writes and who reads each tensor, and the
/// constants' values on demand.
pub(crate) struct Graph<'a> {
    model: &'a [u8],
    dir: &'a Path,
    pub(crate) nodes: Vec<proto::Node>,
    pub(crate) producer: HashMap<String, usize>,
    pub(crate) readers: HashMap<String, Vec<usize>>,
    pub(crate) initializers: HashMap<String, (Vec<i64>, i32)>,
    /// A branch's output name → the `If` output it becomes.
    alias: HashMap<String, String>,
}

impl<'a> Graph<'a> {
    pub(crate) fn read(model: &'a [u8], dir: &'a Path, flag: Option<&str>) -> Result<Graph<'a>, String> {
        let m = proto::Model::decode(model).map_err(|e| format!("not an ONNX model: {e}"))?;
        let g = m.graph.ok_or("the model has no graph")?;
        let mut out = Graph {
            model,
            dir,
            nodes: Vec::new(),
            producer: HashMap::new(),
            readers: HashMap::new(),
            initializers: HashMap::new(),
            alias: HashMap::new(),
        };
        let add_inits = |g: &proto::Graph, out: &mut Graph<'_>| {
            for i in &g.initializer {
                out.initializers.insert(i.name.clone().unwrap_or_default(), (i.dims.clone(), i.data_type.unwrap_or(0)));
            }
        };
        add_inits(&g, &mut out);
        for n in g.node {
            // The branch every prompt runs (flag false: no cache), inlined.
            let cond = n.input.first().map(String::as_str);
            let branch = (n.op_type.as_deref() == Some("If") && cond.is_some() && cond == flag)
                .then(|| {
                    n.attribute.iter().find(|a| a.name.as_deref() == Some("else_branch")).and_then(|a| a.g.clone())
                })
                .flatten();
            match branch {
                Some(sub) => {
                    add_inits(&sub, &mut out);
                    for (o, b) in n.output.iter().zip(&sub.output) {
                        out.alias.insert(o.clone(), b.name.clone().unwrap_or_default());
                    }
                    out.nodes.extend(sub.node);
                }
                None => out.nodes.push(n),
            }
        }
        for (i, n) in out.nodes.iter().enumerate() {
            for o in &n.output {
                out.producer.insert(o.clone(), i);
            }
            for r in &n.input {
                out.readers.entry(r.clone()).or_default().push(i);
            }
        }
        Ok(out)
    }

    pub(crate) fn resolve<'b>(&'b self, name: &'b str) -> &'b str {
        self.alias.get(name).map_or(name, String::as_str)
    }

    pub(crate) fn op(&self, i: usize) -> &str {
        self.nodes[i].op_type.as_deref().unwrap_or("")
    }

    pub(crate) fn name(&self, i: usize) -> &str {
        self.nodes[i].name.as_deref().unwrap_or("")
    }

    /// The values of `tensor` when it is a constant: an initializer, a
    /// `Constant` node, or one seen through a cast or a shape move.
    pub(crate) fn constant(&self, tensor: &str) -> Option<Const> {
        let tensor = self.resolve(tensor);
        if self.initializers.contains_key(tensor) {
            return self.initializer(tensor);
        }
        let i = *self.producer.get(tensor)?;
        let n = &self.nodes[i];
        match self.op(i) {
            "Constant" => {
                let a = n.attribute.first()?;
                match a.name.as_deref()? {
                    "value" => decode(a.t.as_ref()?),
                    "value_float" => Some(Const { values: vec![f64::from(a.f?)], dtype: FLOAT }),
                    "value_floats" => {
                        Some(Const { values: a.floats.iter().map(|v| f64::from(*v)).collect(), dtype: FLOAT })
                    }
                    _ => None,
                }
            }
            // The stored precision is the source's: a float16 constant cast up keeps its rounding.
            "Cast" | "Identity" | "Unsqueeze" | "Reshape" | "Squeeze" => self.constant(n.input.first()?),
            _ => None,
        }
    }

    /// An initializer's values, its external data read from the model's folder.
    fn initializer(&self, name: &str) -> Option<Const> {
        use crate::diagnose::graph_edit as ge;
        let (dims, _) = self.initializers.get(name)?;
        // Only small constants are read: a weight is never a multiplier.
        if dims.iter().product::<i64>() > 1 << 16 {
            return None;
        }
        let fields = ge::fields(self.model).ok()?;
        let graph = &self.model[fields.iter().find(|f| f.number == ge::MODEL_GRAPH)?.payload.clone()];
        for f in ge::fields(graph).ok()?.into_iter().filter(|f| f.number == ge::GRAPH_INITIALIZER) {
            let bytes = &graph[f.payload.clone()];
            if crate::edit::tensor_name_and_type(bytes).is_ok_and(|(n, _)| n == name) {
                let inlined = crate::edit::inline_external(bytes, self.dir).ok()?;
                return decode(&proto::Tensor::decode(inlined.as_slice()).ok()?);
            }
        }
        None
    }

    pub(crate) fn is_constant(&self, tensor: &str) -> bool {
        self.constant(tensor).is_some()
    }
}
