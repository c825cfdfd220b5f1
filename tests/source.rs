//! `check DIR --source CHECKPOINT` (issue 40): the transformers checkpoint an
//! export came from (models/*-source, saved by the fixtures' generators) is
//! the reference of every step, for the folder's first form and each dtype
//! variant; a departure names the file, the step, the token and both logits.

mod common;
use common::*;
use serde_json::Value;

fn with_source(dir: &str, source: &str) -> (i32, Value) {
    json(&[
        "check",
        &format!("models/{dir}"),
        "--source",
        &format!("models/{source}"),
        "--format",
        "json",
        "--no-fetch",
    ])
}

/// The folder's `source-*` findings: (severity, message).
fn said(r: &Value) -> Vec<(String, String)> {
    r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["code"].as_str().unwrap().starts_with("source"))
        .map(|f| (f["severity"].as_str().unwrap().to_string(), f["message"].as_str().unwrap().to_string()))
        .collect()
}

#[test]
fn exports_agree_with_the_checkpoints_they_came_from() {
    // Decoder-only, encoder-decoder, and a folder of dtype variants (fp16, q8, q4) of one fp32 model.
    for (dir, source, files) in [
        ("granite-tiny", "granite-tiny-source", 1),
        ("marian-tiny", "marian-tiny-source", 1),
        ("tjs-variants", "llama-tiny-source", 4),
    ] {
        let (code, r) = with_source(dir, source);
        assert_eq!(code, 0, "{dir}: {r:#}");
        let s = said(&r);
        assert_eq!(s.len(), files, "{dir}: {s:#?}");
        assert!(s.iter().all(|(sev, m)| sev == "info" && m.contains("agrees with the checkpoint")), "{dir}: {s:#?}");
    }
}

#[test]
fn a_semantic_defect_and_a_broken_quantization_depart_from_the_checkpoint() {
    // logits_scaling dropped: every logit 8× the checkpoint's from step 0 (greedy tokens unchanged).
    let (code, r) = with_source("granite-logits-scaling-dropped", "granite-tiny-source");
    assert_eq!(code, 2, "{r:#}");
    let s = said(&r);
    let e = s.iter().find(|(sev, _)| sev == "error").unwrap_or_else(|| panic!("{s:#?}"));
    assert!(e.1.starts_with("model.onnx: at step 0 (prompt [1, 3, 14, 15]"), "{}", e.1);
    assert!(e.1.contains("the greedy token is the same"), "{}", e.1);
    // A q4 file whose quantization is wrong, beside good fp16 and q8 files.
    let (code, r) = with_source("tjs-variants-broken-q4", "llama-tiny-source");
    assert_eq!(code, 2, "{r:#}");
    let errors: Vec<(String, String)> = said(&r).into_iter().filter(|(sev, _)| sev == "error").collect();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(errors[0].1.starts_with("onnx/model_q4.onnx: at step 0"), "{}", errors[0].1);
    assert!(errors[0].1.contains("a quantized file is expected within"), "{}", errors[0].1);
}

#[test]
fn a_source_that_is_no_checkpoint_is_said_and_a_single_file_is_a_usage_error() {
    let (code, r) = with_source("granite-tiny", "granite-tiny");
    assert_eq!(code, 2, "{r:#}");
    let s = said(&r);
    assert!(s.iter().any(|(sev, m)| sev == "error" && m.contains("transformers fails")), "{s:#?}");
    let (code, r) = with_source("llama-tiny", "no-such-checkpoint");
    assert_eq!(code, 2, "{r:#}");
    assert!(said(&r)[0].1.contains("no config.json there"), "{r:#}");
    let out = run(&["check", "models/llama-tiny/model.onnx", "--source", "models/llama-tiny-source"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--source compares an export folder"));
}

/// The checkpoint's hidden states (its layer stack's input and every
/// layer's output) against the graph's tensors at the departing step, the
/// graph's layers found by their node scopes: each semantic defect is named
/// at the layer it starts in — the embeddings, a layer, or after the last.
#[test]
fn a_departure_is_named_at_the_layer_it_starts_in() {
    let cause = |dir: &str, source: &str| -> String {
        let (code, r) = with_source(dir, source);
        assert_eq!(code, 2, "{dir}: {r:#}");
        let f = r["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["code"] == "source-departure" && f["severity"] == "error");
        f.and_then(|f| f["cause"].as_str()).unwrap_or_else(|| panic!("{dir}: {r:#}")).to_string()
    };
    let c = cause("granite-embedding-multiplier-dropped", "granite-tiny-source");
    assert!(c.starts_with("it starts before the first layer: what enters /model/layers.0/"), "{c}");
    for dir in ["granite-residual-multiplier-dropped", "granite-attention-multiplier-dropped"] {
        let c = cause(dir, "granite-tiny-source");
        assert!(
            c.starts_with("the first departing layer is model.layers.0 (the graph's /model/layers.0/"),
            "{dir}: {c}"
        );
        assert!(c.contains("where what enters it agrees"), "{dir}: {c}");
    }
    let c = cause("granite-logits-scaling-dropped", "granite-tiny-source");
    assert!(c.starts_with("every layer agrees with the checkpoint") && c.contains("after the last layer"), "{c}");
    // An encoder-decoder whose decoder layer 3 has its fc2 weight scaled by 1.5
    // (made here from marian-tiny's merged decoder): found inside the If's
    // no-cache branch, the layers before it agreeing.
    let dir = std::env::temp_dir().join(format!("onnx-contract-source-layer-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.json", "generation_config.json", "encoder_model.onnx", "decoder_model_merged.onnx"] {
        std::fs::copy(root().join("models/marian-tiny").join(f), dir.join(f)).unwrap();
    }
    let broke = std::process::Command::new("python3")
        .args(["-c", BREAK_LAYER, path_str(&dir.join("decoder_model_merged.onnx")), "/model/decoder/layers.3/fc2/"])
        .status()
        .unwrap();
    assert!(broke.success());
    let (code, r) = json(&[
        "check",
        path_str(&dir),
        "--source",
        path_str(&root().join("models/marian-tiny-source")),
        "--format",
        "json",
        "--no-fetch",
    ]);
    assert_eq!(code, 2, "{r:#}");
    let f = r["findings"].as_array().unwrap().iter().find(|f| f["code"] == "source-departure").unwrap().clone();
    let c = f["cause"].as_str().unwrap_or_else(|| panic!("{f:#}"));
    assert!(
        c.starts_with("the first departing layer is model.decoder.layers.3 (the graph's /model/decoder/layers.3/"),
        "{c}"
    );
    assert!(c.contains("the layers before it agree"), "{c}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Scales the weight of every MatMul under a node scope (argv[2]) of the
/// model at argv[1] by 1.5, in place (shared by both branches of a merged decoder).
const BREAK_LAYER: &str = r#"
import sys, onnx
from onnx import numpy_helper
path, scope = sys.argv[1], sys.argv[2]
m = onnx.load(path)
def nodes(g):
    for n in g.node:
        yield n
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from nodes(a.g)
target = {n.input[1] for n in nodes(m.graph) if n.name.startswith(scope) and n.op_type == "MatMul"}
hit = [i for i in m.graph.initializer if i.name in target]
assert hit, target
for i in hit:
    i.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(i) * 1.5, i.name))
onnx.save(m, path)
"#;
