//! Any bytes as config.json / genai_config.json: never a panic (sizes,
//! rope fields and multipliers alike); a genai
//! config that parses yields a contract that parses (or a clear error); every
//! consumer's loading rules run on it (as config.json, generation_config.json
//! and genai_config.json of a folder holding gpt2-tiny and a genai model).
#![no_main]
use libfuzzer_sys::fuzz_target;
use onnx_contract::consumer::{self, Consumer, ModelFile, Target, View};
use onnx_contract::folder::{config::ModelConfig, genai::GenaiConfig, rope::Rope, Role};
use onnx_contract::model::reader::signature_from_bytes;

static GPT2: &[u8] = include_bytes!("../../models/gpt2-tiny/model.onnx");
static GENAI: &[u8] = include_bytes!("../../models/llama-genai/model.onnx");

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
    // The multipliers, ALiBi slopes and fields said unread (MiniCPM's) a config states.
    let _ = onnx_contract::folder::scales::from_config(&v);
    if let Ok(g) = GenaiConfig::from_value(&v) {
        let _ = g.contract(&g.config.sizes);
    }
    let (gpt2, genai) = (signature_from_bytes(GPT2).unwrap(), signature_from_bytes(GENAI).unwrap());
    let models = vec![
        ModelFile { rel: "model.onnx", base: "model", variant: None, role: Role::DecoderOnly, sig: &genai },
        ModelFile { rel: "onnx/model_q4.onnx", base: "model", variant: Some("q4"), role: Role::DecoderOnly, sig: &gpt2 },
    ];
    let files = ["model.onnx", "model.onnx.data", "onnx/model_q4.onnx", "onnx/model.onnx_data"].map(String::from);
    let view = View {
        files: files.into_iter().collect(),
        models,
        config: Some(v.clone()),
        generation: Some(v.clone()),
        genai: Some(v),
    };
    let targets: Vec<Target> = Consumer::ALL
        .iter()
        .flat_map(|c| [2, 3].map(|major| Target::new(*c, major, "fuzz")))
        .collect();
    let _ = consumer::check(&view, &targets);
    let _ = consumer::targets(&view, &consumer::Choice::Infer);
});
