//! What the child process reports, one JSON object per line on its stdout,
//! so that a crash still leaves the parent the step and feeds it died on.
//! Typed end to end: codes, severities and element types are the library's
//! own enums, serialised by serde, never strings compared later.

use crate::finding::{Code, Severity};
use crate::model::signature::ElemType;
use serde::{Deserialize, Serialize};

/// A generation's new token ids and, per token, the five highest `(id, logit)`.
pub type Generated = (Vec<i64>, Vec<Vec<(i64, f64)>>, f64);

/// A tensor's name, element type and shape, as fed or as produced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TensorInfo {
    /// Input or output name.
    pub name: String,
    /// Element type (`undefined` when the runtime could not say).
    pub dtype: ElemType,
    /// `None` when the runtime could not say (tensor not produced).
    pub shape: Option<Vec<i64>>,
}

/// A check of one step's outputs that did not hold.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StepIssue {
    /// Which check.
    pub code: Code,
    /// Error or warning.
    pub severity: Severity,
    /// What was seen against what was expected.
    pub message: String,
    /// The tensor concerned.
    pub tensor: Option<String>,
    /// The node it points at (the first non-finite node).
    #[serde(default)]
    pub node: Option<String>,
    /// The mechanism.
    #[serde(default)]
    pub cause: Option<String>,
    /// What a remedy would change.
    #[serde(default)]
    pub repair: Option<crate::finding::Repair>,
}

impl StepIssue {
    /// An error about `tensor`.
    pub fn error(code: Code, message: String, tensor: Option<&str>) -> Self {
        StepIssue {
            code,
            severity: Severity::Error,
            message,
            tensor: tensor.map(str::to_string),
            node: None,
            cause: None,
            repair: None,
        }
    }

    /// Information: what was not measured, and why.
    pub fn info(code: Code, message: String, tensor: Option<&str>) -> Self {
        StepIssue { severity: Severity::Info, ..StepIssue::error(code, message, tensor) }
    }
}

/// The node ONNX Runtime failed in, and what its inputs really were.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FailedNode {
    /// `optimum::if (then_branch) → /Reshape_5`.
    pub path: String,
    /// The node's own name.
    pub name: String,
    /// Its operator.
    pub op_type: String,
    /// Shapes at the failing step, from a re-run with these tensors exposed.
    pub inputs: Vec<TensorInfo>,
    /// Why the inputs could not be traced, if they could not.
    pub trace_error: Option<String>,
}

/// A minimal reproduction of a finding, written for `--repro DIR`: the
/// failing node with the least upstream graph that still shows the problem.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Repro {
    /// The folder written (`DIR/<file>-<code>`).
    pub dir: String,
    /// The finding it reproduces.
    pub code: Code,
    /// The node, `path (Op)`.
    pub node: String,
    /// Nodes in the checked model (subgraphs included) and in the reduction.
    pub nodes: (usize, usize),
    /// Bytes of the checked model and of the reduced one.
    pub bytes: (u64, u64),
    /// What running the reduction here showed: the same error, the NaN/Inf
    /// count against float32, or the departure from the fp32 node.
    pub observed: String,
    /// Whether it shows the problem; when it does not, nothing was written.
    pub reproduces: bool,
}

/// Where a run stopped before stepping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Loading the ONNX Runtime library.
    Runtime,
    /// Creating the model's session.
    Session,
    /// Deciding the feeds.
    Plan,
    /// Running the encoder that produces the decoder's encoder states.
    Encoder,
    /// Loading the separate no-cache model.
    NoCacheModel,
    /// The child process itself (bad job, cannot start).
    Child,
}

impl Stage {
    /// The finding code a failure at this stage becomes.
    pub fn code(self) -> Code {
        match self {
            Stage::Runtime => Code::RuntimeLoad,
            Stage::Session => Code::ModelLoad,
            Stage::Child => Code::Crash,
            Stage::Plan | Stage::Encoder | Stage::NoCacheModel => Code::Plan,
        }
    }

    /// For messages: `session`, `no-cache model`, …
    pub fn label(self) -> &'static str {
        match self {
            Stage::Runtime => "runtime",
            Stage::Session => "session",
            Stage::Plan => "plan",
            Stage::Encoder => "encoder",
            Stage::NoCacheModel => "no-cache model",
            Stage::Child => "child",
        }
    }
}

/// One line of the child's report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The library loaded.
    Runtime {
        /// Its version.
        version: String,
        /// Its path.
        path: String,
    },
    /// The model's session was created.
    Session {
        /// The model.
        model: String,
        /// How long it took.
        seconds: f64,
    },
    /// A companion model's session (the folder's encoder) taken by the job:
    /// created by it, or shared with another job of the check.
    Companion {
        /// The companion model.
        model: String,
        /// How long its session took to create.
        seconds: f64,
        /// Created by another job of this check, and reused.
        shared: bool,
    },
    /// Sent before the folder's encoder runs (to produce the decoder's
    /// states): if the process dies before the next event, it died in there.
    Encoding {
        /// The encoder model.
        model: String,
        /// Every feed's dtype and shape.
        feeds: Vec<TensorInfo>,
    },
    /// Ended an `Encoding`: the encoder ran.
    Encoded,
    /// Sent before each run: if the process dies, these were the feeds.
    Feeds {
        /// The step-0 past length of this run.
        variant: i64,
        /// The step.
        step: usize,
        /// Every feed's dtype and shape.
        feeds: Vec<TensorInfo>,
    },
    /// A step ran; its outputs and the checks that did not hold.
    Step {
        /// The step-0 past length of this run.
        variant: i64,
        /// The step.
        step: usize,
        /// Every output's dtype and shape.
        outputs: Vec<TensorInfo>,
        /// Run time.
        seconds: f64,
        /// Max |cached - recomputed| of the last position's logits.
        parity: Option<f64>,
        /// `parity` over max |recomputed logit|.
        #[serde(default)]
        parity_rel: Option<f64>,
        /// Whether the greedy token is the same on both paths.
        #[serde(default)]
        greedy_agrees: Option<bool>,
        /// How long recomputing the prefix without the cache took.
        #[serde(default)]
        recompute_seconds: Option<f64>,
        /// Checks that did not hold.
        issues: Vec<StepIssue>,
    },
    /// ONNX Runtime returned an error at a step.
    Failure {
        /// The step-0 past length of this run.
        variant: i64,
        /// The step.
        step: usize,
        /// ONNX Runtime's message.
        message: String,
        /// The node it failed in, when the message names one.
        node: Option<FailedNode>,
        /// The mechanism, when the pattern is known.
        cause: Option<String>,
    },
    /// The run could not start (session creation, missing runtime API, …).
    Fatal {
        /// Where it stopped.
        stage: Stage,
        /// Why.
        message: String,
        /// The mechanism, when known.
        cause: Option<String>,
        /// The node the message names, with its `If` branch, when it names one.
        #[serde(default)]
        node: Option<String>,
    },
    /// A probe's tensors at the last position, row 0 (as float32; a tensor
    /// the run did not give as floats is left out).
    Probed {
        /// (name, values).
        values: Vec<(String, Vec<f32>)>,
    },
    /// A reference generation's result.
    Generated {
        /// The new token ids.
        ids: Vec<i64>,
        /// The five highest logits (id, logit) of every new token (greedy only).
        top5: Vec<Vec<(i64, f64)>>,
        /// The new tokens' summed log-probability.
        #[serde(default)]
        score: f64,
    },
    /// A variant against the fp32 model, teacher-forced: (position, max |Δ|, relative, top-1 agrees).
    Variant {
        /// The fp32 model.
        reference: String,
        /// Per generated position.
        positions: Vec<(usize, f64, f64, bool)>,
        /// Departures beyond the form's bound.
        issues: Vec<StepIssue>,
    },
    /// A left-padded batch against its rows run alone.
    Batch {
        /// (row, step, max |Δ|, relative, greedy agrees) for each row and step.
        rows: Vec<(usize, usize, f64, f64, bool)>,
        /// Rows beyond the tolerance.
        issues: Vec<StepIssue>,
    },
    /// A chunk of several tokens onto a non-empty cache against the uncached
    /// run: (position in the chunk, max |Δ|, relative, greedy agrees).
    Chunk {
        /// Every position of the chunk.
        rows: Vec<(usize, f64, f64, bool)>,
        /// Positions beyond the tolerance.
        issues: Vec<StepIssue>,
    },
    /// The sliding-window probe: the cache changed outside and inside the window.
    Window {
        /// What was measured.
        probe: WindowProbe,
        /// A window the graph ignores.
        issues: Vec<StepIssue>,
    },
    /// `--deep`: the steps of the first run re-run with graph optimizations disabled.
    Levels {
        /// What was compared.
        levels: Levels,
        /// Optimization changes beyond the tolerance.
        issues: Vec<StepIssue>,
    },
    /// A probe of one input's effect (multimodal position rows): what was
    /// changed and how far the logits moved, and the issues it found.
    Probe {
        /// What was changed, and the figure.
        what: String,
        /// What the probe shows wrong.
        issues: Vec<StepIssue>,
    },
    /// A re-run recorded call: ONNX Runtime's error, if it failed.
    Replayed {
        /// The call's index in the trace.
        call: usize,
        /// The error, when it failed.
        error: Option<String>,
        /// The node it failed in.
        node: Option<FailedNode>,
        /// Each feed and where its values came from.
        #[serde(default)]
        sources: Vec<(String, FeedSource)>,
        /// Per row of the logits' last position: what the decoding strategy
        /// is judged on (empty for a call with no logits, or a failed one).
        #[serde(default)]
        scores: Vec<RowScores>,
        /// Row digests a format-1 trace lacks, from the re-run where it is
        /// bit-exact: `feed:NAME` or `output:NAME`, and the rows' digests;
        /// and what a caller-kept buffer was shown to be: `kept:NAME` (a
        /// correct update) or `unkept:NAME`, with the words.
        #[serde(default)]
        rows: ComputedRows,
    },
    /// A minimal reproduction was written (or tried) for `--repro`.
    Repro(Repro),
    /// A crash bisection's cut graph ran to its end: the tensors it computed.
    Cut {
        /// The cut graph's outputs, with their element types and shapes.
        outputs: Vec<TensorInfo>,
    },
    /// Every run finished.
    Done,
}

/// Row digests computed from a bit-exact re-run: `feed:NAME` or
/// `output:NAME`, and each row's digest.
pub type ComputedRows = Vec<(String, Vec<String>)>;

/// One row's next-token log-probabilities at its last position, as the
/// re-run computed them: the argmax, and the tokens asked for.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RowScores {
    /// The most likely next token.
    pub argmax: i64,
    /// `(token, log-probability)` of each watched token (-1e30 for an
    /// impossible one: JSON has no -inf).
    pub watched: Vec<(i64, f64)>,
    /// The row's most likely tokens with their log-probabilities, best
    /// first: the candidates a beam search chooses from.
    #[serde(default)]
    pub top: Vec<(i64, f64)>,
}

/// How the logits moved when one cached position was changed, in the windowed
/// layers only: far outside the window, and just inside it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WindowProbe {
    /// The window size.
    pub size: usize,
    /// Where it was stated (`config.json: sliding_window`).
    pub source: String,
    /// The past length fed (the window + 2).
    pub past_len: usize,
    /// max |Δ| of the logits when position 0 (outside the window) changes.
    pub outside: f64,
    /// max |Δ| when the newest past position (inside the window) changes.
    pub inside: f64,
}

/// The same feeds at two graph optimization levels: the logits' departure per step.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Levels {
    /// The level the steps ran at (ONNX Runtime's default: `all`).
    pub ran_at: String,
    /// The level they were re-run at (`disabled`).
    pub rerun_at: String,
    /// (step, max |Δ|, relative) of the logits for every re-run step.
    pub steps: Vec<(usize, f64, f64)>,
}

/// Where a re-run feed's values came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum FeedSource {
    /// The trace holds its values (small integers, or zeros by their digest).
    Recorded,
    /// An earlier re-run call's output, the one the trace's digests equal.
    Chained,
    /// Built from the protocol (positions, cache slots, a mask of ones).
    Protocol,
    /// Only a digest in the trace: seeded values (ids within the vocabulary).
    Seeded,
    /// The previous call's present gathered by the rows another past of the
    /// same call was shown (by its digest) to be: a later layer whose re-run
    /// is not bit-exact with the caller's.
    Gathered,
    /// An earlier output repeated per beam (encoder states, cross caches) or
    /// cropped to an accepted length, its digest the one recorded.
    Hypothesis,
    /// A buffer the caller keeps (the presents hold only the new rows): its
    /// previous value with the previous present put in, its digest the one recorded.
    Kept,
}

/// A companion model's session a run took: one session per file and check,
/// created by the first job that needs it and shared by the others.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct Companion {
    /// The model file.
    pub model: String,
    /// How long its session took to create.
    pub seconds: f64,
    /// Created by another job of the check and reused by this one.
    pub shared: bool,
}
