//! `Report` and `Verdict`: the serde types every renderer reads. A report is
//! plain data: the checker fills it, JSON is `serde_json::to_string(&report)`,
//! and the human table, SARIF or JUnit are functions of it.

use crate::contract::Contract;
use crate::engine::RuntimeReport;
use crate::finding::{Finding, Severity};
use crate::folder::config::Size;
use crate::folder::roles::Role;
use crate::model::summary::ModelSummary;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of the JSON report's shape; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// The outcome of a check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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

/// Everything one check of one model found: the single source of every output format.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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

/// One file of a folder check: its role, how it was driven, and its report.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct FileReport {
    /// Relative to the folder (`onnx/decoder_model_merged.onnx`).
    pub path: String,
    /// Its role, from its signature.
    pub role: Role,
    /// Its numeric variant suffix (`fp16`, `quantized`, …), if any.
    pub variant: Option<String>,
    /// How it was exercised: `merged decoder, encoder states from encoder_model.onnx`,
    /// `split pair: decoder_model.onnx at step 0`, `static only: …`.
    pub driven_as: String,
    /// The file's own report (verdict, findings, runtime, signature).
    #[serde(flatten)]
    pub report: Report,
    /// The folder encoder whose run brought ONNX Runtime down while
    /// producing this decoder's states, and that finding: the encoder's crash.
    #[serde(skip)]
    #[cfg_attr(feature = "schema", schemars(skip))]
    pub(crate) encoder_crash: Option<(String, Finding)>,
}

/// Everything a check of an export folder found.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct FolderReport {
    /// [`SCHEMA_VERSION`] of this shape.
    pub schema_version: u32,
    /// Fail when a file fails or the files disagree.
    pub verdict: Verdict,
    /// The folder, as given.
    pub path: String,
    /// `model_type` from config.json.
    pub model_type: Option<String>,
    /// The family contract the files were judged against (adapted per role).
    pub family_contract: String,
    /// The consumers the folder was checked for (told from its layout, or
    /// `--consumer`), whose loading rules gave some of `findings`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consumers: Vec<crate::consumer::Target>,
    /// Every size used, with where it came from (config.json key or the model).
    pub sizes: BTreeMap<String, Size>,
    /// Findings about the folder as a whole (files that disagree).
    pub findings: Vec<Finding>,
    /// Every ONNX file, sorted by path.
    pub files: Vec<FileReport>,
    /// `--remedy`: each change tried on a copy of the folder and re-checked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remedies: Vec<crate::finding::Remedy>,
    /// `--fix-out DIR`: the repaired folder written there, and its own check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixed: Option<Fixed>,
}

/// The repaired folder `--fix-out` wrote, checked as it is.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Fixed {
    /// Where it was written.
    pub dir: String,
    /// Its check's verdict.
    pub verdict: Verdict,
    /// Its files that still fail.
    pub failing: Vec<String>,
    /// Whether it was written: only a repaired copy whose check passes is.
    #[serde(default = "written_default")]
    pub written: bool,
}

fn written_default() -> bool {
    true
}

impl FolderReport {
    /// A folder report whose verdict follows from its findings and files.
    pub fn new(
        path: &str,
        model_type: Option<String>,
        family_contract: &str,
        sizes: BTreeMap<String, Size>,
        findings: Vec<Finding>,
        files: Vec<FileReport>,
    ) -> Self {
        let fail = Verdict::of(&findings) == Verdict::Fail || files.iter().any(|f| f.report.verdict == Verdict::Fail);
        FolderReport {
            schema_version: SCHEMA_VERSION,
            verdict: if fail { Verdict::Fail } else { Verdict::Pass },
            path: path.to_string(),
            model_type,
            family_contract: family_contract.to_string(),
            consumers: Vec::new(),
            sizes,
            findings,
            files,
            remedies: Vec::new(),
            fixed: None,
        }
    }

    /// Every error, the folder's and every file's.
    pub fn errors(&self) -> impl Iterator<Item = &Finding> {
        self.findings
            .iter()
            .chain(self.files.iter().flat_map(|f| &f.report.findings))
            .filter(|f| f.severity == Severity::Error)
    }
}

/// What a run measured, in a few words: steps, parity, batch, chunk.
pub fn measured(r: &RuntimeReport) -> Option<String> {
    let ok = r.steps.iter().filter(|s| s.ok).count();
    if r.steps.is_empty() {
        return None;
    }
    let parity = r
        .steps
        .iter()
        .filter_map(|s| s.parity_max_abs_diff)
        .fold(None, |m: Option<f64>, p| Some(m.map_or(p, |m| m.max(p))));
    // max |Δ| in two significant figures: what a row has room for.
    let e = |x: f64| if x == 0.0 { "0".to_string() } else { format!("{x:.1e}") };
    let mut parts = vec![match (ok == r.steps.len(), ok) {
        (true, 1) => "1 step".to_string(),
        (true, _) => format!("{ok} steps"),
        (false, _) => format!("{ok}/{} steps", r.steps.len()),
    }];
    if let Some((reference, positions)) = &r.variant {
        let abs = positions.iter().map(|p| p.1).fold(0.0, f64::max);
        let agree = positions.iter().filter(|p| p.3).count();
        parts.push(format!("vs {reference} {}, top-1 {agree}/{}", e(abs), positions.len()));
    }
    if let Some(p) = parity {
        parts.push(format!("parity {}", e(p)));
    }
    if !r.batch.is_empty() {
        parts.push(format!("batch {}", e(r.batch.iter().map(|b| b.2).fold(0.0, f64::max))));
    }
    if !r.chunk.is_empty() {
        parts.push(format!("chunk {}", e(r.chunk.iter().map(|c| c.1).fold(0.0, f64::max))));
    }
    Some(parts.join(", "))
}
