//! `check`: the static check and the runtime checks of a model or an export
//! folder, rendered in the chosen format; the exit code from the verdict.

use super::fail::{exit_code, Fail};
use super::output::{emit, progress_line};
use super::Format;
use onnx_contract::render::{Github, Html, Human, Json, Junit, Renderer, Sarif};
use onnx_contract::{exit, Checker, Contract};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub(crate) struct CheckArgs {
    /// An export folder (every .onnx in it and in onnx/), or one .onnx file;
    /// several folders give one line each and the exit code of the worst.
    #[arg(required_unless_present = "from_list")]
    models: Vec<PathBuf>,
    /// Also check the folders listed in FILE (one path per line; blank lines
    /// and `#` comments skipped): the shard a CI runner was given.
    #[arg(long, value_name = "FILE")]
    from_list: Option<PathBuf>,
    /// Folders checked at once when several are given (each folder's own
    /// runtime jobs already use every core).
    #[arg(long, default_value_t = 1)]
    jobs: usize,
    #[arg(skip)]
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
    /// Whose loading rules a folder is checked against: genai,
    /// transformers.js (or transformers.js@2 for the older layout), optimum,
    /// none, or auto (the consumers the folder is laid out for).
    #[arg(long, value_name = "CONSUMER", default_value = "auto")]
    consumer: onnx_contract::consumer::Choice,
    /// The consumers' loading rules only: their own generation (genai,
    /// transformers.js, optimum in a child each, beside the check) is not
    /// run and compared. The variable takes 1/0, true/false, yes/no, on/off.
    #[arg(long, env = "ONNX_CONTRACT_NO_CONSUMER_RUN", value_parser = clap::builder::BoolishValueParser::new())]
    no_consumer_run: bool,
    /// The transformers checkpoint folder the export came from (config.json +
    /// safetensors): its logits, run by transformers in a child on the
    /// export's own tokens, are the reference for every step of the folder's
    /// first form and each of its dtype variants (needs torch and transformers).
    #[arg(long, value_name = "CHECKPOINT")]
    source: Option<PathBuf>,
    /// The memory the check may use, summed over every process it starts
    /// (8G, 1.5GiB, 512MB): runs that do not fit beside each other run one
    /// after another, one that cannot fit at all is not started and named.
    /// Default: what the machine or its cgroup makes available.
    #[arg(long, value_name = "SIZE", value_parser = onnx_contract::memory::parse)]
    max_memory: Option<u64>,
    /// Only the static signature check (no ONNX Runtime).
    #[arg(long)]
    static_only: bool,
    /// Kept for scripts: the model is now always run when a plan can be
    /// made, also when the static check failed (the run decides).
    #[arg(long, hide = true)]
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
    /// Human output: every file's signature, findings and step table, passing files too
    /// (by default a pass is one screen and only failing files get their detail).
    #[arg(long, short)]
    verbose: bool,
    /// Also write the report as one self-contained HTML page with plots to FILE
    /// (beside the chosen --format on stdout; a CI artifact).
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Write a minimal reproduction of each failing, non-finite or diverging
    /// node into DIR (never into the checked folder): the node with the least
    /// upstream graph that still shows it, its captured inputs (.npz), a
    /// script that shows it on plain onnxruntime, and a README.
    #[arg(long, value_name = "DIR")]
    repro: Option<PathBuf>,
    /// Try the remedy each repairable error names (a float16 node kept in
    /// float32, a quantized node taken back from fp32, a config key set to the
    /// graph's value) on a copy of the folder, and re-check it: a remedy is
    /// said only when the re-check passes.
    #[arg(long)]
    remedy: bool,
    /// Write the folder with the working remedies applied to DIR (copies,
    /// never into the checked folder) and check it as it is; implies --remedy.
    #[arg(long, value_name = "DIR")]
    fix_out: Option<PathBuf>,
}

fn parse_param(s: &str) -> Result<(String, i64), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("`{s}`: expected NAME=VALUE"))?;
    let v: i64 = v.trim().parse().map_err(|_| format!("`{s}`: `{v}` is not an integer"))?;
    Ok((k.trim().to_string(), v))
}

pub(crate) fn run(mut args: CheckArgs, format: Format) -> Result<i32, Fail> {
    let usage = |message: String| Fail { code: exit::USAGE, kind: "usage", message };
    if let Some(list) = &args.from_list {
        let listed = onnx_contract::read_folder_list(list).map_err(usage)?;
        args.models.extend(listed);
    }
    match args.models.len() {
        0 => return Err(usage("no folder to check (the list is empty)".into())),
        1 => args.model = args.models[0].clone(),
        _ => return many(args, format),
    }
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
    for (flag, dir) in [("--repro", &args.repro), ("--fix-out", &args.fix_out)] {
        if let Some(dir) = dir {
            onnx_contract::remedy::outside(dir, &args.model).map_err(|e| usage(format!("{flag} {e}")))?;
        }
    }
    if (args.remedy || args.fix_out.is_some()) && !is_dir {
        return Err(usage(
            "--remedy and --fix-out work on an export folder (its configs and siblings are part of the check)".into(),
        ));
    }
    let no_fetch = no_fetch(args.no_fetch);
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
        .on_progress(progress_line(format == Format::Human));
    if let Some(c) = contract {
        checker = checker.contract(c);
    }
    if let (Some(name), true) = (builtin_name, is_dir) {
        checker = checker.family(name);
    }
    checker = checker.consumer(args.consumer.clone());
    if let Some(bytes) = args.max_memory {
        checker = checker.max_memory(bytes);
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
        Format::Human => &Human { verbose: args.verbose },
        Format::Html => &Html,
    };
    // Rendered only when asked for: the page draws every plot.
    let write_html = |text: &dyn Fn() -> String| -> Result<(), Fail> {
        let Some(path) = &args.html else { return Ok(()) };
        std::fs::write(path, text()).map_err(|e| Fail {
            code: exit::USAGE,
            kind: "usage",
            message: format!("--html {}: cannot write: {e}", path.display()),
        })
    };
    let plain = checker.clone();
    if let Some(dir) = &args.repro {
        let command = std::env::args().collect::<Vec<_>>().join(" ");
        checker = checker.repro(dir, command);
    }
    if is_dir {
        // The consumers' own generation, started as soon as the folder is read so it runs beside the check.
        let running = std::sync::Arc::new(std::sync::Mutex::new(None));
        if !args.static_only && !args.no_consumer_run {
            let slot = running.clone();
            let timeout = Duration::from_secs(args.timeout.min(300));
            let budget = checker.memory();
            checker = checker.on_consumers(move |dir, view, targets| {
                let started =
                    onnx_contract::protocol::consumer::start(dir, view, targets, timeout, Some(budget.clone()));
                if let Ok(mut s) = slot.lock() {
                    *s = Some(started);
                }
            });
        }
        let mut report = checker.run_folder(&args.model)?;
        let started: Option<onnx_contract::protocol::consumer::Running> =
            running.lock().ok().and_then(|mut s| s.take());
        if let Some(started) = started {
            let found = started.finish();
            onnx_contract::protocol::consumer::settle(&mut report, &found);
        }
        // The checkpoint the export came from, when given: the reference of every step.
        if let Some(source) = args.source.as_deref().filter(|_| !args.static_only) {
            let timeout = Duration::from_secs(args.timeout.min(600));
            report.findings.extend(onnx_contract::protocol::source::compare(&args.model, source, timeout));
            if report.errors().next().is_some() {
                report.verdict = onnx_contract::Verdict::Fail;
            }
        }
        if args.remedy || args.fix_out.is_some() {
            remedies(&plain, &mut report, &args.model, args.fix_out.as_deref())?;
        }
        emit(&renderer.render_folder(&report));
        write_html(&|| Html.render_folder(&report))?;
        return Ok(exit_code(report.verdict, report.errors().map(|f| f.code)));
    }
    if args.source.is_some() {
        return Err(Fail {
            code: exit::USAGE,
            kind: "usage",
            message: format!(
                "--source compares an export folder with its checkpoint; {} is one file: give its folder",
                args.model.display()
            ),
        });
    }
    let report = checker.run(&args.model)?;
    emit(&renderer.render(&report));
    write_html(&|| Html.render(&report))?;
    Ok(exit_code(report.verdict, report.errors().map(|f| f.code)))
}

/// Several folders: each checked as `check DIR` checks it, `--jobs` at a
/// time; one line per folder (or the JSON / HTML of them all); the exit code
/// of the worst.
fn many(args: CheckArgs, format: Format) -> Result<i32, Fail> {
    let usage = |message: String| Fail { code: exit::USAGE, kind: "usage", message };
    let alone = [
        (args.contract.is_some() && args.contract.as_deref().is_some_and(|c| Path::new(c).exists()), "--contract FILE"),
        (args.remedy || args.fix_out.is_some(), "--remedy / --fix-out"),
        (args.repro.is_some(), "--repro"),
        (args.encoder.is_some() || args.no_cache_model.is_some(), "--encoder / --no-cache-model"),
        (args.source.is_some(), "--source"),
    ];
    if let Some((_, flag)) = alone.iter().find(|(on, _)| *on) {
        return Err(usage(format!("{flag} applies to one folder: check the folders one at a time")));
    }
    if !matches!(format, Format::Human | Format::Json | Format::Html) {
        return Err(usage("several folders: --format human, json or html (merge JSON reports for the rest)".into()));
    }
    if let Some(file) = args.models.iter().find(|m| !m.is_dir()) {
        return Err(usage(format!(
            "{}: several paths are each an export folder (check a single file alone)",
            file.display()
        )));
    }
    let mut checker = Checker::new()
        .static_only(args.static_only)
        .steps(args.steps)
        .deep(args.deep)
        .batch(args.batch)
        .seed(args.seed)
        .runtimes(args.ort_libs)
        .fetch(!no_fetch(args.no_fetch))
        .timeout(Duration::from_secs(args.timeout))
        .on_notice(|text| eprintln!("onnx-contract: {text} (--no-fetch forbids this)"));
    if let Some(name) = args.contract.as_deref() {
        checker = checker.family(name);
    }
    checker = checker.consumer(args.consumer.clone());
    if let Some(bytes) = args.max_memory {
        checker = checker.max_memory(bytes);
    }
    if let Some(v) = args.target_ort {
        checker = checker.target_ort(v);
    }
    let report = checker.run_folders(&args.models, args.jobs, &super::fail::code_of);
    let text = match format {
        Format::Json => onnx_contract::render::json::to_text(&report),
        Format::Html => onnx_contract::render::html::many(&report),
        _ => onnx_contract::render::table::many(&report),
    };
    emit(&text);
    if let Some(path) = &args.html {
        std::fs::write(path, onnx_contract::render::html::many(&report))
            .map_err(|e| usage(format!("--html {}: cannot write: {e}", path.display())))?;
    }
    Ok(worst(&report))
}

/// The exit code of the worst folder: an unchecked folder's own code, else
/// 2 when any fails (the code a failing `check DIR` ends with), else 0.
pub(crate) fn worst(r: &onnx_contract::ManyReport) -> i32 {
    let failing = r.folders.iter().map(|f| exit_code(f.verdict, f.errors().map(|e| e.code)));
    // A pass, then a failing check, then any error (its own code).
    let rank = |c: i32| match c {
        exit::OK => 0,
        exit::VIOLATED => 1,
        _ => 2,
    };
    failing.chain(r.unchecked.iter().map(|u| u.code)).max_by_key(|&c| (rank(c), c)).unwrap_or(exit::OK)
}

/// `--remedy` / `--fix-out`: each repairable error's change tried on a copy
/// and re-checked; the working ones written to `fix_out` and that folder checked.
fn remedies(
    checker: &Checker,
    report: &mut onnx_contract::FolderReport,
    folder: &Path,
    fix_out: Option<&Path>,
) -> Result<(), Fail> {
    let internal = |message: String| Fail { code: exit::INTERNAL, kind: "remedy", message };
    let found = onnx_contract::remedy::try_all(report, folder, &|dir| checker.run_folder(dir)).map_err(internal)?;
    report.remedies = found.tried.clone();
    if let Some(out) = fix_out {
        // The repaired copy is checked where it is staged; only one that passes is written.
        let name = out.file_name().map_or("fixed".into(), |n| n.to_string_lossy().into_owned());
        let staging = out.with_file_name(format!(".{name}.partial-{}", std::process::id()));
        onnx_contract::remedy::write_fixed(folder, &found, &staging).map_err(internal)?;
        let again = checker.run_folder(&staging);
        let passes = again.as_ref().is_ok_and(|r| r.verdict == onnx_contract::Verdict::Pass);
        if passes {
            onnx_contract::remedy::write_fixed(folder, &found, out).map_err(internal)?;
        }
        let _ = std::fs::remove_dir_all(&staging);
        let again = again?;
        report.fixed = Some(onnx_contract::Fixed {
            dir: out.display().to_string(),
            verdict: again.verdict,
            failing: again
                .files
                .iter()
                .filter(|f| f.report.verdict == onnx_contract::Verdict::Fail)
                .map(|f| f.path.clone())
                .collect(),
            written: passes,
        });
    }
    Ok(())
}

/// `--no-fetch`, or ONNX_CONTRACT_NO_FETCH set to anything but empty or 0.
pub(crate) fn no_fetch(flag: bool) -> bool {
    flag || std::env::var_os("ONNX_CONTRACT_NO_FETCH").is_some_and(|v| !v.is_empty() && v != "0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_parse_as_name_equals_integer() {
        assert_eq!(parse_param("hidden=32").unwrap(), ("hidden".to_string(), 32));
        assert!(parse_param("hidden").unwrap_err().contains("NAME=VALUE"));
        assert!(parse_param("hidden=x").unwrap_err().contains("not an integer"));
    }
}
