//! `merge REPORT.json…`: JSON reports made on several machines (a CI matrix
//! sharding a folder list, each runner's `check … --format json`) joined into
//! one table, JSON document or HTML page, with the exit code of the worst.

use super::check::worst;
use super::fail::Fail;
use super::output::emit;
use super::Format;
use onnx_contract::{exit, ManyReport};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub(crate) struct MergeArgs {
    /// JSON reports of `check DIR --format json` (one folder or several).
    #[arg(required = true)]
    reports: Vec<PathBuf>,
}

pub(crate) fn run(args: MergeArgs, format: Format) -> Result<i32, Fail> {
    let bad = |message: String| Fail { code: exit::BAD_MODEL, kind: "report", message };
    let mut documents = Vec::new();
    for path in &args.reports {
        let text = std::fs::read_to_string(path).map_err(|e| bad(format!("{}: cannot read: {e}", path.display())))?;
        documents.push((path.clone(), text));
    }
    let report = ManyReport::merge(&documents).map_err(bad)?;
    let text = match format {
        Format::Json => onnx_contract::render::json::to_text(&report),
        Format::Html => onnx_contract::render::html::many(&report),
        Format::Human => onnx_contract::render::table::many(&report),
        _ => {
            return Err(Fail {
                code: exit::USAGE,
                kind: "usage",
                message: "merge writes --format human, json or html".into(),
            })
        }
    };
    emit(&text);
    Ok(worst(&report))
}
