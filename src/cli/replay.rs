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
    /// Judge the calls against the protocol only: no re-run, no model check (fast on long traces).
    #[arg(long)]
    static_only: bool,
    /// Never fetch ONNX Runtime with pip when none is installed (also ONNX_CONTRACT_NO_FETCH=1).
    #[arg(long)]
    no_fetch: bool,
    /// When a re-run call fails in a node, write a minimal reproduction of it
    /// into DIR (never into the model's folder): see `check --repro`.
    #[arg(long, value_name = "DIR")]
    repro: Option<PathBuf>,
}

pub(crate) fn run(args: ReplayArgs, json_out: bool) -> Result<i32, Fail> {
    let ReplayArgs { trace, model, static_only, no_fetch, repro } = args;
    let no_fetch = super::check::no_fetch(no_fetch);
    let mut checker = Checker::new()
        .static_only(static_only)
        .fetch(!no_fetch)
        .on_notice(|text| eprintln!("onnx-contract: {text} (--no-fetch forbids this)"))
        .on_progress(progress_line(!json_out));
    if let Some(dir) = repro {
        onnx_contract::remedy::outside(&dir, &model).map_err(|message| Fail {
            code: exit::USAGE,
            kind: "usage",
            message: format!("--repro {message}"),
        })?;
        checker = checker.repro(dir, std::env::args().collect::<Vec<_>>().join(" "));
    }
    let r = onnx_contract::caller::replay::replay(&checker, &trace, &model)?;
    if json_out {
        emit(&json::to_text(&r));
    } else {
        emit(&table::replay(&r));
    }
    Ok(match (r.verdict, r.at_fault.as_str()) {
        (Verdict::Pass, "undecided") if !static_only => exit::NO_RUNTIME,
        (Verdict::Pass, _) => exit::OK,
        _ => exit::VIOLATED,
    })
}
