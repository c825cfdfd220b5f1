//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn model(rel: &str) -> PathBuf {
    root().join("models").join(rel)
}

pub const MARIAN_MERGED: &str = "marian-tiny/decoder_model_merged.onnx";
pub const MARIAN_15: &str = "marian-15-inputs/decoder_model_merged.onnx";
pub const GPT2: &str = "gpt2-tiny/model.onnx";

/// Parameters that fit the tiny Marian fixture to specs/marian-decoder-merged.yaml.
pub fn tiny_marian_params() -> Vec<(String, i64)> {
    vec![("hidden".into(), 32), ("head_dim".into(), 4), ("vocab".into(), 1000)]
}

pub fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_onnx-contract"));
    c.current_dir(root());
    c
}

pub fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run onnx-contract")
}

pub fn json(args: &[&str]) -> (i32, serde_json::Value) {
    let out = run(args);
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout of {args:?} is not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    (out.status.code().unwrap_or(-1), v)
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}
