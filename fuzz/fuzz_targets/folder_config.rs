//! Any bytes as config.json / genai_config.json: never a panic; a genai
//! config that parses yields a contract that parses (or a clear error).
#![no_main]
use libfuzzer_sys::fuzz_target;
use onnx_contract::folder::{config::ModelConfig, genai::GenaiConfig};

fuzz_target!(|data: &[u8]| {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else { return };
    let c = ModelConfig::from_value(&v, "config.json");
    let _ = c.get("head_dim");
    if let Ok(g) = GenaiConfig::from_value(&v) {
        let _ = g.contract(&g.config.sizes);
    }
});
