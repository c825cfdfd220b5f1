//! Any bytes: the signature reader returns Ok or an error sentence, never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(sig) = onnx_contract::model::reader::signature_from_bytes(data) {
        // Rendering must cope with whatever was read.
        let _ = onnx_contract::render::table::signature("fuzz.onnx", &sig, false);
        let _ = onnx_contract::render::json::signature("fuzz.onnx", &sig, Vec::new()).to_string();
        let _ = onnx_contract::contract::init::init(&sig, "fuzz.onnx");
        // So must the protocol inference, on any signature and its dim expressions.
        let _ = onnx_contract::plan::infer::infer(&sig, &Default::default());
    }
});
