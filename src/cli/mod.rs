//! The commands, one file each (the way cargo keeps `commands/`): each holds
//! its arguments and its `run`. Here: the command line's shape and the
//! dispatch from a parsed command to its file.

mod check;
mod diff;
pub(crate) mod fail;
mod init;
mod merge;
pub(crate) mod output;
mod protocol;
mod replay;
mod sig;
mod specs;

use clap::{Parser, Subcommand, ValueEnum};
use fail::Fail;
use onnx_contract::exit;

#[derive(Parser, Debug)]
#[command(
    name = "onnx-contract",
    version,
    about = "Checks that an exported ONNX transformer decoder honours its contract",
    after_help = exit::TABLE
)]
pub(crate) struct Cli {
    /// Output format: tables for people, one JSON document on stdout for tools.
    #[arg(long, value_enum, default_value_t = Format::Human, global = true)]
    pub(crate) format: Format,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// Tables sized to the terminal.
    Human,
    /// One JSON document (schemas in `schemas/`).
    Json,
    /// SARIF 2.1.0 for code scanning (`check` only).
    Sarif,
    /// GitHub Actions annotations (`check` only).
    Github,
    /// JUnit XML for test dashboards (`check` only).
    Junit,
    /// One self-contained HTML page with plots, a CI artifact (`check` only).
    Html,
}

/// `--format json` (or `=json`) anywhere on the command line: usage errors
/// found while parsing it are then JSON too.
pub(crate) fn wants_json(args: &[String]) -> bool {
    args.windows(2).any(|w| w[0] == "--format" && w[1] == "json") || args.iter().any(|a| a == "--format=json")
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    #[command(after_help = exit::TABLE)]
    /// Print a model's signature: IR, opsets, inputs and outputs with dtypes and shapes.
    /// For an export folder: every ONNX file with its role, and the sizes config.json states.
    Sig(sig::SigArgs),
    #[command(after_help = exit::TABLE)]
    /// Compare two models' signatures side by side.
    Diff(diff::DiffArgs),
    #[command(after_help = exit::TABLE)]
    /// Write a contract from a known-good export (to stdout, or --output).
    /// For an export folder: one contract per ONNX file (YAML documents on
    /// stdout, or `<file stem>.yaml` files in the --output folder).
    Init(init::InitArgs),
    #[command(after_help = exit::TABLE)]
    /// How to call this model: which file at which step, every input's dtype,
    /// shape and value at step 0 and after, the rules callers get wrong; or
    /// (`--emit`) a complete greedy-decoding program for it.
    Protocol(protocol::ProtocolArgs),
    #[command(after_help = exit::TABLE)]
    /// Model or caller? Compares a recorded trace of an application's calls
    /// (JSON Lines; python/onnx_contract_trace.py records one) with the protocol
    /// the model needs, re-runs the caller's calls, checks the model with the
    /// correct protocol, and says who is at fault. Exit 0 when the caller
    /// follows the protocol, 2 when it does not.
    Replay(replay::ReplayArgs),
    #[command(after_help = exit::TABLE)]
    /// List the built-in contracts (compiled in), or print one: `specs marian`.
    Specs(specs::SpecsArgs),
    #[command(after_help = exit::TABLE)]
    /// Check a model against a contract: the static signature check, then a
    /// KV-cache smoke test on real ONNX Runtime (in a child process).
    /// Several folders (or --from-list): one line each, the worst exit code.
    Check(Box<check::CheckArgs>),
    #[command(after_help = exit::TABLE)]
    /// Join JSON reports made on several machines (`check … --format json`)
    /// into one table, JSON document or HTML page; exit code of the worst.
    Merge(merge::MergeArgs),
}

/// Runs the parsed command; its exit code, or the error that ended it.
pub(crate) fn run(cli: Cli) -> Result<i32, Fail> {
    let json_out = cli.format == Format::Json;
    if matches!(cli.format, Format::Sarif | Format::Github | Format::Junit | Format::Html)
        && !matches!(cli.command, Command::Check(_))
        && !(cli.format == Format::Html && matches!(cli.command, Command::Merge(_)))
    {
        return Err(Fail {
            code: exit::USAGE,
            kind: "usage",
            message: "--format sarif|github|junit|html report a check: use them with `check`".into(),
        });
    }
    match cli.command {
        Command::Sig(args) => sig::run(args, json_out),
        Command::Diff(args) => diff::run(args, json_out),
        Command::Init(args) => init::run(args, json_out),
        Command::Protocol(args) => protocol::run(args, json_out),
        Command::Replay(args) => replay::run(args, json_out),
        Command::Specs(args) => specs::run(args, json_out),
        Command::Check(args) => check::run(*args, cli.format),
        Command::Merge(args) => merge::run(args, cli.format),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
