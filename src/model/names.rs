//! Tensor naming conventions exporters use, shared by the folder's role
//! detection, the protocol inference and the plan (all read names; none owns them).

/// A past input of any naming convention in the wild: optimum
/// `past_key_values.N.*`, `past_key_N`, `past.N.key`, onnxruntime-genai
/// `past_key_values.N.key`.
pub fn is_past_name(name: &str) -> bool {
    name.starts_with("past") || name.contains(".past_") || name.contains("past_key")
}

/// A cross-attention past (seq2seq): optimum's `.encoder.`, or `cross` in the
/// name (onnxruntime-genai's `past_key_cross_0`).
pub fn is_cross_name(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.contains(".encoder.") || n.contains("cross")
}

/// The present a past's name points to by the conventions in the wild
/// (`past_key_values.N` → `present.N`, `past…` → `present…`), the first that
/// `usable` accepts, with how it was matched.
pub fn present_by_convention(past: &str, usable: impl Fn(&str) -> bool) -> Option<(String, &'static str)> {
    [
        ("past_key_values", "present", "name: past_key_values.N → present.N (optimum)"),
        ("past", "present", "name: past… → present…"),
    ]
    .into_iter()
    .find_map(|(from, to, how)| {
        let p = past.replacen(from, to, 1);
        (p != past && usable(&p)).then_some((p, how))
    })
}

/// `(layer, key|value, cross?)` of a cache tensor name in any convention
/// (`past_key_values.3.decoder.key`, `past_key_3`, `present.3.value`, `past.3.key`).
pub fn cache_slot(name: &str) -> Option<(i64, &'static str, bool)> {
    let layer = name.split(|c: char| !c.is_ascii_digit()).find(|s| !s.is_empty())?.parse().ok()?;
    // `past_key_values` names the family, not the slot.
    let rest = name.replacen("past_key_values", "", 1);
    let kind = if rest.contains("key") {
        "key"
    } else if rest.contains("value") {
        "value"
    } else {
        return None;
    };
    Some((layer, kind, name.contains("encoder") || name.contains("cross")))
}
