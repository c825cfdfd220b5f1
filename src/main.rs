//! The `onnx-contract` command line: parsing, dispatch, printing, exit codes.

use clap::{Parser, Subcommand, ValueEnum};
use onnx_contract::contract::{self, ContractError};
use onnx_contract::exit;
use onnx_contract::finding::verdict;
use onnx_contract::reader::{read_signature, ModelError};
use onnx_contract::render::{json, table};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "onnx-contract",
    version,
    about = "Checks that an exported ONNX transformer decoder honours its contract",
    after_help = exit::TABLE
)]
struct Cli {
    /// Output format: tables for people, one JSON document on stdout for tools.
    #[arg(long, value_enum, default_value_t = Format::Human, global = true)]
    format: Format,
    #[command(subcommand)]
    command: Command,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum Format {
    Human,
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print a model's signature: IR, opsets, inputs and outputs with dtypes and shapes.
    Sig {
        /// The .onnx file (weights are not loaded).
        model: PathBuf,
        /// One row per tensor instead of one per layer family.
        #[arg(long)]
        unfold: bool,
    },
    /// Compare two models' signatures side by side.
    Diff { a: PathBuf, b: PathBuf },
    /// Write a contract from a known-good export (to stdout, or --output).
    Init {
        model: PathBuf,
        /// Where to write the YAML (default: stdout).
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Check a model against a contract.
    Check {
        model: PathBuf,
        /// The YAML contract (see specs/).
        #[arg(long, short)]
        contract: PathBuf,
        /// Override a contract parameter, e.g. --param hidden=32 (repeatable).
        #[arg(long = "param", value_name = "NAME=VALUE", value_parser = parse_param)]
        params: Vec<(String, i64)>,
        /// Only the static signature check (no ONNX Runtime).
        #[arg(long)]
        static_only: bool,
    },
}

fn parse_param(s: &str) -> Result<(String, i64), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("`{s}`: expected NAME=VALUE"))?;
    let v: i64 = v.trim().parse().map_err(|_| format!("`{s}`: `{v}` is not an integer"))?;
    Ok((k.trim().to_string(), v))
}

/// An error that ends the command, with its exit code.
struct Fail {
    code: i32,
    kind: &'static str,
    message: String,
}

impl From<ModelError> for Fail {
    fn from(e: ModelError) -> Self {
        Fail { code: exit::BAD_MODEL, kind: "model", message: e.to_string() }
    }
}

impl From<ContractError> for Fail {
    fn from(e: ContractError) -> Self {
        Fail { code: exit::BAD_CONTRACT, kind: "contract", message: e.to_string() }
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            let code = if e.use_stderr() { exit::USAGE } else { exit::OK };
            return ExitCode::from(code as u8);
        }
    };
    let format = cli.format;
    let code = match run(cli) {
        Ok(code) => code,
        Err(f) => {
            if format == Format::Json {
                emit_json(&json::error(f.kind, &f.message, f.code));
            }
            eprintln!("error: {}", f.message);
            f.code
        }
    };
    let _ = std::io::stdout().flush();
    ExitCode::from(code as u8)
}

/// Writes to stdout; a closed pipe (`| head`) is not an error worth a panic.
fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    if out.write_all(text.as_bytes()).and_then(|_| out.flush()).is_err() {
        // The reader went away; nothing more to say.
    }
}

fn emit_json(v: &serde_json::Value) {
    emit(&format!("{v:#}\n"));
}

fn display(p: &Path) -> String {
    p.display().to_string()
}

fn run(cli: Cli) -> Result<i32, Fail> {
    let json_out = cli.format == Format::Json;
    match cli.command {
        Command::Sig { model, unfold } => {
            let sig = read_signature(&model)?;
            if json_out {
                emit_json(&json::signature(&display(&model), &sig));
            } else {
                emit(&table::signature(&display(&model), &sig, unfold));
            }
            Ok(exit::OK)
        }
        Command::Diff { a, b } => {
            let (sa, sb) = (read_signature(&a)?, read_signature(&b)?);
            let d = onnx_contract::diff::diff(&sa, &sb);
            if json_out {
                emit_json(&json::diff(&display(&a), &display(&b), &d));
            } else {
                emit(&table::diff(&display(&a), &display(&b), &d));
            }
            Ok(if d.is_empty() { exit::OK } else { exit::VIOLATED })
        }
        Command::Init { model, output } => {
            let sig = read_signature(&model)?;
            let text = contract::init::init(&sig, &display(&model));
            match output {
                Some(path) => {
                    std::fs::write(&path, &text).map_err(|e| Fail {
                        code: exit::USAGE,
                        kind: "io",
                        message: format!("{}: cannot write: {e}", path.display()),
                    })?;
                    if json_out {
                        emit_json(&serde_json::json!({ "written": display(&path) }));
                    } else {
                        eprintln!("wrote {}", path.display());
                    }
                }
                None => emit(&text),
            }
            Ok(exit::OK)
        }
        Command::Check { model, contract: spec, params, static_only: _ } => {
            let contract = contract::load(&spec, &params)?;
            let sig = read_signature(&model)?;
            let findings = contract::check(&sig, &contract);
            if json_out {
                emit_json(&json::check(&display(&model), &contract, &findings));
            } else {
                emit(&table::check(&display(&model), &sig, &contract, &findings));
            }
            Ok(if verdict(&findings) == "pass" { exit::OK } else { exit::VIOLATED })
        }
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

    #[test]
    fn params_parse_as_name_equals_integer() {
        assert_eq!(parse_param("hidden=32").unwrap(), ("hidden".to_string(), 32));
        assert!(parse_param("hidden").unwrap_err().contains("NAME=VALUE"));
        assert!(parse_param("hidden=x").unwrap_err().contains("not an integer"));
    }
}
