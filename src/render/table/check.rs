//! A check report as text: one file's verdict, findings and signature
//! against the contract, and a folder's file table, variants and sizes.

use super::runtime::runtime_section;
use super::signature::model_header;
use super::signature::ports_table;
use super::{fit, new_table, paint, plural};
use crate::checker::report::{FileReport, FolderReport, Report, Verdict};
use crate::finding::{Finding, Severity};
use comfy_table::Cell;
use std::fmt::Write;

/// `contract PATH (NAME): k=v …`, when the report was judged against one.
pub(super) fn contract_line(report: &Report) -> Option<String> {
    let contract = report.contract.as_ref()?;
    let params: Vec<String> = contract.params.0.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let params = if params.is_empty() { String::new() } else { format!(": {}", params.join(" ")) };
    Some(format!("contract {} ({}){params}", contract.path, contract.name))
}

/// The signature with a per-row contract status, then the findings, then the verdict.
pub fn check(report: &Report) -> String {
    let (sig, findings, runtimes) = (&report.signature, &report.findings[..], &report.runtimes[..]);
    let mut out = model_header(sig);
    if let Some(line) = contract_line(report) {
        let _ = writeln!(out, "\n{line}");
    }
    let status = |names: &[&str]| port_status(findings, names);
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

/// A signature row's contract status: the codes of the findings naming its tensors, or `ok`.
pub(super) fn port_status(findings: &[Finding], names: &[&str]) -> String {
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

/// `models/x: FAIL (1 file of 3 failing; model_type marian, contract marian-decoder-merged)`,
/// then the consumers whose loading rules were checked.
pub(super) fn folder_headline(r: &FolderReport, failing: usize) -> String {
    let mut out = format!(
        "{}: {} ({} of {} failing; model_type {}, contract {})",
        r.path,
        paint(&r.verdict.as_str().to_uppercase()),
        plural(failing, "file"),
        r.files.len(),
        r.model_type.as_deref().unwrap_or("unknown"),
        r.family_contract,
    );
    if !r.consumers.is_empty() {
        let each: Vec<String> = r.consumers.iter().map(|c| c.describe()).collect();
        let _ = write!(out, "\nconsumer: {}", each.join("; "));
    }
    out
}

/// `━━ onnx/model_q4.onnx (decoder-only, q4) — how it was driven`: where one file's section starts.
pub(super) fn file_banner(f: &FileReport) -> String {
    let variant = f.variant.as_ref().map(|v| format!(", {v}")).unwrap_or_default();
    format!("━━ {} ({}{variant}) — {}", f.path, f.role, f.driven_as)
}

/// `check DIR`: the folder's verdict and one line per file first, then the
/// sizes and where they came from, then each file's report.
pub fn folder_check(r: &FolderReport) -> String {
    let failing = r.files.iter().filter(|f| f.report.verdict == Verdict::Fail).count();
    let headline = folder_headline(r, failing);
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
    out.push_str(&super::fixes::fixes(r));
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
        let _ = writeln!(out, "\n{}", file_banner(f));
        out.push_str(&check(&f.report));
    }
    let _ = writeln!(out, "\n{headline}");
    fit(out)
}
