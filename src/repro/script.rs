//! The words and the script beside a reproduction: `repro.py` (plain
//! onnxruntime and NumPy, exit 0 when it reproduces), `README.md` (versions,
//! the command that found it, expected against observed, the reduction) and
//! `requirements.txt` (the runtime version it was seen with).

use crate::repro::Problem;
use std::path::Path;

/// What the texts say.
pub(super) struct Context<'a> {
    pub(super) model: &'a Path,
    pub(super) node: &'a str,
    pub(super) problem: &'a Problem<'a>,
    pub(super) observed: &'a str,
    pub(super) expected_error: Option<&'a str>,
    pub(super) command: &'a str,
    pub(super) ort_version: &'a str,
    pub(super) nodes: (usize, usize),
    pub(super) bytes: (u64, u64),
}

/// A Python string literal.
fn lit(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

const HEAD: &str = "import os, numpy as np, onnxruntime as ort
os.chdir(os.path.dirname(os.path.abspath(__file__)))
def run(model, npz):
    s, d = ort.InferenceSession(model, providers=[\"CPUExecutionProvider\"]), np.load(npz)
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, {i.name: d[f\"input_{k}\"] for k, i in enumerate(s.get_inputs())})))
";

/// `repro.py`.
pub(super) fn python(c: &Context<'_>) -> String {
    let title = format!("# {}: exit 0 when this reproduces (written by onnx-contract)\n", c.node);
    let body = match c.problem {
        Problem::Fails { .. } => format!(
            "try:\n    run(\"model.onnx\", \"inputs.npz\")\nexcept Exception as e:\n    print(e)\n    raise SystemExit(0 if {} in str(e) else 1)\nprint(\"ran without error: not reproduced\")\nraise SystemExit(1)\n",
            lit(c.expected_error.unwrap_or(""))
        ),
        Problem::NonFinite => "got = run(\"model.onnx\", \"inputs.npz\")
bad = {k: int((~np.isfinite(v)).sum()) for k, v in got.items() if not np.isfinite(v).all()}
print(\"NaN/Inf values:\", bad or \"none\")
if os.path.exists(\"reference_fp32.onnx\"):
    for k, v in run(\"reference_fp32.onnx\", \"inputs.npz\").items():
        print(f\"{k} computed in float32: largest |value| {np.abs(v).max():.4e} (float16's largest finite is 65504)\")
raise SystemExit(0 if bad else 1)
"
        .to_string(),
        // Run in a child interpreter: the crash kills it, and this one says so.
        Problem::Crashes => "import subprocess, sys
if len(sys.argv) > 1:
    run(\"model.onnx\", \"inputs.npz\")
    raise SystemExit(0)
rc = subprocess.run([sys.executable, __file__, \"--child\"]).returncode
print(f\"the process running the node: return code {rc}\" + (\" (killed by a signal)\" if rc < 0 else \"\"))
raise SystemExit(0 if rc < 0 else 1)
"
        .to_string(),
        Problem::Departs { tensor, bound, .. } => format!(
            "t = {}
got = run(\"model.onnx\", \"inputs.npz\")[t].astype(np.float64)
ref = run(\"reference_fp32.onnx\", \"reference_inputs.npz\")[t].astype(np.float64)
d = np.abs(got - ref).max()
rel = d / np.abs(ref).max()
print(f\"{{t}}: max |variant - fp32| {{d:.3e}}, relative {{rel:.3f}} (expected within {bound})\")
raise SystemExit(0 if not rel <= {bound} else 1)
",
            lit(tensor)
        ),
    };
    format!("{title}{HEAD}{body}")
}

/// `requirements.txt`: the runtime it was seen with.
pub(super) fn requirements(ort_version: &str) -> String {
    let pinned = ort_version.chars().all(|c| c.is_ascii_digit() || c == '.') && !ort_version.is_empty();
    let ort = if pinned { format!("onnxruntime=={ort_version}") } else { "onnxruntime".to_string() };
    format!("{ort}\nnumpy\n")
}

/// `README.md`.
pub(super) fn readme(c: &Context<'_>) -> String {
    let file = c.model.display().to_string();
    let nodes = |n: usize| if n == 1 { "1 node".to_string() } else { format!("{n} nodes") };
    let (what, expected, files) = match c.problem {
        Problem::Fails { .. } => (
            "ONNX Runtime fails in this node",
            "the node runs (a correct export runs at every step)".to_string(),
            "`model.onnx` (the node and the constants it reads), `inputs.npz` (the values it read when it failed)",
        ),
        Problem::NonFinite => (
            "this node writes NaN/Inf while its inputs are finite",
            "finite outputs".to_string(),
            "`model.onnx` (the node), `inputs.npz` (the finite values it read), `reference_fp32.onnx` when the model is float16 (the same node computed in float32, fed the same values)",
        ),
        Problem::Crashes => (
            "running this node kills the process (ONNX Runtime itself crashes, no error is raised)",
            "the node runs, or ONNX Runtime raises an error a caller can catch".to_string(),
            "`model.onnx` (the node and the constants it reads), `inputs.npz` (the values it was about to read)",
        ),
        Problem::Departs { reference, bound, .. } => (
            "this node of a numeric variant departs from the fp32 model's node writing the same tensor",
            format!(
                "within {bound} relative of `{}`'s node",
                reference.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default()
            ),
            "`model.onnx` and `inputs.npz` (the variant's node and the values it read), `reference_fp32.onnx` and `reference_inputs.npz` (the fp32 node and the values it read)",
        ),
    };
    format!(
        "# Reproduction: {what}\n\n\
         - model: `{file}`, node `{}`\n\
         - found by: `{}` (onnx-contract {})\n\
         - ONNX Runtime: {}\n\
         - reduced from {}, {} bytes to {}, {} bytes\n\n\
         Files: {files}. Inputs are stored as `input_0`, `input_1`, … in the model's input order.\n\n\
         ## Run\n\n\
         ```sh\npython -m venv venv && venv/bin/pip install -r requirements.txt\nvenv/bin/python repro.py\n```\n\n\
         It exits 0 when it reproduces.\n\n\
         ## Expected and observed\n\n\
         - expected: {expected}\n\
         - observed: {}\n",
        c.node,
        c.command,
        env!("CARGO_PKG_VERSION"),
        c.ort_version,
        nodes(c.nodes.0),
        c.bytes.0,
        nodes(c.nodes.1),
        c.bytes.1,
        c.observed,
    )
}
