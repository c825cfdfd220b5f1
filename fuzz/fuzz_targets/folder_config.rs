//! Any bytes as config.json / genai_config.json: never a panic (sizes and
//! rope fields alike); a genai
//! config that parses yields a contract that parses (or a clear error).
#![no_main]
use libfuzzer_sys::fuzz_target;
use onnx_contract::folder::{config::ModelConfig, genai::GenaiConfig, rope::Rope};

fuzz_target!(|data: &[u8]| {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else { return };
    let c = ModelConfig::from_value(&v, "config.json");
    let _ = c.get("head_dim");
    // The rope fields: a rotary or a clear error naming the field, never a panic,
    // and frequencies for any sequence length.
    if let Ok(Some(r)) = Rope::from_config(&v) {
        for len in [0, 1, 4096, i64::MAX] {
            let _ = r.inv_freq(len);
        }
        let _ = r.attention_scaling();
    }
    if let Ok(g) = GenaiConfig::from_value(&v) {
        let _ = g.contract(&g.config.sizes);
    }
});
