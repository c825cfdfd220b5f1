//! The one pipeline: contract → static check → compatibility → plan →
//! runtime runs → [`Report`]. The command line, folder mode and applications
//! all call it; nothing else strings these steps together.

#[cfg(feature = "runtime")]
mod bisect;
mod budget;
mod builder;
mod folder;
pub mod many;
pub(crate) mod report;
mod runner;
mod settle;

use crate::checker::report::{ContractInfo, Report};
use crate::contract::{self, Contract};
use crate::engine::{compat, RuntimeReport};
use crate::error::Error;
use crate::finding::{any_error, Code, Finding};
use crate::model::summary::ModelSummary;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Where the runtime steps run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Isolation {
    /// A child process (this same executable, recognised by an environment
    /// variable; the host must call [`crate::init_child`] first in `main`):
    /// a crash or hang inside ONNX Runtime becomes a `crash` finding.
    #[default]
    ChildProcess,
    /// This process: no crash isolation, and ONNX Runtime can be loaded only
    /// once per process (one runtime per process lifetime).
    InProcess,
}

/// How one file is driven, beyond the builder's settings (folder mode fills it).
#[derive(Clone, Debug, Default)]
// Without the `runtime` feature nothing is driven: only `static_only` is read.
#[cfg_attr(not(feature = "runtime"), allow(dead_code))]
struct Setup {
    /// The encoder producing the encoder states.
    encoder: Option<PathBuf>,
    /// The no-past decoder recomputing uncached logits.
    no_cache_model: Option<PathBuf>,
    /// The no-past decoder run at step 0 (split pair).
    step0_model: Option<PathBuf>,
    /// The decoder start token (config's `decoder_start_token_id`).
    start_token: Option<i64>,
    /// Why this file is only checked statically, when it is.
    static_only: Option<String>,
    /// A numeric variant's fp32 sibling and its plan, to compare with.
    compare_to: Option<(PathBuf, crate::plan::Plan)>,
    /// The fp32 sibling's encoder, when the variant runs with its own.
    compare_encoder: Option<PathBuf>,
    /// The sliding window the folder's config asks for.
    window: Option<crate::folder::config::SlidingWindow>,
    /// The contract is a built-in family's, chosen for the file (not the
    /// user's, nor genai_config.json's): its names are conventions, and a
    /// deviation the run shows harmless is a warning.
    builtin_contract: bool,
    /// The contract comes from the folder (a family's conventions or the
    /// consumer's config), not from the user: what the run measured settles
    /// its suspicions.
    from_folder: bool,
    /// The embedding model computing `inputs_embeds` from token ids.
    embed_tokens: Option<PathBuf>,
    /// What the folder's configs tell the protocol inference (genai's shared buffers).
    hints: crate::plan::infer::Hints,
    /// An encoder alone (no decoder in its folder), driven as its own
    /// product with ids below this vocabulary size.
    encoder_only: Option<i64>,
    /// The rotary embedding the folder's config.json states, audited against the graph's.
    rope: Option<crate::folder::rope::Rope>,
    /// config.json's `final_logit_softcapping`: every logit within ± it.
    softcap: Option<f64>,
    /// The multipliers and ALiBi slopes config.json states, audited against the graph's.
    scales: Option<crate::folder::scales::Scales>,
    /// Companion files (encoders) several runs of the folder open, with how many open each.
    shared: Vec<(PathBuf, usize)>,
}

/// Builds and runs a check. Defaults: 4 steps, batch 1, seed 0, the runtime
/// found on this machine (never fetched unless [`Checker::fetch`] allows it),
/// a 600 s time limit, in a child process.
#[derive(Clone)]
pub struct Checker {
    contract: Option<Contract>,
    static_only: bool,
    steps: usize,
    batch: i64,
    seed: u64,
    runtimes: Vec<PathBuf>,
    fetch: bool,
    timeout: Duration,
    target_ort: Option<String>,
    encoder: Option<PathBuf>,
    no_cache_model: Option<PathBuf>,
    isolation: Isolation,
    notice: Option<Notice>,
    progress: Option<Notice>,
    family: Option<String>,
    deep: bool,
    /// `--repro DIR`: (folder, command line) for minimal reproductions.
    repro: Option<(PathBuf, String)>,
    /// Folder mode: whose loading rules apply.
    consumer: crate::consumer::Choice,
    /// Folder mode: told the folder's consumers as soon as it is read.
    consumers_known: Option<ConsumersKnown>,
    /// The memory every process the check starts shares (`--max-memory`).
    memory: Arc<crate::memory::Budget>,
    /// Folder mode: the host process running the folder's jobs.
    #[cfg(feature = "runtime")]
    hosts: Option<Arc<crate::engine::host::Hosts>>,
}

/// Told a folder's consumers as soon as it is read, before its runs (to
/// start the consumers' own generation beside them).
type ConsumersKnown =
    Arc<dyn Fn(&std::path::Path, &crate::consumer::View<'_>, &[crate::consumer::Target]) + Send + Sync>;

/// Steps per run under [`Checker::deep`].
pub const DEEP_STEPS: usize = 32;
/// The most steps [`Checker::deep`] runs to get past a sliding window.
pub const DEEP_MAX_STEPS: usize = 512;

/// Steps per run: `--deep` runs at least [`DEEP_STEPS`], and past a sliding
/// window + 2 (from the prompt's 4 tokens) when that takes at most
/// [`DEEP_MAX_STEPS`]; otherwise the note saying why it stopped short.
#[cfg(feature = "runtime")]
fn run_length(steps: usize, deep: bool, window: Option<i64>) -> (usize, Option<String>) {
    if !deep {
        return (steps, None);
    }
    let past_window = window.map_or(0, |w| w.max(0) as usize + 3);
    if past_window > DEEP_MAX_STEPS {
        let ran = steps.max(DEEP_STEPS);
        let note = format!("--deep: running past the sliding window takes {past_window} steps, more than {DEEP_MAX_STEPS}: ran {ran} (the window probe and the graph's attention windows still cover it)");
        return (ran, Some(note));
    }
    (steps.max(DEEP_STEPS).max(past_window), None)
}

/// Where one-line notices go (the library itself never prints).
type Notice = Arc<dyn Fn(&str) + Send + Sync>;

impl Checker {
    #[cfg_attr(not(feature = "runtime"), allow(dead_code))]
    fn progress(&self, text: &str) {
        if let Some(f) = &self.progress {
            f(text);
        }
    }

    #[cfg_attr(not(feature = "runtime"), allow(dead_code))]
    fn notify(&self, text: &str) {
        if let Some(f) = &self.notice {
            f(text);
        }
    }

    /// Checks one model file and returns what was found. `Err` only when the
    /// model cannot be judged at all (unreadable, missing external data);
    /// every finding about the model is in the report. Without a contract,
    /// the family's built-in one is used, chosen and sized from the
    /// config.json beside the file (or from the model itself), and the
    /// file's siblings drive it as they would in [`Checker::run_folder`].
    pub fn run(&self, model: &Path) -> Result<Report, Error> {
        // A path that does not exist is named itself, not the folder around it.
        if let Err(source) = std::fs::metadata(model) {
            return Err(crate::error::ModelError::Io { path: model.to_path_buf(), source }.into());
        }
        match &self.contract {
            Some(contract) => {
                // A model whose weights cannot be found is unusable: say so before any check.
                let sig = crate::model::reader::read_usable_signature(model)?;
                let setup = Setup {
                    encoder: self.encoder.clone(),
                    no_cache_model: self.no_cache_model.clone(),
                    ..Setup::default()
                };
                self.check_file(model, &model.display().to_string(), &sig, contract, &setup, Vec::new())
            }
            None => folder::run_file(self, model),
        }
    }

    /// Checks every ONNX file of an export folder (and its `onnx/`
    /// subfolder), each against its family's contract for its role, driven
    /// the way real callers drive that form, plus the checks across files.
    pub fn run_folder(&self, dir: &Path) -> Result<crate::checker::report::FolderReport, Error> {
        folder::run_folder(self, dir)
    }

    /// The one pipeline for one file: static check, compatibility, then the runtime runs.
    fn check_file(
        &self,
        model: &Path,
        shown: &str,
        sig: &crate::model::signature::Signature,
        contract: &Contract,
        setup: &Setup,
        mut findings: Vec<Finding>,
    ) -> Result<Report, Error> {
        findings.extend(contract::check(sig, contract));
        // The protocol read from the graph, once: its static faults, the run and the settling read it.
        let inferred = crate::plan::infer::infer(sig, &setup.hints);
        findings.extend(crate::plan::faults::present_dtypes(sig, &inferred));
        findings.extend(crate::plan::faults::unread_inputs(sig, &inferred));
        findings.extend(crate::plan::faults::swapped_branches(sig, &inferred));
        // Decoder-only without position_ids: positions follow the past length inside
        // the graph, right at batch 1 and shifted for every left-padded row.
        let decoder_only = sig.input("encoder_hidden_states").is_none()
            && sig.inputs.iter().any(|p| crate::model::names::is_past_name(&p.name))
            && !sig.inputs.iter().any(|p| p.name.contains(".encoder."));
        // GroupQueryAttention places each row by its mask (seqlens_k), not by the past length.
        let by_mask = sig.op_types.contains("GroupQueryAttention");
        let positions = inferred.input(crate::plan::roles::InputRole::PositionIds).is_some();
        if decoder_only && !by_mask && sig.input("attention_mask").is_some() && !positions {
            findings.push(Finding::warning(
                Code::BatchPadding,
                "no position_ids input: the graph derives positions from the past length, so rows of a left-padded batch get shifted positions (right at batch 1)",
            ));
        }
        if let Some(v) = &self.target_ort {
            findings.extend(compat::check_target(sig, v));
        }
        let mut runtimes = Vec::new();
        if !self.static_only && setup.static_only.is_none() {
            // The run decides: a static deviation is evidence, and the model is
            // run whenever a plan can be made, also when the static check failed.
            let static_end = findings.len();
            let static_failed = any_error(&findings);
            runtimes = self.run_runtimes(model, sig, &inferred, contract, setup, &mut findings)?;
            settle::measured_suspicions(&mut findings, static_end, &runtimes, setup.from_folder);
            if static_failed {
                let how = settle::Settle::of(&inferred, contract, setup.builtin_contract);
                settle::settle(&mut findings, static_end, &runtimes, how);
            }
            settle::unread_explains(&mut findings);
        }
        let summary = ModelSummary::of(shown, sig, Vec::new());
        Ok(Report::new(shown, Some(ContractInfo::of(contract)), summary, findings, runtimes))
    }

    #[cfg(not(feature = "runtime"))]
    fn run_runtimes(
        &self,
        _model: &Path,
        _sig: &crate::model::signature::Signature,
        _inferred: &crate::plan::roles::Inferred,
        _contract: &Contract,
        _setup: &Setup,
        _findings: &mut Vec<Finding>,
    ) -> Result<Vec<RuntimeReport>, Error> {
        Err(Error::RuntimeFeature)
    }

    #[cfg(feature = "runtime")]
    fn run_runtimes(
        &self,
        model: &Path,
        sig: &crate::model::signature::Signature,
        inferred: &crate::plan::roles::Inferred,
        contract: &Contract,
        setup: &Setup,
        findings: &mut Vec<Finding>,
    ) -> Result<Vec<RuntimeReport>, Error> {
        use crate::engine::{locate, options};
        use crate::plan;
        let cacheless = crate::folder::roles::role_of(sig) == crate::folder::Role::DecoderOnlyNoCache;
        let pastless =
            !sig.inputs.iter().any(|p| crate::model::names::is_past_name(&p.name)) && inferred.pairs.is_empty();
        if pastless && !cacheless && setup.encoder_only.is_none() {
            // A decoder without past inputs has no cache to drive (a split
            // pair's step-0 half, or an encoder): the static check is its check.
            findings.push(Finding::new(
                Code::RuntimeSkipped,
                crate::finding::Severity::Info,
                "no past inputs: there is no KV cache to drive, so the static check is the whole check",
            ));
            return Ok(Vec::new());
        }
        let built = match setup.encoder_only {
            Some(vocab) => plan::Plan::for_encoder(sig, vocab),
            None => plan::build_with(sig, contract, self.batch, &setup.hints),
        };
        let plan = match built {
            Ok(p) => p,
            Err(message) => {
                findings.push(Finding::error(Code::Plan, message));
                return Ok(Vec::new());
            }
        };
        // An input nobody can place: say which and why, never guess it.
        if let Some(f) = plan::faults::unplaced(&plan, inferred, sig) {
            findings.push(f);
            return Ok(Vec::new());
        }
        let libs = match self.libraries() {
            Ok(libs) => libs,
            Err(message) => {
                findings.push(Finding::error(Code::RuntimeLoad, message));
                return Ok(Vec::new());
            }
        };
        let exe = self.runner()?;
        let (steps, short) = run_length(self.steps, self.deep, setup.window.as_ref().map(|w| w.size));
        findings.extend(short.map(|text| Finding::new(Code::RuntimeSkipped, crate::finding::Severity::Info, text)));
        let unprobed = crate::checks::window::MAX_PROBED as i64;
        if let Some(w) = setup.window.as_ref().filter(|w| w.size > unprobed && sig.attention_windows.is_empty()) {
            findings.push(Finding::new(
                Code::RuntimeSkipped,
                crate::finding::Severity::Info,
                format!("{} = {}: longer than {unprobed}, not probed at run time (the past it needs is too large for a default check); a graph without GroupQueryAttention has no window attribute to read statically", w.source, w.size),
            ));
        }
        let options = options::Options {
            steps,
            deep: self.deep,
            batch: self.batch,
            seed: self.seed,
            encoder: setup.encoder.clone(),
            embed_tokens: setup.embed_tokens.clone(),
            no_cache_model: setup.no_cache_model.clone(),
            step0_model: setup.step0_model.clone(),
            start_token: setup.start_token,
            gqa: sig.op_types.contains("GroupQueryAttention"),
            compare_to: setup.compare_to.clone(),
            compare_encoder: setup.compare_encoder.clone(),
            shared: setup.shared.clone(),
            window: setup.window.as_ref().map(|w| options::Window {
                size: w.size.max(0) as usize,
                source: w.source.clone(),
                layers: w.layers.clone(),
            }),
            // Batched generation (left-padded prompts, or padded sources) where the batch axis is dynamic.
            batch_check: self.batch == 1
                && plan.codebooks.is_none()
                && sig
                    .input(plan.inputs_embeds.as_ref().unwrap_or(&plan.input_ids))
                    .and_then(|p| p.ty.tensor_parts())
                    .and_then(|(_, d)| d.and_then(|d| d.first().cloned()))
                    .is_some_and(|d| !matches!(d, crate::model::signature::Dim::Fixed(_))),
            rope: setup.rope.clone(),
            softcap: setup.softcap,
            scales: setup.scales.clone(),
            repro: self.repro_to(),
            ..Default::default()
        };
        let mut reports = Vec::new();
        for lib in libs {
            // The version found, checked statically first: the table names the limit, the run confirms it.
            if let Some(v) = locate::version_from_name(&lib.path) {
                findings.extend(compat::check_found(sig, &v));
            }
            let job = options::Job {
                model: model.to_path_buf(),
                ort_lib: lib.path.clone(),
                plan: plan.clone(),
                options: options.clone(),
            };
            let source = lib.source.to_string();
            // Held until the job and its crash bisection are done; a job larger than the budget never starts.
            let Some(_lease) = self.lease(&job, findings) else { continue };
            let mut report = self.run_job(exe.as_deref(), &job, &source);
            // ONNX Runtime killed the child in the encoder: bisect to the node.
            if let Some(exe) = exe.as_deref() {
                self.name_crash_node(exe, &job, &source, &mut report);
            }
            report.parity_rule = Some(plan.tolerance.clone());
            report.cache_pairs = plan
                .self_past
                .iter()
                .chain(&plan.cross_past)
                .map(|c| (c.past.clone(), c.present.clone(), c.matched_by.clone()))
                .collect();
            findings.extend(report.findings.iter().cloned());
            if plan.is_cacheless() {
                findings.extend(no_cache_cost(&report));
            }
            reports.push(report);
        }
        Ok(reports)
    }

    /// A file of unknown role loaded and run once on inputs built from its
    /// signature: the runtime's report (its probe says what happened).
    #[cfg(feature = "runtime")]
    pub(crate) fn smoke(
        &self,
        model: &Path,
        sig: &crate::model::signature::Signature,
        codebooks: Option<i64>,
    ) -> Result<RuntimeReport, String> {
        use crate::engine::options;
        let lib = self.libraries()?.into_iter().next().ok_or("no ONNX Runtime")?;
        let options = options::Options { smoke: true, codebooks, ..Default::default() };
        let job = options::Job {
            model: model.to_path_buf(),
            ort_lib: lib.path.clone(),
            plan: crate::plan::Plan::placeholder(sig),
            options,
        };
        let exe = self.runner().map_err(|e| e.to_string())?;
        let _lease = self.lease_or(&job).map_err(|f| f.message)?;
        Ok(self.run_job(exe.as_deref(), &job, &lib.source.to_string()))
    }

    /// [`Checker::smoke`] without the runtime feature: nothing runs.
    #[cfg(not(feature = "runtime"))]
    pub(crate) fn smoke(
        &self,
        _model: &Path,
        _sig: &crate::model::signature::Signature,
        _codebooks: Option<i64>,
    ) -> Result<RuntimeReport, String> {
        Err("built without the runtime feature".into())
    }

    /// The runtimes to run with, or why there is none.
    #[cfg(feature = "runtime")]
    fn libraries(&self) -> Result<Vec<crate::engine::locate::Located>, String> {
        use crate::engine::locate::{self, Located, Source};
        if !self.runtimes.is_empty() {
            return Ok(self.runtimes.iter().map(|p| Located { path: p.clone(), source: Source::Flag }).collect());
        }
        match locate::locate(None) {
            Ok(l) => Ok(vec![l]),
            Err(not_found) if !self.fetch => Err(not_found.to_string()),
            Err(not_found) => locate::fetch_pinned(&|line: &str| self.notify(line))
                .map(|path| vec![Located { path, source: Source::Cache }])
                .map_err(|e| format!("{not_found}\n  fetching failed: {e}")),
        }
    }
}

/// A decoder without a cache, driven by re-feeding the prefix: what each
/// generated token costs, measured, against the tokens it recomputes.
#[cfg(feature = "runtime")]
fn no_cache_cost(r: &RuntimeReport) -> Option<Finding> {
    let steps: Vec<_> = r.steps.iter().filter(|s| s.ok && s.seconds.is_some()).collect();
    // Step 0 also pays the session's first-run warm-up: the second step is the baseline.
    let (first, last) = (steps.get(1).or(steps.first())?, steps.last()?);
    let tokens = |s: &crate::engine::runtime_report::StepRow| {
        s.feeds
            .iter()
            .find(|f| f.name.contains("input_ids"))
            .and_then(|f| f.shape.as_ref()?.get(1).copied())
            .unwrap_or(0)
    };
    let ms = |s: &crate::engine::runtime_report::StepRow| s.seconds.unwrap_or(0.0) * 1e3;
    Some(Finding::warning(
        Code::NoCache,
        format!(
            "no KV cache: every generated token re-feeds the whole prefix ({} tokens at step {}: {:.2} ms; {} tokens at step {}: {:.2} ms), so generating n tokens costs O(n²) token-passes; an export with past inputs (optimum's `text-generation-with-past`) runs one token per call",
            tokens(first),
            first.step,
            ms(first),
            tokens(last),
            last.step,
            ms(last)
        ),
    ))
}

#[cfg(all(test, feature = "runtime"))]
mod tests {
    use super::*;

    #[test]
    fn deep_runs_are_long_and_go_past_a_reachable_window() {
        assert_eq!(run_length(4, false, Some(100)), (4, None));
        assert_eq!(run_length(4, true, None), (DEEP_STEPS, None));
        assert_eq!(run_length(40, true, Some(8)), (40, None));
        // A window of 100 on a prompt of 4: 103 steps end 105 tokens in, window + 5.
        assert_eq!(run_length(4, true, Some(100)), (103, None));
        let (ran, note) = run_length(4, true, Some(4096));
        assert_eq!(ran, DEEP_STEPS);
        assert!(note.unwrap().contains("takes 4099 steps, more than 512"));
    }
}
