//! Tensor naming conventions exporters use, shared by the folder's role
//! detection and the decoding plan (both read names; neither owns them).

/// A past input of any naming convention in the wild: optimum
/// `past_key_values.N.*`, `past_key_N`, `past.N.key`, onnxruntime-genai
/// `past_key_values.N.key`.
pub fn is_past_name(name: &str) -> bool {
    name.starts_with("past") || name.contains(".past_") || name.contains("past_key")
}
