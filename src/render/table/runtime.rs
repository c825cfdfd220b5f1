//! The runtime section of a check report: what ran, the step table, the
//! shape trace and the failing node.

use super::new_table;
use crate::engine::runtime_report::{RuntimeReport, StepRow};
use crate::model::fold::fold;
use std::fmt::Write;

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
    if !r.chunk.is_empty() {
        let worst = r.chunk.iter().map(|c| c.1).fold(0.0, f64::max);
        let _ = writeln!(
            out,
            "{} tokens at once onto a cache of 4, against the uncached run: max |Δ| {worst:.2e}",
            r.chunk.len()
        );
    }
    if let Some(w) = &r.window {
        let _ = writeln!(
            out,
            "sliding window {} ({}): on a past of {}, a cache change outside it moves the logits by {:.2e}, inside it by {:.2e}",
            w.size, w.source, w.past_len, w.outside, w.inside
        );
    }
    for p in &r.probes {
        let _ = writeln!(out, "{p}");
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
