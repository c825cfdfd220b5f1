//! The `onnx-contract` command line: parse, dispatch to the command's file in
//! `cli/`, print an error that ended it, and exit with its code.

mod cli;

use clap::Parser;
use cli::output::{emit, terminal_style};
use cli::{Cli, Format};
use onnx_contract::exit;
use onnx_contract::render::{json, table};
use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    // When started as the runtime check's child, drive the model and exit.
    onnx_contract::init_child();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { exit::USAGE } else { exit::OK };
            let args: Vec<String> = std::env::args().collect();
            if code == exit::USAGE && cli::wants_json(&args) {
                let message = e.kind().to_string();
                let detail = e.to_string();
                let text = detail.lines().next().map(|l| l.trim_start_matches("error: ")).unwrap_or(&message);
                emit(&json::to_text(&json::error("usage", text, code)));
            }
            let _ = e.print();
            return ExitCode::from(code as u8);
        }
    };
    let format = cli.format;
    table::set_style(terminal_style());
    let code = match cli::run(cli) {
        Ok(code) => code,
        Err(f) => {
            if format == Format::Json {
                emit(&json::to_text(&json::error(f.kind, &f.message, f.code)));
            }
            eprintln!("error: {}", f.message);
            f.code
        }
    };
    let _ = std::io::stdout().flush();
    ExitCode::from(code as u8)
}
