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
    // The transformers.js tests/setup.sh installs: the consumer `check` runs on its folders.
    c.env("TRANSFORMERS_JS_DIR", root().join("tests/callers/node_modules/@huggingface/transformers"));
    // The consumers' own generation is tested in tests/consumers.rs; elsewhere
    // it would only add a torch import per optimum folder.
    c.env(NO_CONSUMER_RUN, "1");
    c
}

/// Set by [`bin`]: `check` leaves out the consumers' own generation.
pub const NO_CONSUMER_RUN: &str = "ONNX_CONTRACT_NO_CONSUMER_RUN";

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

/// `check models/DIR --format json`, with no flags a user would need.
pub fn check_folder(dir: &str) -> (i32, serde_json::Value) {
    json(&["check", &format!("models/{dir}"), "--format", "json", "--no-fetch"])
}

/// The report of `file` in a folder report.
pub fn file_report<'a>(r: &'a serde_json::Value, file: &str) -> &'a serde_json::Value {
    r["files"].as_array().unwrap().iter().find(|f| f["path"] == file).unwrap_or_else(|| panic!("no {file} in {r}"))
}

/// Shape of the feed (or output, with `outputs`) `name` at `step` of the first run.
pub fn shape_at(f: &serde_json::Value, step: usize, list: &str, name: &str) -> serde_json::Value {
    let s = f["runtimes"][0]["steps"].as_array().unwrap().iter().find(|s| s["step"] == step).expect("step");
    s[list].as_array().unwrap().iter().find(|x| x["name"] == name).unwrap_or_else(|| panic!("no {name}"))["shape"]
        .clone()
}
