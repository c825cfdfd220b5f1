//! The `onnx-contract` command line: parsing, dispatch, printing, exit codes.

use clap::{Parser, Subcommand, ValueEnum};
use onnx_contract::contract::{self, ContractError};
use onnx_contract::exit;
use onnx_contract::finding::{verdict, Code, Finding, Severity};
use onnx_contract::reader::{read_signature, ModelError};
use onnx_contract::render::{json, table};
use onnx_contract::runtime::{self, locate};
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
    /// Check a model against a contract: the static signature check, then a
    /// KV-cache smoke test on real ONNX Runtime (in a child process).
    Check(CheckArgs),
    /// (internal) The child process that drives ONNX Runtime.
    #[command(name = "__drive-child", hide = true)]
    DriveChild,
}

#[derive(clap::Args, Debug)]
struct CheckArgs {
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
    /// Run the runtime check even when the static check failed.
    #[arg(long)]
    force_run: bool,
    /// Decoding steps to drive (the field failure happened at step 2).
    #[arg(long, default_value_t = 4)]
    steps: usize,
    /// Batch size of the feeds.
    #[arg(long, default_value_t = 1)]
    batch: i64,
    /// Seed for token ids and random encoder states.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Produce encoder_hidden_states with this encoder model (seq2seq).
    #[arg(long, value_name = "ENCODER.onnx")]
    encoder: Option<PathBuf>,
    /// Recompute uncached logits with this model (e.g. decoder_model.onnx)
    /// instead of the merged decoder's no-cache branch.
    #[arg(long, value_name = "DECODER.onnx")]
    no_cache_model: Option<PathBuf>,
    /// ONNX Runtime library to use; repeat to check against several runtimes.
    /// Default: ORT_DYLIB_PATH, the python onnxruntime package, our cache,
    /// system paths, then a pip fetch of the pinned version.
    #[arg(long = "ort-lib", value_name = "PATH")]
    ort_libs: Vec<PathBuf>,
    /// Never fetch ONNX Runtime with pip; fail if none is installed.
    #[arg(long)]
    no_fetch: bool,
    /// Say before running whether the model needs a newer ONNX Runtime than
    /// this version (max IR version and opset it accepts), e.g. 1.16.
    #[arg(long, value_name = "VERSION")]
    target_ort: Option<String>,
    /// Seconds before a hung runtime is killed.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
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

impl From<onnx_contract::Error> for Fail {
    fn from(e: onnx_contract::Error) -> Self {
        match e {
            onnx_contract::Error::Contract(c) => c.into(),
            other => Fail { code: exit::BAD_MODEL, kind: "model", message: other.to_string() },
        }
    }
}

impl From<ContractError> for Fail {
    fn from(e: ContractError) -> Self {
        Fail { code: exit::BAD_CONTRACT, kind: "contract", message: e.to_string() }
    }
}

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some(runtime::child::CHILD_ARG) {
        return ExitCode::from(runtime::child::child_main() as u8);
    }
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
            let problems = onnx_contract::reader::external_data_problems(&model, &sig);
            if json_out {
                let mut v = json::signature(&display(&model), &sig);
                v["external_data_problems"] = serde_json::json!(problems);
                emit_json(&v);
            } else {
                emit(&table::signature(&display(&model), &sig, unfold));
                for p in &problems {
                    eprintln!("warning: {}: {p}", model.display());
                }
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
                None if json_out => emit_json(&serde_json::json!({ "model": display(&model), "contract": text })),
                None => emit(&text),
            }
            Ok(exit::OK)
        }
        Command::Check(args) => check(args, json_out),
        Command::DriveChild => Ok(runtime::child::child_main()),
    }
}

fn check(args: CheckArgs, json_out: bool) -> Result<i32, Fail> {
    let contract = contract::load(&args.contract, &args.params)?;
    // A model whose weights cannot be found is unusable: say so before any check.
    let sig = onnx_contract::read_usable_signature(&args.model)?;
    let mut findings = contract::check(&sig, &contract);
    if let Some(v) = &args.target_ort {
        findings.extend(runtime::compat::check_target(&sig, v));
    }
    let static_failed = verdict(&findings) == "fail";
    let mut reports = Vec::new();
    if !args.static_only {
        if static_failed && !args.force_run {
            findings.push(Finding::new(
                Code::RuntimeSkipped,
                Severity::Warning,
                "runtime check not run: the static check failed, so a run would only repeat it (--force-run runs it anyway)",
            ));
        } else {
            match runtime::plan::build(&sig, &contract, args.batch) {
                Err(message) => findings.push(Finding::error(Code::Plan, message)),
                Ok(plan) => {
                    let libs = runtime_libs(&args)?;
                    let exe = std::env::current_exe().map_err(|e| Fail {
                        code: exit::INTERNAL,
                        kind: "internal",
                        message: format!("current_exe: {e}"),
                    })?;
                    let options = runtime::Options {
                        steps: args.steps,
                        batch: args.batch,
                        seed: args.seed,
                        encoder: args.encoder.clone(),
                        no_cache_model: args.no_cache_model.clone(),
                        ..Default::default()
                    };
                    for lib in libs {
                        // The version found, checked statically first: the table
                        // names the limit, the run below confirms it.
                        if let Some(v) = locate::version_from_name(&lib.path) {
                            findings.extend(runtime::compat::check_found(&sig, &v));
                        }
                        let job = runtime::driver::Job {
                            model: args.model.clone(),
                            ort_lib: lib.path.clone(),
                            plan: plan.clone(),
                            options: options.clone(),
                        };
                        let report = runtime::child::run(
                            &exe,
                            &job,
                            &lib.source.to_string(),
                            std::time::Duration::from_secs(args.timeout),
                        );
                        findings.extend(report.findings.iter().cloned());
                        reports.push(report);
                    }
                }
            }
        }
    }
    let model = display(&args.model);
    if json_out {
        emit_json(&json::check(&model, &contract, &findings, &reports));
    } else {
        emit(&table::check(&model, &sig, &contract, &findings, &reports));
    }
    // 69 only when the runtime could not load and nothing else failed: a
    // violation seen with another runtime is still a violation (2).
    let errors = || findings.iter().filter(|f| f.severity == Severity::Error);
    let only_runtime_missing = errors().next().is_some() && errors().all(|f| f.code == Code::RuntimeLoad);
    Ok(if static_failed {
        exit::VIOLATED
    } else if only_runtime_missing {
        exit::NO_RUNTIME
    } else if verdict(&findings) == "pass" {
        exit::OK
    } else {
        exit::VIOLATED
    })
}

/// The runtimes to check against; fetches the pinned one with pip only when
/// nothing is installed and fetching is allowed (announced on stderr).
fn runtime_libs(args: &CheckArgs) -> Result<Vec<locate::Located>, Fail> {
    if !args.ort_libs.is_empty() {
        return Ok(args
            .ort_libs
            .iter()
            .map(|p| locate::Located { path: p.clone(), source: locate::Source::Flag })
            .collect());
    }
    let no_fetch =
        args.no_fetch || std::env::var_os("ONNX_CONTRACT_NO_FETCH").is_some_and(|v| !v.is_empty() && v != "0");
    match locate::locate(None) {
        Ok(l) => Ok(vec![l]),
        Err(not_found) if no_fetch => {
            Err(Fail { code: exit::NO_RUNTIME, kind: "runtime", message: not_found.to_string() })
        }
        Err(not_found) => {
            eprintln!(
                "onnx-contract: no ONNX Runtime installed; fetching onnxruntime=={} with pip into {} (once; --no-fetch forbids this)",
                locate::PINNED_ORT,
                locate::cache_root().display()
            );
            match locate::fetch_pinned() {
                Ok(path) => Ok(vec![locate::Located { path, source: locate::Source::Cache }]),
                Err(e) => Err(Fail {
                    code: exit::NO_RUNTIME,
                    kind: "runtime",
                    message: format!("{not_found}\n  fetching failed: {e}"),
                }),
            }
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
