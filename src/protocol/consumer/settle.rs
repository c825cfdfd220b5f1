//! What the consumer's own run settles: a static claim about its config
//! that its generation, run on the folder, refutes stays as a warning with
//! the measurement, never an error the consumer does not meet.

use crate::checker::report::{FolderReport, Verdict};
use crate::finding::{Code, Finding, Severity};

/// Whether onnxruntime-genai's own generation agreed with the reference.
fn genai_agreed(found: &[Finding]) -> bool {
    found.iter().any(|f| {
        f.code == Code::ConsumerRun && f.severity == Severity::Info && f.message.starts_with("onnxruntime-genai")
    })
}

/// Downgrades what `found` (the consumers' runs) refutes in `report` and
/// recomputes the verdicts.
pub fn settle(report: &mut FolderReport, found: &[Finding]) {
    if !genai_agreed(found) {
        return;
    }
    for file in &mut report.files {
        let mut changed = false;
        let mut sizes: Vec<String> = Vec::new();
        // genai sizes its empty first past and its buffers with these keys;
        // its generation giving the reference's tokens shows the run does not hang on them.
        for f in file.report.findings.iter_mut().filter(|f| {
            f.code == Code::ConfigMismatch
                && f.severity == Severity::Error
                && f.message.starts_with("genai_config.json: model.decoder.")
        }) {
            f.severity = Severity::Warning;
            // `…, but model.onnx has kv_heads 2 (…)`: the size whose contract dims follow it.
            if let Some(name) = f.message.split(" has ").nth(1).and_then(|r| r.split_whitespace().next()) {
                sizes.push(format!("(${name})"));
            }
            f.message.push_str(": onnxruntime-genai's own generation still gives the reference's tokens (measured), so the value is wrong but not what its run depends on here; correct it before another consumer or setting (a batch, a shared buffer) reads it");
            changed = true;
        }
        // The contract's dims sized from the same refuted value.
        for f in file.report.findings.iter_mut().filter(|f| {
            f.code == Code::DimValue
                && f.severity == Severity::Error
                && sizes.iter().any(|s| f.message.contains(s.as_str()))
        }) {
            f.severity = Severity::Warning;
            f.message.push_str(" (the contract sized from genai_config.json's value, which genai's own run refutes)");
            changed = true;
        }
        if changed {
            file.report.verdict = Verdict::of(&file.report.findings);
        }
    }
    let fail = report.errors().next().is_some();
    report.verdict = if fail { Verdict::Fail } else { Verdict::Pass };
}
