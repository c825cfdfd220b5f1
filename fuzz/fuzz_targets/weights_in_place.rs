//! Any bytes through the rewrite that marks a model's large initializers as
//! external data at their own place in the file: Ok or an error sentence,
//! never a panic, and a model the signature reader reads still reads.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((graph, _)) = onnx_contract::engine::mapped::split(data, "fuzz.onnx") {
        // The rewritten model reads again, and reads as a model where the original did.
        let before = onnx_contract::model::reader::signature_from_bytes(data).is_ok();
        let after = onnx_contract::model::reader::signature_from_bytes(&graph).is_ok();
        assert!(!before || after, "a readable model became unreadable");
    }
});
