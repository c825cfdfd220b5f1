//! `--format github`: GitHub Actions workflow commands, one annotation per
//! error or warning (`::error file=…,line=…,title=…::…`), then a summary.

use super::targets::{full_message, Targets};
use crate::checker::report::Verdict;
use crate::finding::{Finding, Severity};

/// Escapes a message (`%`, CR, LF) as the workflow-command syntax requires.
fn data(s: &str) -> String {
    s.replace('%', "%25").replace('\r', "%0D").replace('\n', "%0A")
}

/// Escapes a property value (also `:` and `,`).
fn property(s: &str) -> String {
    data(s).replace(':', "%3A").replace(',', "%2C")
}

fn line(f: &Finding, file: &str, contract: Option<&str>) -> Option<String> {
    let kind = match f.severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
        _ => return None,
    };
    // A contract finding points at its contract line when the contract is a file in the repository.
    let at = match (contract.filter(|c| !c.starts_with("builtin:") && !c.ends_with(".json")), f.contract_line) {
        (Some(c), Some(l)) => format!("file={},line={l}", property(c)),
        _ => format!("file={}", property(file)),
    };
    let title = format!("onnx-contract {}: {}", f.code, file);
    Some(format!("::{kind} {at},title={}::{}", property(&title), data(&full_message(f))))
}

/// The workflow commands of a check.
pub fn render(t: &Targets<'_>) -> String {
    let mut out = String::new();
    for file in &t.files {
        let contract = file.report.contract.as_ref().map(|c| c.path.as_str());
        for f in &file.report.findings {
            if let Some(l) = line(f, &file.path, contract) {
                out.push_str(&l);
                out.push('\n');
            }
        }
    }
    if let Some((dir, findings)) = t.folder {
        for f in findings {
            if let Some(l) = line(f, dir, None) {
                out.push_str(&l);
                out.push('\n');
            }
        }
    }
    let failing: Vec<&str> =
        t.files.iter().filter(|f| f.report.verdict == Verdict::Fail).map(|f| f.path.as_str()).collect();
    let summary = match t.verdict {
        Verdict::Pass => {
            format!("::notice title=onnx-contract::PASS: {} file(s) honour their contracts", t.files.len())
        }
        _ => format!("::error title=onnx-contract::FAIL: {}", data(&failing.join(", "))),
    };
    out.push_str(&summary);
    out.push('\n');
    out
}
