//! The runtime part of a report: what ran, step by step, and the findings.
// Turning a finished run into findings is only reachable with the `runtime`
// feature; the types themselves are part of every report.
#![cfg_attr(not(feature = "runtime"), allow(dead_code))]

pub use crate::engine::events::Companion;
use crate::engine::events::{Event, FailedNode, TensorInfo};
pub use crate::engine::messages::clean_ort_message;
use crate::engine::messages::innermost_status;
use crate::finding::{Code, Finding, Severity};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

/// A variant against fp32 at one generated position: (position, max |Δ|, relative, top-1 agrees).
pub type VariantPosition = (usize, f64, f64, bool);

/// One decoding step as it ran.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct StepRow {
    /// The past length fed at step 0 in this run.
    pub step0_past_len: i64,
    /// The step.
    pub step: usize,
    /// Every check of the step held.
    pub ok: bool,
    /// Run time (absent when the step did not finish).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    /// Max |cached − uncached| of the last position's logits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parity_max_abs_diff: Option<f64>,
    /// `parity_max_abs_diff` over max |uncached logit|.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parity_rel_diff: Option<f64>,
    /// Whether the greedy token agrees between the cached and uncached paths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub greedy_agrees: Option<bool>,
    /// Time to recompute the whole prefix without the cache (what a caller that never uses the cache pays per step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recompute_seconds: Option<f64>,
    /// Every feed's dtype and shape.
    pub feeds: Vec<TensorInfo>,
    /// Every output's dtype and shape.
    pub outputs: Vec<TensorInfo>,
    /// ONNX Runtime's error at this step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The node it failed in, with its traced input shapes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_node: Option<FailedNode>,
}

/// What one ONNX Runtime did with the model, step by step.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct RuntimeReport {
    /// Its version, when known.
    pub ort_version: Option<String>,
    /// The library's path.
    pub ort_path: String,
    /// Where the library was found (`--ort-lib`, python package, …).
    pub ort_source: String,
    /// Session creation time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_seconds: Option<f64>,
    /// The companion models' sessions the run took (the folder's encoder).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub companions: Vec<Companion>,
    /// The parity rule applied: numeric form, bound, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parity_rule: Option<crate::plan::numeric::Tolerance>,
    /// Every cache pair driven: (past input, present output, how they were matched).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cache_pairs: Vec<(String, String, String)>,
    /// A numeric variant against the folder's fp32 model: (reference, per position: (position, max |Δ|, relative, top-1 agrees)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<(String, Vec<VariantPosition>)>,
    /// A batch of 2, one row padded (the prompt on the left, or the source), against each row alone: (row, step, max |Δ|, relative, greedy agrees).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub batch: Vec<(usize, usize, f64, f64, bool)>,
    /// 3 tokens fed at once onto a cache of 4, against the uncached run: (position in the chunk, max |Δ|, relative, greedy agrees).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chunk: Vec<(usize, f64, f64, bool)>,
    /// The sliding-window probe, when the config states a window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<crate::engine::events::WindowProbe>,
    /// `--deep`: the steps re-run with graph optimizations disabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub levels: Option<crate::engine::events::Levels>,
    /// Every step of every run.
    pub steps: Vec<StepRow>,
    /// Set when the child process died or hung.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crash: Option<String>,
    /// The encoder the child was running when it died, if it died in one
    /// (the crash is that file's, not the decoder's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crashed_in: Option<String>,
    /// The encoder running now, and its feeds (until it finishes).
    #[serde(skip)]
    encoding: Option<(String, Vec<TensorInfo>)>,
    /// Re-run recorded calls: `(call, error)` for each one run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replayed: Vec<(usize, Option<String>, Option<FailedNode>)>,
    /// Each re-run call's feeds and where their values came from (read by `replay`'s report).
    #[serde(skip)]
    pub replay_sources: Vec<(usize, Vec<(String, crate::engine::events::FeedSource)>)>,
    /// Probes run (multimodal position rows): what was changed, and the figure.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probes: Vec<String>,
    /// Replay: each re-run call's per-row next-token scores (not serialized: the strategy reads them).
    #[serde(skip)]
    pub replay_scores: Vec<(usize, Vec<crate::engine::events::RowScores>)>,
    /// Replay: row digests computed from a bit-exact re-run (`feed:NAME`, `output:NAME`), by call.
    #[serde(skip)]
    pub replay_rows: Vec<(usize, crate::engine::events::ComputedRows)>,
    /// A reference generation's new ids and top-5 logits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generated: Option<crate::engine::events::Generated>,
    /// A probe's tensors (`--source`'s layer search; not part of a report).
    #[serde(skip)]
    pub probed: Option<Vec<(String, Vec<f32>)>>,
    /// Minimal reproductions written for `--repro`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repros: Vec<crate::engine::events::Repro>,
    /// This runtime's findings (also in the report's own list).
    #[serde(skip)]
    pub findings: Vec<Finding>,
    /// A crash bisection's cut graph: what it computed, when it ran to its end.
    #[serde(skip)]
    pub cut: Option<Vec<TensorInfo>>,
    #[serde(skip)]
    done: bool,
}

/// How the driving ended, for [`RuntimeReport::finish`].
pub(crate) enum End {
    /// The child process exited (or was killed after `timeout`).
    Child { status: Option<ExitStatus>, timed_out: bool, timeout: Duration, stderr: String },
    /// The driver ran in this process and returned.
    InProcess,
}

impl RuntimeReport {
    /// An empty report for the library at `lib`, found by `source`.
    pub fn new(lib: &Path, source: &str) -> Self {
        RuntimeReport {
            // Until the child reports it; kept when the library cannot even load.
            ort_version: crate::engine::locate::version_from_name(lib),
            ort_path: lib.display().to_string(),
            ort_source: source.to_string(),
            session_seconds: None,
            companions: Vec::new(),
            parity_rule: None,
            cache_pairs: Vec::new(),
            batch: Vec::new(),
            chunk: Vec::new(),
            variant: None,
            window: None,
            levels: None,
            steps: Vec::new(),
            crash: None,
            crashed_in: None,
            encoding: None,
            generated: None,
            probed: None,
            replayed: Vec::new(),
            replay_sources: Vec::new(),
            replay_scores: Vec::new(),
            probes: Vec::new(),
            replay_rows: Vec::new(),
            repros: Vec::new(),
            findings: Vec::new(),
            cut: None,
            done: false,
        }
    }

    fn finding(&self, f: Finding) -> Finding {
        Finding { runtime: self.ort_version.clone(), ..f }
    }

    /// Takes in one event of the driver.
    pub fn absorb(&mut self, ev: Event) {
        match ev {
            Event::Runtime { version, path } => {
                self.ort_version = Some(version);
                self.ort_path = path;
            }
            Event::Session { seconds, .. } => self.session_seconds = Some(seconds),
            Event::Companion { model, seconds, shared } => self.companions.push(Companion { model, seconds, shared }),
            Event::Encoding { model, feeds } => self.encoding = Some((model, feeds)),
            Event::Encoded => self.encoding = None,
            Event::Feeds { variant, step, feeds } => self.steps.push(StepRow {
                step0_past_len: variant,
                step,
                ok: false,
                seconds: None,
                parity_max_abs_diff: None,
                parity_rel_diff: None,
                greedy_agrees: None,
                recompute_seconds: None,
                feeds,
                outputs: Vec::new(),
                error: None,
                failed_node: None,
            }),
            Event::Step {
                variant,
                step,
                outputs,
                seconds,
                parity,
                parity_rel,
                greedy_agrees,
                recompute_seconds,
                issues,
            } => {
                let ok = issues.iter().all(|i| i.severity != Severity::Error);
                if let Some(row) = self.row(variant, step) {
                    row.ok = ok;
                    row.seconds = Some(seconds);
                    row.parity_max_abs_diff = parity;
                    row.parity_rel_diff = parity_rel;
                    row.greedy_agrees = greedy_agrees;
                    row.recompute_seconds = recompute_seconds;
                    row.outputs = outputs;
                }
                for i in issues {
                    let code = i.code;
                    let mut f =
                        Finding::new(code, i.severity, format!("step {step}: {}", i.message)).at_step(step, variant);
                    f.tensor = i.tensor;
                    f.node = i.node;
                    f.cause = i.cause;
                    f.repair = i.repair;
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
            Event::Fatal { stage, message, cause, node } => {
                // A fatal event is an orderly end, not a crash.
                self.done = true;
                let message = clean_ort_message(&message);
                let mut f = Finding::error(stage.code(), format!("{}: {message}", stage.label())).cause(cause);
                f.node = node;
                let f = self.finding(f);
                self.findings.push(f);
            }
            Event::Generated { ids, top5, score } => self.generated = Some((ids, top5, score)),
            Event::Probed { values } => self.probed = Some(values),
            Event::Replayed { call, error, node, sources, scores, rows } => {
                if !rows.is_empty() {
                    self.replay_rows.push((call, rows));
                }
                self.replayed.push((call, error, node));
                self.replay_sources.push((call, sources));
                if !scores.is_empty() {
                    self.replay_scores.push((call, scores));
                }
            }
            Event::Variant { reference, positions, issues } => {
                self.variant = Some((reference, positions));
                self.push_issues(issues);
            }
            Event::Probe { what, issues } => {
                self.probes.push(what);
                self.push_issues(issues);
            }
            Event::Window { probe, issues } => {
                self.window = Some(probe);
                self.push_issues(issues);
            }
            Event::Levels { levels, issues } => {
                self.levels = Some(levels);
                self.push_issues(issues);
            }
            Event::Batch { rows, issues } => {
                self.batch = rows;
                self.push_issues(issues);
            }
            Event::Chunk { rows, issues } => {
                self.chunk = rows;
                self.push_issues(issues);
            }
            Event::Repro(r) => self.repros.push(r),
            Event::Cut { outputs } => self.cut = Some(outputs),
            Event::Done => self.done = true,
        }
    }

    /// Findings of a whole-run check (variant, batch, window): not tied to a step.
    fn push_issues(&mut self, issues: Vec<crate::engine::events::StepIssue>) {
        for i in issues {
            let mut f = Finding::new(i.code, i.severity, i.message).cause(i.cause);
            f.tensor = i.tensor;
            f.node = i.node;
            f.repair = i.repair;
            let f = self.finding(f);
            self.findings.push(f);
        }
    }

    fn row(&mut self, variant: i64, step: usize) -> Option<&mut StepRow> {
        self.steps.iter_mut().rev().find(|r| r.step0_past_len == variant && r.step == step)
    }

    /// A line from the child that is not an event: what it reported is lost,
    /// and the report says so.
    pub(crate) fn unreadable(&mut self, line: String) {
        let f = Finding::error(Code::RunFailed, format!("the check's child process wrote a line that is not an event, so what it reported there is lost: {line}"));
        let f = self.finding(f);
        self.findings.push(f);
    }

    /// Called after the driving ended: a missing `Done` means the child died.
    pub(crate) fn finish(&mut self, end: End) {
        if self.done {
            self.add_dummy_notes();
            return;
        }
        let (how, stderr) = match end {
            End::Child { timed_out: true, timeout, stderr, .. } => {
                (format!("did not finish within {} s and was killed", timeout.as_secs()), stderr)
            }
            End::Child { status, stderr, .. } => (describe_exit(status), stderr),
            End::InProcess => ("stopped without finishing".to_string(), String::new()),
        };
        let last = self.steps.last().filter(|r| r.seconds.is_none() && r.error.is_none()).cloned();
        let mut text = format!("the process running ONNX Runtime {how}");
        let mut f = match (&last, &self.encoding) {
            (None, Some((model, feeds))) => {
                text.push_str(&format!(" while running the encoder {model}, fed {}", describe_feeds(feeds)));
                self.crashed_in = Some(model.clone());
                Finding::error(Code::Crash, text)
            }
            (Some(row), _) => {
                text.push_str(&format!(
                    " at step {} (step-0 past length {}), fed {}",
                    row.step,
                    row.step0_past_len,
                    describe_feeds(&row.feeds)
                ));
                Finding::error(Code::Crash, text).at_step(row.step, row.step0_past_len)
            }
            (None, None) => Finding::error(Code::Crash, text),
        };
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        // A panic of our own driver is a bug of this tool: say where, not the backtrace hint.
        if let Some(i) = lines.iter().position(|l| l.contains("panicked at")) {
            let what = lines.get(i + 1).map(|l| l.trim()).unwrap_or("");
            f.cause = Some(format!("onnx-contract's driver panicked (a bug in this tool): {} {what}", lines[i].trim()));
        } else if let Some(l) = lines.last() {
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

/// A signal's name, and what it says of the process.
pub(crate) fn signal_name(signal: i32) -> &'static str {
    match signal {
        11 => "SIGSEGV (segmentation fault)",
        6 => "SIGABRT (abort)",
        7 => "SIGBUS",
        4 => "SIGILL",
        9 => "SIGKILL",
        8 => "SIGFPE",
        _ => "a signal",
    }
}

/// Whether a process killed by `signal` died of what it ran (a crash), not
/// of something from outside (the out-of-memory killer, a stop request).
pub(crate) fn crash_signal(signal: i32) -> bool {
    matches!(signal, 4 | 6 | 7 | 8 | 11)
}

fn describe_exit(status: Option<ExitStatus>) -> String {
    let Some(status) = status else { return "vanished".into() };
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return format!("was killed by signal {sig}, {}", signal_name(sig));
        }
    }
    format!("exited early with {status}")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ort_messages_lose_their_cpp_location_and_nesting() {
        let m = "Non-zero status code returned while running If node. Name:'optimum::if' Status Message: \
                 Non-zero status code returned while running Reshape node. Name:'/Reshape_5' Status Message: \
                 /onnxruntime_src/onnxruntime/core/providers/cpu/tensor/reshape_helper.h:91 \
                 onnxruntime::ReshapeHelper::ReshapeHelper(const onnxruntime::TensorShape&, bool) \
                 input_shape_size == requested_shape_size was false. The input tensor cannot be reshaped.";
        assert_eq!(innermost_status(m), "The input tensor cannot be reshaped.");
        let load = "Load model failed: /onnxruntime_src/onnxruntime/core/graph/model.cc:256 \
                    onnxruntime::Model::Model(onnx::ModelProto&&, const PathString&) Unsupported model IR version: 14";
        assert_eq!(clean_ort_message(load), "Load model failed: Unsupported model IR version: 14");
        assert_eq!(clean_ort_message("plain"), "plain");
    }

    #[test]
    fn a_child_that_dies_mid_step_is_a_crash_at_that_step() {
        let mut r = RuntimeReport::new(Path::new("/x/libonnxruntime.so.1.31.1"), "test");
        assert_eq!(r.ort_version.as_deref(), Some("1.31.1"));
        let feed = TensorInfo {
            name: "input_ids".into(),
            dtype: crate::model::signature::ElemType::I64,
            shape: Some(vec![1, 1]),
        };
        r.absorb(Event::Feeds { variant: 0, step: 2, feeds: vec![feed] });
        r.finish(End::Child {
            status: None,
            timed_out: false,
            timeout: Duration::from_secs(1),
            stderr: "boom\n".into(),
        });
        let f = &r.findings[0];
        assert_eq!((f.code, f.step), (Code::Crash, Some(2)));
        assert!(f.message.contains("input_ids [1, 1]"), "{}", f.message);
        assert_eq!(f.cause.as_deref(), Some("last runtime message: boom"));
        // A finished run is not a crash.
        let mut ok = RuntimeReport::new(Path::new("lib"), "test");
        ok.absorb(Event::Done);
        ok.finish(End::InProcess);
        assert!(ok.findings.is_empty());
    }
}
