//! Signatures as tables: one model's inputs and outputs (folded per layer
//! family), an export folder's files and sizes, and a diff of two models.

use super::{fit, new_table, plural, StatusFn};
use crate::folder::FolderSummary;
use crate::model::diff::{Change, Diff};
use crate::model::fold::fold;
use crate::model::signature::{shape_label, Signature};
use crate::model::summary::{ModelSummary, PortSummary};
use crate::render::human_size;
use std::fmt::Write;

/// One line on what the model is: IR, opsets, producer, size.
pub fn model_header(sig: &ModelSummary) -> String {
    let path = &sig.file;
    let opsets: Vec<String> = sig
        .opsets
        .iter()
        .map(|o| format!("{}:{}", if o.domain.is_empty() { "ai.onnx" } else { &o.domain }, o.version))
        .collect();
    let producer = format!("{} {}", sig.producer, sig.producer_version).trim().to_string();
    let mut s = format!(
        "{path}\n  IR {} | opsets {} | producer {} | {} | {} nodes",
        sig.ir_version.map(|v| v.to_string()).unwrap_or_else(|| "?".into()),
        if opsets.is_empty() { "none".to_string() } else { opsets.join(", ") },
        if producer.is_empty() { "unknown" } else { &producer },
        human_size(sig.file_size),
        sig.node_count,
    );
    if sig.if_nodes > 0 {
        let _ = write!(s, " ({} If, {} nodes in subgraphs)", sig.if_nodes, sig.subgraph_nodes);
    }
    if !sig.external_data.is_empty() {
        let mut files: Vec<&str> = sig.external_data.iter().map(|e| e.location.as_str()).collect();
        files.dedup();
        let _ = write!(s, "\n  external data: {} in {}", plural(sig.external_data.len(), "tensor"), files.join(", "));
    }
    s
}

/// `#`, name, dtype, shape; per-layer families folded into one row
/// (`past_key_values.{0..5}.decoder.{key,value} ×12`) unless `unfold`.
pub(super) fn ports_table(title: &str, ports: &[PortSummary], unfold: bool, status: Option<StatusFn<'_>>) -> String {
    ports_rows(title, ports, unfold, status, false).unwrap_or_default()
}

/// [`ports_table`] with only the rows whose status is not `ok` (numbered as
/// in the model), or `None` when every row is ok.
pub(super) fn flagged_ports_table(title: &str, ports: &[PortSummary], status: StatusFn<'_>) -> Option<String> {
    ports_rows(title, ports, false, Some(status), true)
}

fn ports_rows(
    title: &str,
    ports: &[PortSummary],
    unfold: bool,
    status: Option<StatusFn<'_>>,
    flagged_only: bool,
) -> Option<String> {
    let mut header = vec!["#", title, "dtype", "shape"];
    if status.is_some() {
        header.push("contract");
    }
    let mut t = new_table(&header);
    // Per-layer dim symbols often embed the tensor's own name; abstract it so
    // such layers still fold, and put the folded label back when rendering.
    let keyed: Vec<(String, (String, String))> = ports
        .iter()
        .map(|p| {
            let shape = if p.is_tensor() { shape_label(p.shape.as_deref()) } else { String::new() };
            (p.name.clone(), (p.dtype.clone(), shape.replace(&p.name, "\u{0}")))
        })
        .collect();
    let groups = if unfold {
        (0..keyed.len()).map(|i| crate::model::fold::Group { label: keyed[i].0.clone(), members: vec![i] }).collect()
    } else {
        fold(&keyed)
    };
    let mut rows = 0;
    for g in groups {
        let first = g.members[0];
        let index = index_label(&g.members);
        let name = if g.members.len() == 1 { g.label.clone() } else { format!("{} ×{}", g.label, g.members.len()) };
        let (dtype, shape) = &keyed[first].1;
        let mut row = vec![index, name, dtype.clone(), shape.replace('\u{0}', &g.label)];
        if let Some(f) = status {
            let names: Vec<&str> = g.members.iter().map(|&i| keyed[i].0.as_str()).collect();
            let st = f(&names);
            if flagged_only && st == "ok" {
                continue;
            }
            row.push(st);
        }
        t.add_row(row);
        rows += 1;
    }
    (!flagged_only || rows > 0).then(|| t.to_string())
}

/// `3`, `3..14` for a contiguous run, `3,4,7,…,24` otherwise.
fn index_label(members: &[usize]) -> String {
    let last = members[members.len() - 1];
    if members.len() == 1 {
        members[0].to_string()
    } else if last - members[0] + 1 == members.len() {
        format!("{}..{last}", members[0])
    } else if members.len() <= 4 {
        members.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
    } else {
        format!("{},{},{},…,{last}", members[0], members[1], members[2])
    }
}

/// `sig`: the header, then inputs and outputs (folded per layer unless `unfold`).
pub fn signature(path: &str, sig: &Signature, unfold: bool) -> String {
    summary(&ModelSummary::of(path, sig, Vec::new()), unfold)
}

/// `sig DIR`: the folder's files and roles, the sizes its config states, then each file.
pub fn folder(f: &FolderSummary, unfold: bool) -> String {
    let mut out = format!("{}: {}", f.path, plural(f.files.len(), "ONNX file"));
    if let Some(t) = &f.model_type {
        let _ = write!(out, ", model_type {t}");
    }
    let mut t = new_table(&["file", "role", "variant", "inputs", "outputs", "size"]);
    for file in &f.files {
        t.add_row(vec![
            file.path.clone(),
            file.role.to_string(),
            file.variant.clone().unwrap_or_default(),
            file.signature.inputs.len().to_string(),
            file.signature.outputs.len().to_string(),
            human_size(file.signature.file_size),
        ]);
    }
    let _ = writeln!(out, "\n{t}");
    if f.sizes.is_empty() {
        out.push_str("no config.json: sizes come from the models themselves\n");
    } else {
        let mut s = new_table(&["size", "value", "from"]);
        for (name, size) in &f.sizes {
            s.add_row(vec![name.clone(), size.value.to_string(), size.source.clone()]);
        }
        let _ = writeln!(out, "{s}");
    }
    for file in &f.files {
        let _ = write!(out, "\n{}", summary(&file.signature, unfold));
        for p in &file.signature.external_data_problems {
            let _ = writeln!(out, "external data: {p}");
        }
    }
    out
}

fn summary(sig: &ModelSummary, unfold: bool) -> String {
    fit(format!(
        "{}\n\n{}\n{}\n{}\n{}\n",
        model_header(sig),
        plural(sig.inputs.len(), "input"),
        ports_table("input", &sig.inputs, unfold, None),
        plural(sig.outputs.len(), "output"),
        ports_table("output", &sig.outputs, unfold, None),
    ))
}

/// `diff`: header fields side by side, then tensors only in A, only in B, or different.
pub fn diff(a_path: &str, b_path: &str, d: &Diff) -> String {
    let mut out = format!("A: {a_path}\nB: {b_path}\n\n");
    let mut h = new_table(&["", "A", "B"]);
    for row in &d.header {
        let mark = if row.a == row.b { "" } else { "  ≠" };
        h.add_row(vec![format!("{}{mark}", row.field), row.a.clone(), row.b.clone()]);
    }
    let _ = writeln!(out, "{h}");
    if d.rows.is_empty() {
        out.push_str("\nsame inputs and outputs (names, dtypes and shapes)\n");
        return out;
    }
    let mut t = new_table(&["", "tensor", "A", "B"]);
    for r in &d.rows {
        let what = match r.change {
            Change::OnlyInA => format!("{} only in A", r.side),
            Change::OnlyInB => format!("{} only in B", r.side),
            Change::Differs => format!("{} differs", r.side),
        };
        let label = if r.names.len() > 1 { format!("{} ×{}", r.label, r.names.len()) } else { r.label.clone() };
        let (a, b) = match r.change {
            Change::OnlyInA => (r.a.clone(), "—".to_string()),
            Change::OnlyInB => ("—".to_string(), r.b.clone()),
            Change::Differs => (r.a.clone(), r.b.clone()),
        };
        t.add_row(vec![what, label, a, b]);
    }
    let count = |c: Change, side: &str| -> usize {
        d.rows.iter().filter(|r| r.change == c && r.side == side).map(|r| r.names.len()).sum()
    };
    let _ = writeln!(out, "\n{t}");
    let _ = writeln!(
        out,
        "inputs: {} only in A, {} only in B, {} differ; outputs: {} only in A, {} only in B, {} differ",
        count(Change::OnlyInA, "input"),
        count(Change::OnlyInB, "input"),
        count(Change::Differs, "input"),
        count(Change::OnlyInA, "output"),
        count(Change::OnlyInB, "output"),
        count(Change::Differs, "output"),
    );
    out
}
