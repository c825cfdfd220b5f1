//! Cause sentences: one line on what a failure usually means, for a runtime
//! that cannot load, a session that cannot be created and a run that fails
//! (a length baked in at export, a static axis, a signature mismatch).

use crate::engine::events::FailedNode;

pub(crate) fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

pub(crate) fn runtime_version(lib: &std::path::Path) -> String {
    if let Some(v) = crate::engine::locate::version_from_name(lib) {
        return v;
    }
    // ORT's build info names the release branch: `git-branch=rel-1.31.1`.
    let info = ort::info();
    info.split(|c: char| c == ',' || c.is_whitespace())
        .find_map(|p| p.strip_prefix("git-branch=rel-"))
        .map(str::to_string)
        .unwrap_or_else(|| "unknown".into())
}

pub(crate) fn load_error_cause(e: &ort::LoadDynamicError) -> Option<String> {
    match e {
        ort::LoadDynamicError::Dlopen { error, .. } => {
            let reason = std::error::Error::source(error).map(|s| s.to_string()).unwrap_or_else(|| error.to_string());
            Some(format!("the file could not be loaded as a shared library: {reason}"))
        }
        ort::LoadDynamicError::MissingApi { .. } => {
            Some("the library is not ONNX Runtime (no OrtGetApiBase symbol)".into())
        }
        ort::LoadDynamicError::BadVersion { version_str, .. } => {
            Some(format!("ONNX Runtime {version_str} is older than 1.17, the oldest API this build supports"))
        }
        ort::LoadDynamicError::InvalidVersionString => None,
    }
}

pub(crate) fn session_cause(message: &str) -> Option<String> {
    if message.contains("IR version") {
        Some("the model's IR version is newer than this ONNX Runtime accepts: re-save it with an older IR or use a newer runtime".into())
    } else if message.contains("not a registered function/op")
        || message.contains("No opset import for domain")
        || message.contains("Could not find an implementation")
    {
        Some("the model uses an operator (or opset) this ONNX Runtime does not implement".into())
    } else if message.contains("only *guarantees* support for models stamped with official released onnx opset")
        || (message.contains("opset") && message.contains("is under development"))
    {
        Some("the model's opset is newer than this ONNX Runtime supports".into())
    } else {
        None
    }
}

/// One line on what the failure pattern usually means.
pub(crate) fn failure_cause(message: &str, step: usize, past_len: i64, node: Option<&FailedNode>) -> Option<String> {
    if message.contains("Missing Input")
        || message.contains("Invalid input name")
        || message.contains("Invalid Feed Input Name")
    {
        return Some(
            "signature mismatch: the model does not have the inputs a correct caller feeds (see the static findings)"
                .into(),
        );
    }
    if message.contains("Got invalid dimensions") {
        return Some(
            "a static axis in the declared signature: the model fixed this input's size at export time".into(),
        );
    }
    let op = node.map(|n| n.op_type.as_str()).unwrap_or("");
    let shape_op =
        matches!(op, "Reshape" | "Expand" | "Concat" | "Add" | "Mul" | "Where" | "MatMul" | "Softmax" | "Sub" | "Div")
            || message.contains("Reshape")
            || message.contains("broadcast")
            || message.contains("Broadcast");
    if shape_op && step > 0 {
        let numbers: Vec<i64> = message.split(|c: char| !c.is_ascii_digit()).filter_map(|s| s.parse().ok()).collect();
        let tracks = numbers.contains(&(past_len + 1)) || numbers.contains(&past_len);
        if tracks {
            return Some(format!(
                "a sequence length fixed at export time: step {step} feeds a past of length {past_len} and the numbers in the error track it; earlier steps worked (a Python int or constant shape captured while tracing)"
            ));
        }
        return Some(format!("a shape mismatch that appears only once the cache has grown (step {step}): suspect a length baked in at export time"));
    }
    None
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// ORT 1.31.1's message for the baked-past Marian at step 2 (models/marian-baked-past).
    pub(crate) const BAKED: &str =
        "Non-zero status code returned while running If node. Name:'optimum::if' Status Message: \
        Non-zero status code returned while running Reshape node. Name:'/Reshape_5' Status Message: \
        The input tensor cannot be reshaped to the requested shape. Input shape:{1,8,3,4}, requested shape:{1,8,2,4}";

    fn node(op: &str) -> FailedNode {
        FailedNode { path: "p".into(), name: "n".into(), op_type: op.into(), inputs: vec![], trace_error: None }
    }

    #[test]
    fn cause_rules_name_the_mechanism() {
        // Numbers tracking the past length at a cached step: a length baked in at export.
        let c = failure_cause(BAKED, 2, 2, Some(&node("Reshape"))).unwrap();
        assert!(c.contains("fixed at export time") && c.contains("step 2"), "{c}");
        // A shape error after the cache grew, numbers not tracking it: still the grown cache.
        let c =
            failure_cause("running Expand node ... invalid expand shape {7}", 3, 40, Some(&node("Expand"))).unwrap();
        assert!(c.contains("only once the cache has grown"), "{c}");
        // At step 0 a shape error is not blamed on the cache.
        assert_eq!(failure_cause(BAKED, 0, 0, Some(&node("Reshape"))), None);
        // Feeding inputs the model does not have: the signature.
        let c = failure_cause("Invalid input name: use_cache_branch", 0, 0, None).unwrap();
        assert!(c.starts_with("signature mismatch"), "{c}");
        // A fixed axis refused by the runtime's input check.
        let c =
            failure_cause("Got invalid dimensions for input: input_ids for the following indices", 1, 1, None).unwrap();
        assert!(c.contains("static axis"), "{c}");
        assert_eq!(failure_cause("out of memory", 2, 2, Some(&node("Gemm"))), None);
    }

    #[test]
    fn load_failures_measured_here_get_their_cause() {
        // Messages from ONNX Runtime 1.31.1, 1.20.1 and 1.22.0.
        let ir = "Unsupported model IR version: 14, max supported IR version: 13";
        assert!(session_cause(ir).unwrap().contains("IR version is newer"));
        let op = "Fatal error: com.example:NoSuchOp(-1) is not a registered function/op";
        assert!(session_cause(op).unwrap().contains("does not implement"));
        let opset = "ONNX Runtime only *guarantees* support for models stamped with official released onnx opset versions. Opset 22 is under development";
        assert!(session_cause(opset).unwrap().contains("opset is newer"));
        assert_eq!(session_cause("something else"), None);
    }
}
