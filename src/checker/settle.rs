//! The run decides. When the static check failed and the model was run
//! anyway, the two are settled: a signature deviation from a built-in
//! family contract that the run shows harmless (the model, driven with the
//! protocol inferred from its own graph, passed every runtime check) becomes
//! a warning that says so; when the run failed, its findings, which name the
//! mechanism, come first.

use crate::engine::RuntimeReport;
use crate::finding::{Code, Finding, Severity};

/// Deviations in how a model names, types and orders its tensors and
/// symbols: a caller adapts to them; they do not make the model compute
/// anything wrong.
const NAMING: &[Code] =
    &[Code::Dtype, Code::DimName, Code::DimBinding, Code::DimDynamic, Code::DimUnknown, Code::Order];

/// Deviations in which tensors there are: harmless only when the model's own
/// protocol has a tensor for every one the contract asks for (a dynamo
/// export's `k0` for `past_key_values.0.key`), not when a whole part of the
/// protocol is missing (a merged decoder without its encoder pasts).
const PRESENCE: &[Code] = &[
    Code::InputCount,
    Code::InputMissing,
    Code::InputExtra,
    Code::OutputCount,
    Code::OutputMissing,
    Code::OutputExtra,
];

/// Why a deviation the run disproved is only information.
pub(crate) const HARMLESS: &str = "harmless here: driven with the protocol inferred from its own graph, the model passed every runtime check (cached = uncached at every step); a caller written for the family's usual signature must use this model's names, types and sizes";

/// Why a fixed size the run disproved is only information.
pub(crate) const FIXED_SHAPES: &str = "a static-cache export: batch, tokens per call and cache length are fixed by design, for fixed-shape runtimes; driven one call at a time into its buffers, the model passed every runtime check. It cannot batch or take a longer chunk than it was traced with";

/// Why a token axis fixed at 1 the run disproved is only a warning.
pub(crate) const ONE_TOKEN: &str = "one token per call, as every step after the prompt feeds (the prompt goes through the folder's no-past decoder); driven so, the model passed every runtime check. A caller cannot feed several tokens at once (speculative verification, a second prefill)";

/// A token input whose sequence axis is fixed at 1.
fn one_token(message: &str) -> bool {
    message.starts_with("input_ids: axis 1 is fixed at 1,")
        || message.starts_with("inputs_embeds: axis 1 is fixed at 1,")
}

/// The split pair's no-past half is run as the pair's step 0, inside its
/// partner's job: when that job passed, this half's own naming and size
/// deviations from the family contract are harmless, as for a file run alone.
pub(crate) fn settle_pair_halves(files: &mut [crate::checker::report::FileReport]) {
    let passed: Vec<String> = files
        .iter()
        .filter(|f| {
            f.report.verdict == crate::checker::report::Verdict::Pass
                && f.report.runtimes.iter().any(|r| r.steps.iter().any(|s| s.ok))
        })
        .map(|f| f.path.clone())
        .collect();
    for f in files.iter_mut() {
        let Some(partner) = f.driven_as.strip_prefix("static only here: driven at step 0 of the split pair with ")
        else {
            continue;
        };
        if !passed.iter().any(|p| p == partner) {
            continue;
        }
        let why = format!("harmless here: run as step 0 of the split pair with {partner}, which passed every runtime check; a caller written for the family's usual signature must use this model's names and sizes");
        for x in f.report.findings.iter_mut().filter(|x| x.severity == Severity::Error) {
            if NAMING.contains(&x.code) || matches!(x.code, Code::DimValue | Code::DimStatic) {
                x.severity = Severity::Warning;
                x.cause = Some(why.clone());
            }
        }
        f.report.verdict = crate::checker::report::Verdict::of(&f.report.findings);
    }
}

/// What the settling knows about the file.
pub(crate) struct Settle {
    /// The contract is a family's conventions, not the user's.
    pub(crate) builtin: bool,
    /// The model's inferred protocol has as many caches as the contract and
    /// no input it could not place.
    pub(crate) same_caches: bool,
    /// The inferred cache is a static one: fixed shapes are its form.
    pub(crate) fixed_shapes: bool,
}

impl Settle {
    /// What the inference of `sig` says, against `contract`.
    pub(crate) fn of(
        inferred: &crate::plan::roles::Inferred,
        contract: &crate::contract::Contract,
        builtin: bool,
    ) -> Settle {
        let same_caches = same_caches(inferred, contract);
        use crate::plan::roles::CacheForm::{CallerRolled, CallerWritten, StaticBuffer};
        let fixed_shapes = matches!(inferred.cache_form, StaticBuffer | CallerWritten | CallerRolled);
        Settle { builtin, same_caches, fixed_shapes }
    }
}

/// Settles the static findings `findings[..static_end]` against the run's.
pub(crate) fn settle(findings: &mut Vec<Finding>, static_end: usize, runtimes: &[RuntimeReport], how: Settle) {
    let Settle { builtin, same_caches, fixed_shapes } = how;
    let ran = runtimes.iter().any(|r| r.crash.is_none() && r.steps.iter().any(|s| s.ok));
    let run_failed = findings[static_end..].iter().any(|f| f.severity == Severity::Error);
    if ran && !run_failed && builtin {
        for f in findings[..static_end].iter_mut() {
            let harmless = NAMING.contains(&f.code) || (same_caches && PRESENCE.contains(&f.code));
            // The exporter's own conventions, once its run passed: information, not warnings (issue 40).
            if f.severity == Severity::Error && harmless {
                f.severity = Severity::Info;
                f.cause = Some(HARMLESS.into());
            } else if f.severity == Severity::Error && fixed_shapes && f.code == Code::DimStatic {
                f.severity = Severity::Info;
                f.cause = Some(FIXED_SHAPES.into());
            } else if f.severity == Severity::Error && f.code == Code::DimStatic && one_token(&f.message) {
                f.severity = Severity::Info;
                f.cause = Some(ONE_TOKEN.into());
            }
        }
    }
    if run_failed {
        // The mechanism first: the run's errors lead, the static evidence follows.
        let run: Vec<Finding> = findings.drain(static_end..).collect();
        let (errors, rest): (Vec<Finding>, Vec<Finding>) = run.into_iter().partition(|f| f.severity == Severity::Error);
        let statics: Vec<Finding> = std::mem::take(findings);
        findings.extend(errors);
        findings.extend(statics);
        findings.extend(rest);
        cause_first(findings);
    }
}

/// The contract findings about names and counts: a family's naming, not the graph's behaviour.
const CONVENTIONS: &[Code] = &[
    Code::InputCount,
    Code::InputMissing,
    Code::InputExtra,
    Code::OutputCount,
    Code::OutputMissing,
    Code::OutputExtra,
];

/// Static suspicions the run measured: a symbolic axis where the folder's
/// contract (a family's conventions, a consumer's config) wants a fixed
/// size, when the run fed that size there and passed, is no deviation; "no
/// position_ids" is a suspicion about left-padded rows, and the batch run
/// measured them; a family contract's names and fixed axes another exporter
/// chose, once the inferred protocol drove every check to a pass. Each
/// becomes information carrying what was measured; a user's own contract
/// keeps its warnings (it may want fixed shapes).
pub(crate) fn measured_suspicions(
    findings: &mut [Finding],
    static_end: usize,
    runtimes: &[RuntimeReport],
    folder: bool,
) {
    let ran = runtimes.iter().any(|r| r.crash.is_none() && r.steps.iter().any(|s| s.ok));
    let run_failed = findings[static_end..].iter().any(|f| f.severity == Severity::Error);
    let batch = runtimes
        .iter()
        .flat_map(|r| &r.batch)
        .map(|b| b.2)
        .fold(None, |m: Option<f64>, d| Some(m.map_or(d, |m| m.max(d))));
    let departed = findings[static_end..].iter().any(|f| f.code == Code::BatchPadding);
    let passed = folder && ran && !run_failed;
    let batch_fixed_at_one =
        findings.iter().any(|f| f.code == Code::DimStatic && f.message.contains(": axis 0 is fixed at 1,"));
    for f in findings[..static_end].iter_mut().filter(|f| f.severity == Severity::Warning) {
        if f.code == Code::DimDynamic && passed {
            f.severity = Severity::Info;
            f.cause = Some("the run fed the contract's size on this symbolic axis and passed every runtime check: the axis takes it".into());
        } else if CONVENTIONS.contains(&f.code) && passed {
            // A family's contract names optimum's tensors; another exporter's
            // names (dynamo's k0/v0, a fused key_value, a static cache's
            // cache_position) are its own convention once the protocol
            // inferred from the graph drove every check to a pass.
            f.severity = Severity::Info;
            f.cause = Some("the family contract's convention, not this exporter's: the protocol inferred from the graph drove every runtime check and they passed".into());
        } else if f.code == Code::DimStatic && passed {
            f.severity = Severity::Info;
            // The form's own reading (a static-cache export) stays; else the measured one.
            if f.cause.is_none() {
                f.cause = Some("the graph fixes this axis (its exporter's choice): the run fed that size and passed; a caller cannot feed another size here".into());
            }
        } else if f.code == Code::BatchPadding && f.message.starts_with("no position_ids input") {
            let Some(max) = batch else {
                // A graph that fixes its batch at 1 takes no padded batch to misplace.
                if batch_fixed_at_one {
                    f.severity = Severity::Info;
                    f.cause = Some(
                        "the graph fixes the batch at 1 (dim-static): no left-padded batch can be fed to it".into(),
                    );
                }
                continue;
            };
            f.severity = Severity::Info;
            f.cause = Some(if departed {
                format!("measured: the padded batch departs from the rows run alone (max |Δ| {max:.1e}), named by the batch-padding finding below")
            } else {
                format!("measured: the padded rows agree with the same prompts run alone (max |Δ| {max:.1e}): the graph places them")
            });
        }
    }
}

/// An input that reaches no node is the cause of the departures it can
/// explain (a padded row, a chunk, a cached step): the graph's own fact
/// replaces the run's general reading.
pub(crate) fn unread_explains(findings: &mut [Finding]) {
    let Some(unread) = findings.iter().find(|f| f.code == Code::InputUnread) else { return };
    let cause = match &unread.cause {
        Some(c) => format!("{}: {c}", unread.message),
        None => unread.message.clone(),
    };
    for f in findings.iter_mut().filter(|f| f.severity == Severity::Error) {
        if matches!(f.code, Code::BatchPadding | Code::ChunkAfterPast | Code::Parity) {
            f.cause = Some(cause.clone());
        }
    }
}

/// Static findings that explain a runtime refusal, by what the runtime says.
const EXPLAINS: &[(Code, &str)] = &[
    (Code::CacheDtype, "Unexpected input data type"),
    (Code::Dtype, "Unexpected input data type"),
    (Code::DimStatic, "Got invalid dimensions"),
];

/// When a static finding explains the run's first failure (float16
/// presents refused as float32 pasts, a fixed axis refused), the cause
/// leads and the runtime's message becomes its evidence.
pub(crate) fn cause_first(findings: &mut Vec<Finding>) {
    let Some(run) = findings.iter().position(|f| f.code == Code::RunFailed && f.severity == Severity::Error) else {
        return;
    };
    let message = findings[run].message.clone();
    // The static finding must be about the tensor the runtime names.
    let about = |f: &Finding| {
        let tensor = f.tensor.clone().or_else(|| f.message.split(':').next().map(str::to_string)).unwrap_or_default();
        !tensor.is_empty() && message.contains(&format!("input: {tensor} ")) || message.contains(&format!("`{tensor}`"))
    };
    let Some(at) = findings.iter().position(|f| {
        f.severity == Severity::Error
            && EXPLAINS.iter().any(|(c, says)| f.code == *c && message.contains(says))
            && (f.code == Code::CacheDtype || about(f))
    }) else {
        return;
    };
    let mut cause = findings.remove(at);
    let evidence = format!("confirmed by the run: {message}");
    cause.cause = Some(match cause.cause.take() {
        Some(c) => format!("{c}; {evidence}"),
        None => evidence,
    });
    let code = cause.code;
    findings.insert(0, cause);
    // The refusal stays listed, pointing at what explains it.
    let run = run + usize::from(at > run);
    let said = findings[run].cause.take();
    findings[run].cause = Some(match said {
        Some(c) => format!("explained by the `{code}` finding above: {c}"),
        None => format!("explained by the `{code}` finding above"),
    });
}

/// Whether the model's inferred protocol has a cache tensor for every past
/// the contract names, and no input it could not place.
pub(crate) fn same_caches(inferred: &crate::plan::roles::Inferred, contract: &crate::contract::Contract) -> bool {
    use crate::plan::roles::InputRole;
    // States (a hybrid's convolution states) ride along whether the contract names them or not.
    let state = |n: &str| inferred.inputs.iter().any(|p| p.name == n && p.role == InputRole::State);
    let wanted =
        contract.inputs.iter().filter(|r| crate::model::names::is_past_name(&r.name) && !state(&r.name)).count();
    // A fused cache (GPT-BigCode's `key_value`) holds a key and a value.
    let have: usize = inferred
        .inputs
        .iter()
        .filter(|p| matches!(p.role, InputRole::Past | InputRole::CrossPast))
        .map(|p| if p.name.ends_with("key_value") { 2 } else { 1 })
        .sum();
    wanted == have && !inferred.inputs.iter().any(|p| p.role == InputRole::Unplaced)
}
