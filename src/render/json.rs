//! JSON reports (one document per command, on stdout).

use crate::contract::Contract;
use crate::diff::{Change, Diff};
use crate::finding::{verdict, Finding};
use crate::runtime::RuntimeReport;
use crate::signature::{Port, Signature, ValueType};
use serde_json::{json, Value};

fn port(p: &Port) -> Value {
    let mut v = json!({ "name": p.name, "kind": p.ty.kind() });
    match &p.ty {
        ValueType::Tensor { elem, shape } | ValueType::SparseTensor { elem, shape } => {
            v["dtype"] = json!(elem);
            v["shape"] = json!(shape);
        }
        other => {
            v["dtype"] = json!(other.to_string());
            v["shape"] = Value::Null;
        }
    }
    v["type"] = json!(p.ty.to_string());
    v
}

pub fn signature(path: &str, sig: &Signature) -> Value {
    json!({
        "file": path,
        "file_size": sig.file_size,
        "ir_version": sig.ir_version,
        "opsets": sig.opsets,
        "producer": sig.producer,
        "producer_version": sig.producer_version,
        "node_count": sig.node_count,
        "if_nodes": sig.if_node_count,
        "subgraph_nodes": sig.subgraph_node_count,
        "initializers": sig.initializer_count,
        "external_data": sig.external_data,
        "inputs": sig.inputs.iter().map(port).collect::<Vec<_>>(),
        "outputs": sig.outputs.iter().map(port).collect::<Vec<_>>(),
    })
}

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
            "a": if r.a.is_empty() { Value::Null } else { json!(r.a) },
            "b": if r.b.is_empty() { Value::Null } else { json!(r.b) },
        })).collect::<Vec<_>>(),
    })
}

pub fn check(model: &str, contract: &Contract, findings: &[Finding], runtimes: &[RuntimeReport]) -> Value {
    let mut v = json!({
        "runtime": runtimes.first(),
        "model": model,
        "contract": contract.path.display().to_string(),
        "contract_name": contract.name,
        "params": contract.params.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "verdict": verdict(findings),
        "findings": findings,
    });
    // One row per runtime when several were checked (`--ort-lib` repeated).
    if runtimes.len() > 1 {
        v["runtimes"] = json!(runtimes);
    }
    v
}

/// An error that stopped the command, for `--format json` callers.
pub fn error(kind: &str, message: &str, exit_code: i32) -> Value {
    json!({ "error": { "kind": kind, "message": message, "exit_code": exit_code } })
}
