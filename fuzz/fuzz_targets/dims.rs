//! Any text as a `dim_param`: parsed, evaluated and inverted without a panic,
//! a hang or a deep recursion (exporters write arbitrary strings there).
#![no_main]
use libfuzzer_sys::fuzz_target;
use onnx_contract::model::dims::Expr;
use std::collections::BTreeMap;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let e = Expr::parse(text);
    let symbols = e.symbols();
    let env: BTreeMap<String, i64> = symbols.iter().map(|s| (s.clone(), 16_000)).collect();
    let _ = e.eval(&env);
    let _ = (e.sum_of_two_symbols(), e.symbol_plus_literal(), e.to_string());
    if let Some(s) = symbols.first() {
        let _ = e.smallest_input_for(s, 1, 1_000_000);
    }
});
