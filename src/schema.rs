//! JSON Schemas of every document the tool writes and of the contract YAML,
//! generated from the types themselves (`schemars`), so they cannot drift:
//! `tests/schemas.rs` keeps the committed copies in `schemas/` in sync.

use crate::checker::report::Params;
use crate::finding::Code;
use crate::model::signature::{Dim, ElemType};
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use std::borrow::Cow;

impl JsonSchema for Code {
    fn schema_name() -> Cow<'static, str> {
        "Code".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let names: Vec<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
        json_schema!({ "type": "string", "enum": names, "description": "A stable finding code (docs/findings.md)." })
    }
}

impl JsonSchema for ElemType {
    fn schema_name() -> Cow<'static, str> {
        "ElemType".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "description": "An ONNX element type by name (float32, float16, int64, bool, …), `undefined`, or `elem_type(N)` for codes newer than this tool."
        })
    }
}

impl JsonSchema for Dim {
    fn schema_name() -> Cow<'static, str> {
        "Dim".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A dimension: an integer (fixed), a string (a symbol, kept exactly as written) or null (unknown).",
            "type": ["integer", "string", "null"]
        })
    }
}

impl JsonSchema for Params {
    fn schema_name() -> Cow<'static, str> {
        "Params".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "Contract parameters, in the contract's order.",
            "type": "object",
            "additionalProperties": { "type": "integer" }
        })
    }
}

/// `(file name, schema)` for every document: check and folder reports,
/// signatures and folder listings, errors, and the contract YAML.
pub fn all() -> Vec<(&'static str, serde_json::Value)> {
    let doc = |s: Schema| serde_json::to_value(s).unwrap_or_default();
    vec![
        ("report.schema.json", doc(schemars::schema_for!(crate::checker::report::Report))),
        ("folder-report.schema.json", doc(schemars::schema_for!(crate::checker::report::FolderReport))),
        ("many-report.schema.json", doc(schemars::schema_for!(crate::checker::many::ManyReport))),
        ("signature.schema.json", doc(schemars::schema_for!(crate::model::summary::ModelSummary))),
        ("folder-summary.schema.json", doc(schemars::schema_for!(crate::folder::FolderSummary))),
        ("contract.schema.json", doc(schemars::schema_for!(crate::contract::spec::ContractFile))),
        ("protocol.schema.json", doc(schemars::schema_for!(crate::protocol::Protocol))),
        ("trace-line.schema.json", doc(schemars::schema_for!(crate::caller::Call))),
        #[cfg(feature = "runtime")]
        ("replay.schema.json", doc(schemars::schema_for!(crate::caller::replay::ReplayReport))),
        (
            "error.schema.json",
            serde_json::json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "title": "Error",
                "description": "What --format json prints when a command cannot run (usage, unreadable model, invalid contract).",
                "type": "object",
                "required": ["error"],
                "properties": { "error": {
                    "type": "object",
                    "required": ["kind", "message", "exit_code"],
                    "properties": {
                        "kind": { "type": "string", "description": "usage, model, contract, runtime, io or internal" },
                        "message": { "type": "string", "description": "What is wrong, naming the file" },
                        "exit_code": { "type": "integer", "description": "The process exit code (README: Exit codes)" }
                    }
                }}
            }),
        ),
    ]
}
