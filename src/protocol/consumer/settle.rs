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

/// Adds `found` (the consumers' runs) to `report`, downgrades what they
/// refute or confirm as a consumer's own limitation, and recomputes the verdicts.
pub fn settle(report: &mut FolderReport, found: &[Finding]) {
    report.findings.extend(found.iter().cloned());
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
    let foreseen: Vec<String> = report
        .findings
        .iter()
        .chain(report.files.iter().flat_map(|f| &f.report.findings))
        .filter(|f| f.code == Code::ConsumerSize && f.severity == Severity::Warning && f.message.contains("optimum"))
        .map(|f| f.message.clone())
        .collect();
    // ONNX Runtime's "invalid dimensions for input: NAME … Got: G Expected: E"
    // on a past (it names the first past it validates, not always layer 0's),
    // with the very sizes the warning foresaw.
    let foresaw = |m: &str| -> bool {
        let Some(rest) = m.split("invalid dimensions for input: ").nth(1) else { return false };
        let past = rest.split_whitespace().next().is_some_and(|n| n.contains(".key") || n.contains(".value"));
        let num = |key: &str| rest.split(key).nth(1).and_then(|r| r.split_whitespace().next()).map(str::to_string);
        let (Some(got), Some(expected)) = (num("Got:"), num("Expected:")) else { return false };
        past && foreseen.iter().any(|w| {
            let fed =
                w.contains(&format!("with {got} heads where")) || w.contains(&format!("head size of {got} where"));
            fed && w.contains(&format!("have {expected} ("))
        })
    };
    for f in report.findings.iter_mut().filter(|f| {
        f.code == Code::ConsumerRun
            && f.severity == Severity::Error
            && f.message.starts_with("optimum fails")
            && foresaw(&f.message)
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
        let failed = Finding::error(Code::ConsumerRun, "optimum fails on this folder at generate: Got invalid dimensions for input: past_key_values.1.key for the following indices index: 1 Got: 4 Expected: 2 Please fix");
        let foreseen = |heads: i64| {
            Finding::warning(Code::ConsumerSize, format!("model.onnx: optimum-onnx 0.1.0's ORTModelForCausalLM feeds its first, empty past `past_key_values.0.key` with {heads} heads where the graph and config.json's num_key_value_heads have 2 (it reads …)"))
        };
        let mut r = folder(&[]);
        settle(&mut r, std::slice::from_ref(&failed));
        assert_eq!(r.verdict, Verdict::Fail);
        // Foreseen with other sizes: still the folder's failure.
        let mut r = folder(&[foreseen(8)]);
        settle(&mut r, std::slice::from_ref(&failed));
        assert_eq!(r.verdict, Verdict::Fail);
        let mut r = folder(&[foreseen(4)]);
        settle(&mut r, std::slice::from_ref(&failed));
        assert_eq!(r.verdict, Verdict::Pass);
        assert!(r.findings.iter().all(|f| f.severity != Severity::Error), "{:?}", r.findings);
    }
}
