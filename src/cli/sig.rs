//! `sig`: a model's signature, or an export folder's files with their roles
//! and the sizes its config files state.

use super::fail::Fail;
use super::output::{display, emit};
use onnx_contract::exit;
use onnx_contract::model::reader::{external_data_problems, read_signature};
use onnx_contract::render::{json, table};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub(crate) struct SigArgs {
    /// The .onnx file (weights are not loaded), or an export folder.
    model: PathBuf,
    /// One row per tensor instead of one per layer family.
    #[arg(long)]
    unfold: bool,
}

pub(crate) fn run(args: SigArgs, json_out: bool) -> Result<i32, Fail> {
    let SigArgs { model, unfold } = args;
    if model.is_dir() {
        let summary = onnx_contract::folder::summarize(&model)?;
        if json_out {
            emit(&json::to_text(&summary));
        } else {
            emit(&table::folder(&summary, unfold));
        }
        Ok(exit::OK)
    } else {
        let sig = read_signature(&model)?;
        let problems = external_data_problems(&model, &sig);
        if json_out {
            emit(&json::to_text(&json::signature(&display(&model), &sig, problems)));
        } else {
            emit(&table::signature(&display(&model), &sig, unfold));
            for p in &problems {
                eprintln!("warning: {}: {p}", model.display());
            }
        }
        Ok(exit::OK)
    }
}
