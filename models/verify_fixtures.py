"""Run every fixture folder once in onnxruntime (CPU) and print what happens.

    python models/verify_fixtures.py [--root DIR] [folder ...]

Seq2seq: the encoder once; the merged decoder step 0 (use_cache_branch False,
zero-length past) and step 1 (its own presents); the split pair as
transformers.js / older optimum drive it (decoder_model.onnx step 0, then
decoder_with_past_model.onnx for steps 1 and 2). Parity: the pair's and the
merged file's logits against each other, and a cached step against the
uncached decoder run over the same two tokens.
Decoder-only: a 4-token prompt, then one cached step, against one uncached
5-token run (max |delta| of the last logits).
Expected failures (baked past at past length 2) are printed with ORT's text.
"""
import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parent
so = ort.SessionOptions()
so.log_severity_level = 3
so.intra_op_num_threads = 1


def session(path):
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def zero_past(inp):
    shape = []
    for k, d in enumerate(inp.shape):
        if isinstance(d, int):
            shape.append(d)
        else:
            shape.append(1 if k == 0 else 0)  # batch 1, every symbolic length 0
    return np.zeros(shape, dtype=np.float32)


def run(sess, ids, *, enc_mask=None, enc_hidden=None, past=None, features=None):
    """past: dict past_key_values.* -> array, or None for 'no cache yet'."""
    past_len = 0
    if past:
        past_len = next(v.shape[2] for k, v in past.items() if k.endswith((".decoder.key", ".key")) and ".encoder." not in k)
    feeds = {}
    for inp in sess.get_inputs():
        n = inp.name
        if n == "input_ids":
            feeds[n] = ids
        elif n == "encoder_attention_mask":
            feeds[n] = enc_mask
        elif n == "attention_mask":
            feeds[n] = np.ones((1, past_len + ids.shape[1]), dtype=np.int64)
        elif n == "position_ids":
            feeds[n] = np.arange(past_len, past_len + ids.shape[1], dtype=np.int64)[None]
        elif n == "encoder_hidden_states":
            feeds[n] = enc_hidden
        elif n == "input_features":
            feeds[n] = features
        elif n == "use_cache_branch":
            feeds[n] = np.array([past is not None])
        elif n.startswith("past_key_values."):
            feeds[n] = past[n] if past is not None else zero_past(inp)
        else:
            raise ValueError(f"no feed for {n}")
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))


def next_past(past, out):
    """Decoder presents replace the past; encoder presents only if not yet held."""
    new = dict(past or {})
    for k, v in out.items():
        if k.startswith("present."):
            name = "past_key_values." + k[len("present."):]
            if ".encoder." in name and name in new:
                continue
            new[name] = v
    return new


def try_run(label, fn):
    try:
        out = fn()
        print(f"  {label}: ok, logits {list(out['logits'].shape)}")
        return out
    except Exception as e:  # noqa: BLE001
        print(f"  {label}: FAILS: {type(e).__name__}: {e}")
        return None


def delta(a, b):
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max())


def seq2seq(folder: Path):
    cfg = json.loads((folder / "config.json").read_text())
    onnx_dir = folder / "onnx" if (folder / "onnx").is_dir() else folder
    start = cfg["decoder_start_token_id"]
    files = {p.name: p for p in onnx_dir.glob("*.onnx")}
    enc_mask = np.ones((1, 5), dtype=np.int64)
    rng = np.random.default_rng(0)
    features = None
    if "encoder_model.onnx" in files:
        enc = session(files["encoder_model.onnx"])
        feeds = {}
        for inp in enc.get_inputs():
            if inp.name == "input_features":
                frames = 2 * cfg["max_source_positions"]
                features = rng.standard_normal((1, cfg["num_mel_bins"], frames)).astype(np.float32)
                feeds[inp.name] = features
            elif inp.name == "input_ids":
                feeds[inp.name] = np.array([[5, 6, 7, 8, 9]], dtype=np.int64)
            elif inp.name == "attention_mask":
                feeds[inp.name] = enc_mask
        hidden = enc.run(None, feeds)[0]
        print(f"  encoder: ok, {[i.name for i in enc.get_inputs()]} -> last_hidden_state {list(hidden.shape)}")
        if features is not None:
            for frames in (features.shape[2] // 2, features.shape[2] + 2):
                f2 = rng.standard_normal((1, cfg["num_mel_bins"], frames)).astype(np.float32)
                try_run(f"encoder with {frames} frames", lambda: {"logits": enc.run(None, {"input_features": f2})[0]})
    else:
        hidden = rng.standard_normal((1, 5, cfg["d_model"])).astype(np.float32)
        print(f"  (no encoder file: random encoder_hidden_states {list(hidden.shape)})")
    enc_len = hidden.shape[1]
    enc_mask = np.ones((1, enc_len), dtype=np.int64)
    kw = dict(enc_mask=enc_mask, enc_hidden=hidden)
    ids0 = np.array([[start]], dtype=np.int64)
    results = {}
    if "decoder_model_merged.onnx" in files:
        m = session(files["decoder_model_merged.onnx"])
        print(f"  merged: {len(m.get_inputs())} inputs, {len(m.get_outputs())} outputs")
        s0 = try_run("merged step 0 (no cache, zero-length past)", lambda: run(m, ids0, past=None, **kw))
        if s0:
            tok = np.array([[int(s0["logits"][0, -1].argmax())]], dtype=np.int64)
            p1 = next_past(None, s0)
            s1 = try_run("merged step 1 (cache, past 1)", lambda: run(m, tok, past=p1, **kw))
            results["merged"] = (s0, s1, tok)
            if s1:
                p2 = next_past(p1, s1)
                s2 = try_run("merged step 2 (cache, past 2)", lambda: run(m, tok, past=p2, **kw))
    if "decoder_model.onnx" in files:
        d = session(files["decoder_model.onnx"])
        print(f"  decoder_model: {len(d.get_inputs())} inputs, {len(d.get_outputs())} outputs")
        s0 = try_run("pair step 0 (decoder_model)", lambda: run(d, ids0, **kw))
        tok = np.array([[int(s0["logits"][0, -1].argmax())]], dtype=np.int64)
        if "merged" in results:
            print(f"  |merged step 0 - decoder_model step 0| = {delta(results['merged'][0]['logits'], s0['logits']):.3g}")
        full = run(d, np.concatenate([ids0, tok], axis=1), **kw)
        if "decoder_with_past_model.onnx" in files:
            w = session(files["decoder_with_past_model.onnx"])
            print(f"  decoder_with_past: {len(w.get_inputs())} inputs, {len(w.get_outputs())} outputs")
            p1 = next_past(None, s0)
            s1 = try_run("pair step 1 (with-past, past 1)", lambda: run(w, tok, past=p1, **kw))
            if s1:
                print(f"  cached vs uncached (pair step 1 vs decoder_model on 2 tokens): max |delta| = {delta(s1['logits'][0, -1], full['logits'][0, -1]):.3g}")
                if "merged" in results and results["merged"][1] is not None:
                    print(f"  |merged step 1 - with-past step 1| = {delta(results['merged'][1]['logits'], s1['logits']):.3g}")
                p2 = next_past(p1, s1)
                try_run("pair step 2 (with-past, past 2)", lambda: run(w, tok, past=p2, **kw))
        if "merged" in results and results["merged"][1] is not None and np.array_equal(results["merged"][2], tok):
            print(f"  cached vs uncached (merged step 1 vs decoder_model on 2 tokens): max |delta| = {delta(results['merged'][1]['logits'][0, -1], full['logits'][0, -1]):.3g}")


def decoder_only(folder: Path):
    s = session(folder / "model.onnx")
    print(f"  model: {len(s.get_inputs())} inputs, {len(s.get_outputs())} outputs; {[i.name for i in s.get_inputs()][:4]}")
    prompt = np.array([[3, 14, 15, 92]], dtype=np.int64)
    p = run(s, prompt, past=None)
    tok = np.array([[int(p["logits"][0, -1].argmax())]], dtype=np.int64)
    c = run(s, tok, past=next_past(None, p))
    full = run(s, np.concatenate([prompt, tok], axis=1), past=None)
    print(f"  prompt 4 -> {list(p['logits'].shape)}, cached step -> {list(c['logits'].shape)}")
    print(f"  cached vs uncached last logits: max |delta| = {delta(c['logits'][0, -1], full['logits'][0, -1]):.3g}")


def main():
    args = sys.argv[1:]
    root = ROOT
    if "--root" in args:
        k = args.index("--root")
        root = Path(args[k + 1])
        del args[k : k + 2]
    folders = [root / a for a in args] or sorted(p for p in root.iterdir() if (p / "config.json").exists())
    for folder in folders:
        cfg = json.loads((folder / "config.json").read_text())
        print(f"== {folder.name} ({cfg['model_type']})")
        (seq2seq if cfg.get("is_encoder_decoder") else decoder_only)(folder)


if __name__ == "__main__":
    main()
