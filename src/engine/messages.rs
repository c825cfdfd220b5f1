//! ONNX Runtime's error messages made readable: the C++ source location and
//! signature dropped, the innermost status of nested `If` messages found.

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
pub(crate) fn innermost_status(message: &str) -> String {
    let m = message.rsplit("Status Message: ").next().unwrap_or(message);
    // Drop the C++ source location prefix ORT puts before the reason.
    let m = match m.find(" was false. ") {
        Some(i) => m[i + " was false. ".len()..].to_string(),
        None => clean_ort_message(m),
    };
    m.split_whitespace().collect::<Vec<_>>().join(" ")
}
