//! `--format junit`: JUnit XML for test dashboards. A testsuite per model
//! file; a testcase for the static check and one per decoding step (and one
//! for a run that never reached a step); failures carry the message and the
//! shape trace of the failing step.

use super::targets::{full_message, is_static, Targets};
use crate::engine::runtime_report::{RuntimeReport, StepRow};
use crate::finding::{Finding, Severity};
use quick_junit::{NonSuccessKind, Report as JunitReport, TestCase, TestCaseStatus, TestSuite};
use std::time::Duration;

fn failure(errors: &[&Finding], kind: NonSuccessKind) -> TestCaseStatus {
    let mut status = TestCaseStatus::non_success(kind);
    if let TestCaseStatus::NonSuccess { message, ty, description, .. } = &mut status {
        *message = Some(errors[0].message.clone().into());
        *ty = Some(errors[0].code.as_str().into());
        let text: Vec<String> = errors.iter().map(|f| format!("[{}] {}", f.code, full_message(f))).collect();
        *description = Some(text.join("\n").into());
    }
    status
}

fn shapes(row: &StepRow) -> String {
    let mut s = String::from("feeds:\n");
    for f in &row.feeds {
        s.push_str(&format!("  {} {} {:?}\n", f.name, f.dtype, f.shape.clone().unwrap_or_default()));
    }
    if let Some(node) = &row.failed_node {
        s.push_str(&format!("failing node: {} ({})\n", node.path, node.op_type));
        for i in &node.inputs {
            s.push_str(&format!("  {} {} {:?}\n", i.name, i.dtype, i.shape.clone().unwrap_or_default()));
        }
    }
    s
}

fn step_cases(r: &RuntimeReport, findings: &[Finding], label: &str) -> Vec<TestCase> {
    r.steps
        .iter()
        .map(|row| {
            let name = format!("{label}step {} (step-0 past length {})", row.step, row.step0_past_len);
            let errors: Vec<&Finding> = findings
                .iter()
                .filter(|f| f.severity == Severity::Error)
                .filter(|f| f.step == Some(row.step) && f.step0_past_len == Some(row.step0_past_len))
                .filter(|f| f.runtime.is_none() || f.runtime == r.ort_version)
                .collect();
            let status = if errors.is_empty() && row.ok {
                TestCaseStatus::success()
            } else if errors.is_empty() {
                TestCaseStatus::non_success(NonSuccessKind::Failure)
            } else {
                failure(&errors, NonSuccessKind::Failure)
            };
            let mut case = TestCase::new(name, status);
            if let Some(s) = row.seconds {
                case.set_time(Duration::from_secs_f64(s.max(0.0)));
            }
            case.set_system_out(shapes(row));
            case
        })
        .collect()
}

/// The JUnit XML of a check.
pub fn render(t: &Targets<'_>) -> String {
    let mut report = JunitReport::new("onnx-contract");
    for file in &t.files {
        let r = file.report;
        let mut suite = TestSuite::new(file.path.clone());
        let static_errors: Vec<&Finding> =
            r.findings.iter().filter(|f| f.severity == Severity::Error && is_static(f)).collect();
        let contract = r.contract.as_ref().map(|c| c.name.clone()).unwrap_or_else(|| "no contract".into());
        let status = if static_errors.is_empty() {
            TestCaseStatus::success()
        } else {
            failure(&static_errors, NonSuccessKind::Failure)
        };
        suite.add_test_case(TestCase::new(format!("static: signature against {contract}"), status));
        // Errors of a run that reached no step (runtime missing, model refused, plan, crash before step 0).
        let run_errors: Vec<&Finding> =
            r.findings.iter().filter(|f| f.severity == Severity::Error && !is_static(f) && f.step.is_none()).collect();
        if !run_errors.is_empty() {
            suite.add_test_case(TestCase::new("runtime", failure(&run_errors, NonSuccessKind::Error)));
        }
        let several = r.runtimes.len() > 1;
        for rt in &r.runtimes {
            let label =
                if several { format!("ORT {}: ", rt.ort_version.as_deref().unwrap_or("?")) } else { String::new() };
            suite.add_test_cases(step_cases(rt, &r.findings, &label));
        }
        report.add_test_suite(suite);
    }
    if let Some((dir, findings)) = t.folder {
        let mut suite = TestSuite::new(dir.to_string());
        let errors: Vec<&Finding> = findings.iter().filter(|f| f.severity == Severity::Error).collect();
        let status =
            if errors.is_empty() { TestCaseStatus::success() } else { failure(&errors, NonSuccessKind::Failure) };
        suite.add_test_case(TestCase::new("files agree", status));
        report.add_test_suite(suite);
    }
    report.to_string().unwrap_or_else(|e| format!("<!-- cannot write JUnit XML: {e} -->\n"))
}
