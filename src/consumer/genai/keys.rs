//! The keys onnxruntime-genai's strict parser accepts (`src/config.cpp`:
//! every `*_Element::OnValue` throws `Unknown value "<key>"` for any other,
//! at `og.Model`), and the sliding-window block's defaults.

use crate::finding::{Code, Finding};
use serde_json::Value;

/// Keys genai's strict parser refuses where people put them (`src/config.cpp`:
/// each `*_Element::OnValue` throws `Unknown value "<key>"` for a key it does
/// not know; verified on 0.18): transformers' names copied over.
const UNKNOWN_KEYS: &[(&str, &str)] = &[
    ("model", "max_position_embeddings"),
    ("model", "model_type"),
    ("model.decoder", "rope_theta"),
    ("model.decoder", "intermediate_size"),
    ("search", "max_new_tokens"),
];

/// The keys genai 0.18 accepts in these sections (`src/config.cpp`:
/// `DecoderInputs_Element`, `DecoderOutputs_Element`, `SlidingWindow_Element`,
/// `Search_Element`, plus the keys 0.18 added); any other fails at `og.Model`.
const SECTION_KEYS: &[(&str, &[&str])] = &[
    (
        "model.decoder.inputs",
        &[
            "input_ids",
            "inputs_embeds",
            "attention_mask",
            "position_ids",
            "past_key_names",
            "past_value_names",
            "past_names",
            "cross_past_key_names",
            "cross_past_value_names",
            "past_sequence_length",
            "current_sequence_length",
            "total_sequence_length",
            "past_key_values_length",
            "cache_indirection",
            "encoder_hidden_states",
            "encoder_attention_mask",
            "rnn_states_prev",
            "cumulative_sequence_lengths",
            "past_sequence_lengths",
            "block_table",
            "block_table_windowed",
            "attention_metadata",
            "past_conv_names",
            "hidden_states",
            "targets",
            "lstm_hidden_state",
            "lstm_cell_state",
            "per_layer_inputs",
            "targets_length",
            "past_key_scale_names",
            "past_value_scale_names",
            "past_recurrent_names",
            "state_update_capture_count",
            "state_update_active",
            "logits_indices",
        ],
    ),
    (
        "model.decoder.outputs",
        &[
            "logits",
            "present_key_names",
            "present_value_names",
            "present_names",
            "output_cross_qk_names",
            "rnn_states",
            "present_conv_names",
            "hidden_states",
            "outputs",
            "lstm_hidden_state",
            "lstm_cell_state",
            "outputs_length",
            "present_key_scale_names",
            "present_value_scale_names",
            "present_recurrent_names",
            "state_update_conv_value_names",
            "state_update_recurrent_capsule_names",
        ],
    ),
    (
        "model.decoder.sliding_window",
        &["window_size", "pad_value", "alignment", "slide_key_value_cache", "slide_inputs", "cache_slack", "layers"],
    ),
    (
        "search",
        &[
            "min_length",
            "max_length",
            "batch_size",
            "num_beams",
            "num_return_sequences",
            "top_k",
            "no_repeat_ngram_size",
            "random_seed",
            "top_p",
            "temperature",
            "repetition_penalty",
            "length_penalty",
            "diversity_penalty",
            "blank_penalty",
            "chunk_size",
            "do_sample",
            "past_present_share_buffer",
            "early_stopping",
        ],
    ),
];

/// Keys genai's parser refuses: unknown ones in the sections whose keys are
/// known whole, and transformers' names people copy in.
pub(super) fn check(g: &Value) -> Vec<Finding> {
    let mut out = Vec::new();
    let refused = |section: &str, key: &str| {
        let path = section.replace('.', ":");
        config_error(
            &format!("{section}.{key}"),
            format!("{section}.{key} is not a key onnxruntime-genai knows: og.Model fails while parsing (\"JSON Error: {path}: Unknown value \\\"{key}\\\"\"); remove it"),
        )
    };
    for (section, key) in UNKNOWN_KEYS {
        if at(g, section).and_then(|s| s.get(key)).is_some() {
            out.push(refused(section, key));
        }
    }
    for (section, known) in SECTION_KEYS {
        for key in at(g, section).and_then(Value::as_object).into_iter().flat_map(|m| m.keys()) {
            if !known.contains(&key.as_str()) {
                out.push(refused(section, key));
            }
        }
    }
    // An unknown top-level object or array is refused too (a scalar is ignored).
    for (key, v) in g.as_object().into_iter().flatten() {
        if (v.is_object() || v.is_array()) && !["model", "search", "speculative", "engine"].contains(&key.as_str()) {
            out.push(config_error(key, format!("top-level `{key}` is not a section onnxruntime-genai knows: og.Model fails while parsing (\"Unknown value \\\"{key}\\\"\"); remove it")));
        }
    }
    // The sliding-window block's defaults select QNN's windowed cache and inputs.
    if let Some(w) = at(g, "model.decoder.sliding_window").filter(|w| w.is_object()) {
        for key in ["slide_key_value_cache", "slide_inputs"] {
            if w.get(key).and_then(Value::as_bool) != Some(false) {
                out.push(config_error(&format!("model.decoder.sliding_window.{key}"), format!("model.decoder.sliding_window.{key} is not false: it defaults to true, which selects the windowed cache and inputs of NPU builds; on CPU and CUDA generation fails (\"Expected input data type to be uint8_t for WindowedKeyValueCache\", or a total_sequence_length mismatch in GroupQueryAttention); set it to false, as the builder writes")));
            }
        }
    }
    out
}

/// `dotted` (`model.decoder.filename`) in a config.
pub(super) fn at<'v>(v: &'v Value, dotted: &str) -> Option<&'v Value> {
    dotted.split('.').try_fold(v, |v, k| v.get(k))
}

/// A consumer-config error about `key`.
pub(super) fn config_error(key: &str, message: String) -> Finding {
    Finding::error(Code::ConsumerConfig, format!("genai_config.json: {message}")).tensor(key)
}
