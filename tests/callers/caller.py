"""Real onnxruntime callers of the committed fixtures, one switch per caller
mistake, each recording its calls with python/onnx_contract_trace.py into
tests/traces/<mistake>.jsonl (the input of `onnx-contract replay`).

    python3 tests/callers/caller.py --mistake marian-correct
    python3 tests/callers/caller.py --all            # regenerate every trace
    python3 tests/callers/caller.py --all --out DIR  # elsewhere (determinism check)
    python3 tests/callers/caller.py --timing         # incident2-no-cache vs marian-correct

Greedy decoding from fixed ids, one thread per session: nothing here draws random
numbers (test_recorder.py seeds its arrays with default_rng(0)), and every digest
is the same from run to run. Only incident2-no-cache records `time_ms` (the other traces are
byte-reproducible). A caller that makes ORT raise records the error and stops.
"""
import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
from onnx_contract_trace import TraceRecorder  # noqa: E402

TRACES = ROOT / "tests" / "traces"
MARIAN = ROOT / "models" / "marian-tiny"
MARIAN_15 = ROOT / "models" / "marian-15-inputs" / "decoder_model_merged.onnx"
GPT2 = ROOT / "models" / "gpt2-tiny" / "model.onnx"
STEPS = 5  # decoder calls per trace
ENC_IDS = np.array([[5, 17, 42, 7, 9, 3, 0]], dtype=np.int64)
DECODER_START = 999
LAYERS, HEADS, HEAD_DIM = 6, 8, 4  # Marian
GPT2_LAYERS, GPT2_HEADS, GPT2_HEAD_DIM = 2, 4, 8
PROMPT = [3, 14, 15, 92]


def load(path, rec):
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.log_severity_level = 4  # the error is recorded and printed once
    return rec.wrap(ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]))


def run(sess, feeds, order=None):
    """All outputs as a name -> array dict, feeds in the model's input order (or `order`)."""
    order = order or [i.name for i in sess.get_inputs()]
    feeds = {**{k: feeds[k] for k in order if k in feeds}, **feeds}
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def greedy(out):
    return int(np.argmax(out["logits"][0, -1]))


# ---------------------------------------------------------------- Marian
def encode(rec):
    enc = load(MARIAN / "encoder_model.onnx", rec)
    return run(enc, {"input_ids": ENC_IDS, "attention_mask": np.ones_like(ENC_IDS)})["last_hidden_state"]


def base(hidden, ids, flag=None):
    feeds = {"encoder_attention_mask": np.ones_like(ENC_IDS),
             "input_ids": np.array([ids], dtype=np.int64), "encoder_hidden_states": hidden}
    if flag is not None:
        feeds["use_cache_branch"] = np.array([flag])
    return feeds


def zeros(kinds=("decoder", "encoder"), seq=0):
    return {f"past_key_values.{l}.{k}.{kv}": np.zeros((1, HEADS, seq, HEAD_DIM), np.float32)
            for l in range(LAYERS) for k in kinds for kv in ("key", "value")}


def pasts(out, kinds=("decoder", "encoder")):
    """present.L.K.V -> past_key_values.L.K.V, for the kinds asked."""
    return {"past_key_values." + n[len("present."):]: v for n, v in out.items()
            if n.startswith("present.") and n.split(".")[2] in kinds}


def marian_merged(rec, steps, decoder_past, encoder_past, flag, ids):
    """The merged-decoder loop; the four hooks say what the caller feeds at step k."""
    hidden = encode(rec)
    dec = load(MARIAN / "decoder_model_merged.onnx", rec)
    tokens, history = [DECODER_START], []
    for k in range(steps):
        feeds = {**base(hidden, ids(k, tokens), flag(k)),
                 **decoder_past(k, history), **encoder_past(k, history)}
        try:
            history.append(run(dec, feeds))
        except Exception as e:
            print(f"  ORT error at decoder step {k}: {e}")
            return tokens
        tokens.append(greedy(history[-1]))
    return tokens


def correct_decoder_past(k, h):
    return zeros(["decoder"]) if k == 0 else pasts(h[-1], ["decoder"])


def correct_encoder_past(k, h):
    return zeros(["encoder"]) if k == 0 else pasts(h[0], ["encoder"])


def last(k, tokens):
    return [tokens[-1]]


def marian_correct(rec, steps=STEPS):
    return marian_merged(rec, steps, correct_decoder_past, correct_encoder_past, lambda k: k > 0, last)


def marian_split_correct(rec, steps=STEPS):
    hidden = encode(rec)
    dec = load(MARIAN / "decoder_model.onnx", rec)
    dec_past = load(MARIAN / "decoder_with_past_model.onnx", rec)
    out0 = run(dec, base(hidden, [DECODER_START]))
    tokens, prev = [DECODER_START, greedy(out0)], out0
    for _ in range(1, steps):
        feeds = {**base(hidden, [tokens[-1]]), **pasts(prev, ["decoder"]), **pasts(out0, ["encoder"])}
        del feeds["encoder_hidden_states"]  # decoder_with_past reads the encoder pasts instead
        prev = run(dec_past, feeds)
        tokens.append(greedy(prev))
    return tokens


def incident1_28_feeds(rec, steps=STEPS):
    """The engine built for the 28-input signature meets the 15-input export."""
    hidden = encode(rec)
    dec = load(MARIAN_15, rec)
    order = [i.name for i in ort.InferenceSession(str(MARIAN / "decoder_model_merged.onnx")).get_inputs()]
    try:  # exactly marian-correct's step-0 feeds, in the 28-input order
        run(dec, {**base(hidden, [DECODER_START], False), **zeros()}, order)
    except Exception as e:
        print(f"  ORT error at decoder step 0: {e}")
    return [DECODER_START]


def incident2_no_cache(rec, steps=STEPS):
    """The workaround: no-cache branch every call, whole prefix, [1,8,1,4] dummies."""
    return marian_merged(rec, steps, lambda k, h: zeros(["decoder"], 1), lambda k, h: zeros(["encoder"], 1),
                         lambda k: False, lambda k, tokens: list(tokens))


def incident2_dummy_encoder_present(rec, steps=STEPS):
    """From step 1 on, the encoder past is the previous call's present.*.encoder.*."""
    return marian_merged(rec, steps, correct_decoder_past,
                         lambda k, h: zeros(["encoder"]) if k == 0 else pasts(h[-1], ["encoder"]),
                         lambda k: k > 0, last)


def marian_fresh_zeros_past(rec, steps=STEPS):
    return marian_merged(rec, steps, lambda k, h: zeros(["decoder"], k), correct_encoder_past,
                         lambda k: k > 0, last)


def marian_prefix_on_past(rec, steps=STEPS):
    return marian_merged(rec, steps, correct_decoder_past, correct_encoder_past,
                         lambda k: k > 0, lambda k, tokens: list(tokens))


def marian_flag_inconsistent(rec, steps=STEPS):
    """use_cache_branch=True at step 0, with the empty (length 0) pasts."""
    return marian_merged(rec, steps, correct_decoder_past, correct_encoder_past, lambda k: True, last)


def marian_flag_false_with_past(rec, steps=STEPS):
    """The other inconsistency: correct pasts, but use_cache_branch stays False after step 0."""
    return marian_merged(rec, steps, correct_decoder_past, correct_encoder_past, lambda k: False, last)


# ---------------------------------------------------------------- GPT-2
def gpt2(rec, steps=STEPS, mask_new_only=False, positions_restart=False, batch2_at=None, remap=None):
    """remap(k, history, past): the past the caller feeds at step k + 1 instead of step k's presents."""
    dec = load(GPT2, rec)
    history = []
    tokens, past = list(PROMPT), {f"past_key_values.{l}.{kv}": np.zeros((1, GPT2_HEADS, 0, GPT2_HEAD_DIM), np.float32)
                                  for l in range(GPT2_LAYERS) for kv in ("key", "value")}
    for k in range(steps):
        new = tokens if k == 0 else tokens[-1:]
        past_len = past["past_key_values.0.key"].shape[2]
        batch = 2 if k == batch2_at else 1
        start = 0 if positions_restart else past_len
        feeds = {"input_ids": np.array([new] * batch, np.int64), **past,
                 "attention_mask": np.ones((batch, len(new) + (0 if mask_new_only else past_len)), np.int64),
                 "position_ids": np.tile(np.arange(start, start + len(new), dtype=np.int64), (batch, 1))}
        try:
            out = run(dec, feeds)
        except Exception as e:
            print(f"  ORT error at decoder step {k}: {e}")
            return tokens
        tokens.append(greedy(out))
        history.append(out)
        past = {"past_key_values." + n[len("present."):]: v for n, v in out.items() if n.startswith("present.")}
        if remap:
            past = remap(k, history, past)
    return tokens


def swap(a, b):
    """Renames every past name's `a` part to `b` and back."""
    return lambda k, h, p: {n.replace(a, "\0").replace(b, a).replace("\0", b): v for n, v in p.items()}


def stale(k, h, p):
    """From step 2 on, the presents of two calls back (a stale cache)."""
    if len(h) < 2:
        return p
    return {"past_key_values." + n[len("present."):]: v for n, v in h[-2].items() if n.startswith("present.")}


MISTAKES = {
    "marian-correct": marian_correct,
    "marian-split-correct": marian_split_correct,
    "incident1-28-feeds": incident1_28_feeds,
    "incident2-no-cache": incident2_no_cache,
    "incident2-dummy-encoder-present": incident2_dummy_encoder_present,
    "marian-fresh-zeros-past": marian_fresh_zeros_past,
    "marian-prefix-on-past": marian_prefix_on_past,
    "marian-flag-inconsistent": marian_flag_inconsistent,
    "marian-flag-false-with-past": marian_flag_false_with_past,
    "gpt2-correct": lambda rec, steps=STEPS: gpt2(rec, steps),
    "gpt2-mask-new-only": lambda rec, steps=STEPS: gpt2(rec, steps, mask_new_only=True),
    "gpt2-positions-restart": lambda rec, steps=STEPS: gpt2(rec, steps, positions_restart=True),
    "gpt2-batch-mismatch": lambda rec, steps=STEPS: gpt2(rec, steps, batch2_at=1),
    "gpt2-swapped-layers": lambda rec, steps=STEPS: gpt2(rec, steps, remap=swap(".0.", ".1.")),
    "gpt2-key-value-swapped": lambda rec, steps=STEPS: gpt2(rec, steps, remap=swap(".key", ".value")),
    "gpt2-stale-past": lambda rec, steps=STEPS: gpt2(rec, steps, remap=stale),
}
TIMED = {"incident2-no-cache"}


def record_trace(name, out_dir, steps=STEPS, timing=None, quiet=False):
    with TraceRecorder(Path(out_dir) / f"{name}.jsonl", timing=name in TIMED if timing is None else timing,
                       version=1) as rec:  # v1: the committed traces prove old traces still read
        tokens = MISTAKES[name](rec, steps)
    if not quiet:
        print(f"{name}: tokens {tokens}")


def timing(tokens=8, repeats=30):
    """Total decoder time_ms (encoder call excluded) over `tokens` decoder calls.
    The two callers alternate, so a busy machine slows both alike."""
    import json
    names, runs = ("marian-correct", "incident2-no-cache"), {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            for name in names:
                record_trace(name, tmp, tokens, timing=True, quiet=True)
                calls = [json.loads(l) for l in open(Path(tmp) / f"{name}.jsonl")]
                runs.setdefault(name, []).append(sum(c["time_ms"] for c in calls if c["model"] != "encoder_model.onnx"))
    for name in names:
        print(f"{name}: {tokens} decoder calls, total decoder time median {statistics.median(runs[name]):.2f} ms, "
              f"min {min(runs[name]):.2f} ms ({repeats} runs)")
    no_cache, cached = (runs[n] for n in reversed(names))
    print(f"no-cache / cached: {statistics.median(no_cache) / statistics.median(cached):.2f}x on medians, "
          f"{min(no_cache) / min(cached):.2f}x on minimums")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mistake", choices=sorted(MISTAKES), action="append", default=[])
    ap.add_argument("--all", action="store_true", help="every trace")
    ap.add_argument("--out", default=str(TRACES), help="folder for the traces (default tests/traces)")
    ap.add_argument("--timing", type=int, nargs="?", const=8, metavar="TOKENS",
                    help="compare incident2-no-cache with marian-correct (default 8 decoder calls)")
    args = ap.parse_args()
    if not (args.mistake or args.all or args.timing):
        ap.error("give --mistake NAME, --all or --timing")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    for name in (list(MISTAKES) if args.all else args.mistake):
        record_trace(name, args.out)
    if args.timing:
        timing(args.timing)


if __name__ == "__main__":
    main()
