//! Any bytes as a caller trace: parsed into calls or refused with the line
//! to blame, never a panic, a hang or an allocation sized by the input; the
//! calls that parse are then judged by the feed guard against a real
//! decoder's plan (gpt2-tiny), as `replay --static-only` judges them, and
//! the decoding strategy is inferred from them (format 2's row digests, beam
//! groups) with scores made up from the calls' own tokens.
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
    if let Some(plan) = plan {
        // Every row scores every token the next call feeds: the strategy's
        // arithmetic and row bookkeeping run on whatever the trace claims.
        let mut scores = std::collections::BTreeMap::new();
        for (i, c) in calls.iter().enumerate() {
            let rows = c.feeds.get(&plan.input_ids).and_then(|t| t.shape.first().copied()).unwrap_or(0).clamp(0, 64);
            let next: Vec<i64> = calls
                .get(i + 1)
                .and_then(|n| n.feeds.get(&plan.input_ids)?.value.clone())
                .unwrap_or_default();
            let row = onnx_contract::engine::events::RowScores {
                argmax: next.first().copied().unwrap_or(0),
                watched: next.iter().enumerate().map(|(k, &t)| (t, -(k as f64))).collect(),
                top: next.iter().enumerate().map(|(k, &t)| (t, -(k as f64))).collect(),
            };
            scores.insert(c.call, vec![row; rows as usize]);
        }
        let mine: Vec<&trace::Call> = calls.iter().collect();
        let _ = onnx_contract::caller::strategy::infer(plan, &mine, &scores);
    }
});
