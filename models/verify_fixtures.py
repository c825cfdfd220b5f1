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
Expected failures (baked past at past length 2, a decoder ORT refuses to
load) are printed with ORT's text.

Every input is fed in the type the model declares (float16 pasts and encoder
states included). Model files are looked for in the folder and in its onnx/
subfolder (transformers.js layout; every decoder-only .onnx there is run);
an onnxruntime-genai folder runs genai_config.json's decoder file, its
symbolic head axis sized by the config's head_size. NaN/Inf in logits or
presents are counted. A folder that cannot be driven (no config.json model
type, no .onnx file, an input with no feed rule, a type numpy lacks) is
skipped with the reason printed; the run goes on with the next folder.
"""
import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

from fixture_common import next_past  # noqa: F401  (shared with the generators)

ROOT = Path(__file__).resolve().parent
so = ort.SessionOptions()
so.log_severity_level = 3
so.intra_op_num_threads = 1


class Skip(Exception):
    """The folder (or file) cannot be driven by this script: print why, go on."""


# ORT type string -> numpy dtype (bfloat16 has none: such models are skipped).
DTYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
}
HEAD_SIZE = None  # a genai folder's head_size, for its symbolic last past axis


def session(path):
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def dtype_of(inp):
    if inp.type not in DTYPES:
        raise Skip(f"input `{inp.name}` is {inp.type}, which this script cannot make in numpy")
    return DTYPES[inp.type]


def zero_past(inp):
    shape = []
    for k, d in enumerate(inp.shape):
        if isinstance(d, int):
            shape.append(d)
        elif k == 3 and HEAD_SIZE is not None:
            shape.append(HEAD_SIZE)  # genai: the head axis is the symbolic `kv_cache_dim`
        else:
            shape.append(1 if k == 0 else 0)  # batch 1, every symbolic length 0
    return np.zeros(shape, dtype=dtype_of(inp))


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
            raise Skip(f"no feed rule for input `{n}` ({inp.type})")
        if feeds[n] is None:
            raise Skip(f"nothing to feed `{n}` with here")
        feeds[n] = np.asarray(feeds[n]).astype(dtype_of(inp), copy=False)  # the declared type
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))


def nonfinite(out):
    """`name: N NaN, M Inf` for every float output holding NaN or Inf."""
    bad = []
    for k, v in out.items():
        v = np.asarray(v)
        if v.dtype.kind == "f" and not np.isfinite(v).all():
            bad.append(f"{k}: {int(np.isnan(v).sum())} NaN, {int(np.isinf(v).sum())} Inf")
    return bad


def try_run(label, fn):
    try:
        out = fn()
    except Skip:
        raise
    except Exception as e:  # noqa: BLE001
        print(f"  {label}: FAILS: {type(e).__name__}: {e}")
        return None
    bad = nonfinite(out)
    print(f"  {label}: ok, logits {list(out['logits'].shape)}" + (f"; NON-FINITE {bad}" if bad else ""))
    return out


def try_session(label, path):
    try:
        return session(path)
    except Exception as e:  # noqa: BLE001
        print(f"  {label}{path.name}: does not load: {type(e).__name__}: {e}")
        return None


def argmax_token(logits):
    """Greedy token of the last position; NaN counts as -inf."""
    last = np.nan_to_num(np.asarray(logits[0, -1], dtype=np.float64), nan=-np.inf)
    return np.array([[int(last.argmax())]], dtype=np.int64)


def delta(a, b):
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max())


def seq2seq(folder: Path):
    cfg = json.loads((folder / "config.json").read_text())
    onnx_dir = folder / "onnx" if (folder / "onnx").is_dir() else folder
    start = cfg["decoder_start_token_id"]
    files = {p.name: p for p in onnx_dir.glob("*.onnx")}
    if not files:
        raise Skip(f"no .onnx file in {onnx_dir.relative_to(folder.parent)}")
    enc_mask = np.ones((1, 5), dtype=np.int64)
    rng = np.random.default_rng(0)
    features = None
    enc = try_session("encoder ", files["encoder_model.onnx"]) if "encoder_model.onnx" in files else None
    if "encoder_model.onnx" in files and enc is None:
        raise Skip("the encoder does not load, so there are no encoder states to drive the decoder with")
    if enc is not None:
        feeds = {}
        for inp in enc.get_inputs():
            if inp.name == "input_features":
                frames = 2 * cfg["max_source_positions"]
                features = rng.standard_normal((1, cfg["num_mel_bins"], frames))
                feeds[inp.name] = features.astype(dtype_of(inp))
            elif inp.name == "input_ids":
                feeds[inp.name] = np.array([[5, 6, 7, 8, 9]], dtype=dtype_of(inp))
            elif inp.name == "attention_mask":
                feeds[inp.name] = enc_mask.astype(dtype_of(inp))
            else:
                raise Skip(f"no feed rule for encoder input `{inp.name}` ({inp.type})")
        try:
            hidden = enc.run(None, feeds)[0]
        except Exception as e:  # noqa: BLE001
            raise Skip(f"the encoder does not run ({type(e).__name__}: {e}), so there are no encoder states") from None
        bad = nonfinite({"last_hidden_state": hidden})
        print(f"  encoder: ok, {[i.name for i in enc.get_inputs()]} -> last_hidden_state {hidden.dtype} {list(hidden.shape)}"
              + (f"; NON-FINITE {bad}" if bad else ""))
        if features is not None:
            ftype = dtype_of(enc.get_inputs()[0])
            for frames in (features.shape[2] // 2, features.shape[2] + 2):
                f2 = rng.standard_normal((1, cfg["num_mel_bins"], frames)).astype(ftype)
                try_run(f"encoder with {frames} frames", lambda: {"logits": enc.run(None, {"input_features": f2})[0]})
    else:
        hidden = rng.standard_normal((1, 5, cfg["d_model"])).astype(np.float32)
        print(f"  (no encoder file: random encoder_hidden_states {list(hidden.shape)})")
    enc_len = hidden.shape[1]
    enc_mask = np.ones((1, enc_len), dtype=np.int64)
    kw = dict(enc_mask=enc_mask, enc_hidden=hidden)
    ids0 = np.array([[start]], dtype=np.int64)
    results = {}
    m = try_session("merged ", files["decoder_model_merged.onnx"]) if "decoder_model_merged.onnx" in files else None
    if m is not None:
        print(f"  merged: {len(m.get_inputs())} inputs, {len(m.get_outputs())} outputs")
        s0 = try_run("merged step 0 (no cache, zero-length past)", lambda: run(m, ids0, past=None, **kw))
        if s0:
            tok = argmax_token(s0["logits"])
            p1 = next_past(None, s0)
            s1 = try_run("merged step 1 (cache, past 1)", lambda: run(m, tok, past=p1, **kw))
            results["merged"] = (s0, s1, tok)
            if s1:
                p2 = next_past(p1, s1)
                s2 = try_run("merged step 2 (cache, past 2)", lambda: run(m, tok, past=p2, **kw))
    d = try_session("pair ", files["decoder_model.onnx"]) if "decoder_model.onnx" in files else None
    if d is not None:
        print(f"  decoder_model: {len(d.get_inputs())} inputs, {len(d.get_outputs())} outputs")
        s0 = try_run("pair step 0 (decoder_model)", lambda: run(d, ids0, **kw))
        if s0 is None:
            return
        tok = argmax_token(s0["logits"])
        if "merged" in results:
            print(f"  |merged step 0 - decoder_model step 0| = {delta(results['merged'][0]['logits'], s0['logits']):.3g}")
        full = run(d, np.concatenate([ids0, tok], axis=1), **kw)
        w = try_session("pair ", files["decoder_with_past_model.onnx"]) if "decoder_with_past_model.onnx" in files else None
        if w is not None:
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


def decoder_files(folder: Path):
    """The decoder-only files to run: genai_config's decoder, model.onnx in the
    folder, else every .onnx in onnx/ (e.g. model.onnx and model_quantized.onnx)."""
    global HEAD_SIZE
    genai = folder / "genai_config.json"
    if genai.exists():
        dec = json.loads(genai.read_text())["model"]["decoder"]
        HEAD_SIZE = dec.get("head_size")
        return [folder / dec["filename"]]
    if (folder / "model.onnx").exists():
        return [folder / "model.onnx"]
    if (folder / "onnx").is_dir():
        return sorted((folder / "onnx").glob("*.onnx"))
    return []


def decoder_only(folder: Path):
    files = decoder_files(folder)
    if not files:
        raise Skip("no model.onnx in the folder or its onnx/, and no genai_config.json")
    for path in files:
        label = path.relative_to(folder)
        try:
            decoder_only_file(path, label)
        except Skip as e:
            if len(files) == 1:
                raise
            print(f"  {label}: SKIPPED: {e}")


def decoder_only_file(path: Path, label: Path):
    s = try_session(f"{label.parent}/" if label.parent != Path(".") else "", path)
    if s is None:
        return
    ins = s.get_inputs()
    print(f"  {label}: {len(ins)} inputs, {len(s.get_outputs())} outputs; {[i.name for i in ins][:4]};"
          f" float inputs {sorted({i.type for i in ins if 'float' in i.type or 'double' in i.type}) or 'none'}")
    prompt = np.array([[3, 14, 15, 92]], dtype=np.int64)
    p = try_run(f"{label} prompt 4 (zero-length past)", lambda: run(s, prompt, past=None))
    if p is None:
        return
    tok = argmax_token(p["logits"])
    c = try_run(f"{label} cached step (past 4)", lambda: run(s, tok, past=next_past(None, p)))
    full = try_run(f"{label} uncached 5 tokens", lambda: run(s, np.concatenate([prompt, tok], axis=1), past=None))
    if c is not None and full is not None:
        print(f"  {label} cached vs uncached last logits: max |delta| = {delta(c['logits'][0, -1], full['logits'][0, -1]):.3g}")


def main():
    args = sys.argv[1:]
    root = ROOT
    if "--root" in args:
        k = args.index("--root")
        root = Path(args[k + 1])
        del args[k : k + 2]
    folders = [root / a for a in args] or sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    errors = 0
    global HEAD_SIZE
    for folder in folders:
        HEAD_SIZE = None
        try:
            cfg_path = folder / "config.json"
            if not cfg_path.exists():
                print(f"== {folder.name}")
                raise Skip("no config.json")
            cfg = json.loads(cfg_path.read_text())
            print(f"== {folder.name} ({cfg.get('model_type', '?')})")
            if "model_type" not in cfg:
                raise Skip("config.json has no model_type")
            (seq2seq if cfg.get("is_encoder_decoder") else decoder_only)(folder)
        except Skip as e:
            print(f"  SKIPPED: {e}")
        except Exception as e:  # noqa: BLE001 - a bug here or an unforeseen fixture: say so, go on
            errors += 1
            print(f"  SKIPPED (unexpected error in this script): {type(e).__name__}: {e}")
    if errors:
        print(f"{errors} folder(s) stopped on an unexpected error")
        sys.exit(1)


if __name__ == "__main__":
    main()
