//! `Report` and `Verdict`: the serde types every renderer reads. A report is
//! plain data: the checker fills it, JSON is `serde_json::to_string(&report)`,
//! and the human table, SARIF or JUnit are functions of it.

use crate::contract::Contract;
use crate::finding::{Finding, Severity};
use crate::runtime::RuntimeReport;
use crate::signature::{Dim, ExternalRef, Opset, Port, Signature, ValueType};
use serde::{Deserialize, Serialize};

/// Version of the JSON report's shape; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// The outcome of a check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Verdict {
    /// No finding is an error.
    Pass,
    /// Some finding is an error.
    Fail,
}

impl Verdict {
    /// `Fail` when some finding is an error.
    pub fn of(findings: &[Finding]) -> Verdict {
        if findings.iter().any(|f| f.severity == Severity::Error) {
            Verdict::Fail
        } else {
            Verdict::Pass
        }
    }

    /// `pass` or `fail`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Contract parameters in the contract's order; a JSON object `{name: value}`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Params(pub Vec<(String, i64)>);

impl Serialize for Params {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Params {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Params;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of parameter names to integers")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Params, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, i64>()? {
                    out.push((k, v));
                }
                Ok(Params(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// Which contract a model was checked against.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ContractInfo {
    /// The contract's `name`.
    pub name: String,
    /// Where it was read from.
    pub path: String,
    /// Its parameters after overrides.
    pub params: Params,
}

impl ContractInfo {
    /// The summary of `contract`.
    pub fn of(contract: &Contract) -> Self {
        ContractInfo {
            name: contract.name.clone(),
            path: contract.path.display().to_string(),
            params: Params(contract.params.clone()),
        }
    }
}

/// One input or output as reports show it (the shape of `sig --format json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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

/// Everything one check of one model found: the single source of every output format.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Report {
    /// [`SCHEMA_VERSION`] of this shape.
    pub schema_version: u32,
    /// Pass unless some finding is an error.
    pub verdict: Verdict,
    /// The model file, as given.
    pub model: String,
    /// The contract it was checked against.
    pub contract: Option<ContractInfo>,
    /// Every finding, static ones first.
    pub findings: Vec<Finding>,
    /// The first runtime's run (null when nothing ran).
    pub runtime: Option<RuntimeReport>,
    /// Every runtime's run, in the order given (the first is `runtime`).
    pub runtimes: Vec<RuntimeReport>,
    /// What the model declares.
    pub signature: ModelSummary,
}

impl Report {
    /// A report whose verdict follows from `findings`.
    pub fn new(
        model: &str,
        contract: Option<ContractInfo>,
        signature: ModelSummary,
        findings: Vec<Finding>,
        runtimes: Vec<RuntimeReport>,
    ) -> Self {
        Report {
            schema_version: SCHEMA_VERSION,
            verdict: Verdict::of(&findings),
            model: model.to_string(),
            contract,
            findings,
            runtime: runtimes.first().cloned(),
            runtimes,
            signature,
        }
    }

    /// The errors, in order.
    pub fn errors(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.severity == Severity::Error)
    }
}
