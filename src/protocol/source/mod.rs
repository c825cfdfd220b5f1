//! `check DIR --source CHECKPOINT`: the transformers checkpoint an export
//! came from is the reference. The export generates greedily, uncached,
//! from the tool's prompt (its first form, then each dtype variant of that
//! file, each with its own tolerance); a Python child runs the checkpoint on
//! the same tokens (teacher forcing, float32, eager attention) and returns
//! the logits of each step's top 5; the first step where they depart beyond
//! what the numeric form explains is a `source-departure` error. Where the
//! export and the checkpoint agree, one line says so with the figure.

mod layers;

use crate::finding::{Code, Finding, Severity};
use crate::plan::numeric::Tolerance;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The checkpoint's side (Python, transformers + torch).
pub const PROGRAM: &str = include_str!("source.py");

/// Steps compared after the prompt.
const STEPS: usize = 8;

/// ONNX Runtime against PyTorch in float32 differs by kernel order: a gap
/// within both bounds is the same model (the numeric form's own tolerance
/// applies on top, for float16 and quantized files).
const SOURCE_ABS: f64 = 1e-3;
const SOURCE_REL: f64 = 1e-3;

#[derive(Debug, Deserialize)]
struct Answer {
    installed: bool,
    ok: bool,
    error: Option<String>,
    stage: Option<String>,
    sequences: Vec<Sequence>,
    /// Where the first sequence's hidden states were saved (absent: no
    /// layer stack found).
    #[serde(default)]
    hidden: Option<layers::Saved>,
}

#[derive(Debug, Deserialize)]
struct Sequence {
    logits: Vec<Vec<f64>>,
    argmax: Vec<i64>,
    scale: Vec<f64>,
}

/// One file's uncached generation: its tokens, each step's top 5, its tolerance.
struct Generated {
    rel: String,
    tokens: Vec<i64>,
    top: Vec<Vec<(i64, f64)>>,
    tolerance: Tolerance,
}

fn error(message: String) -> Finding {
    Finding::error(Code::SourceNotRun, message)
}

/// The dtype variants of `later` beside it (`model_fp16.onnx` beside `model.onnx`).
fn variants(dir: &Path, later: &str) -> Vec<(String, PathBuf)> {
    let Ok((files, _)) = crate::folder::discover::discover_all(dir) else { return Vec::new() };
    let Some(main) = files.iter().find(|f| f.rel == later) else { return Vec::new() };
    files
        .iter()
        .filter(|f| f.base == main.base && f.variant.is_some() && f.rel != later)
        .map(|f| (f.rel.clone(), f.path.clone()))
        .collect()
}

/// Compares the export in `dir` with the checkpoint folder `checkpoint`.
pub fn compare(dir: &Path, checkpoint: &Path, timeout: Duration) -> Vec<Finding> {
    if !checkpoint.join("config.json").is_file() {
        return vec![error(format!(
            "--source {}: no config.json there: give the transformers checkpoint folder the export was made from",
            checkpoint.display()
        ))];
    }
    let p = match super::describe(dir) {
        Ok(p) => p,
        Err(e) => return vec![error(format!("--source: the folder's protocol: {e}"))],
    };
    let Some(l) = p.loops.iter().find(|l| l.form != "with-past-alone") else {
        return vec![error("--source: the folder has no decoder form to generate with".into())];
    };
    let Some(plan) = l.plan.as_ref() else { return vec![error("--source: no plan for the folder's decoder".into())] };
    let seq2seq = plan.family == crate::plan::Family::Seq2Seq;
    let text = l.embed.is_none() && !plan.dtypes.iter().any(|(n, _)| n.contains("inputs_embeds"));
    if !text || !matches!(plan.family, crate::plan::Family::DecoderOnly | crate::plan::Family::Seq2Seq) {
        return vec![Finding::new(
            Code::SourceNotRun,
            Severity::Warning,
            format!("--source: compared on text decoder-only and encoder-decoder folders; this is a {} folder", l.form),
        )];
    }
    let vocab = plan.vocab.max(1);
    let ids: Vec<i64> = if seq2seq { vec![5, 17, 42, 7, 9, 3] } else { vec![1, 3, 14, 15] };
    let ids: Vec<i64> = ids.iter().map(|i| i % vocab).collect();
    let mut files: Vec<Generated> = Vec::new();
    match super::reference::generate(&p, dir, ids.clone(), None, STEPS, true, Some(1)) {
        Ok((tokens, top, _)) => {
            files.push(Generated { rel: l.later_file.clone(), tokens, top, tolerance: plan.tolerance.clone() })
        }
        Err(e) => return vec![error(format!("--source: the export's own generation failed: {e}"))],
    }
    // Variants of a decoder-only file (an encoder-decoder's variants need their own encoder).
    let mut out = Vec::new();
    if !seq2seq {
        for (rel, path) in variants(dir, &l.later_file) {
            let (r, tolerance) = super::consumer::reference_of_file(&path, &ids, &plan.tolerance, STEPS);
            match r {
                Ok((tokens, top, _)) => files.push(Generated { rel, tokens, top, tolerance }),
                Err(e) => out.push(Finding::new(
                    Code::SourceNotRun,
                    Severity::Warning,
                    format!("--source: {rel} could not generate to be compared: {e}"),
                )),
            }
        }
    }
    let spec = serde_json::json!({
        "ids": ids,
        "start": l.decoder_start,
        "sequences": files.iter().map(|f| serde_json::json!({
            "tokens": f.tokens,
            "ask": f.top.iter().map(|s| s.iter().map(|(t, _)| *t).collect::<Vec<_>>()).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    });
    // The checkpoint's hidden states go to a file of the system's temporary
    // folder (a large model's would not fit a JSON line), removed after.
    let hidden_to = std::env::temp_dir().join(format!("onnx-contract-hidden-{}.npy", std::process::id()));
    let mut spec = spec;
    spec["hidden_to"] = serde_json::json!(hidden_to);
    let mut cmd = std::process::Command::new("python3");
    cmd.args(["-c", PROGRAM, &checkpoint.to_string_lossy(), &spec.to_string()]);
    let answer = super::consumer::run_program::<Answer>(cmd, timeout);
    let hidden = answer.as_ref().ok().and_then(|a| a.hidden.as_ref()).map(layers::Saved::read);
    let _ = std::fs::remove_file(&hidden_to);
    let answer: Answer = match answer {
        Ok(a) => a,
        Err(why) => return vec![error(format!("--source: the checkpoint's run: {why}"))],
    };
    if !answer.installed {
        out.push(error(format!(
            "--source: transformers and torch are needed to run the checkpoint ({}): pip install torch transformers",
            answer.error.unwrap_or_default()
        )));
        return out;
    }
    if !answer.ok {
        let at = answer.stage.map(|s| format!(" at {s}")).unwrap_or_default();
        out.push(error(format!(
            "--source {}: transformers fails{at}: {}",
            checkpoint.display(),
            answer.error.unwrap_or_default().lines().next().unwrap_or("")
        )));
        return out;
    }
    for (n, (f, s)) in files.iter().zip(&answer.sequences).enumerate() {
        let (mut finding, departed) = judge(f, s, &ids, checkpoint);
        // Where the folder's own file departs, the layer it starts in.
        if let (0, Some(step), Some(hidden)) = (n, departed, hidden.as_ref()) {
            let bound = bound_of(&f.tolerance);
            finding.cause = Some(match hidden {
                Ok(h) => start_of(&p, dir, &ids, &f.tokens[..step], step, h, bound),
                Err(e) => format!("where it starts was not located: the checkpoint's hidden states: {e}"),
            });
        }
        out.push(finding);
    }
    out
}

/// Where the departure at `step` starts, said as a sentence: the graph's
/// layer outputs (by node scope) at that step against the checkpoint's.
fn start_of(
    p: &super::table::Protocol,
    dir: &Path,
    ids: &[i64],
    tokens: &[i64],
    step: usize,
    hidden: &layers::Hidden,
    bound: f64,
) -> String {
    let Some(l) = p.loops.iter().find(|l| l.form != "with-past-alone") else { return String::new() };
    // The file the uncached run executes: a split pair's no-past half, else the decoder.
    let rel = if l.form == "split-pair" { &l.step0_file } else { &l.later_file };
    let nodes = match std::fs::read(dir.join(rel))
        .map_err(|e| e.to_string())
        .and_then(|b| crate::diagnose::graph_edit::flatten(&b, &|_| Some(false)).map(|(_, n)| n))
    {
        Ok(n) => n,
        Err(e) => return format!("where it starts was not located: {rel}: {e}"),
    };
    let layer_count = hidden.layers.first().map_or(0, Vec::len);
    let Some(c) = layers::candidates(&nodes, &hidden.path, layer_count) else {
        return format!("where it starts was not located: no node of {rel} is scoped by the checkpoint's module path {} (`/{}.N/…`, as an optimum TorchScript export names them)", hidden.path, hidden.path.replace('.', "/"));
    };
    match super::reference::probe(p, dir, ids.to_vec(), tokens.to_vec(), c.all()) {
        Ok(values) => layers::locate(&c, hidden, step, &values, bound),
        Err(e) => format!("where it starts was not located: the graph's layer outputs could not be read: {e}"),
    }
}

/// The relative gap a file of `tolerance`'s form is expected within.
fn bound_of(tolerance: &Tolerance) -> f64 {
    match tolerance.form {
        crate::plan::numeric::NumericForm::Float32 => SOURCE_REL,
        ref form => crate::plan::numeric::variant_bound(form).0,
    }
}

/// One file's steps against the checkpoint's: the first departing step
/// (with the step), or agreement.
fn judge(f: &Generated, s: &Sequence, ids: &[i64], checkpoint: &Path) -> (Finding, Option<usize>) {
    // A float16 or quantized file is expected within its form's bound of
    // full precision (the variant check's own bound), a float32 one within kernel order.
    let bound = bound_of(&f.tolerance);
    let mut worst = (0.0f64, 0usize);
    for (k, (step, theirs)) in f.top.iter().zip(&s.logits).enumerate() {
        let scale = s.scale.get(k).copied().unwrap_or(1.0).max(1e-9);
        for ((t, mine), src) in step.iter().zip(theirs) {
            let gap = (mine - src).abs();
            let rel = gap / scale;
            if gap > worst.0 {
                worst = (gap, k);
            }
            if gap > SOURCE_ABS && rel > bound {
                let argmax = s.argmax.get(k).copied().unwrap_or(-1);
                let greedy = if argmax == f.tokens[k] {
                    "the greedy token is the same".to_string()
                } else {
                    format!("the checkpoint's greedy token is {argmax}, the export's {}", f.tokens[k])
                };
                let found = Finding::error(
                    Code::SourceDeparture,
                    format!(
                        "{}: at step {k} (prompt {ids:?}, then the export's own tokens) its logit for token {t} is {mine:.5} where the checkpoint {} gives {src:.5} (|Δ| {gap:.3e}, {rel:.1e} of the checkpoint's largest logit, beyond the {bound:e} a {} file is expected within; {greedy}): the export computes another model from step {k}",
                        f.rel,
                        checkpoint.display(),
                        crate::plan::numeric::variant_bound(&f.tolerance.form).1
                    ),
                )
                .tensor(&f.rel);
                return (found, Some(k));
            }
        }
    }
    let agreed = Finding::new(
        Code::SourceDeparture,
        Severity::Info,
        format!(
            "{}: agrees with the checkpoint {} over {} steps (each step's top 5 logits; largest |Δ| {:.2e}, at step {})",
            f.rel,
            checkpoint.display(),
            f.top.len(),
            worst.0,
            worst.1
        ),
    );
    (agreed, None)
}
