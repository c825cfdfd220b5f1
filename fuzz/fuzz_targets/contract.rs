//! Any text as a contract: parse errors carry a location, valid contracts
//! check against a real signature without panicking.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::path::Path;
use std::sync::OnceLock;

fn signature() -> &'static onnx_contract::model::signature::Signature {
    static SIG: OnceLock<onnx_contract::model::signature::Signature> = OnceLock::new();
    SIG.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/marian-tiny/decoder_model_merged.onnx");
        onnx_contract::model::reader::read_signature(&path).expect("fixture model")
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(c) = onnx_contract::contract::parse(Path::new("fuzz.yaml"), text, &[]) {
        let findings = onnx_contract::contract::check(signature(), &c);
        let _ = onnx_contract::render::table::findings_table(&findings);
        let _ = onnx_contract::plan::build(signature(), &c, 1);
    }
});
