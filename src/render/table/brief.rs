//! The default human report: one screen for a pass, the cause first for a
//! fail. A folder is its headline, then (failing) the first error and its
//! cause, one line per file, the sizes a config stated, the variants; the
//! full detail only for what failed. `--verbose` is `check::folder_check`.

use super::check::{file_banner, findings_table, folder_headline, port_status, verdict_line};
use super::runtime::runtime_section;
use super::signature::{flagged_ports_table, model_header};
use super::{fit, paint, plural, style};
use crate::checker::report::{measured, FileReport, FolderReport, Report, Verdict};
use crate::finding::{Code, Finding, Severity};
use std::fmt::Write;

/// At most this many lines of file rows; past it, passing variants fold into their base file's row.
const FILE_ROWS: usize = 24;

/// `text` cut to `width` display columns, with an ellipsis (no limit in a pipe).
pub(super) fn clip(text: &str, width: Option<usize>) -> String {
    let Some(w) = width else { return text.to_string() };
    if textwrap::core::display_width(text) <= w {
        return text.to_string();
    }
    let mut out = String::new();
    for ch in text.chars() {
        if textwrap::core::display_width(&out) + 2 > w {
            break;
        }
        out.push(ch);
    }
    out.push('…');
    out
}

/// The first error of a report and its cause, as the lines a person reads first.
fn first_error(prefix: &str, f: &Finding) -> String {
    let mut s = format!("first error: {prefix}{}: {}", f.code, f.message);
    if let Some(node) = &f.node {
        let _ = write!(s, "\n  node: {node}");
    }
    if let Some(cause) = &f.cause {
        let _ = write!(s, "\n  cause: {cause}");
    }
    s
}

/// At most this many warning lines before the rest is counted.
const WARNING_GROUPS: usize = 12;

/// Warnings, one per file and code: the first message, and how many more
/// of that code (a static export's twenty fixed axes are one line).
fn warnings(reports: &[(&str, &Report)]) -> String {
    let mut groups: Vec<(String, Code, &Finding, usize)> = Vec::new();
    for (path, report) in reports {
        for w in report.findings.iter().filter(|x| x.severity == Severity::Warning) {
            match groups.iter_mut().find(|g| g.0 == *path && g.1 == w.code) {
                Some(g) => g.3 += 1,
                None => groups.push((path.to_string(), w.code, w, 0)),
            }
        }
    }
    let mut out = String::new();
    for (path, code, w, more) in groups.iter().take(WARNING_GROUPS) {
        let at = if path.is_empty() { String::new() } else { format!("{path}: ") };
        let also = if *more > 0 { format!(" (and {more} more {code})") } else { String::new() };
        let _ = writeln!(out, "warning: {at}{code}: {}{also}", w.message);
    }
    if groups.len() > WARNING_GROUPS {
        let _ = writeln!(out, "warning: {} more kinds of warning (--verbose)", groups.len() - WARNING_GROUPS);
    }
    out
}

/// One row per file (passing variants folded past [`FILE_ROWS`]), columns aligned.
fn file_rows(r: &FolderReport) -> String {
    let folded = r.files.len() > FILE_ROWS;
    let mut rows: Vec<(String, String, String, String)> = Vec::new();
    let mut hidden: Vec<&FileReport> = Vec::new();
    for f in &r.files {
        let pass = f.report.verdict == Verdict::Pass;
        if folded && pass && f.variant.is_some() {
            hidden.push(f);
            continue;
        }
        let what = match f.report.errors().next() {
            Some(e) => format!("{}: {}", e.code, e.message),
            None => match f.report.runtime.as_ref().and_then(measured) {
                Some(m) => format!("{m}; {}", f.driven_as),
                None => f.driven_as.clone(),
            },
        };
        let warnings = f.report.findings.iter().filter(|x| x.severity == Severity::Warning).count();
        let verdict = f.report.verdict.as_str().to_uppercase();
        let verdict = if pass && warnings > 0 { format!("{verdict} ({warnings}w)") } else { verdict };
        rows.push((verdict, f.path.clone(), f.role.to_string(), what));
    }
    if !hidden.is_empty() {
        let mut names: Vec<String> = hidden.iter().filter_map(|f| f.variant.clone()).collect();
        names.sort();
        names.dedup();
        rows.push((
            "PASS".into(),
            format!("… {} more", plural(hidden.len(), "file")),
            "variants".into(),
            format!("{} within their bounds against fp32 (--verbose lists each)", names.join(", ")),
        ));
    }
    let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(4);
    let w1 = rows.iter().map(|r| textwrap::core::display_width(&r.1)).max().unwrap_or(0);
    let w2 = rows.iter().map(|r| r.2.len()).max().unwrap_or(0);
    let width = style().width.map(usize::from);
    let mut out = String::new();
    for (v, file, role, what) in rows {
        let pad = " ".repeat(w0 - v.len());
        let head = format!("  {}{pad}  {file:<w1$}  {role:<w2$}  ", paint(&v));
        let used = 2 + w0 + 2 + w1 + 2 + w2 + 2;
        let rest = width.map(|w| w.saturating_sub(used).max(20));
        let _ = writeln!(out, "{head}{}", clip(&what, rest));
    }
    out
}

/// Sizes that a config file stated, grouped by file, each with its key.
fn sizes_line(r: &FolderReport) -> Option<String> {
    let mut by_file: Vec<(&str, Vec<String>)> = Vec::new();
    for (name, s) in &r.sizes {
        let Some((file, key)) = s.source.split_once(": ").filter(|(f, _)| f.ends_with("config.json")) else { continue };
        let item = if key == name { format!("{name} {}", s.value) } else { format!("{name} {} ({key})", s.value) };
        match by_file.iter_mut().find(|(f, _)| *f == file) {
            Some((_, items)) => items.push(item),
            None => by_file.push((file, vec![item])),
        }
    }
    let parts: Vec<String> = by_file.into_iter().map(|(f, items)| format!("{f}: {}", items.join(", "))).collect();
    (!parts.is_empty()).then(|| format!("sizes from {}", parts.join("; from ")))
}

/// `check DIR` for people: one screen when it passes, the cause first when not.
pub fn folder_brief(r: &FolderReport) -> String {
    let failing: Vec<&FileReport> = r.files.iter().filter(|f| f.report.verdict == Verdict::Fail).collect();
    let headline = folder_headline(r, failing.len());
    let mut out = format!("{headline}\n");
    let first = failing
        .iter()
        .find_map(|f| f.report.errors().next().map(|e| first_error(&format!("{}: ", f.path), e)))
        .or_else(|| r.findings.iter().find(|f| f.severity == Severity::Error).map(|e| first_error("", e)));
    if let Some(first) = first {
        let _ = writeln!(out, "{first}");
    }
    out.push_str(&super::fixes::fixes(r));
    out.push_str(&file_rows(r));
    if let Some(sizes) = sizes_line(r) {
        let _ = writeln!(out, "{sizes}");
    }
    let shown: Vec<&Finding> = r.findings.iter().filter(|f| f.severity > Severity::Info).collect();
    if !shown.is_empty() {
        let owned: Vec<Finding> = shown.into_iter().cloned().collect();
        let _ = write!(out, "across files:\n{}", findings_table(&owned));
    }
    // Warnings of passing files (a failing file's are in its section).
    let passing: Vec<(&str, &Report)> =
        r.files.iter().filter(|f| f.report.verdict == Verdict::Pass).map(|f| (f.path.as_str(), &f.report)).collect();
    out.push_str(&warnings(&passing));
    for f in &failing {
        let _ = writeln!(out, "\n{}", file_banner(f));
        out.push_str(&failing_detail(&f.report));
    }
    if !failing.is_empty() || r.files.len() > 8 {
        let _ = writeln!(out, "\n{headline}");
    }
    if r.verdict == Verdict::Pass {
        let _ = writeln!(out, "(--verbose: every file's signature, findings and step table)");
    }
    fit(out)
}

/// A failing file's findings (errors and warnings), the ports that differ,
/// and the runtime section with its step table, shape trace and failing node.
fn failing_detail(report: &Report) -> String {
    let mut out = String::new();
    let shown: Vec<Finding> = report.findings.iter().filter(|f| f.severity > Severity::Info).cloned().collect();
    out.push_str(&findings_table(&shown));
    let info = report.findings.len() - shown.len();
    if info > 0 {
        let _ = writeln!(out, "({} more with --verbose)", plural(info, "info finding"));
    }
    let ports = differing_ports(report);
    if ports.is_empty() {
        // The static check ran and found nothing to say: say so, in one line.
        let sig = &report.signature;
        let _ = writeln!(
            out,
            "static check: {}, {} as the contract says",
            plural(sig.inputs.len(), "input"),
            plural(sig.outputs.len(), "output")
        );
    }
    out.push_str(&ports);
    for r in &report.runtimes {
        let ran =
            r.steps.iter().any(|s| !s.ok) || report.findings.iter().any(|f| !crate::render::targets::is_static(f));
        if ran {
            out.push_str(&runtime_section(r));
        }
    }
    out
}

/// Only the inputs and outputs a finding names, numbered as in the model, with their contract status.
fn differing_ports(report: &Report) -> String {
    let status = |names: &[&str]| port_status(&report.findings, names);
    let sig = &report.signature;
    let mut out = String::new();
    if let Some(t) = flagged_ports_table("input", &sig.inputs, &status) {
        let _ = writeln!(out, "inputs named by a finding:\n{t}");
    }
    if let Some(t) = flagged_ports_table("output", &sig.outputs, &status) {
        let _ = writeln!(out, "outputs named by a finding:\n{t}");
    }
    out
}

/// `check FILE` for people: the header, the verdict, what ran; the detail
/// only when it fails.
pub fn file_brief(report: &Report) -> String {
    let mut out = model_header(&report.signature);
    if let Some(line) = super::check::contract_line(report) {
        let _ = write!(out, "\n{line}");
    }
    out.push('\n');
    if report.verdict == Verdict::Fail {
        let count = |sev: Severity| report.findings.iter().filter(|f| f.severity == sev).count();
        let (errors, warnings) = (count(Severity::Error), count(Severity::Warning));
        let _ =
            writeln!(out, "verdict: {} ({}, {})", paint("FAIL"), plural(errors, "error"), plural(warnings, "warning"));
        if let Some(e) = report.errors().next() {
            let _ = writeln!(out, "{}", first_error("", e));
        }
        out.push_str(&super::fixes::file_repros(report));
        out.push('\n');
        out.push_str(&failing_detail(report));
    } else {
        let _ = writeln!(out, "{}", verdict_line(&report.findings));
        out.push_str(&warnings(&[("", report)]));
        for r in &report.runtimes {
            let _ = writeln!(
                out,
                "runtime: ONNX Runtime {}: {}",
                r.ort_version.as_deref().unwrap_or("?"),
                measured(r).unwrap_or_else(|| "not driven".into())
            );
        }
        let _ = writeln!(out, "(--verbose: the signature, every finding and the step table)");
    }
    fit(out)
}
