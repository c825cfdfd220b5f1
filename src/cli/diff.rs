//! `diff A B`: two models' signatures side by side.

use super::fail::Fail;
use super::output::{display, emit};
use onnx_contract::exit;
use onnx_contract::model::reader::read_signature;
use onnx_contract::render::{json, table};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub(crate) struct DiffArgs {
    /// The first .onnx file (A).
    a: PathBuf,
    /// The second .onnx file (B).
    b: PathBuf,
}

pub(crate) fn run(args: DiffArgs, json_out: bool) -> Result<i32, Fail> {
    let DiffArgs { a, b } = args;
    let (sa, sb) = (read_signature(&a)?, read_signature(&b)?);
    let d = onnx_contract::model::diff::diff(&sa, &sb);
    if json_out {
        emit(&json::to_text(&json::diff(&display(&a), &display(&b), &d)));
    } else {
        emit(&table::diff(&display(&a), &display(&b), &d));
    }
    Ok(if d.is_empty() { exit::OK } else { exit::VIOLATED })
}
