//! `replay TRACE --model PATH`: model or caller, from a recorded trace.

use super::fail::Fail;
use super::output::{emit, progress_line};
use onnx_contract::render::{json, table};
use onnx_contract::{exit, Checker, Verdict};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub(crate) struct ReplayArgs {
    /// The trace (.jsonl).
    trace: PathBuf,
    /// The model file or export folder the application called.
    #[arg(long)]
    model: PathBuf,
}

pub(crate) fn run(args: ReplayArgs, json_out: bool) -> Result<i32, Fail> {
    let ReplayArgs { trace, model } = args;
    let checker = Checker::new().fetch(false).on_progress(progress_line());
    let r = onnx_contract::caller::replay::replay(&checker, &trace, &model)?;
    if json_out {
        emit(&json::to_text(&r));
    } else {
        emit(&table::replay(&r));
    }
    Ok(if r.verdict == Verdict::Pass { exit::OK } else { exit::VIOLATED })
}
