//! The runtime part of a report: what ran, step by step, and the findings.

use super::events::{Event, FailedNode, TensorInfo};
use crate::finding::{Code, Finding, Severity};
use serde::Serialize;
use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

#[derive(Clone, Debug, Serialize)]
pub struct StepRow {
    pub step0_past_len: i64,
    pub step: usize,
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    /// Max |cached − uncached| of the last position's logits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parity_max_abs_diff: Option<f64>,
    pub feeds: Vec<TensorInfo>,
    pub outputs: Vec<TensorInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_node: Option<FailedNode>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RuntimeReport {
    pub ort_version: Option<String>,
    pub ort_path: String,
    /// Where the library was found (`--ort-lib`, python package, …).
    pub ort_source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_seconds: Option<f64>,
    pub steps: Vec<StepRow>,
    /// Set when the child process died or hung.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crash: Option<String>,
    #[serde(skip)]
    pub findings: Vec<Finding>,
    #[serde(skip)]
    done: bool,
}

impl RuntimeReport {
    pub fn new(lib: &Path, source: &str) -> Self {
        RuntimeReport {
            // Until the child reports it; kept when the library cannot even load.
            ort_version: super::locate::version_from_name(lib),
            ort_path: lib.display().to_string(),
            ort_source: source.to_string(),
            session_seconds: None,
            steps: Vec::new(),
            crash: None,
            findings: Vec::new(),
            done: false,
        }
    }

    fn finding(&self, f: Finding) -> Finding {
        Finding { runtime: self.ort_version.clone(), ..f }
    }

    pub fn absorb(&mut self, ev: Event) {
        match ev {
            Event::Runtime { version, path } => {
                self.ort_version = Some(version);
                self.ort_path = path;
            }
            Event::Session { seconds, .. } => self.session_seconds = Some(seconds),
            Event::Feeds { variant, step, feeds } => self.steps.push(StepRow {
                step0_past_len: variant,
                step,
                ok: false,
                seconds: None,
                parity_max_abs_diff: None,
                feeds,
                outputs: Vec::new(),
                error: None,
                failed_node: None,
            }),
            Event::Step { variant, step, outputs, seconds, parity, issues } => {
                let ok = issues.iter().all(|i| i.severity != "error");
                if let Some(row) = self.row(variant, step) {
                    row.ok = ok;
                    row.seconds = Some(seconds);
                    row.parity_max_abs_diff = parity;
                    row.outputs = outputs;
                }
                for i in issues {
                    let code = Code::ALL.iter().copied().find(|c| c.as_str() == i.code).unwrap_or(Code::RunFailed);
                    let sev = if i.severity == "error" { Severity::Error } else { Severity::Warning };
                    let mut f = Finding::new(code, sev, format!("step {step}: {}", i.message)).at_step(step, variant);
                    f.tensor = i.tensor;
                    if code == Code::Parity && f.message.contains("max |Δ|") {
                        f.cause = Some(
                            "the cache runs but is used wrongly: positions that do not continue from the cache length \
                             (position_ids), a mask that does not cover the past, or presents written at the wrong offset"
                                .into(),
                        );
                    }
                    let f = self.finding(f);
                    self.findings.push(f);
                }
            }
            Event::Failure { variant, step, message, node, cause } => {
                let inner = innermost_status(&message);
                if let Some(row) = self.row(variant, step) {
                    row.error = Some(message.clone());
                    row.failed_node = node.clone();
                }
                let mut text = format!("step {step} (step-0 past length {variant}): ONNX Runtime failed");
                if let Some(n) = &node {
                    text.push_str(&format!(" in {} node `{}`", n.op_type, n.name));
                }
                text.push_str(&format!(": {inner}"));
                let mut f = Finding::error(Code::RunFailed, text).at_step(step, variant).cause(cause);
                f.node = node.as_ref().map(|n| n.path.clone());
                let f = self.finding(f);
                self.findings.push(f);
            }
            Event::Fatal { stage, message, cause } => {
                // A fatal event is an orderly end, not a crash.
                self.done = true;
                let message = clean_ort_message(&message);
                let code = match stage.as_str() {
                    "runtime" => Code::RuntimeLoad,
                    "session" => Code::ModelLoad,
                    "child" => Code::Crash,
                    _ => Code::Plan,
                };
                let f = self.finding(Finding::error(code, format!("{stage}: {message}")).cause(cause));
                self.findings.push(f);
            }
            Event::Done => self.done = true,
        }
    }

    fn row(&mut self, variant: i64, step: usize) -> Option<&mut StepRow> {
        self.steps.iter_mut().rev().find(|r| r.step0_past_len == variant && r.step == step)
    }

    /// Called after the child exited: a missing `Done` means it died.
    pub fn finish(&mut self, status: Option<ExitStatus>, timed_out: bool, timeout: Duration, stderr: &str) {
        if self.done {
            self.add_dummy_notes();
            return;
        }
        let how = if timed_out {
            format!("did not finish within {} s and was killed", timeout.as_secs())
        } else {
            describe_exit(status)
        };
        let last = self.steps.last().filter(|r| r.seconds.is_none() && r.error.is_none()).cloned();
        let mut text = format!("the process running ONNX Runtime {how}");
        let mut f = match &last {
            Some(row) => {
                text.push_str(&format!(
                    " at step {} (step-0 past length {}), fed {}",
                    row.step,
                    row.step0_past_len,
                    describe_feeds(&row.feeds)
                ));
                Finding::error(Code::Crash, text).at_step(row.step, row.step0_past_len)
            }
            None => Finding::error(Code::Crash, text),
        };
        let tail: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        if let Some(l) = tail.last() {
            f.cause = Some(format!("last runtime message: {}", l.trim()));
        }
        self.crash = Some(how);
        let f = self.finding(f);
        self.findings.push(f);
    }

    /// Says whether the step-0 dummy length mattered, on each failure.
    fn add_dummy_notes(&mut self) {
        let variants: Vec<i64> = {
            let mut v: Vec<i64> = self.steps.iter().map(|r| r.step0_past_len).collect();
            v.dedup();
            v
        };
        if variants.len() < 2 {
            return;
        }
        let passed = |v: i64| self.steps.iter().filter(|r| r.step0_past_len == v).all(|r| r.ok);
        let verdicts: Vec<(i64, bool)> = variants.iter().map(|&v| (v, passed(v))).collect();
        for f in self.findings.iter_mut().filter(|f| f.code == Code::RunFailed) {
            let Some(v) = f.step0_past_len else { continue };
            let others: Vec<String> = verdicts
                .iter()
                .filter(|(o, _)| *o != v)
                .map(|(o, ok)| format!("{o}: {}", if *ok { "passes" } else { "fails too" }))
                .collect();
            f.message.push_str(&format!(" [with step-0 past length {}]", others.join(", ")));
        }
    }
}

fn describe_exit(status: Option<ExitStatus>) -> String {
    let Some(status) = status else { return "vanished".into() };
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            let name = match sig {
                11 => "SIGSEGV (segmentation fault)",
                6 => "SIGABRT (abort)",
                7 => "SIGBUS",
                4 => "SIGILL",
                9 => "SIGKILL",
                8 => "SIGFPE",
                _ => "a signal",
            };
            return format!("was killed by signal {sig}, {name}");
        }
    }
    format!("exited early with {status}")
}

/// Drops the C++ source location and function signature ONNX Runtime puts
/// before its reason (`…/model.cc:256 onnxruntime::Model::Model(…) Unsupported…`).
pub fn clean_ort_message(message: &str) -> String {
    let message = message.trim();
    let Some(i) = message.find("/onnxruntime_src/").or_else(|| message.find("onnxruntime/core/")) else {
        return message.to_string();
    };
    let rest = &message[i..];
    let Some(open) = rest.find('(') else { return message.to_string() };
    let mut depth = 0usize;
    for (j, ch) in rest[open..].char_indices() {
        match ch {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    let reason = rest[open + j + 1..].trim_start();
                    return format!("{}{}", &message[..i], reason).trim().to_string();
                }
            }
            _ => {}
        }
    }
    message.to_string()
}

/// ORT nests messages: `… running If node … Status Message: … running Reshape node …`.
fn innermost_status(message: &str) -> String {
    let m = message.rsplit("Status Message: ").next().unwrap_or(message);
    // Drop the C++ source location prefix ORT puts before the reason.
    let m = match m.find(" was false. ") {
        Some(i) => m[i + " was false. ".len()..].to_string(),
        None => clean_ort_message(m),
    };
    m.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Shapes of the feeds, for the crash message.
fn describe_feeds(feeds: &[TensorInfo]) -> String {
    let shown: Vec<String> =
        feeds.iter().take(4).map(|f| format!("{} {:?}", f.name, f.shape.clone().unwrap_or_default())).collect();
    if feeds.len() > 4 {
        format!("{}, … ({} feeds)", shown.join(", "), feeds.len())
    } else {
        shown.join(", ")
    }
}
