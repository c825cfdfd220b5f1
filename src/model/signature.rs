//! Our own model of a graph's signature, independent of the protobuf types.

use serde::{Deserialize, Serialize};
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

impl<'de> Deserialize<'de> for Dim {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(i64),
            Text(String),
        }
        Ok(match Option::<Raw>::deserialize(d)? {
            Some(Raw::Int(v)) => Dim::Fixed(v),
            Some(Raw::Text(s)) => Dim::Symbolic(s),
            None => Dim::Unknown,
        })
    }
}

/// ONNX `TensorProto.DataType`, by name. Codes we do not know are kept as numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElemType {
    /// A type ONNX defines, by our name (`float32`, `int64`, `bool`, …).
    Known(&'static str),
    /// Code 0: the exporter did not say.
    Undefined,
    /// A code newer than this tool.
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
    /// `float32`.
    pub const F32: ElemType = ElemType::Known("float32");
    /// `float16`.
    pub const F16: ElemType = ElemType::Known("float16");
    /// `bfloat16`.
    pub const BF16: ElemType = ElemType::Known("bfloat16");
    /// `float64`.
    pub const F64: ElemType = ElemType::Known("float64");
    /// `int64`.
    pub const I64: ElemType = ElemType::Known("int64");
    /// `int32`.
    pub const I32: ElemType = ElemType::Known("int32");
    /// `bool`.
    pub const BOOL: ElemType = ElemType::Known("bool");

    /// The type for an ONNX `TensorProto.DataType` code.
    pub fn from_code(code: i32) -> Self {
        match code {
            0 => ElemType::Undefined,
            c if c > 0 && (c as usize) < ELEM_NAMES.len() => ElemType::Known(ELEM_NAMES[c as usize]),
            c => ElemType::Other(c),
        }
    }

    /// The ONNX `TensorProto.DataType` code (0 when undefined).
    pub fn code(&self) -> i32 {
        match self {
            ElemType::Undefined => 0,
            ElemType::Known(n) => ELEM_NAMES.iter().position(|e| e == n).map_or(0, |i| i as i32),
            ElemType::Other(c) => *c,
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

    /// Every name `from_name` accepts (aliases aside).
    pub fn all_names() -> impl Iterator<Item = &'static str> {
        ELEM_NAMES.iter().skip(1).copied()
    }

    /// float16, bfloat16, float32, float64.
    pub fn is_float(self) -> bool {
        matches!(self, ElemType::Known("float16" | "bfloat16" | "float32" | "float64"))
    }

    /// Parses what `Display` writes (`float32`, `undefined`, `elem_type(99)`).
    pub fn parse(text: &str) -> Option<Self> {
        if text == "undefined" {
            return Some(ElemType::Undefined);
        }
        if let Some(code) = text.strip_prefix("elem_type(").and_then(|t| t.strip_suffix(')')) {
            return code.parse().ok().map(ElemType::from_code);
        }
        ElemType::from_name(text)
    }
}

impl<'de> Deserialize<'de> for ElemType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        ElemType::parse(&text).ok_or_else(|| serde::de::Error::custom(format!("unknown element type `{text}`")))
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
    #[allow(missing_docs)]
    Tensor { elem: ElemType, shape: Option<Vec<Dim>> },
    /// A sparse tensor.
    #[allow(missing_docs)]
    SparseTensor { elem: ElemType, shape: Option<Vec<Dim>> },
    /// `sequence(T)`.
    Sequence(Box<ValueType>),
    /// `map(K, V)`.
    Map {
        /// Key element type.
        key: ElemType,
        /// Value type.
        value: Box<ValueType>,
    },
    /// `optional(T)`.
    Optional(Box<ValueType>),
    /// An opaque type named by domain and name.
    Opaque {
        /// Its domain.
        domain: String,
        /// Its name.
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

    /// Element type and shape, for tensors only.
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

    /// `[batch_size, 8, past, 4]`, or `(any rank)`; empty for non-tensors.
    pub fn shape_label(&self) -> String {
        match self {
            ValueType::Tensor { shape, .. } | ValueType::SparseTensor { shape, .. } => shape_label(shape.as_deref()),
            _ => String::new(),
        }
    }
}

/// `[batch_size, 8, past, 4]`, or `(any rank)` when no shape is declared.
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
    /// The input or output name.
    pub name: String,
    /// Its declared type.
    pub ty: ValueType,
}

/// One opset import.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Opset {
    /// `""` is the default ONNX domain (`ai.onnx`).
    pub domain: String,
    /// The opset version imported.
    pub version: i64,
}

/// A tensor whose data lives outside the `.onnx` file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ExternalRef {
    /// The initializer's name.
    pub tensor: String,
    /// The data file, relative to the model's folder.
    pub location: String,
    /// Byte offset in the data file.
    pub offset: Option<u64>,
    /// Byte length in the data file.
    pub length: Option<u64>,
}

/// Everything a caller needs to know to feed the graph, without its weights.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    /// The model's IR version.
    pub ir_version: Option<i64>,
    /// Opsets imported, per domain.
    pub opsets: Vec<Opset>,
    /// `producer_name` (e.g. `pytorch`).
    pub producer: String,
    /// `producer_version`.
    pub producer_version: String,
    /// Graph inputs that are not initializers, in order.
    pub inputs: Vec<Port>,
    /// Graph outputs, in order.
    pub outputs: Vec<Port>,
    /// Nodes of the main graph, not counting subgraphs.
    pub node_count: usize,
    /// Nodes across all subgraphs (`If`, `Loop`, `Scan` bodies).
    pub subgraph_node_count: usize,
    /// `If` nodes anywhere in the model.
    pub if_node_count: usize,
    /// Every operator used, in the main graph and in subgraphs.
    pub op_types: std::collections::BTreeSet<String>,
    /// `local_window_size` of every GroupQueryAttention node, in graph order
    /// (-1, its default, when absent: the whole past is attended).
    pub attention_windows: Vec<i64>,
    /// Elements of the main graph's initializers per element type
    /// (`float16` → 1.2e6): what precision the weights are stored in.
    pub weight_elements: std::collections::BTreeMap<String, u64>,
    /// Initializers of the main graph.
    pub initializer_count: usize,
    /// Tensors stored in external data files.
    pub external_data: Vec<ExternalRef>,
    /// Size of the `.onnx` file in bytes.
    pub file_size: u64,
    /// For every graph input, the operators that read it within a few hops
    /// of the main graph (and directly inside subgraphs): what an input is
    /// used for, when its name does not say (`cache_position` reaching a
    /// ScatterND that writes the past).
    pub input_reach: std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
    /// For every graph input, the operators that read it directly (main
    /// graph and subgraphs): none means the input reaches no node; only
    /// `Shape`/`Size` means its values are never read.
    pub input_readers: std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
    /// Every main-graph `If` whose condition is a graph input: the graph
    /// inputs each branch reads (a merged decoder's cache branch reads the pasts).
    pub if_branches: Vec<IfBranches>,
    /// For each graph input that indexes an embedding table: the table's
    /// initializer and its rows (the token ids it can take).
    pub token_rows: std::collections::BTreeMap<String, (String, i64)>,
    /// Rows of the precomputed rotary tables (`cos_cache` read by
    /// GroupQueryAttention or RotaryEmbedding), the fewest over the graph's
    /// attention nodes, with the table's name: the longest sequence the
    /// graph can rotate.
    pub rotary_rows: Option<(String, i64)>,
}

/// What the two branches of an `If` on a graph input read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IfBranches {
    /// The graph input the condition is.
    pub cond: String,
    /// Graph inputs the branch taken when it is true reads.
    pub then_reads: std::collections::BTreeSet<String>,
    /// Graph inputs the branch taken when it is false reads.
    pub else_reads: std::collections::BTreeSet<String>,
}

impl Signature {
    /// The input named `name`.
    pub fn input(&self, name: &str) -> Option<&Port> {
        self.inputs.iter().find(|p| p.name == name)
    }

    /// Why the values fed as `name` cannot affect any output, when they
    /// cannot: it reaches no node, or only its shape is read.
    pub fn unread(&self, name: &str) -> Option<&'static str> {
        let readers = self.input_readers.get(name)?;
        if readers.is_empty() {
            Some("reaches no node of the graph")
        } else if readers.iter().all(|op| op == "Shape" || op == "Size") {
            Some("is read only for its shape: its values reach no node")
        } else {
            None
        }
    }

    /// The output named `name`.
    pub fn output(&self, name: &str) -> Option<&Port> {
        self.outputs.iter().find(|p| p.name == name)
    }

    /// The default-domain opset, which decides which runtime can load the model.
    pub fn onnx_opset(&self) -> Option<i64> {
        self.opsets.iter().find(|o| o.domain.is_empty() || o.domain == "ai.onnx").map(|o| o.version)
    }
}
