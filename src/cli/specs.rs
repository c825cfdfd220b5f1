//! `specs [NAME]`: the built-in contracts, or one of them.

use super::fail::Fail;
use super::output::emit;
use onnx_contract::exit;
use onnx_contract::render::{json, table};

#[derive(clap::Args, Debug)]
pub(crate) struct SpecsArgs {
    /// A built-in contract's name, or its family (`marian`, `gpt2`).
    name: Option<String>,
}

pub(crate) fn run(args: SpecsArgs, json_out: bool) -> Result<i32, Fail> {
    match args.name {
        Some(name) => {
            let (full, text) = onnx_contract::contract::builtin::text(&name).ok_or_else(|| Fail {
                code: exit::USAGE,
                kind: "usage",
                message: format!("no built-in contract `{name}` (`onnx-contract specs` lists them)"),
            })?;
            if json_out {
                emit(&json::to_text(&serde_json::json!({ "name": full, "contract": text })));
            } else {
                emit(text);
            }
            Ok(exit::OK)
        }
        None => {
            let list = onnx_contract::contract::builtin::list();
            if json_out {
                emit(&json::to_text(&list));
            } else {
                emit(&table::builtin_specs(&list));
            }
            Ok(exit::OK)
        }
    }
}
