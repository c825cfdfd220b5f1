//! From diagnosis to fix, for people: the reproductions `--repro` wrote
//! (where, how much smaller, what running them shows) and the remedies
//! `--remedy` ran (what changed, the re-check's result, how to make the same
//! change at export time), then the folder `--fix-out` wrote and its check.

use crate::checker::report::{FolderReport, Report, Verdict};
use crate::engine::events::Repro;
use std::fmt::Write;

/// `1,234`.
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub(super) fn repro_lines(r: &Repro) -> String {
    if !r.reproduces {
        return format!("reproduction of {}: {}\n", r.node, r.observed);
    }
    let nodes = |n: usize| if n == 1 { "1 node".to_string() } else { format!("{n} nodes") };
    format!(
        "reproduction: {} ({} → {}, {} → {} bytes): {}\n  run: python {}/repro.py (exits 0 when it reproduces)\n",
        r.dir,
        nodes(r.nodes.0),
        nodes(r.nodes.1),
        thousands(r.bytes.0),
        thousands(r.bytes.1),
        r.observed,
        r.dir
    )
}

/// The reproductions of one file's runs.
pub(super) fn file_repros(report: &Report) -> String {
    let mut seen = Vec::new();
    let mut out = String::new();
    // `runtime` is the first of `runtimes`: each reproduction once.
    for r in report.runtimes.iter().chain(report.runtime.iter()).flat_map(|rt| &rt.repros) {
        if !seen.contains(&&r.dir) {
            seen.push(&r.dir);
            out.push_str(&repro_lines(r));
        }
    }
    out
}

/// Every reproduction, remedy and the fixed folder of a folder check.
pub(super) fn fixes(r: &FolderReport) -> String {
    let mut out = String::new();
    for f in &r.files {
        out.push_str(&file_repros(&f.report));
    }
    for m in &r.remedies {
        let checks = if m.rechecks == 1 { "1 re-check".to_string() } else { format!("{} re-checks", m.rechecks) };
        if m.works {
            let _ = writeln!(out, "remedy for {} (verified, {checks}): {}", m.file, m.change);
            let _ = writeln!(out, "  {}", m.result);
            let _ = writeln!(out, "  at export: {}", m.option);
        } else {
            let _ = writeln!(out, "tried for {}, not a remedy ({checks}): {}", m.file, m.change);
            let _ = writeln!(out, "  {}", m.result);
        }
    }
    if let Some(fixed) = &r.fixed {
        let verdict = match fixed.verdict {
            Verdict::Pass => "PASS".to_string(),
            Verdict::Fail => format!("FAIL ({} still failing)", fixed.failing.join(", ")),
        };
        if fixed.written {
            let _ = writeln!(out, "repaired folder written to {}: its check {verdict}", fixed.dir);
        } else {
            let _ = writeln!(
                out,
                "nothing written to {}: the repaired copy's check {verdict}; only a copy that passes is written",
                fixed.dir
            );
        }
    }
    out
}
