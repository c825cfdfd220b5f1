//! `replay TRACE --model PATH`: a caller's recorded calls against the
//! protocol the model needs. The guard names the first departures (call,
//! tensor, both values); the calls are then re-run with the caller's shapes
//! and flags to show its error happen, the model is checked with the correct
//! protocol to show it does not, and one line says who is at fault.

use super::trace::{self, Call};
use crate::checker::report::{Report, Verdict};
use crate::checker::Checker;
use crate::engine::events::FeedSource;
use crate::engine::options::{Job, Options, ReplayCall, ReplayFeed};
use crate::engine::{child, locate};
use crate::finding::{Code, Finding, Severity};
use crate::folder::layout::{Entry, Layout};
use crate::folder::Role;
use crate::model::fold::fold_names;
use crate::plan;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// What re-running the caller's recorded calls did.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Reproduction {
    /// The model the calls were re-run on.
    pub model: String,
    /// Calls re-run (up to the first failure).
    pub calls: Vec<usize>,
    /// The first call that failed, with ONNX Runtime's error and node.
    pub failed: Option<(usize, String, Option<String>)>,
    /// Where the re-run's feeds came from: one line per kind (as recorded,
    /// chained from the re-run's outputs, built from the protocol, seeded), with the inputs.
    #[serde(default)]
    pub fed: Vec<String>,
    /// `--repro`: the failing node cut out with the values the re-run fed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repro: Option<crate::engine::events::Repro>,
}

/// With the cache against the trace's pattern, measured by the tool on this model.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Cost {
    /// Cached steps timed.
    pub steps: usize,
    /// Those steps with the cache.
    pub cached_ms: f64,
    /// The same steps re-feeding the whole prefix without a cache (the trace's pattern).
    pub uncached_ms: f64,
    /// What the trace's own decoder calls took, when it recorded times.
    pub trace_ms: Option<f64>,
}

/// Everything a replay found.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct ReplayReport {
    /// [`crate::SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Pass when the caller follows the protocol.
    pub verdict: Verdict,
    /// `caller`, `model`, `both`, `both fine`, `cannot tell` (no fault shown, and a
    /// call the trace cannot decide), or `undecided` (the model was not run: no
    /// ONNX Runtime, or `--static-only`).
    pub at_fault: String,
    /// One line on it.
    pub summary: String,
    /// The trace file.
    pub trace: String,
    /// The model file or folder.
    pub model: String,
    /// Calls in the trace.
    pub calls: usize,
    /// The caller's departures (first occurrence of each, with `call`), then the recorded errors.
    pub findings: Vec<Finding>,
    /// The caller's calls re-run on the model.
    pub reproduction: Option<Reproduction>,
    /// The model checked with the correct protocol.
    pub model_check: Option<Report>,
    /// The cost of never using the cache, when that is the departure.
    pub cost: Option<Cost>,
    /// The first wrong call as fed against the protocol, and the protocol's run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<super::fix::CallFix>,
    /// The decoding strategy the trace shows, in one line (inferred from its
    /// calls and the re-run's scores): greedy, sampling, beam search, several
    /// tokens per call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decoding: Option<String>,
}

/// The inputs a re-run had to invent (the trace held only their digests).
fn invented(r: &Reproduction) -> String {
    match r.fed.iter().find(|l| l.starts_with("seeded")) {
        Some(line) => format!("it had to invent {}", line.split_once(": ").map_or(line.as_str(), |(_, names)| names)),
        None => "every input came from the trace or the protocol".into(),
    }
}

fn basename(s: &str) -> &str {
    s.rsplit(['/', '\\']).next().unwrap_or(s)
}

/// The entry a call's `model` names: by file name, else the only decoder of a file PATH.
fn entry_for<'a>(layout: &'a Layout, path: &Path, call: &Call) -> Option<&'a Entry> {
    let name = basename(&call.model);
    if path.is_file() {
        return layout.entries.iter().find(|e| e.file.path == path && basename(&e.file.rel) == name);
    }
    layout.entries.iter().find(|e| basename(&e.file.rel) == name)
}

/// Replays `trace` against the model at `path` (a file or an export folder).
pub fn replay(checker: &Checker, trace_path: &Path, path: &Path) -> Result<ReplayReport, crate::error::Error> {
    let mut calls = trace::read(trace_path)?;
    // Values kept only as digests, recovered where a hypothesis' digest matches.
    let recovered = super::hypotheses::fill(&mut calls);
    let layout = if path.is_dir() {
        Layout::read(path, None, None)?
    } else {
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        Layout::read(dir, Some(path), None).or_else(|_| Layout::single(path, None))?
    };
    // Every model the trace calls, with the plan of its protocol.
    let mut models = Vec::new();
    let mut findings = Vec::new();
    for c in &calls {
        let Some(e) = entry_for(&layout, path, c) else {
            if !findings.iter().any(|f: &Finding| f.message.contains(&format!("`{}`", c.model))) {
                let mut f = Finding::new(
                    Code::CallerError,
                    Severity::Info,
                    format!("calls to `{}` are not checked: it is not {}", c.model, path.display()),
                );
                f.call = Some(c.call);
                findings.push(f);
            }
            continue;
        };
        let name = basename(&c.model).to_string();
        if models.iter().any(|(n, _, _)| *n == name) {
            continue;
        }
        let plan = layout.plan_for(e, 1).and_then(Result::ok);
        models.push((name, e.sig.clone(), plan));
    }
    let known: Vec<String> = models.iter().map(|(n, _, _)| n.clone()).collect();
    if known.is_empty() {
        let mut called: Vec<String> = calls.iter().map(|c| c.model.clone()).collect();
        called.sort();
        called.dedup();
        return Err(crate::error::TraceError {
            path: trace_path.to_path_buf(),
            line: None,
            message: format!(
                "none of its {} calls is to {} (it calls {})",
                calls.len(),
                path.display(),
                fold_names(&called).join(", ")
            ),
        }
        .into());
    }
    let unchecked = findings;
    let mut findings = unchecked.clone();
    findings.extend(super::judge::judge_calls(&models, &known, &calls));
    let mut findings = super::judge::first_departures(findings);

    // The decoder the trace drives, and its correct protocol.
    let decoder = calls
        .iter()
        .filter_map(|c| entry_for(&layout, path, c))
        .rfind(|e| matches!(e.role, Role::MergedDecoder | Role::DecoderWithPast | Role::DecoderOnly));
    let mut model_check = None;
    let mut reproduction = None;
    let mut decoding = None;
    // `--static-only`: the calls judged against the protocol, nothing run.
    if let Some(d) = decoder.filter(|_| !checker.is_static_only()) {
        let report = checker.clone().run(&d.file.path)?;
        // Re-run every time: the strategy is judged on the re-run's scores.
        reproduction = match reproduce(&layout, d, &calls, checker.repro_to()) {
            Ok((mut r, scores, computed)) => {
                // A format-1 trace: the rows a bit-exact re-run gives are the caller's
                // rows; the calls are judged again with them (a beam's gathered past).
                let mut filled = calls.clone();
                let n = super::judge::fill_rows(&mut filled, &computed);
                let kept = super::judge::fill_kept(&mut filled, &computed);
                if n + kept > 0 {
                    let mut again = unchecked.clone();
                    again.extend(super::judge::judge_calls(&models, &known, &filled));
                    findings = super::judge::first_departures(again);
                    if n > 0 {
                        r.fed.push(format!(
                            "row digests the trace lacks: computed from the re-run where it is bit-exact with the caller's run ({n} tensors)"
                        ));
                    }
                }
                if !recovered.is_empty() {
                    let shown: Vec<&str> = recovered.iter().take(3).map(String::as_str).collect();
                    let more = recovered.len().saturating_sub(3);
                    let more = if more > 0 { format!(" (and {more} calls more)") } else { String::new() };
                    r.fed.push(format!(
                        "values the trace keeps only as digests, found by hashing each candidate with its scheme: {}{more}",
                        shown.join("; ")
                    ));
                }
                if let Some(Ok(plan)) = layout.plan_for(d, 1) {
                    let name = basename(&d.file.rel);
                    let mine: Vec<&Call> = filled.iter().filter(|c| basename(&c.model) == name).collect();
                    if let Some(dec) = super::strategy::infer(&plan, &mine, &scores) {
                        findings.extend(dec.findings);
                        decoding = Some(dec.line);
                    }
                }
                Some(r)
            }
            Err(why) => {
                findings.push(Finding::new(
                    Code::RuntimeSkipped,
                    Severity::Info,
                    format!("the caller's calls were not re-run: {why}"),
                ));
                None
            }
        };
        model_check = Some(report);
    }
    let caller_ok = !findings.iter().any(|f| f.severity == Severity::Error);
    // What the trace records failing, against what the re-run did: a verdict
    // never contradicts the trace.
    let recorded_error = calls.iter().find(|c| c.error.is_some()).map(|c| c.call);
    // A model that could not be run here (no ONNX Runtime) is not judged: the
    // caller's departures still stand, the model's share stays undecided.
    let no_runtime = model_check.as_ref().is_some_and(|r| {
        let mut errors = r.findings.iter().filter(|f| f.severity == Severity::Error).peekable();
        errors.peek().is_some() && errors.all(|f| f.code == Code::RuntimeLoad)
    });
    let model_ok = no_runtime || model_check.as_ref().is_none_or(|r| r.verdict == Verdict::Pass);
    let cost =
        findings.iter().any(|f| f.code == Code::CallerNoCache).then(|| cost(model_check.as_ref(), &calls)).flatten();
    let undecided = findings.iter().find(|f| f.code == Code::CallerUndecided);
    let at_fault = match (caller_ok, model_ok) {
        (true, true) if no_runtime || model_check.is_none() && checker.is_static_only() => "undecided",
        (true, true) if undecided.is_some() => "cannot tell",
        (true, true) => "both fine",
        (false, true) => "caller",
        (true, false) => "model",
        (false, false) => "both",
    };
    let unrun = model_check
        .as_ref()
        .and_then(|r| r.findings.iter().find(|f| f.code == Code::RuntimeLoad))
        .map(|f| format!("the model was not run (no ONNX Runtime here: {})", f.message))
        .or_else(|| checker.is_static_only().then(|| "the model was not run (--static-only)".to_string()));
    let summary = match at_fault {
        "undecided" => format!("undecided: every call follows the protocol; {}", unrun.clone().unwrap_or_default()),
        "both fine" => "both fine: the caller follows the protocol and the model honours it".to_string(),
        "cannot tell" => format!(
            "cannot tell: the model honours the protocol, and the trace cannot show whether the caller does: call {}: {}",
            undecided.and_then(|f| f.call).unwrap_or_default(),
            undecided.map(|f| f.message.as_str()).unwrap_or_default()
        ),
        "caller" => {
            let errors: Vec<&Finding> = findings.iter().filter(|f| f.severity == Severity::Error).collect();
            let first = errors
                .first()
                .map(|f| match f.call {
                    Some(c) => format!("call {c}: {}", f.message),
                    None => f.message.clone(),
                })
                .unwrap_or_default();
            let only_slow = errors.iter().all(|f| f.code == Code::CallerNoCache);
            let shown = match &reproduction {
                Some(Reproduction { failed: Some((c, e, _)), .. }) => format!(
                    "; re-running its calls fails at call {c} ({}), the correct protocol passes on the same model",
                    e.lines().next().unwrap_or(e)
                ),
                Some(r) if recorded_error.is_some() => format!(
                    "; the trace records call {} failing, and the re-run did not reproduce it ({}); the correct protocol passes on the same model",
                    recorded_error.unwrap_or_default(),
                    invented(r)
                ),
                Some(_) if only_slow => "; its calls run and their results are right, paid for by recomputing the prefix every call; the cached protocol passes on the same model".into(),
                Some(_) => "; its calls run without an error but compute something else (no crash to warn it); the correct protocol passes on the same model".into(),
                None => String::new(),
            };
            let shown = match &unrun {
                Some(why) => format!("; {why}"),
                None => shown,
            };
            format!("caller: {first}{shown}")
        }
        "model" => "model: the caller follows the protocol, and the model fails the correct protocol too".into(),
        _ => "both: the caller departs from the protocol, and the model fails the correct protocol too".into(),
    };
    let fix = super::fix::first_wrong_call(&findings, &calls, model_check.as_ref());
    Ok(ReplayReport {
        fix,
        decoding,
        schema_version: crate::checker::report::SCHEMA_VERSION,
        verdict: if caller_ok { Verdict::Pass } else { Verdict::Fail },
        at_fault: at_fault.into(),
        summary,
        trace: trace_path.display().to_string(),
        model: path.display().to_string(),
        calls: calls.len(),
        findings,
        reproduction,
        model_check,
        cost,
    })
}

/// The re-run's per-row next-token scores, by call.
type Scores = BTreeMap<usize, Vec<crate::engine::events::RowScores>>;

/// Row digests a bit-exact re-run computed, by call (`feed:NAME` / `output:NAME`).
type Rows = Vec<(usize, crate::engine::events::ComputedRows)>;

/// Re-runs the caller's calls to `d` in a child process until one fails,
/// with the calls to the folder's other files it was fed from (an encoder,
/// an embedding model) re-run on their own sessions.
fn reproduce(
    layout: &Layout,
    d: &Entry,
    calls: &[Call],
    repro: Option<crate::engine::options::ReproTo>,
) -> Result<(Reproduction, Scores, Rows), String> {
    // The family's plan; for an export that contract does not fit (incident 1's),
    // the plan of the model's own signature: re-running needs only its vocabulary.
    let own = || {
        let text = crate::contract::init::init(&d.sig, &d.file.rel);
        crate::contract::parse(Path::new("own.yaml"), &text, &[]).map_err(|e| e.to_string())
    };
    let plan = match layout.plan_for(d, 1) {
        Some(Ok(p)) => p,
        _ => plan::build(&d.sig, &own()?, 1)?,
    };
    let name = basename(&d.file.rel);
    // A companion: another file of the folder, not a decoder (the encoder, `embed_tokens`).
    let companion = |c: &Call| {
        let other = basename(&c.model);
        layout
            .entries
            .iter()
            .find(|e| basename(&e.file.rel) == other && other != name)
            .filter(|e| !matches!(e.role, Role::MergedDecoder | Role::DecoderWithPast | Role::DecoderOnly))
            .map(|e| e.file.path.clone())
    };
    let mine: Vec<usize> =
        calls.iter().enumerate().filter(|(_, c)| basename(&c.model) == name).map(|(i, _)| i).collect();
    // The tokens the next call to the decoder fed: what the strategy chose from these scores.
    let watch = |i: usize| -> Vec<i64> {
        let next = mine.iter().find(|&&j| j > i).map(|&j| &calls[j]);
        next.and_then(|c| c.feeds.get(&plan.input_ids)?.value.clone()).unwrap_or_default()
    };
    let replay: Vec<ReplayCall> = calls
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let model = if basename(&c.model) == name { None } else { Some(companion(c)?) };
            Some(ReplayCall {
                call: c.call,
                feeds: c
                    .feeds
                    .iter()
                    .map(|(n, r)| ReplayFeed {
                        name: n.clone(),
                        dtype: r.dtype.clone(),
                        shape: r.shape.clone(),
                        value: r.value.clone(),
                        digest: r.digest.clone(),
                        zeros: r.digest.is_some() && r.digest == super::guard::zero_digest(&r.dtype, &r.shape),
                        rows: r.rows.clone(),
                    })
                    .collect(),
                outputs: c.outputs.iter().flatten().filter_map(|(n, r)| Some((n.clone(), r.digest.clone()?))).collect(),
                output_rows: c
                    .outputs
                    .iter()
                    .flatten()
                    .filter_map(|(n, r)| Some((n.clone(), r.rows.clone()?)))
                    .collect(),
                watch: if model.is_none() { watch(i) } else { Vec::new() },
                model,
            })
        })
        .collect();
    // A trace's shapes are untrusted: nothing is allocated for a tensor no model takes.
    for c in &replay {
        for f in &c.feeds {
            let n = f.shape.iter().try_fold(1u64, |a, &d| a.checked_mul(u64::try_from(d).ok()?));
            if n.is_none_or(|n| n > MAX_REPLAY_ELEMENTS) {
                return Err(format!(
                    "call {} feeds `{}` of shape {:?}: too large to re-create (over {MAX_REPLAY_ELEMENTS} elements)",
                    c.call, f.name, f.shape
                ));
            }
        }
    }
    let lib = locate::locate(None).map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let options = Options { replay: Some(replay), repro, ..Options::default() };
    let job = Job { model: d.file.path.clone(), ort_lib: lib.path.clone(), plan, options };
    let r = child::run(&exe, &job, &lib.source.to_string(), Duration::from_secs(600), &|_| {});
    let failed = r.replayed.iter().find_map(|(c, e, n)| {
        e.as_ref()
            .map(|e| (*c, crate::engine::runtime_report::clean_ort_message(e), n.as_ref().map(|n| n.path.clone())))
    });
    // Where the re-run's values came from, each input once under the kinds it was fed as.
    let mut by_source: BTreeMap<FeedSource, Vec<String>> = BTreeMap::new();
    for (_, fed) in &r.replay_sources {
        for (input, source) in fed {
            let names = by_source.entry(*source).or_default();
            if !names.contains(input) {
                names.push(input.clone());
            }
        }
    }
    let fed = by_source
        .into_iter()
        .map(|(source, names)| {
            let how = match source {
                FeedSource::Recorded => "as recorded",
                FeedSource::Chained => {
                    "the re-run's own outputs, where the trace's digests say the caller fed an earlier output"
                }
                FeedSource::Protocol => {
                    "built from the protocol (the trace holds only a digest): continuing the past the call feeds"
                }
                FeedSource::Seeded => "seeded (the trace holds only a digest; equal digests get equal values)",
                FeedSource::Hypothesis => {
                    "an earlier output repeated per beam or cropped to an accepted length, as hashing that hypothesis with the trace's scheme showed"
                }
                FeedSource::Kept => {
                    "the caller's own buffer: its previous value with the previous call's present rows put in, as hashing each update with the trace's scheme showed"
                }
                FeedSource::Gathered => {
                    "the previous call's presents gathered by the rows another past of the same call was shown by its digest to be (the re-run is not bit-exact with the caller's in every layer)"
                }
            };
            format!("{how}: {}", fold_names(&names).join(", "))
        })
        .collect();
    let calls = r.replayed.iter().map(|(c, _, _)| *c).collect();
    // A call re-run on seeded values (the trace holds only their digest) measured
    // nothing of the caller's: its probabilities never judge the strategy.
    let seeded: Vec<usize> = r
        .replay_sources
        .iter()
        .filter(|(_, fed)| fed.iter().any(|(_, s)| *s == FeedSource::Seeded))
        .map(|(c, _)| *c)
        .collect();
    let scores = r.replay_scores.into_iter().filter(|(c, _)| !seeded.contains(c)).collect();
    let reproduction =
        Reproduction { model: d.file.rel.clone(), calls, failed, fed, repro: r.repros.into_iter().next() };
    Ok((reproduction, scores, r.replay_rows))
}

/// The most elements a re-created feed may have (a real past is far below it).
const MAX_REPLAY_ELEMENTS: u64 = 1 << 27;

/// The tool's cached steps against its uncached recomputes on this model.
fn cost(check: Option<&Report>, calls: &[Call]) -> Option<Cost> {
    let rt = check?.runtime.as_ref()?;
    let rows: Vec<_> =
        rt.steps.iter().filter(|s| s.step > 0 && s.recompute_seconds.is_some() && s.step0_past_len == 0).collect();
    if rows.is_empty() {
        return None;
    }
    let cached_ms = rows.iter().filter_map(|s| s.seconds).sum::<f64>() * 1e3;
    let uncached_ms = rows.iter().filter_map(|s| s.recompute_seconds).sum::<f64>() * 1e3;
    let times: Vec<f64> = calls.iter().filter(|c| c.model.contains("decoder")).filter_map(|c| c.time_ms).collect();
    Some(Cost { steps: rows.len(), cached_ms, uncached_ms, trace_ms: (!times.is_empty()).then(|| times.iter().sum()) })
}
