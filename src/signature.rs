//! Our own model of a graph's signature, independent of the protobuf types.

use serde::Serialize;
use std::fmt;

/// One dimension of a declared tensor shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    /// `dim_value`: a size fixed at export time.
    Fixed(i64),
    /// `dim_param`: a symbol, kept exactly as written (`"1"` stays a symbol).
    Symbolic(String),
    /// Neither value nor param: the exporter said nothing about this axis.
    Unknown,
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Fixed(v) => write!(f, "{v}"),
            // Quoted when it could be mistaken for a number.
            Dim::Symbolic(s) if s.parse::<i64>().is_ok() || s.is_empty() => write!(f, "\"{s}\""),
            Dim::Symbolic(s) => f.write_str(s),
            Dim::Unknown => f.write_str("?"),
        }
    }
}

/// JSON form: an integer, a string (symbol) or null (unknown).
impl Serialize for Dim {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Dim::Fixed(v) => s.serialize_i64(*v),
            Dim::Symbolic(p) => s.serialize_str(p),
            Dim::Unknown => s.serialize_none(),
        }
    }
}

/// ONNX `TensorProto.DataType`, by name. Codes we do not know are kept as numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElemType {
    Known(&'static str),
    Undefined,
    Other(i32),
}

/// Index = ONNX enum value; names follow numpy / ONNX Runtime usage.
const ELEM_NAMES: &[&str] = &[
    "undefined",
    "float32",
    "uint8",
    "int8",
    "uint16",
    "int16",
    "int32",
    "int64",
    "string",
    "bool",
    "float16",
    "float64",
    "uint32",
    "uint64",
    "complex64",
    "complex128",
    "bfloat16",
    "float8e4m3fn",
    "float8e4m3fnuz",
    "float8e5m2",
    "float8e5m2fnuz",
    "uint4",
    "int4",
    "float4e2m1",
    "float8e8m0",
    "uint2",
    "int2",
    "float6e2m3",
    "float6e3m2",
];

impl ElemType {
    pub fn from_code(code: i32) -> Self {
        match code {
            0 => ElemType::Undefined,
            c if c > 0 && (c as usize) < ELEM_NAMES.len() => ElemType::Known(ELEM_NAMES[c as usize]),
            c => ElemType::Other(c),
        }
    }

    /// Accepts our names plus the common aliases (`float`, `double`, `half`).
    pub fn from_name(name: &str) -> Option<Self> {
        let canonical = match name {
            "float" => "float32",
            "double" => "float64",
            "half" => "float16",
            other => other,
        };
        ELEM_NAMES.iter().skip(1).find(|n| **n == canonical).map(|n| ElemType::Known(n))
    }

    pub fn all_names() -> impl Iterator<Item = &'static str> {
        ELEM_NAMES.iter().skip(1).copied()
    }
}

impl fmt::Display for ElemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ElemType::Known(n) => f.write_str(n),
            ElemType::Undefined => f.write_str("undefined"),
            ElemType::Other(c) => write!(f, "elem_type({c})"),
        }
    }
}

impl Serialize for ElemType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The declared type of a graph input or output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ValueType {
    /// `shape` is `None` when the exporter declared no shape at all (any rank).
    Tensor {
        elem: ElemType,
        shape: Option<Vec<Dim>>,
    },
    SparseTensor {
        elem: ElemType,
        shape: Option<Vec<Dim>>,
    },
    Sequence(Box<ValueType>),
    Map {
        key: ElemType,
        value: Box<ValueType>,
    },
    Optional(Box<ValueType>),
    Opaque {
        domain: String,
        name: String,
    },
    /// A `TypeProto` with no value set.
    Missing,
}

impl ValueType {
    /// `tensor`, `sequence`, … as used in the JSON `kind` field.
    pub fn kind(&self) -> &'static str {
        match self {
            ValueType::Tensor { .. } => "tensor",
            ValueType::SparseTensor { .. } => "sparse_tensor",
            ValueType::Sequence(_) => "sequence",
            ValueType::Map { .. } => "map",
            ValueType::Optional(_) => "optional",
            ValueType::Opaque { .. } => "opaque",
            ValueType::Missing => "none",
        }
    }

    pub fn tensor_parts(&self) -> Option<(ElemType, Option<&[Dim]>)> {
        match self {
            ValueType::Tensor { elem, shape } => Some((*elem, shape.as_deref())),
            _ => None,
        }
    }

    /// What goes in a table's dtype column: the element type for tensors,
    /// the full type for anything else (`sequence(tensor(float32))`).
    pub fn dtype_label(&self) -> String {
        match self {
            ValueType::Tensor { elem, .. } => elem.to_string(),
            other => other.to_string(),
        }
    }

    pub fn shape_label(&self) -> String {
        match self {
            ValueType::Tensor { shape, .. } | ValueType::SparseTensor { shape, .. } => shape_label(shape.as_deref()),
            _ => String::new(),
        }
    }
}

pub fn shape_label(shape: Option<&[Dim]>) -> String {
    match shape {
        None => "(any rank)".to_string(),
        Some(dims) => {
            let parts: Vec<String> = dims.iter().map(Dim::to_string).collect();
            format!("[{}]", parts.join(", "))
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueType::Tensor { elem, .. } => write!(f, "tensor({elem})"),
            ValueType::SparseTensor { elem, .. } => write!(f, "sparse_tensor({elem})"),
            ValueType::Sequence(inner) => write!(f, "sequence({inner})"),
            ValueType::Map { key, value } => write!(f, "map({key}, {value})"),
            ValueType::Optional(inner) => write!(f, "optional({inner})"),
            ValueType::Opaque { domain, name } => write!(f, "opaque({domain}, {name})"),
            ValueType::Missing => f.write_str("none"),
        }
    }
}

/// A graph input or output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    pub name: String,
    pub ty: ValueType,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Opset {
    /// `""` is the default ONNX domain (`ai.onnx`).
    pub domain: String,
    pub version: i64,
}

/// A tensor whose data lives outside the `.onnx` file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ExternalRef {
    pub tensor: String,
    pub location: String,
    pub offset: Option<u64>,
    pub length: Option<u64>,
}

/// Everything a caller needs to know to feed the graph, without its weights.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    pub ir_version: Option<i64>,
    pub opsets: Vec<Opset>,
    pub producer: String,
    pub producer_version: String,
    pub inputs: Vec<Port>,
    pub outputs: Vec<Port>,
    /// Nodes of the main graph, not counting subgraphs.
    pub node_count: usize,
    /// Nodes across all subgraphs (`If`, `Loop`, `Scan` bodies).
    pub subgraph_node_count: usize,
    pub if_node_count: usize,
    pub initializer_count: usize,
    pub external_data: Vec<ExternalRef>,
    pub file_size: u64,
}

impl Signature {
    pub fn input(&self, name: &str) -> Option<&Port> {
        self.inputs.iter().find(|p| p.name == name)
    }

    pub fn output(&self, name: &str) -> Option<&Port> {
        self.outputs.iter().find(|p| p.name == name)
    }

    /// The default-domain opset, which decides which runtime can load the model.
    pub fn onnx_opset(&self) -> Option<i64> {
        self.opsets.iter().find(|o| o.domain.is_empty() || o.domain == "ai.onnx").map(|o| o.version)
    }
}
