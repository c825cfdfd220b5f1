//! What the child process reports, one JSON object per line on its stdout,
//! so that a crash still leaves the parent the step and feeds it died on.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: String,
    /// `None` when the runtime could not say (tensor not produced).
    pub shape: Option<Vec<i64>>,
}

/// A check of one step's outputs that did not hold.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepIssue {
    /// A `finding::Code` string.
    pub code: String,
    /// `error` or `warning`.
    pub severity: String,
    pub message: String,
    pub tensor: Option<String>,
}

/// The node ONNX Runtime failed in, and what its inputs really were.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FailedNode {
    /// `optimum::if (then_branch) → /Reshape_5`.
    pub path: String,
    pub name: String,
    pub op_type: String,
    /// Shapes at the failing step, from a re-run with these tensors exposed.
    pub inputs: Vec<TensorInfo>,
    /// Why the inputs could not be traced, if they could not.
    pub trace_error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    Runtime {
        version: String,
        path: String,
    },
    Session {
        model: String,
        seconds: f64,
    },
    /// Sent before each run: if the process dies, these were the feeds.
    Feeds {
        variant: i64,
        step: usize,
        feeds: Vec<TensorInfo>,
    },
    Step {
        variant: i64,
        step: usize,
        outputs: Vec<TensorInfo>,
        seconds: f64,
        /// Max |cached - recomputed| of the last position's logits.
        parity: Option<f64>,
        issues: Vec<StepIssue>,
    },
    Failure {
        variant: i64,
        step: usize,
        message: String,
        node: Option<FailedNode>,
        cause: Option<String>,
    },
    /// The run could not start (session creation, missing runtime API, …).
    Fatal {
        stage: String,
        message: String,
        cause: Option<String>,
    },
    Done,
}
