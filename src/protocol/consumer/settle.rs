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
    predicted_failures(report);
    if genai_agreed(found) {
        genai_refutes(report);
    }
    let fail = report.errors().next().is_some();
    report.verdict = if fail { Verdict::Fail } else { Verdict::Pass };
}

/// A consumer's failure its loading rules foresaw as the consumer's own
/// limitation on a correct export (optimum sizing the first past from
/// num_attention_heads): the run confirms the warning, it does not fail the
/// export. Any other failure of the consumer stays an error.
fn predicted_failures(report: &mut FolderReport) {
    let foreseen = report
        .findings
        .iter()
        .chain(report.files.iter().flat_map(|f| &f.report.findings))
        .any(|f| f.code == Code::ConsumerSize && f.severity == Severity::Warning && f.message.contains("optimum"));
    // ONNX Runtime names the first past it validates, not always layer 0's.
    let rejects_a_past = |m: &str| {
        m.split("invalid dimensions for input: ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .is_some_and(|name| name.contains(".key") || name.contains(".value"))
    };
    for f in report.findings.iter_mut().filter(|f| {
        foreseen
            && f.code == Code::ConsumerRun
            && f.severity == Severity::Error
            && f.message.starts_with("optimum fails")
            && rejects_a_past(&f.message)
    }) {
        f.severity = Severity::Warning;
        f.message.push_str(
            " (measured: the failure the consumer-size warning foresees, optimum's limitation, not the export's)",
        );
    }
}

/// What onnxruntime-genai's agreeing run refutes: the genai_config.json
/// sizes its generation does not depend on here.
fn genai_refutes(report: &mut FolderReport) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(found: &[Finding]) -> FolderReport {
        let mut r = FolderReport::new("f", None, "c", Default::default(), Vec::new(), Vec::new());
        r.findings.extend(found.iter().cloned());
        r
    }

    #[test]
    fn a_consumer_s_failure_fails_the_folder_unless_foreseen_as_its_own_limitation() {
        let failed = Finding::error(Code::ConsumerRun, "optimum fails on this folder at generate: Got invalid dimensions for input: past_key_values.1.key for the following indices");
        let mut r = folder(std::slice::from_ref(&failed));
        settle(&mut r, std::slice::from_ref(&failed));
        assert_eq!(r.verdict, Verdict::Fail);
        let mut r = folder(std::slice::from_ref(&failed));
        r.findings
            .push(Finding::warning(Code::ConsumerSize, "model.onnx: optimum-onnx 0.1.0's ORTModelForCausalLM feeds …"));
        settle(&mut r, std::slice::from_ref(&failed));
        assert_eq!(r.verdict, Verdict::Pass);
        assert!(r.findings.iter().all(|f| f.severity != Severity::Error), "{:?}", r.findings);
    }
}
