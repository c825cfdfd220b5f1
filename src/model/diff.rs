//! Side-by-side comparison of two signatures: what the field notes needed
//! when a 15-input decoder met a caller built for 28.

use crate::model::fold::fold;
use crate::model::signature::{Port, Signature};

/// How a tensor differs between A and B.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Only A has it.
    OnlyInA,
    /// Only B has it.
    OnlyInB,
    /// Present in both, with another dtype or shape.
    Differs,
}

/// One row of the diff: a tensor (or a folded family) and how it differs.
#[derive(Debug, Clone)]
pub struct DiffRow {
    /// `input` or `output`.
    pub side: &'static str,
    /// How it differs.
    pub change: Change,
    /// Folded name, e.g. `past_key_values.{0..5}.encoder.{key,value}`.
    pub label: String,
    /// Every name behind the label.
    pub names: Vec<String>,
    /// `dtype shape` in A, empty where absent.
    pub a: String,
    /// `dtype shape` in B, empty where absent.
    pub b: String,
    /// A's declaration (of the family's first member), as `sig --format json` shows it.
    pub a_port: Option<crate::model::summary::PortSummary>,
    /// B's declaration, likewise.
    pub b_port: Option<crate::model::summary::PortSummary>,
}

/// Header facts that differ (IR version, opsets, producer, counts).
#[derive(Debug, Clone)]
pub struct HeaderRow {
    /// `ir_version`, `opsets`, …
    pub field: &'static str,
    /// A's value.
    pub a: String,
    /// B's value.
    pub b: String,
}

/// Two signatures compared.
#[derive(Debug, Clone)]
pub struct Diff {
    /// Header facts, equal or not.
    pub header: Vec<HeaderRow>,
    /// Tensors that differ.
    pub rows: Vec<DiffRow>,
}

impl Diff {
    /// No tensor and no header fact differs.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty() && self.header.iter().all(|h| h.a == h.b)
    }
}

fn describe(p: &Port) -> String {
    format!("{} {}", p.ty.dtype_label(), p.ty.shape_label()).trim().to_string()
}

/// Compares two signatures, layer families folded.
pub fn diff(a: &Signature, b: &Signature) -> Diff {
    let opsets = |s: &Signature| {
        let v: Vec<String> = s
            .opsets
            .iter()
            .map(|o| format!("{}:{}", if o.domain.is_empty() { "ai.onnx" } else { &o.domain }, o.version))
            .collect();
        v.join(", ")
    };
    let header = vec![
        HeaderRow { field: "ir_version", a: fmt_opt(a.ir_version), b: fmt_opt(b.ir_version) },
        HeaderRow { field: "opsets", a: opsets(a), b: opsets(b) },
        HeaderRow { field: "producer", a: producer(a), b: producer(b) },
        HeaderRow { field: "inputs", a: a.inputs.len().to_string(), b: b.inputs.len().to_string() },
        HeaderRow { field: "outputs", a: a.outputs.len().to_string(), b: b.outputs.len().to_string() },
    ];
    let mut rows = Vec::new();
    for (side, pa, pb) in [("input", &a.inputs, &b.inputs), ("output", &a.outputs, &b.outputs)] {
        // Keyed by (change, A description, B description) so a family folds
        // only when every member changed the same way.
        let mut keyed: Vec<(String, (u8, String, String))> = Vec::new();
        for p in pa {
            match pb.iter().find(|q| q.name == p.name) {
                None => keyed.push((p.name.clone(), (0, describe(p), String::new()))),
                Some(q) if q.ty != p.ty => keyed.push((p.name.clone(), (2, describe(p), describe(q)))),
                Some(_) => {}
            }
        }
        for q in pb {
            if !pa.iter().any(|p| p.name == q.name) {
                keyed.push((q.name.clone(), (1, String::new(), describe(q))));
            }
        }
        let port = |ports: &[Port], name: &str| {
            ports.iter().find(|p| p.name == name).map(crate::model::summary::PortSummary::of)
        };
        for group in fold(&keyed) {
            let (kind, da, db) = keyed[group.members[0]].1.clone();
            let first = &keyed[group.members[0]].0;
            let (a_port, b_port) = (port(pa, first), port(pb, first));
            rows.push(DiffRow {
                side,
                change: match kind {
                    0 => Change::OnlyInA,
                    1 => Change::OnlyInB,
                    _ => Change::Differs,
                },
                label: group.label,
                names: group.members.iter().map(|&i| keyed[i].0.clone()).collect(),
                a: da,
                b: db,
                a_port,
                b_port,
            });
        }
    }
    Diff { header, rows }
}

fn fmt_opt(v: Option<i64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

fn producer(s: &Signature) -> String {
    format!("{} {}", s.producer, s.producer_version).trim().to_string()
}
