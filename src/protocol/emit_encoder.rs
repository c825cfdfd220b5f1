//! The program of an encoder alone, in each language: one call on the token
//! ids, printing the hidden states' shape and the last token's first values
//! (what `protocol --reference` prints for the same ids).

use super::spec::Lang;
use super::table::Loop;
use crate::plan::Plan;

/// The program of `l`, an encoder alone.
pub(super) fn encoder(l: &Loop, plan: &Plan, lang: Lang) -> String {
    let file = &l.later_file;
    let ids = &plan.input_ids;
    let mask = plan.attention_mask.clone().unwrap_or_default();
    let states = &plan.logits;
    match lang {
        Lang::Python => python(file, ids, &mask, states),
        Lang::Rust => rust(file, ids, &mask, states),
        Lang::Js => js(file, ids, &mask, states),
    }
}

fn python(file: &str, ids: &str, mask: &str, states: &str) -> String {
    let mask = if mask.is_empty() { "None".to_string() } else { format!("{mask:?}") };
    format!(
        r#"#!/usr/bin/env python3
"""Token embeddings with {file}, written by `onnx-contract protocol --emit python`
from the plan its runtime check drives the model with (form encoder-alone).

    python3 embed.py --model-dir DIR --ids 5,17,42

prints {{"ids": [], "top5": [[[i, value] for the last token's first 5 hidden values]], "shape": [...]}}.
"""
import argparse
import json
import os

import numpy as np
import onnxruntime as ort

MODEL = {file:?}
IDS = {ids:?}  # the token ids input
MASK = {mask}  # ones over each row's tokens (zeros over a row's right padding)
STATES = {states:?}  # [batch, seq, hidden]: each token's embedding


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--ids", required=True, help="token ids, e.g. 5,17,42")
    # The decoders' programs take these; an encoder generates nothing, so they change nothing.
    ap.add_argument("--max-new-tokens", type=int, default=0)
    ap.add_argument("--num-beams", type=int, default=1)
    ap.add_argument("--ignore-eos", action="store_true")
    a = ap.parse_args()
    session = ort.InferenceSession(os.path.join(a.model_dir, MODEL), providers=["CPUExecutionProvider"])
    ids = np.array([[int(t) for t in a.ids.split(",")]], dtype=np.int64)
    feeds = {{}}
    for i in session.get_inputs():
        if i.name == IDS:
            feeds[i.name] = ids
        elif i.name == MASK:
            feeds[i.name] = np.ones_like(ids)
        else:
            feeds[i.name] = np.zeros_like(ids)  # token_type_ids: one segment
    out = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    states = out[STATES].astype(np.float64)
    first = [[i, float(v)] for i, v in enumerate(states[0, -1, :5])]
    print(json.dumps({{"ids": [], "top5": [first], "shape": list(states.shape)}}))


if __name__ == "__main__":
    main()
"#
    )
}

fn rust(file: &str, ids: &str, mask: &str, states: &str) -> String {
    format!(
        r#"//! Token embeddings with {file}, written by `onnx-contract protocol --emit rust`
//! from the plan its runtime check drives the model with (form encoder-alone).
//!
//! Cargo.toml:
//!   [dependencies]
//!   ort = {{ version = "=2.0.0-rc.15", default-features = false, features = ["std", "ndarray", "load-dynamic", "api-17"] }}
//!   ndarray = "0.17"
//! Run (ONNX Runtime is loaded from ORT_DYLIB_PATH):
//!   ORT_DYLIB_PATH=... cargo run --release -- --model-dir DIR --ids 5,17,42
//! prints {{"ids": [], "top5": [[[i, value] for the last token's first 5 hidden values]], "shape": [...]}}.

use ndarray::{{Array2, Axis}};
use ort::session::{{Session, SessionInputValue}};
use ort::value::Tensor;
use std::error::Error;

const MODEL: &str = {file:?};
const IDS: &str = {ids:?}; // the token ids input
const MASK: &str = {mask:?}; // ones over each row's tokens (zeros over a row's right padding)
const STATES: &str = {states:?}; // [batch, seq, hidden]: each token's embedding

fn main() -> Result<(), Box<dyn Error>> {{
    let (mut dir, mut ids) = (String::new(), Vec::<i64>::new());
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {{
        let mut value = || it.next().ok_or(format!("{{flag}} needs a value"));
        match flag.as_str() {{
            "--model-dir" => dir = value()?,
            "--ids" => ids = value()?.split(',').map(|t| t.trim().parse()).collect::<Result<_, _>>()?,
            // The decoders' programs take these; an encoder generates nothing.
            "--max-new-tokens" | "--num-beams" => drop(value()?),
            "--ignore-eos" => {{}}
            other => return Err(format!("unknown argument `{{other}}`").into()),
        }}
    }}
    let lib = std::env::var("ORT_DYLIB_PATH").map_err(|_| "set ORT_DYLIB_PATH to an ONNX Runtime library")?;
    let env = ort::init_from(lib)?.build()?;
    let mut session = Session::builder(&env)?.commit_from_file(std::path::Path::new(&dir).join(MODEL))?;
    let n = ids.len();
    let mut feeds: Vec<(String, SessionInputValue)> = Vec::new();
    for input in session.inputs() {{
        let name = input.name().to_string();
        // token_type_ids: one segment.
        let v: Vec<i64> = if name == IDS {{ ids.clone() }} else {{ vec![i64::from(name == MASK); n] }};
        feeds.push((name, Tensor::from_array(Array2::from_shape_vec((1, n), v)?)?.into()));
    }}
    let out = session.run(feeds)?;
    let states = out[STATES].try_extract_array::<f32>()?;
    let shape: Vec<String> = states.shape().iter().map(|d| d.to_string()).collect();
    let last = states.index_axis(Axis(0), 0);
    let last = last.index_axis(Axis(0), n - 1);
    let first: Vec<String> = last.iter().take(5).enumerate().map(|(i, v)| format!("[{{i}}, {{}}]", f64::from(*v))).collect();
    println!("{{{{\"ids\": [], \"top5\": [[{{}}]], \"shape\": [{{}}]}}}}", first.join(", "), shape.join(", "));
    Ok(())
}}
"#
    )
}

fn js(file: &str, ids: &str, mask: &str, states: &str) -> String {
    format!(
        r#"#!/usr/bin/env node
// Token embeddings with {file}, written by `onnx-contract protocol --emit js`
// from the plan its runtime check drives the model with (form encoder-alone). Needs onnxruntime-node:
//   npm install onnxruntime-node && node embed.mjs --model-dir DIR --ids 5,17,42
// prints {{"ids": [], "top5": [[[i, value] for the last token's first 5 hidden values]], "shape": [...]}}.
import * as ort from 'onnxruntime-node';
import path from 'node:path';

const MODEL = {file:?};
const IDS = {ids:?}; // the token ids input
const MASK = {mask:?}; // ones over each row's tokens (zeros over a row's right padding)
const STATES = {states:?}; // [batch, seq, hidden]: each token's embedding

async function main() {{
  let dir = null, ids = [];
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i++) {{
    if (argv[i] === '--model-dir') dir = argv[++i];
    else if (argv[i] === '--ids') ids = argv[++i].split(',').map((t) => parseInt(t, 10));
    // The decoders' programs take these; an encoder generates nothing.
    else if (argv[i] === '--max-new-tokens' || argv[i] === '--num-beams') i++;
    else if (argv[i] !== '--ignore-eos') throw new Error(`unknown argument ${{argv[i]}}`);
  }}
  const session = await ort.InferenceSession.create(path.join(dir, MODEL));
  const n = ids.length, feeds = {{}};
  for (const name of session.inputNames) {{
    // token_type_ids: one segment.
    const v = name === IDS ? ids : new Array(n).fill(name === MASK ? 1 : 0);
    feeds[name] = new ort.Tensor('int64', BigInt64Array.from(v, (x) => BigInt(x)), [1, n]);
  }}
  const out = (await session.run(feeds))[STATES];
  const hidden = out.dims[2];
  const first = Array.from(out.data.subarray((n - 1) * hidden, (n - 1) * hidden + 5), (v, i) => [i, v]);
  console.log(JSON.stringify({{ ids: [], top5: [first], shape: out.dims }}));
}}

main().catch((e) => {{
  console.error(e.message);
  process.exit(1);
}});
"#
    )
}
