//! A signature as reports show it: plain serde data with the shape of
//! `sig --format json`, shared by check reports and folder listings.

use crate::model::signature::{Dim, ExternalRef, Opset, Port, Signature, ValueType};
use serde::{Deserialize, Serialize};

/// One input or output as reports show it (the shape of `sig --format json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct PortSummary {
    /// Its name.
    pub name: String,
    /// `tensor`, `sequence`, `map`, …
    pub kind: String,
    /// Element type for tensors, the whole type otherwise.
    pub dtype: String,
    /// Dims: an integer (fixed), a string (symbol) or null (unknown); null when no shape is declared.
    pub shape: Option<Vec<Dim>>,
    /// The whole type, e.g. `tensor(float32)`.
    #[serde(rename = "type")]
    pub ty: String,
}

impl PortSummary {
    /// The summary of a port.
    pub fn of(p: &Port) -> Self {
        let shape = match &p.ty {
            ValueType::Tensor { shape, .. } | ValueType::SparseTensor { shape, .. } => shape.clone(),
            _ => None,
        };
        let dtype = match &p.ty {
            ValueType::Tensor { elem, .. } | ValueType::SparseTensor { elem, .. } => elem.to_string(),
            other => other.to_string(),
        };
        PortSummary { name: p.name.clone(), kind: p.ty.kind().to_string(), dtype, shape, ty: p.ty.to_string() }
    }

    /// Whether the port is a (sparse) tensor, whose shape is worth showing.
    pub fn is_tensor(&self) -> bool {
        self.kind == "tensor" || self.kind == "sparse_tensor"
    }
}

/// What a model declares, without its weights.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct ModelSummary {
    /// The file, as given.
    pub file: String,
    /// Its size in bytes.
    pub file_size: u64,
    /// IR version.
    pub ir_version: Option<i64>,
    /// Opsets per domain.
    pub opsets: Vec<Opset>,
    /// `producer_name`.
    pub producer: String,
    /// `producer_version`.
    pub producer_version: String,
    /// Nodes of the main graph.
    pub node_count: usize,
    /// `If` nodes anywhere.
    pub if_nodes: usize,
    /// Nodes inside subgraphs.
    pub subgraph_nodes: usize,
    /// Initializers of the main graph.
    pub initializers: usize,
    /// Tensors stored in external data files.
    pub external_data: Vec<ExternalRef>,
    /// Inputs in order.
    pub inputs: Vec<PortSummary>,
    /// Outputs in order.
    pub outputs: Vec<PortSummary>,
    /// External data that is missing, short or points outside the folder.
    #[serde(default)]
    pub external_data_problems: Vec<String>,
}

impl ModelSummary {
    /// The summary of `sig`, read from `file`.
    pub fn of(file: &str, sig: &Signature, external_data_problems: Vec<String>) -> Self {
        ModelSummary {
            file: file.to_string(),
            file_size: sig.file_size,
            ir_version: sig.ir_version,
            opsets: sig.opsets.clone(),
            producer: sig.producer.clone(),
            producer_version: sig.producer_version.clone(),
            node_count: sig.node_count,
            if_nodes: sig.if_node_count,
            subgraph_nodes: sig.subgraph_node_count,
            initializers: sig.initializer_count,
            external_data: sig.external_data.clone(),
            inputs: sig.inputs.iter().map(PortSummary::of).collect(),
            outputs: sig.outputs.iter().map(PortSummary::of).collect(),
            external_data_problems,
        }
    }
}
