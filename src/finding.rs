//! The one finding type every check produces.

use serde::Serialize;
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        })
    }
}

macro_rules! codes {
    ($($variant:ident = $code:literal: $doc:literal,)*) => {
        /// Stable finding codes. Never renumber or reuse one; the README lists them.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Code { $(#[doc = $doc] $variant,)* }

        impl Code {
            pub const ALL: &'static [Code] = &[$(Code::$variant,)*];
            pub fn as_str(self) -> &'static str {
                match self { $(Code::$variant => $code,)* }
            }
            pub fn doc(self) -> &'static str {
                match self { $(Code::$variant => $doc,)* }
            }
        }
    };
}

codes! {
    InputCount = "input-count": "The model has a different number of inputs than the contract, or misses required ones.",
    InputMissing = "input-missing": "A required contract input is not in the model.",
    InputExtra = "input-extra": "The model has an input the contract does not list.",
    OutputCount = "output-count": "The model has a different number of outputs than the contract, or misses some.",
    OutputMissing = "output-missing": "A contract output is not in the model.",
    OutputExtra = "output-extra": "The model has an output the contract does not list.",
    NotTensor = "not-tensor": "The contract expects a tensor; the model declares another type.",
    Dtype = "dtype": "Element type differs from the contract.",
    Rank = "rank": "Number of dimensions differs from the contract.",
    DimValue = "dim-value": "A dimension has another fixed size than the contract's.",
    DimStatic = "dim-static": "A dimension the contract wants dynamic is fixed in the model.",
    DimDynamic = "dim-dynamic": "A dimension the contract wants fixed is symbolic in the model.",
    DimUnknown = "dim-unknown": "The model declares no size or symbol for an axis the contract constrains.",
    DimName = "dim-name": "A symbolic dimension is named differently from the contract's pinned name.",
    DimBinding = "dim-binding": "One contract dimension variable binds to two different model dims.",
    Order = "order": "Inputs or outputs are in another order than the contract's.",
    RuntimeLoad = "runtime-load": "The ONNX Runtime library could not be loaded.",
    ModelLoad = "model-load": "ONNX Runtime refused to load the model (IR version, opset, unknown operator).",
    Compat = "runtime-compat": "The model needs a newer ONNX Runtime than the target (IR version or opset).",
    Plan = "plan": "The model cannot be driven as a KV-cache decoder (an input nobody knows how to feed, no fixed size).",
    RunFailed = "run-failed": "ONNX Runtime returned an error at a decoding step.",
    Crash = "crash": "The process running ONNX Runtime died (segfault, abort) or hung.",
    StepOutput = "step-output": "An output was not produced at a step.",
    LogitsShape = "logits-shape": "Logits are not [batch, new tokens, vocab].",
    NonFinite = "non-finite": "Logits contain NaN or Inf.",
    CacheGrowth = "cache-growth": "A self-attention present does not grow by the tokens fed.",
    CrossCache = "cross-cache": "A cross-attention present does not keep the encoder length.",
    Parity = "parity": "Cached logits differ from recomputing the prefix without cache.",
    RuntimeSkipped = "runtime-skipped": "The runtime check did not run (static errors first).",
}

/// One difference between a model and what was expected of it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    #[serde(serialize_with = "ser_code")]
    pub code: Code,
    pub severity: Severity,
    pub message: String,
    /// The tensor (or folded tensor family) concerned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tensor: Option<String>,
    /// Every tensor name behind a folded `tensor`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// 1-based line of the contract entry that asked for this check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contract_line: Option<u64>,
    /// Decoding step (runtime findings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<usize>,
    /// Past length fed at step 0 in the run that produced this finding.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step0_past_len: Option<i64>,
    /// Node path, also inside `If` branches (`optimum::if (then_branch) → /Reshape_5`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// One line on what this pattern usually means.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// ONNX Runtime version the finding was seen with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
}

fn ser_code<S: serde::Serializer>(c: &Code, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(c.as_str())
}

impl Finding {
    pub fn new(code: Code, severity: Severity, message: impl Into<String>) -> Self {
        Finding {
            code,
            severity,
            message: message.into(),
            tensor: None,
            names: Vec::new(),
            contract_line: None,
            step: None,
            step0_past_len: None,
            node: None,
            cause: None,
            runtime: None,
        }
    }
    pub fn error(code: Code, message: impl Into<String>) -> Self {
        Self::new(code, Severity::Error, message)
    }
    pub fn warning(code: Code, message: impl Into<String>) -> Self {
        Self::new(code, Severity::Warning, message)
    }
    pub fn tensor(mut self, t: impl Into<String>) -> Self {
        self.tensor = Some(t.into());
        self
    }
    pub fn names(mut self, names: Vec<String>) -> Self {
        self.names = names;
        self
    }
    pub fn at_step(mut self, step: usize, step0_past_len: i64) -> Self {
        self.step = Some(step);
        self.step0_past_len = Some(step0_past_len);
        self
    }
    pub fn cause(mut self, cause: Option<String>) -> Self {
        self.cause = cause;
        self
    }
    pub fn line(mut self, line: Option<u64>) -> Self {
        self.contract_line = line;
        self
    }
}

/// `pass` unless some finding is an error.
pub fn verdict(findings: &[Finding]) -> &'static str {
    if findings.iter().any(|f| f.severity == Severity::Error) {
        "fail"
    } else {
        "pass"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for c in Code::ALL {
            assert!(seen.insert(c.as_str()), "duplicate code {}", c.as_str());
        }
    }
}
