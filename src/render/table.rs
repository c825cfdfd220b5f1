//! Human-readable tables (comfy-table).

use super::human_size;
use crate::engine::runtime_report::{RuntimeReport, StepRow};
use crate::finding::{Finding, Severity};
use crate::folder::FolderSummary;
use crate::model::diff::{Change, Diff};
use crate::model::fold::fold;
use crate::model::signature::{shape_label, Signature};
use crate::model::summary::{ModelSummary, PortSummary};
use crate::report::{FolderReport, Report, Verdict};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, ContentArrangement, Table};
use std::fmt::Write;

/// The contract status of a row, given the tensor names behind it.
type StatusFn<'a> = &'a dyn Fn(&[&str]) -> String;

fn plural(n: usize, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

/// How human output is laid out: the terminal's width (long cells wrap,
/// long lines fold) and whether to color; `None` width means no limit (a pipe).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Style {
    /// Columns available.
    pub width: Option<u16>,
    /// ANSI colors for verdicts.
    pub color: bool,
}

thread_local! {
    static STYLE: std::cell::Cell<Style> = const { std::cell::Cell::new(Style { width: None, color: false }) };
}

/// Sets the layout for the tables rendered on this thread.
pub fn set_style(style: Style) {
    STYLE.with(|s| s.set(style));
}

fn style() -> Style {
    STYLE.with(|s| s.get())
}

fn new_table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(header.iter().map(Cell::new));
    match style().width {
        Some(w) => t.set_content_arrangement(ContentArrangement::Dynamic).set_width(w),
        None => t.set_content_arrangement(ContentArrangement::Disabled),
    };
    if style().color {
        t.enforce_styling();
    } else {
        t.force_no_tty();
    }
    t
}

/// Folds every line wider than the terminal that is not part of a table
/// (tables are sized by comfy-table), indenting the continuation.
fn fit(text: String) -> String {
    let Some(width) = style().width else { return text };
    let width = width as usize;
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let in_table = line.starts_with(['│', '┌', '└', '├', '╞', '┆']);
        if in_table || textwrap::core::display_width(line) <= width {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let opts = textwrap::Options::new(width).subsequent_indent("    ");
        for piece in textwrap::wrap(line, opts) {
            out.push_str(&piece);
            out.push('\n');
        }
    }
    out
}

/// `PASS` / `FAIL`, colored when colors are on.
fn paint(verdict: &str) -> String {
    if !style().color {
        return verdict.to_string();
    }
    let code = if verdict.starts_with("PASS") { "32" } else { "31" };
    format!("\x1b[1;{code}m{verdict}\x1b[0m")
}

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
fn ports_table(title: &str, ports: &[PortSummary], unfold: bool, status: Option<StatusFn<'_>>) -> String {
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
    for g in groups {
        let first = g.members[0];
        let index = index_label(&g.members);
        let name = if g.members.len() == 1 { g.label.clone() } else { format!("{} ×{}", g.label, g.members.len()) };
        let (dtype, shape) = &keyed[first].1;
        let mut row = vec![index, name, dtype.clone(), shape.replace('\u{0}', &g.label)];
        if let Some(f) = status {
            let names: Vec<&str> = g.members.iter().map(|&i| keyed[i].0.as_str()).collect();
            row.push(f(&names));
        }
        t.add_row(row);
    }
    t.to_string()
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

/// The signature with a per-row contract status, then the findings, then the verdict.
pub fn check(report: &Report) -> String {
    let (sig, findings, runtimes) = (&report.signature, &report.findings[..], &report.runtimes[..]);
    let mut out = model_header(sig);
    if let Some(contract) = &report.contract {
        let params: Vec<String> = contract.params.0.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(
            out,
            "\ncontract {} ({}){}",
            contract.path,
            contract.name,
            if params.is_empty() { String::new() } else { format!(": {}", params.join(" ")) }
        );
    }
    let status = |names: &[&str]| -> String {
        let mut codes: Vec<&str> = findings
            .iter()
            .filter(|f| f.severity > Severity::Info)
            .filter(|f| names.iter().any(|n| f.tensor.as_deref() == Some(n) || f.names.iter().any(|m| m == n)))
            .map(|f| f.code.as_str())
            .collect();
        codes.dedup();
        if codes.is_empty() {
            "ok".into()
        } else {
            codes.join(", ")
        }
    };
    let _ = writeln!(out, "\n{}", verdict_line(findings));
    out.push_str(&findings_table(findings));
    let _ = write!(
        out,
        "\n{}\n{}\n{}\n{}\n",
        plural(sig.inputs.len(), "input"),
        ports_table("input", &sig.inputs, false, Some(&status)),
        plural(sig.outputs.len(), "output"),
        ports_table("output", &sig.outputs, false, Some(&status)),
    );
    for r in runtimes {
        out.push_str(&runtime_section(r));
    }
    if runtimes.len() > 1 {
        let mut t = new_table(&["ONNX Runtime", "library", "steps ok", "result"]);
        for r in runtimes {
            let version = r.ort_version.clone().unwrap_or_else(|| "?".into());
            let errors: Vec<&str> = findings
                .iter()
                .filter(|f| f.severity == Severity::Error && f.runtime.as_deref() == r.ort_version.as_deref())
                .map(|f| f.code.as_str())
                .collect();
            let ok = r.steps.iter().filter(|s| s.ok).count();
            t.add_row(vec![
                version,
                r.ort_path.clone(),
                format!("{ok}/{}", r.steps.len()),
                if errors.is_empty() { "pass".into() } else { format!("FAIL ({})", errors.join(", ")) },
            ]);
        }
        let _ = writeln!(out, "\nper runtime:\n{t}");
    }
    let _ = writeln!(out, "\n{}", verdict_line(findings));
    fit(out)
}

fn shape_str(s: &Option<Vec<i64>>) -> String {
    match s {
        Some(v) => format!("{v:?}"),
        None => "?".into(),
    }
}

/// Steps run, then (on failure) the shape trace and the failing node's inputs.
pub fn runtime_section(r: &RuntimeReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nruntime: ONNX Runtime {} ({}: {}){}",
        r.ort_version.as_deref().unwrap_or("?"),
        r.ort_source,
        r.ort_path,
        r.session_seconds.map(|s| format!(", session created in {s:.2} s")).unwrap_or_default()
    );
    if let Some((_, _, how)) = r.cache_pairs.first() {
        let same = r.cache_pairs.iter().all(|(_, _, h)| h == how);
        let _ = writeln!(
            out,
            "cache: {} past/present pairs, matched by {}",
            r.cache_pairs.len(),
            if same { how.as_str() } else { "several rules (see JSON)" }
        );
    }
    if let Some(rule) = &r.parity_rule {
        let _ = writeln!(out, "parity tolerance {}: {}", rule.describe(), rule.reason);
    }
    if !r.batch.is_empty() {
        let worst = |row: usize| r.batch.iter().filter(|b| b.0 == row).map(|b| b.2).fold(0.0, f64::max);
        let steps = r.batch.iter().map(|b| b.1).max().unwrap_or(0) + 1;
        let _ = writeln!(
            out,
            "batch of 2, row 1 padded (prompt on the left, or source), against each row alone, {steps} steps: max |Δ| row 0 {:.2e}, row 1 {:.2e}",
            worst(0),
            worst(1)
        );
    }
    if let Some(w) = &r.window {
        let _ = writeln!(
            out,
            "sliding window {} ({}): on a past of {}, a cache change outside it moves the logits by {:.2e}, inside it by {:.2e}",
            w.size, w.source, w.past_len, w.outside, w.inside
        );
    }
    if let Some(l) = &r.levels {
        let worst = l.steps.iter().fold((0.0, 0.0), |w: (f64, f64), s| (w.0.max(s.1), w.1.max(s.2)));
        let _ = writeln!(
            out,
            "graph optimizations {} vs {}, {} steps: logits max |Δ| {:.2e} (relative {:.2e})",
            l.rerun_at,
            l.ran_at,
            l.steps.len(),
            worst.0,
            worst.1
        );
    }
    if r.steps.is_empty() {
        return out;
    }
    let mut t = new_table(&[
        "step-0 past",
        "step",
        "result",
        "ms",
        "parity max |Δ|",
        "rel.",
        "greedy",
        "logits",
        "self-attn present",
        "cross-attn present",
    ]);
    for row in &r.steps {
        let out_shape = |pred: &dyn Fn(&str) -> bool| {
            row.outputs.iter().find(|o| pred(&o.name)).map(|o| shape_str(&o.shape)).unwrap_or_default()
        };
        let result = if row.ok {
            "ok".to_string()
        } else if row.error.is_some() {
            "FAILED".to_string()
        } else if row.seconds.is_none() {
            "crashed".to_string()
        } else {
            "checks failed".to_string()
        };
        t.add_row(vec![
            row.step0_past_len.to_string(),
            row.step.to_string(),
            result,
            row.seconds.map(|s| format!("{:.1}", s * 1000.0)).unwrap_or_default(),
            row.parity_max_abs_diff.map(|p| format!("{p:.2e}")).unwrap_or_default(),
            row.parity_rel_diff.map(|p| format!("{p:.1e}")).unwrap_or_default(),
            row.greedy_agrees.map(|g| if g { "same" } else { "DIFFERS" }.to_string()).unwrap_or_default(),
            out_shape(&|n| n == "logits"),
            out_shape(&|n| n.starts_with("present") && !n.contains(".encoder.")),
            out_shape(&|n| n.starts_with("present") && n.contains(".encoder.")),
        ]);
    }
    let _ = writeln!(out, "{t}");
    let failing = r.steps.iter().find(|row| !row.ok);
    if let Some(fail) = failing {
        // The shape trace: every feed's shape per step of the failing run.
        let rows: Vec<&StepRow> =
            r.steps.iter().filter(|x| x.step0_past_len == fail.step0_past_len && x.step <= fail.step).collect();
        let mut header = vec!["feed".to_string()];
        header.extend(rows.iter().map(|x| format!("step {}", x.step)));
        let header_refs: Vec<&str> = header.iter().map(String::as_str).collect();
        let mut trace = new_table(&header_refs);
        let names: Vec<(String, Vec<String>)> = fail
            .feeds
            .iter()
            .map(|f| {
                let cells = rows
                    .iter()
                    .map(|x| {
                        x.feeds
                            .iter()
                            .find(|g| g.name == f.name)
                            .map(|g| format!("{} {}", g.dtype, shape_str(&g.shape)))
                            .unwrap_or("—".into())
                    })
                    .collect();
                (f.name.clone(), cells)
            })
            .collect();
        for g in fold(&names) {
            let label =
                if g.members.len() > 1 { format!("{} ×{}", g.label, g.members.len()) } else { g.label.clone() };
            let mut row = vec![label];
            row.extend(names[g.members[0]].1.iter().cloned());
            trace.add_row(row);
        }
        let _ = writeln!(
            out,
            "shape trace (step-0 past length {}, up to the failing step {}):\n{trace}",
            fail.step0_past_len, fail.step
        );
        if let Some(node) = &fail.failed_node {
            let _ = writeln!(out, "failing node: {} ({})", node.path, node.op_type);
            if !node.inputs.is_empty() {
                let mut n = new_table(&["node input", "dtype", "shape at the failing step"]);
                for i in &node.inputs {
                    n.add_row(vec![i.name.clone(), i.dtype.to_string(), shape_str(&i.shape)]);
                }
                let _ = writeln!(out, "{n}");
            }
            if let Some(e) = &node.trace_error {
                let _ = writeln!(out, "(input shapes not traced: {e})");
            }
        }
    }
    out
}

/// `verdict: FAIL (3 errors, 2 warnings): expected 28 inputs, found 15: 13 missing`
#[allow(missing_docs)]
pub fn verdict_line(findings: &[Finding]) -> String {
    let errors = findings.iter().filter(|f| f.severity == Severity::Error).count();
    let warnings = findings.iter().filter(|f| f.severity == Severity::Warning).count();
    let mut s = format!(
        "verdict: {} ({} error{}, {} warning{})",
        paint(&Verdict::of(findings).as_str().to_uppercase()),
        errors,
        if errors == 1 { "" } else { "s" },
        warnings,
        if warnings == 1 { "" } else { "s" },
    );
    if let Some(first) = findings.iter().find(|f| f.severity == Severity::Error) {
        s.push_str(": ");
        s.push_str(&first.message);
    }
    s
}

/// Severity, code, message (with node and cause), contract line.
pub fn findings_table(findings: &[Finding]) -> String {
    if findings.is_empty() {
        return String::new();
    }
    let mut t = new_table(&["severity", "code", "finding", "contract line"]);
    for f in findings {
        let mut text = f.message.clone();
        if let Some(node) = &f.node {
            text.push_str(&format!("\nnode: {node}"));
        }
        if let Some(cause) = &f.cause {
            text.push_str(&format!("\ncause: {cause}"));
        }
        t.add_row(vec![
            f.severity.to_string(),
            f.code.as_str().to_string(),
            text,
            f.contract_line.map(|l| l.to_string()).unwrap_or_default(),
        ]);
    }
    format!("{t}\n")
}

/// `check DIR`: the folder's verdict and one line per file first, then the
/// sizes and where they came from, then each file's report.
pub fn folder_check(r: &FolderReport) -> String {
    let failing = r.files.iter().filter(|f| f.report.verdict == Verdict::Fail).count();
    let headline = format!(
        "{}: {} ({} of {} failing; model_type {}, contract {})",
        r.path,
        paint(&r.verdict.as_str().to_uppercase()),
        plural(failing, "file"),
        r.files.len(),
        r.model_type.as_deref().unwrap_or("unknown"),
        r.family_contract,
    );
    let mut out = format!("{headline}\n");
    let mut t = new_table(&["verdict", "file", "role", "first error, or how it was driven"]);
    for f in &r.files {
        let first = f.report.errors().next().map(|e| format!("{}: {}", e.code, e.message));
        let verdict = f.report.verdict.as_str().to_uppercase();
        let color = if f.report.verdict == Verdict::Pass { comfy_table::Color::Green } else { comfy_table::Color::Red };
        t.add_row(vec![
            Cell::new(verdict).fg(color),
            Cell::new(&f.path),
            Cell::new(f.role),
            Cell::new(first.unwrap_or_else(|| f.driven_as.clone())),
        ]);
    }
    let _ = writeln!(out, "{t}");
    if !r.findings.is_empty() {
        let _ = writeln!(out, "across files:\n{}", findings_table(&r.findings));
    }
    let variants: Vec<_> =
        r.files.iter().filter_map(|f| f.report.runtime.as_ref()?.variant.as_ref().map(|v| (f, v))).collect();
    if !variants.is_empty() {
        let mut t = new_table(&["variant", "against", "max |Δ|", "max rel.", "top-1 agrees", "verdict"]);
        for (f, (reference, positions)) in variants {
            let abs = positions.iter().map(|p| p.1).fold(0.0, f64::max);
            let rel = positions.iter().map(|p| p.2).fold(0.0, f64::max);
            let agree = positions.iter().filter(|p| p.3).count();
            let bad = f.report.findings.iter().any(|x| x.code == crate::finding::Code::VariantDivergence);
            t.add_row(vec![
                f.path.clone(),
                reference.clone(),
                format!("{abs:.2e}"),
                format!("{rel:.3}"),
                format!("{agree}/{}", positions.len()),
                if bad { "DIVERGES".into() } else { "ok".to_string() },
            ]);
        }
        let _ = writeln!(out, "variants against fp32 (teacher-forced, same tokens):\n{t}");
    }
    let mut s = new_table(&["size", "value", "from"]);
    for (name, size) in &r.sizes {
        s.add_row(vec![name.clone(), size.value.to_string(), size.source.clone()]);
    }
    let _ = writeln!(out, "sizes:\n{s}");
    for f in &r.files {
        let _ = writeln!(
            out,
            "\n━━ {} ({}{}) — {}",
            f.path,
            f.role,
            f.variant.as_ref().map(|v| format!(", {v}")).unwrap_or_default(),
            f.driven_as
        );
        out.push_str(&check(&f.report));
    }
    let _ = writeln!(out, "\n{headline}");
    fit(out)
}

/// `specs`: every built-in contract, the model types that choose it, its defaults.
pub fn builtin_specs(list: &[crate::contract::builtin::Listed]) -> String {
    let mut t = new_table(&["contract", "chosen for model_type", "params (defaults)"]);
    for l in list {
        let params: Vec<String> = l.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let types = if l.model_types.is_empty() { "(by signature)".to_string() } else { l.model_types.join(", ") };
        t.add_row(vec![l.name.to_string(), types, params.join(" ")]);
    }
    format!("{t}\n`onnx-contract specs NAME` prints one; `check --contract NAME` uses one.\n")
}

/// `protocol`: per decoder form, the files, the feeds of step 0 and of every
/// later step with their shapes at steps 0–2, and the rules. At most 100
/// columns when the terminal says nothing (it is read, and pasted).
pub fn protocol(p: &crate::protocol::Protocol) -> String {
    let outer = style();
    set_style(Style { width: Some(outer.width.unwrap_or(100)), ..outer });
    let mut out = format!("{}: how to call it", p.path);
    if let Some(t) = &p.model_type {
        let _ = write!(out, " (model_type {t})");
    }
    out.push('\n');
    let mut files = new_table(&["file", "role"]);
    for (f, r) in &p.files {
        files.add_row(vec![f.clone(), r.clone()]);
    }
    let _ = writeln!(out, "{files}");
    if p.loops.is_empty() {
        out.push_str("no decoder with a KV cache to drive here\n");
    }
    for l in &p.loops {
        let _ = writeln!(out, "\n━━ {} ━━", l.form);
        let mut order = Vec::new();
        if let Some(e) = &l.encoder {
            order.push(format!("{e} once on the source"));
        }
        if l.step0_file == l.later_file {
            order.push(format!("{} at every step", l.later_file));
        } else {
            order.push(format!("{} at step 0", l.step0_file));
            order.push(format!("{} at every later step", l.later_file));
        }
        let _ = writeln!(out, "run: {}", order.join(", then "));
        if let Some(s) = l.decoder_start {
            let _ = write!(out, "decoder start token {s}");
            if let Some(e) = l.eos {
                let _ = write!(out, ", stop at {e}");
            }
            out.push('\n');
        } else if let Some(e) = l.eos {
            let _ = writeln!(out, "stop at token {e}");
        }
        if !l.encoder_feeds.is_empty() {
            let mut t = new_table(&["encoder input", "dtype", "shape", "value"]);
            for r in &l.encoder_feeds {
                t.add_row(vec![r.name.clone(), r.dtype.clone(), r.shape.clone(), r.source.clone()]);
            }
            let _ = writeln!(out, "{t}");
        }
        for s in &l.steps {
            let _ = writeln!(out, "{} — {}:", s.step, s.file);
            let mut t = new_table(&["input", "dtype", "shape", "value"]);
            for r in &s.feeds {
                t.add_row(vec![r.name.clone(), r.dtype.clone(), r.shape.clone(), r.source.clone()]);
            }
            let _ = writeln!(out, "{t}");
        }
        let mut t = new_table(&["input", "step 0", "step 1", "step 2"]);
        let mut seen = Vec::new();
        for s in &l.steps {
            for (name, at) in &s.examples {
                match seen.iter().position(|(n, _): &(String, Vec<String>)| n == name) {
                    Some(i) => {
                        for (k, v) in at.iter().enumerate() {
                            if v != "—" {
                                seen[i].1[k] = v.clone();
                            }
                        }
                    }
                    None => seen.push((name.clone(), at.clone())),
                }
            }
        }
        for (name, at) in seen {
            let mut row = vec![name];
            row.extend(at);
            t.add_row(row);
        }
        let _ = writeln!(out, "shapes at batch 1:\n{t}");
        let _ = writeln!(out, "rules:");
        for r in &l.rules {
            let _ = writeln!(out, "- {r}");
        }
    }
    let text = fit(out);
    set_style(outer);
    text
}

/// `replay`: the caller's first departures, the reproduction, the model's own
/// check with the correct protocol, and who is at fault.
pub fn replay(r: &crate::caller::replay::ReplayReport) -> String {
    let mut out = format!("{} against {} ({} calls)\n", r.trace, r.model, r.calls);
    if r.findings.is_empty() {
        out.push_str("every call follows the protocol\n");
    } else {
        let mut t = new_table(&["call", "code", "finding"]);
        for f in &r.findings {
            t.add_row(vec![
                f.call.map(|c| c.to_string()).unwrap_or_default(),
                f.code.as_str().to_string(),
                f.message.clone(),
            ]);
        }
        let _ = writeln!(out, "{t}");
    }
    if let Some(rep) = &r.reproduction {
        match &rep.failed {
            Some((call, error, node)) => {
                let _ = writeln!(out, "re-running the caller's calls on {}: call {call} fails: {error}", rep.model);
                if let Some(n) = node {
                    let _ = writeln!(out, "  node: {n}");
                }
            }
            None => {
                let _ = writeln!(
                    out,
                    "re-running the caller's calls on {}: calls {:?} run without an error",
                    rep.model, rep.calls
                );
            }
        }
    }
    if let Some(c) = &r.model_check {
        let steps = c.runtime.as_ref().map_or(0, |rt| rt.steps.iter().filter(|s| s.ok).count());
        let _ = writeln!(
            out,
            "the correct protocol on {}: {} ({steps} steps ok)",
            c.model,
            paint(&c.verdict.as_str().to_uppercase())
        );
    }
    if let Some(cost) = &r.cost {
        let _ = writeln!(
            out,
            "cost of not using the cache, measured on this model: {} steps take {:.1} ms with the cache, {:.1} ms re-feeding the prefix ({:.1}x){}",
            cost.steps,
            cost.cached_ms,
            cost.uncached_ms,
            cost.uncached_ms / cost.cached_ms.max(1e-9),
            cost.trace_ms.map(|t| format!("; the trace's decoder calls took {t:.1} ms")).unwrap_or_default()
        );
    }
    let _ = writeln!(out, "\nverdict: {}", r.summary);
    fit(out)
}
