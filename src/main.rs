//! The `onnx-contract` command line: parsing, dispatch, printing, exit codes.

use clap::{Parser, Subcommand, ValueEnum};
use onnx_contract::contract::{ContractError, ContractErrorKind};
use onnx_contract::exit;
use onnx_contract::model::reader::{external_data_problems, read_signature, ModelError};
use onnx_contract::render::{json, table, Github, Human, Json, Junit, Renderer, Sarif};
use onnx_contract::{Checker, Code, Contract, Verdict};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

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
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum Lang {
    Python,
    Rust,
    Js,
}

/// `--format json` (or `=json`) anywhere on the command line: usage errors
/// found while parsing it are then JSON too.
fn wants_json(args: &[String]) -> bool {
    args.windows(2).any(|w| w[0] == "--format" && w[1] == "json") || args.iter().any(|a| a == "--format=json")
}

#[derive(Subcommand, Debug)]
enum Command {
    #[command(after_help = exit::TABLE)]
    /// Print a model's signature: IR, opsets, inputs and outputs with dtypes and shapes.
    /// For an export folder: every ONNX file with its role, and the sizes config.json states.
    Sig {
        /// The .onnx file (weights are not loaded), or an export folder.
        model: PathBuf,
        /// One row per tensor instead of one per layer family.
        #[arg(long)]
        unfold: bool,
    },
    #[command(after_help = exit::TABLE)]
    /// Compare two models' signatures side by side.
    Diff {
        /// The first .onnx file (A).
        a: PathBuf,
        /// The second .onnx file (B).
        b: PathBuf,
    },
    #[command(after_help = exit::TABLE)]
    /// Write a contract from a known-good export (to stdout, or --output).
    /// For an export folder: one contract per ONNX file (YAML documents on
    /// stdout, or `<file stem>.yaml` files in the --output folder).
    Init {
        /// A known-good .onnx file, or an export folder.
        model: PathBuf,
        /// Where to write the YAML (default: stdout); a folder when MODEL is one.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    #[command(after_help = exit::TABLE)]
    /// How to call this model: which file at which step, every input's dtype,
    /// shape and value at step 0 and after, the rules callers get wrong; or
    /// (`--emit`) a complete greedy-decoding program for it.
    Protocol {
        /// An export folder, or one decoder file.
        path: PathBuf,
        /// Write a program instead: python (onnxruntime + numpy), rust (ort 2 + ndarray) or js (onnxruntime-node).
        #[arg(long, value_enum)]
        emit: Option<Lang>,
        /// Instead: generate greedily WITHOUT a cache (every step recomputes the
        /// prefix) and print what an emitted program prints, as a reference.
        #[arg(long, conflicts_with = "emit")]
        reference: bool,
        /// The prompt (decoder-only) or the source ids (text seq2seq) for --reference, e.g. 5,17,42.
        #[arg(long, value_delimiter = ',')]
        ids: Vec<i64>,
        /// The audio encoder's input features (.npy) for --reference.
        #[arg(long)]
        features: Option<PathBuf>,
        /// New tokens for --reference.
        #[arg(long, default_value_t = 16)]
        max_new_tokens: usize,
        /// Do not stop at the end token (--reference).
        #[arg(long)]
        ignore_eos: bool,
        /// Which decoder form to emit or generate with when the folder has
        /// several: merged-decoder, split-pair, decoder-only (default: the first).
        #[arg(long)]
        form: Option<String>,
    },
    #[command(after_help = exit::TABLE)]
    /// Model or caller? Compares a recorded trace of an application's calls
    /// (JSON Lines; python/onnx_contract_trace.py records one) with the protocol
    /// the model needs, re-runs the caller's calls, checks the model with the
    /// correct protocol, and says who is at fault. Exit 0 when the caller
    /// follows the protocol, 2 when it does not.
    Replay {
        /// The trace (.jsonl).
        trace: PathBuf,
        /// The model file or export folder the application called.
        #[arg(long)]
        model: PathBuf,
    },
    #[command(after_help = exit::TABLE)]
    /// List the built-in contracts (compiled in), or print one: `specs marian`.
    Specs {
        /// A built-in contract's name, or its family (`marian`, `gpt2`).
        name: Option<String>,
    },
    #[command(after_help = exit::TABLE)]
    /// Check a model against a contract: the static signature check, then a
    /// KV-cache smoke test on real ONNX Runtime (in a child process).
    Check(CheckArgs),
}

#[derive(clap::Args, Debug)]
struct CheckArgs {
    /// An export folder (every .onnx in it and in onnx/), or one .onnx file.
    model: PathBuf,
    /// A YAML contract file, or a built-in contract's name (`specs` lists
    /// them). Default: the family's built-in contract, chosen by
    /// config.json's model_type (or the signature) and sized from it.
    #[arg(long, short)]
    contract: Option<String>,
    /// Override a contract parameter, e.g. --param hidden=32 (repeatable). The
    /// built-in contracts' parameters: layers, heads or kv_heads, head_dim,
    /// hidden (seq2seq), vocab (`onnx-contract specs NAME` shows a contract's).
    #[arg(long = "param", value_name = "NAME=VALUE", value_parser = parse_param)]
    params: Vec<(String, i64)>,
    /// Only the static signature check (no ONNX Runtime).
    #[arg(long)]
    static_only: bool,
    /// Run the runtime check even when the static check failed.
    #[arg(long)]
    force_run: bool,
    /// Decoding steps per run (bugs of a length baked in at export show at step 2, so at least 3).
    #[arg(long, default_value_t = 4)]
    steps: usize,
    /// Longer and slower: at least 32 steps (and past config.json's
    /// sliding_window + 2), every step also re-run with ONNX Runtime's
    /// graph optimizations disabled and compared with the default level.
    #[arg(long)]
    deep: bool,
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
        use onnx_contract::Error as E;
        match e {
            E::Contract(c) => c.into(),
            E::Model(_) | E::ExternalData { .. } | E::Folder(_) | E::Config(_) => {
                Fail { code: exit::BAD_MODEL, kind: "model", message: e.to_string() }
            }
            E::NoContract => Fail { code: exit::USAGE, kind: "usage", message: e.to_string() },
            other => Fail { code: exit::INTERNAL, kind: "internal", message: other.to_string() },
        }
    }
}

impl From<ContractError> for Fail {
    fn from(e: ContractError) -> Self {
        match e.kind {
            ContractErrorKind::UnknownParam => {
                Fail { code: exit::USAGE, kind: "usage", message: format!("--param: {e}") }
            }
            _ => Fail { code: exit::BAD_CONTRACT, kind: "contract", message: e.to_string() },
        }
    }
}

fn main() -> ExitCode {
    // When started as the runtime check's child, drive the model and exit.
    onnx_contract::init_child();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { exit::USAGE } else { exit::OK };
            let args: Vec<String> = std::env::args().collect();
            if code == exit::USAGE && wants_json(&args) {
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
    let code = match run(cli) {
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

/// A spinner on stderr with the current stage, shown only on a terminal and
/// only once the check has taken more than a second (quick checks stay quiet).
fn progress_line() -> impl Fn(&str) + Send + Sync + 'static {
    use std::io::IsTerminal;
    let start = std::time::Instant::now();
    let tty = std::io::stderr().is_terminal();
    let bar = std::sync::Mutex::new(None::<indicatif::ProgressBar>);
    move |text: &str| {
        if !tty || start.elapsed() < Duration::from_secs(1) {
            return;
        }
        if let Ok(mut slot) = bar.lock() {
            let b = slot.get_or_insert_with(|| {
                let b = indicatif::ProgressBar::new_spinner().with_finish(indicatif::ProgressFinish::AndClear);
                b.enable_steady_tick(Duration::from_millis(120));
                b
            });
            b.set_message(text.to_string());
        }
    }
}

/// Human output sized to the terminal: `COLUMNS` when set, else the width of
/// stdout when it is a terminal, else no limit (a pipe or a file). Colors
/// only on a terminal, and never with `NO_COLOR` set.
fn terminal_style() -> table::Style {
    use std::io::IsTerminal;
    let tty = std::io::stdout().is_terminal();
    let width = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<u16>().ok())
        .filter(|w| *w >= 40)
        .or_else(|| if tty { terminal_size::terminal_size().map(|(w, _)| w.0) } else { None });
    let color = tty && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    table::Style { width, color }
}

/// Writes to stdout; a closed pipe (`| head`) is not an error worth a panic.
fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    if out.write_all(text.as_bytes()).and_then(|_| out.flush()).is_err() {
        // The reader went away; nothing more to say.
    }
}

fn display(p: &Path) -> String {
    p.display().to_string()
}

fn run(cli: Cli) -> Result<i32, Fail> {
    let json_out = cli.format == Format::Json;
    if matches!(cli.format, Format::Sarif | Format::Github | Format::Junit) && !matches!(cli.command, Command::Check(_))
    {
        return Err(Fail {
            code: exit::USAGE,
            kind: "usage",
            message: "--format sarif|github|junit report a check: use them with `check`".into(),
        });
    }
    match cli.command {
        Command::Sig { model, unfold } if model.is_dir() => {
            let summary = onnx_contract::folder::summarize(&model)?;
            if json_out {
                emit(&json::to_text(&summary));
            } else {
                emit(&table::folder(&summary, unfold));
            }
            Ok(exit::OK)
        }
        Command::Sig { model, unfold } => {
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
        Command::Diff { a, b } => {
            let (sa, sb) = (read_signature(&a)?, read_signature(&b)?);
            let d = onnx_contract::model::diff::diff(&sa, &sb);
            if json_out {
                emit(&json::to_text(&json::diff(&display(&a), &display(&b), &d)));
            } else {
                emit(&table::diff(&display(&a), &display(&b), &d));
            }
            Ok(if d.is_empty() { exit::OK } else { exit::VIOLATED })
        }
        Command::Init { model, output } if model.is_dir() => {
            let all = onnx_contract::folder::init::init_all(&model)?;
            match output {
                Some(dir) => {
                    let io = |e: std::io::Error| Fail {
                        code: exit::USAGE,
                        kind: "io",
                        message: format!("{}: cannot write: {e}", dir.display()),
                    };
                    std::fs::create_dir_all(&dir).map_err(io)?;
                    let mut written = Vec::new();
                    for (rel, text) in &all {
                        let stem = rel.trim_end_matches(".onnx").replace('/', "_");
                        let path = dir.join(format!("{stem}.yaml"));
                        std::fs::write(&path, text).map_err(io)?;
                        written.push(display(&path));
                    }
                    if json_out {
                        emit(&json::to_text(&serde_json::json!({ "written": written })));
                    } else {
                        eprintln!("wrote {}", written.join(", "));
                    }
                }
                None if json_out => {
                    let docs: Vec<_> =
                        all.iter().map(|(rel, text)| serde_json::json!({ "model": rel, "contract": text })).collect();
                    emit(&json::to_text(&serde_json::json!({ "folder": display(&model), "contracts": docs })))
                }
                None => {
                    let docs: Vec<String> = all.iter().map(|(rel, text)| format!("# ── {rel}\n{text}")).collect();
                    emit(&docs.join("---\n"));
                }
            }
            Ok(exit::OK)
        }
        Command::Protocol { path, emit: lang, reference, ids, features, max_new_tokens, ignore_eos, form } => {
            let mut p = onnx_contract::protocol::describe(&path)?;
            if let Some(form) = form {
                let forms: Vec<String> = p.loops.iter().map(|l| l.form.clone()).collect();
                p.loops.retain(|l| l.form == form);
                if p.loops.is_empty() {
                    return Err(Fail {
                        code: exit::USAGE,
                        kind: "usage",
                        message: format!("--form {form}: {} has only: {}", path.display(), forms.join(", ")),
                    });
                }
            }
            if reference {
                let (ids, top5) =
                    onnx_contract::protocol::reference::generate(&p, &path, ids, features, max_new_tokens, ignore_eos)
                        .map_err(|message| Fail { code: exit::NO_RUNTIME, kind: "runtime", message })?;
                emit(&format!("{}\n", serde_json::json!({ "ids": ids, "top5": top5 })));
                return Ok(exit::OK);
            }
            match lang {
                Some(lang) => {
                    let lang = match lang {
                        Lang::Python => onnx_contract::protocol::emit::Lang::Python,
                        Lang::Rust => onnx_contract::protocol::emit::Lang::Rust,
                        Lang::Js => onnx_contract::protocol::emit::Lang::Js,
                    };
                    let text = onnx_contract::protocol::emit::program(&p, lang).map_err(|message| Fail {
                        code: exit::VIOLATED,
                        kind: "protocol",
                        message: format!("{}: {message}", path.display()),
                    })?;
                    emit(&text);
                }
                None if json_out => emit(&json::to_text(&p)),
                None => emit(&table::protocol(&p)),
            }
            Ok(exit::OK)
        }
        Command::Replay { trace, model } => {
            let checker = Checker::new().fetch(false).on_progress(progress_line());
            let r = onnx_contract::caller::replay::replay(&checker, &trace, &model)?;
            if json_out {
                emit(&json::to_text(&r));
            } else {
                emit(&table::replay(&r));
            }
            Ok(if r.verdict == Verdict::Pass { exit::OK } else { exit::VIOLATED })
        }
        Command::Specs { name: Some(name) } => {
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
        Command::Specs { name: None } => {
            let list = onnx_contract::contract::builtin::list();
            if json_out {
                emit(&json::to_text(&list));
            } else {
                emit(&table::builtin_specs(&list));
            }
            Ok(exit::OK)
        }
        Command::Init { model, output } => {
            let sig = read_signature(&model)?;
            let text = onnx_contract::contract::init::init(&sig, &display(&model));
            match output {
                Some(path) => {
                    std::fs::write(&path, &text).map_err(|e| Fail {
                        code: exit::USAGE,
                        kind: "io",
                        message: format!("{}: cannot write: {e}", path.display()),
                    })?;
                    if json_out {
                        emit(&json::to_text(&serde_json::json!({ "written": display(&path) })));
                    } else {
                        eprintln!("wrote {}", path.display());
                    }
                }
                None if json_out => {
                    emit(&json::to_text(&serde_json::json!({ "model": display(&model), "contract": text })))
                }
                None => emit(&text),
            }
            Ok(exit::OK)
        }
        Command::Check(args) => check(args, cli.format),
    }
}

fn check(args: CheckArgs, format: Format) -> Result<i32, Fail> {
    let is_dir = args.model.is_dir();
    let builtin_name = args.contract.as_deref().filter(|c| !Path::new(c).exists());
    // A contract file applies to one model; a folder takes a family's name.
    let contract = match (&args.contract, is_dir) {
        (Some(c), false) => Some(Contract::resolve(c, &args.params)?),
        (Some(c), true) if builtin_name.is_none() => {
            return Err(Fail {
                code: exit::USAGE,
                kind: "usage",
                message: format!(
                    "--contract {c}: a contract file applies to one model; for a folder give a built-in family (`onnx-contract specs`) or check a file"
                ),
            })
        }
        _ => None,
    };
    let no_fetch =
        args.no_fetch || std::env::var_os("ONNX_CONTRACT_NO_FETCH").is_some_and(|v| !v.is_empty() && v != "0");
    let mut checker = Checker::new()
        .static_only(args.static_only)
        .force_run(args.force_run)
        .steps(args.steps)
        .deep(args.deep)
        .batch(args.batch)
        .seed(args.seed)
        .runtimes(args.ort_libs)
        .fetch(!no_fetch)
        .timeout(Duration::from_secs(args.timeout))
        .on_notice(|text| eprintln!("onnx-contract: {text} (--no-fetch forbids this)"))
        .on_progress(progress_line());
    if let Some(c) = contract {
        checker = checker.contract(c);
    }
    if let (Some(name), true) = (builtin_name, is_dir) {
        checker = checker.family(name);
    }
    if let Some(v) = args.target_ort {
        checker = checker.target_ort(v);
    }
    if let Some(p) = args.encoder {
        checker = checker.encoder(p);
    }
    if let Some(p) = args.no_cache_model {
        checker = checker.no_cache_model(p);
    }
    let renderer: &dyn Renderer = match format {
        Format::Json => &Json,
        Format::Sarif => &Sarif,
        Format::Github => &Github,
        Format::Junit => &Junit,
        Format::Human => &Human,
    };
    if is_dir {
        let report = checker.run_folder(&args.model)?;
        emit(&renderer.render_folder(&report));
        return Ok(exit_code(report.verdict, report.errors().map(|f| f.code)));
    }
    let report = checker.run(&args.model)?;
    emit(&renderer.render(&report));
    Ok(exit_code(report.verdict, report.errors().map(|f| f.code)))
}

/// The exit code of a check: 69 only when the runtime could not load and
/// nothing else failed (a violation seen with another runtime is still 2).
fn exit_code(verdict: Verdict, mut error_codes: impl Iterator<Item = Code>) -> i32 {
    match verdict {
        Verdict::Pass => exit::OK,
        _ if error_codes.all(|c| c == Code::RuntimeLoad) => exit::NO_RUNTIME,
        _ => exit::VIOLATED,
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
