//! A config's sliding window against the graph, statically: onnxruntime-genai
//! (and any exporter using GroupQueryAttention) implements the window as the
//! operator's `local_window_size`; `-1` attends to the whole past. A window
//! the config states and no windowed attention in the graph is consistent
//! with itself and wrong (sonos/tract#2323), at any length, probed or not.

use super::config::SlidingWindow;
use crate::finding::{Code, Finding};
use crate::model::signature::Signature;

/// The finding when the graph's GroupQueryAttention windows do not implement
/// `window` (graphs without GroupQueryAttention are left to the runtime probe).
pub fn check(window: &SlidingWindow, rel: &str, sig: &Signature) -> Option<Finding> {
    let found = &sig.attention_windows;
    if found.is_empty() {
        return None;
    }
    // One GroupQueryAttention per layer, in layer order.
    let expected: Vec<usize> = match &window.layers {
        Some(layers) => layers.iter().copied().filter(|&l| l < found.len()).collect(),
        None => (0..found.len()).collect(),
    };
    // An off-by-one (inclusive or exclusive of the current token) is a convention, not a missing window.
    let wrong: Vec<usize> = expected.iter().copied().filter(|&l| (found[l] - window.size).abs() > 1).collect();
    let &first = wrong.first()?;
    let values: std::collections::BTreeSet<i64> = wrong.iter().map(|&l| found[l]).collect();
    let values: Vec<String> = values.iter().map(i64::to_string).collect();
    let mut f = Finding::error(
        Code::SlidingWindow,
        format!(
            "{} = {}, but {rel} has GroupQueryAttention local_window_size = {} in {} of the {} windowed layers (first: layer {first})",
            window.source,
            window.size,
            values.join(", "),
            wrong.len(),
            expected.len()
        ),
    );
    f.cause = Some(if values.iter().all(|v| v.parse::<i64>().is_ok_and(|v| v <= 0)) {
        "local_window_size -1 attends to the whole past: the export dropped the window the model was trained with, so generation past the window departs from the framework while cached and uncached runs agree".into()
    } else {
        "the graph's window is not the config's: tokens the model should (or should not) see are attended".into()
    });
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn sig(folder: &str) -> Signature {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("models").join(folder).join("model.onnx");
        crate::model::reader::read_signature(&root).unwrap()
    }

    #[test]
    fn group_query_attention_windows_are_read_and_compared_with_the_config() {
        let w = |size, layers| SlidingWindow { size, source: "config.json: sliding_window".into(), layers };
        let kept = sig("mistral-genai");
        assert_eq!(kept.attention_windows, [8, 8]);
        assert!(check(&w(8, None), "model.onnx", &kept).is_none());
        let dropped = sig("mistral-genai-no-window");
        assert_eq!(dropped.attention_windows, [-1, -1]);
        let f = check(&w(8, None), "model.onnx", &dropped).unwrap();
        assert_eq!(f.code, Code::SlidingWindow);
        assert!(f.message.contains("sliding_window = 8, but model.onnx has GroupQueryAttention local_window_size = -1 in 2 of the 2 windowed layers (first: layer 0)"), "{}", f.message);
        // Only the windowed layers are asked for a window; another size is named.
        assert!(check(&w(8, Some(vec![])), "model.onnx", &dropped).is_none());
        let other = check(&w(4096, Some(vec![1])), "model.onnx", &kept).unwrap();
        assert!(
            other.message.contains("local_window_size = 8 in 1 of the 1 windowed layers (first: layer 1)"),
            "{}",
            other.message
        );
        // No GroupQueryAttention: the runtime probe speaks.
        assert!(sig("llama-tiny").attention_windows.is_empty());
        assert!(check(&w(8, None), "model.onnx", &sig("llama-tiny")).is_none());
    }
}
