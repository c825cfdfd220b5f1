//! The program of an encoder alone: one call on the token ids, printing the
//! hidden states' shape and the last token's first values (what `protocol
//! --reference` prints for the same ids).

use super::table::Loop;
use crate::plan::Plan;

/// The program of `l`, an encoder alone.
pub(super) fn encoder_python(l: &Loop, plan: &Plan) -> String {
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
"#,
        file = l.later_file,
        ids = plan.input_ids,
        mask = plan.attention_mask.as_ref().map_or("None".to_string(), |m| format!("{m:?}")),
        states = plan.logits,
    )
}
