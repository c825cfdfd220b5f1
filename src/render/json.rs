//! JSON documents (one per command, on stdout), all serde-derived from the
//! library's types.

use crate::model::diff::{Change, Diff};
use crate::model::signature::Signature;
use crate::model::summary::ModelSummary;
use serde::Serialize;
use serde_json::{json, Value};

/// Pretty JSON of any report type, newline-terminated.
pub fn to_text<T: Serialize>(value: &T) -> String {
    match serde_json::to_string_pretty(value) {
        Ok(mut s) => {
            s.push('\n');
            s
        }
        // Our types serialise infallibly (string keys, finite structure).
        Err(e) => format!("{{\"error\": {{\"kind\": \"internal\", \"message\": {:?}}}}}\n", e.to_string()),
    }
}

/// `sig --format json`.
pub fn signature(path: &str, sig: &Signature, external_data_problems: Vec<String>) -> Value {
    json!(ModelSummary::of(path, sig, external_data_problems))
}

/// `diff --format json`.
pub fn diff(a: &str, b: &str, d: &Diff) -> Value {
    json!({
        "a": a,
        "b": b,
        "identical": d.is_empty(),
        "header": d.header.iter().map(|h| json!({"field": h.field, "a": h.a, "b": h.b, "same": h.a == h.b})).collect::<Vec<_>>(),
        "differences": d.rows.iter().map(|r| json!({
            "side": r.side,
            "change": match r.change { Change::OnlyInA => "only_in_a", Change::OnlyInB => "only_in_b", Change::Differs => "differs" },
            "tensor": r.label,
            "names": r.names,
            "a": r.a_port,
            "b": r.b_port,
        })).collect::<Vec<_>>(),
    })
}

/// An error that stopped the command, for `--format json` callers.
pub fn error(kind: &str, message: &str, exit_code: i32) -> Value {
    json!({ "error": { "kind": kind, "message": message, "exit_code": exit_code } })
}
