//! The Python program (onnxruntime + numpy), rendered from the recipe.

use super::spec::{Cache, Rule, Spec};
use std::fmt::Write;

fn np_dtype(t: &str) -> &'static str {
    match t {
        "float16" => "np.float16",
        "float64" => "np.float64",
        "int64" => "np.int64",
        "int32" => "np.int32",
        "bool" => "np.bool_",
        _ => "np.float32",
    }
}

/// `(past, present, numpy dtype, (dims after batch), fixed)` rows.
fn py_cache(list: &[Cache]) -> String {
    let mut s = String::from("[\n");
    for c in list {
        let dims: Vec<String> = c.dims.iter().map(|d| d.to_string()).collect();
        let comma = if dims.len() == 1 { "," } else { "" };
        let fixed = if c.fixed { "True" } else { "False" };
        let _ = writeln!(
            s,
            "    ({:?}, {:?}, {}, ({}{comma}), {fixed}),",
            c.past,
            c.present,
            np_dtype(&c.dtype),
            dims.join(", ")
        );
    }
    s.push(']');
    s
}

/// The expression feeding one input at a call (`part`: the tokens of this call).
fn value(rule: Rule, t: &str) -> String {
    let d = np_dtype(t);
    let range = format!("np.arange(past_len, past_len + n, dtype={d})");
    match rule {
        Rule::Ids => format!("part.astype({d})"),
        Rule::Embeds => "embed.run(None, {embed_in.name: part.astype(np.int32 if \"int32\" in embed_in.type else np.int64)})[0]  # embeddings, every call".into(),
        Rule::Flag => "np.array([step > 0])  # the no-cache branch at step 0, the cached one after".into(),
        Rule::States => format!("states.astype({d})"),
        Rule::EncoderMask => format!("np.ones((B, states.shape[1]), dtype={d})"),
        Rule::Mask => format!("np.ones((B, past_len + n), dtype={d})  # the past AND the new tokens"),
        Rule::MaskOverBuffer(len, false) => format!(
            "np.tile((np.arange({len}) < past_len + n).astype({d}), (B, 1))  # the whole buffer: ones up to the last token fed"
        ),
        Rule::MaskOverBuffer(len, true) => format!(
            "np.tile((np.arange({len}) >= {len} - (past_len + n)).astype({d}), (B, 1))  # the whole buffer, right-aligned: ones over the last past + new slots"
        ),
        Rule::CachePosition => format!("{range}  # the buffer slots written"),
        Rule::LogitsToKeep => format!("np.array(1, dtype={d})  # logits for the last position only"),
        Rule::Positions => format!("np.tile({range}, (B, 1))  # continuing the past"),
        Rule::Positions3(k) => format!("np.tile({range}, ({k}, B, 1))  # text: every rotary section's row continues the past"),
    }
}

pub(crate) fn python(s: &Spec<'_>) -> String {
    let (l, p) = (s.l, s.plan);
    let mut o = String::new();
    let input = if s.audio() { "--features input.npy" } else { "--ids 5,17,42" };
    let _ = write!(
        o,
        r#"#!/usr/bin/env python3
"""Decoding with the KV cache ({form}), written by `onnx-contract protocol --emit python`
from the plan its runtime check drives the model with: greedy, or beam search with
--num-beams N (default {beams}: generation_config.json's num_beams, else 1).

    python3 gen.py --model-dir DIR {input} --max-new-tokens 16

prints {{"ids": [new token ids], "score": their summed log-probability,
"top5": [[[id, logit], ... 5 per new token]] (greedy only)}}.

Beam search: {rule}
"""
import argparse
import json
import os

import numpy as np
import onnxruntime as ort

"#,
        form = l.form,
        beams = s.beams,
        rule = super::spec::BEAM_RULE,
    );
    if let Some(e) = &l.encoder {
        let _ = writeln!(o, "ENCODER = {e:?}  # run once, before step 0");
    }
    if let Some(e) = &l.embed {
        let _ = writeln!(o, "EMBED = {e:?}  # token ids to the decoder's embeddings, before every call");
    }
    let _ = writeln!(o, "STEP0 = {:?}  # the file run at step 0", l.step0_file);
    let _ = writeln!(o, "DECODER = {:?}  # the file run at every later step", l.later_file);
    let _ = writeln!(o, "DECODER_START = {}", l.decoder_start.map_or("None".into(), |v| v.to_string()));
    let _ = writeln!(o, "EOS = {}", l.eos.map_or("None".into(), |v| v.to_string()));
    let _ = writeln!(o, "NUM_BEAMS = {}\nLENGTH_PENALTY = {:?}", s.beams, l.beams.1);
    let _ = writeln!(o, "LOGITS = {:?}", p.logits);
    let _ = writeln!(o, "# (past input, present output, dtype, shape after the batch axis, fixed)");
    let _ = writeln!(o, "SELF_PAST = {}  # refreshed from the present every call", py_cache(&s.self_caches()));
    let cross_src = if s.cross_from_encoder() { "the encoder's outputs" } else { "step 0's presents" };
    let _ = writeln!(o, "CROSS_PAST = {}  # {cross_src}, then kept", py_cache(&s.cross_caches()));
    if let Some(k) = p.tokens_per_call {
        let _ = writeln!(o, "TOKENS_PER_CALL = {k}  # the graph takes this many tokens per call, the prompt's too");
    }
    let axis = p.seq_axis;
    // This export's presents hold only the new rows: the caller keeps each buffer.
    let kept = match s.keep() {
        Some("roll") => format!(
            "\n\ndef keep_rows(buf, rows, at):\n    \"\"\"The buffer after a call: its oldest rows dropped, the call's new rows (the present) appended.\"\"\"\n    n = rows.shape[{axis}]\n    return np.concatenate([np.take(buf, range(n, buf.shape[{axis}]), axis={axis}), rows], axis={axis})\n"
        ),
        Some(_) => format!(
            "\n\ndef keep_rows(buf, rows, at):\n    \"\"\"The buffer after a call: the call's new rows (the present) written at the slots its tokens fill.\"\"\"\n    out = buf.copy()\n    idx = [slice(None)] * buf.ndim\n    idx[{axis}] = slice(at, at + rows.shape[{axis}])\n    out[tuple(idx)] = rows\n    return out\n"
        ),
        None => String::new(),
    };
    let _ = write!(
        o,
        r#"

def cache(shape, dtype, fixed, rows):
    """Fixed states and buffers: zeros of their whole shape. A growing past:
    length 0 on axis {axis} (not 1: a zero slot would be attended to)."""
    s = [rows, *shape]
    if not fixed:
        s[{axis}] = 0
    return np.zeros(s, dtype=dtype)
{kept}

def log_softmax(x):
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", required=True)
"#
    );
    if s.audio() {
        let _ = writeln!(
            o,
            "    ap.add_argument(\"--features\", required=True, help=\"the encoder's input features (.npy)\")"
        );
    } else {
        let what = if s.seq2seq { "the source token ids" } else { "the prompt's token ids" };
        let _ = writeln!(o, "    ap.add_argument(\"--ids\", required=True, help=\"{what}, e.g. 5,17,42\")");
    }
    let _ = write!(
        o,
        r#"    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--num-beams", type=int, default=NUM_BEAMS)
    ap.add_argument("--ignore-eos", action="store_true")
    a = ap.parse_args()
    B = a.num_beams
    opts = dict(providers=["CPUExecutionProvider"])
    path = lambda f: os.path.join(a.model_dir, f)
"#
    );
    if let Some(why) = s.single_row() {
        let _ = writeln!(o, "    if B != 1:\n        ap.error({why:?})");
    }
    if !s.audio() {
        let _ = writeln!(o, "    ids = np.array([[int(t) for t in a.ids.split(\",\")]], dtype=np.int64)");
    }
    if l.encoder.is_some() {
        python_encoder(s, &mut o);
    }
    let _ = writeln!(o, "\n    step0 = ort.InferenceSession(path(STEP0), **opts)");
    let _ = writeln!(o, "    decoder = step0 if DECODER == STEP0 else ort.InferenceSession(path(DECODER), **opts)");
    if l.embed.is_some() {
        let _ = writeln!(o, "    embed = ort.InferenceSession(path(EMBED), **opts)");
        let _ = writeln!(o, "    embed_in = embed.get_inputs()[0]");
    }
    let _ = writeln!(o, "    past = {{p: cache(shape, t, fixed, B) for p, _, t, shape, fixed in SELF_PAST}}");
    if s.cross_from_encoder() {
        let _ = writeln!(o, "    cross = {{p: np.repeat(enc[q], B, axis=0) for p, q, _, _, _ in CROSS_PAST}}");
    } else {
        let _ = writeln!(o, "    cross = {{p: cache(shape, t, False, B) for p, _, t, shape, _ in CROSS_PAST}}");
    }
    let ids_dtype = np_dtype(&p.input_ids_dtype.to_string());
    match (s.seq2seq, p.codebooks) {
        (true, Some(k)) => {
            let _ = writeln!(
                o,
                "    fed = np.full(({k}, 1), DECODER_START, dtype={ids_dtype})  # step 0: the start token in each of the {k} codebook rows"
            );
        }
        (true, None) => {
            let _ = writeln!(
                o,
                "    fed = np.full((B, 1), DECODER_START, dtype={ids_dtype})  # step 0: the decoder start token"
            );
        }
        _ => {
            let _ = writeln!(o, "    fed = np.repeat(ids, B, axis=0).astype({ids_dtype})  # step 0: the whole prompt");
        }
    }
    let _ = write!(
        o,
        r#"    seqs = [[] for _ in range(B)]  # each beam's new tokens
    scores = np.array([0.0] + [-1e9] * (B - 1))  # the beams start as one: only row 0 counts at step 0
    finished, top5, past_len = [], [], 0
    for step in range(a.max_new_tokens):
"#
    );
    match p.tokens_per_call {
        Some(_) => {
            let _ = writeln!(
                o,
                "        for part in [fed[:, i:i + TOKENS_PER_CALL] for i in range(0, fed.shape[1], TOKENS_PER_CALL)]:"
            );
        }
        None => {
            let _ = writeln!(o, "        for part in [fed]:");
        }
    }
    let _ = writeln!(o, "            n = part.shape[1]\n            feeds = {{}}");
    for f in s.feeds() {
        let _ = writeln!(o, "            feeds[{:?}] = {}", f.name, value(f.rule, &f.dtype));
    }
    if s.pair {
        let _ =
            writeln!(o, "            if step > 0:  # the with-past decoder takes the cache; step 0's decoder has none");
        let _ = writeln!(o, "                feeds.update(past)\n                feeds.update(cross)");
    } else {
        let _ = writeln!(o, "            feeds.update(past)\n            feeds.update(cross)");
    }
    let _ = write!(
        o,
        r#"            session = step0 if step == 0 else decoder
            declared = {{i.name for i in session.get_inputs()}}  # each file gets the inputs it declares
            out = dict(zip([o.name for o in session.get_outputs()], session.run(None, {{k: v for k, v in feeds.items() if k in declared}})))
"#
    );
    let carry = match s.keep() {
        Some(_) => "past = {p: keep_rows(past[p], out[q], past_len) for p, q, _, _, _ in SELF_PAST}  # the new rows into the kept buffer",
        None => "past = {p: out[q] for p, q, _, _, _ in SELF_PAST}  # the present becomes the past",
    };
    let _ = writeln!(o, "            {carry}");
    let _ = write!(
        o,
        r#"            if step == 0 and CROSS_PAST and all(q in out for _, q, _, _, _ in CROSS_PAST):
                cross = {{p: out[q] for p, q, _, _, _ in CROSS_PAST}}  # step 0's, kept (later ones are dummies)
"#
    );
    if p.is_cacheless() {
        let _ = writeln!(o, "            # no cache: the next call feeds the whole prefix again, from position 0");
    } else {
        let _ = writeln!(o, "            past_len += n");
    }
    let _ = write!(
        o,
        r#"        logits = out[LOGITS][:, -1].astype(np.float64)  # the last position of every row
        if B == 1:
            best = np.argsort(-logits[0], kind="stable")[:5]
            top5.append([[int(i), float(logits[0, i])] for i in best])
        cand = (scores[:, None] + log_softmax(logits[:B])).ravel()
        vocab = logits.shape[1]
        origin, tokens, kept = [], [], []
        for rank, i in enumerate(np.argsort(-cand, kind="stable")[:2 * B]):
            b, t = divmod(int(i), vocab)
            if t == EOS and not a.ignore_eos:
                if rank < B:  # a finished hypothesis
                    finished.append((cand[i] / (len(seqs[b]) + 1) ** LENGTH_PENALTY, seqs[b] + [t], cand[i]))
                continue
            origin.append(b)
            tokens.append(t)
            kept.append(cand[i])
            if len(origin) == B:
                break
        seqs = [seqs[b] + [t] for b, t in zip(origin, tokens)]
        scores = np.array(kept)
        past = {{p: v[origin] for p, v in past.items()}}  # every beam's cache rows follow its origin
"#
    );
    if p.is_cacheless() {
        let _ = writeln!(
            o,
            "        fed = np.concatenate([fed[origin], np.array(tokens, dtype={ids_dtype})[:, None]], axis=1)  # the whole prefix, every call"
        );
    } else if p.codebooks.is_some() {
        let _ = writeln!(o, "        # every other codebook row takes its own greedy token");
        let _ = writeln!(
            o,
            "        fed = np.array([[tokens[0]]] + [[int(np.argmax(logits[r]))] for r in range(1, fed.shape[0])], dtype={ids_dtype})"
        );
    } else {
        let _ = writeln!(o, "        fed = np.array(tokens, dtype={ids_dtype})[:, None]");
    }
    let _ = write!(
        o,
        r#"        if len(finished) >= B:
            break
    running = [(scores[b] / max(len(seqs[b]), 1) ** LENGTH_PENALTY, seqs[b], scores[b]) for b in range(B)]
    _, ids_out, score = max(finished + running, key=lambda h: h[0])
    print(json.dumps({{"ids": ids_out, "score": float(score), "top5": top5 if B == 1 else []}}))


if __name__ == "__main__":
    main()
"#
    );
    o
}

/// The encoder, once: its states (and cross caches) repeated per beam.
fn python_encoder(s: &Spec<'_>, o: &mut String) {
    let _ = writeln!(o, "\n    # The encoder, once.");
    let _ = writeln!(o, "    encoder = ort.InferenceSession(path(ENCODER), **opts)");
    let mut feeds = Vec::new();
    if let Some((_, t, d)) = s.encoder_inputs.iter().find(|(_, t, _)| t.starts_with("float")) {
        // Features (log-mel frames) or raw samples, without the batch axis in the file.
        let _ = writeln!(o, "    feat = np.load(a.features).astype({})", np_dtype(t));
        let _ = writeln!(o, "    feat = feat[None] if feat.ndim == {} else feat", d.len().saturating_sub(1));
    }
    for (n, t, _) in s.encoder_inputs {
        let v = if t.starts_with("float") {
            "feat".to_string()
        } else if n.contains("mask") && s.audio() {
            format!("np.ones(feat.shape[:2], dtype={})", np_dtype(t))
        } else if n.contains("mask") {
            format!("np.ones_like(ids, dtype={})", np_dtype(t))
        } else {
            format!("ids.astype({})", np_dtype(t))
        };
        feeds.push(format!("{n:?}: {v}"));
    }
    let _ = writeln!(o, "    enc_out = encoder.run(None, {{{}}})", feeds.join(", "));
    let _ = writeln!(o, "    enc = dict(zip([o.name for o in encoder.get_outputs()], enc_out))");
    let _ = writeln!(o, "    states = np.repeat(enc_out[0], B, axis=0)  # one row per beam");
}
