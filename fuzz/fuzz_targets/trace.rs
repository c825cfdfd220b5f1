//! Any bytes as a caller trace: parsed into calls or refused with the line
//! to blame, never a panic, a hang or an allocation sized by the input; the
//! calls that parse are then judged by the feed guard against a real
//! decoder's plan (gpt2-tiny), as `replay --static-only` judges them.
#![no_main]
use libfuzzer_sys::fuzz_target;
use onnx_contract::caller::{trace, FeedGuard};
use std::sync::OnceLock;

fn gpt2() -> &'static (onnx_contract::model::signature::Signature, Option<onnx_contract::plan::Plan>) {
    static MODEL: OnceLock<(onnx_contract::model::signature::Signature, Option<onnx_contract::plan::Plan>)> =
        OnceLock::new();
    MODEL.get_or_init(|| {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/gpt2-tiny/model.onnx");
        let guard_model = onnx_contract::model::reader::read_signature(&path).expect("gpt2-tiny");
        let contract = onnx_contract::contract::Contract::resolve("gpt2-decoder", &[]).ok();
        let plan = contract.and_then(|c| onnx_contract::plan::build(&guard_model, &c, 1).ok());
        (guard_model, plan)
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(calls) = trace::parse(data) else { return };
    let (sig, plan) = gpt2();
    let mut guard = FeedGuard::new("model.onnx", sig.clone(), plan.clone());
    for c in &calls {
        let _ = guard.check(c.call, &c.model, &c.feeds);
        guard.observe(c.call, &c.model, &c.feeds, c.outputs.as_ref());
    }
    let _ = guard.summary();
});
