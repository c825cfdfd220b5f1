"""Real onnxruntime callers of the committed fixtures for the cache forms
beyond a growing optimum cache, each recording its calls with
python/onnx_contract_trace.py into tests/traces/<name>.jsonl, as the runtime
of that form drives it; one switch per caller mistake.

    python3 tests/callers/forms.py --all            # regenerate every trace
    python3 tests/callers/forms.py --all --out DIR  # elsewhere (determinism check)

- static caches (models/static-cache-llama): fixed [1, 2, 32, 16] buffers, one
  token per call (the prompt too), `cache_position` the slot written;
- buffers the caller keeps (models/static-cache-caller-writes,
  models/sliding-cache-caller-rolls, microsoft/winml-cli's static cache and
  sliding window): presents of the new token's rows only, which the caller
  writes into its [1, 2, 32, 16] buffers at `cache_position` or rolls in
  (drop the oldest row, append), the mask left- or right-aligned;
- onnxruntime-genai's shared buffers (models/llama-genai): past buffers of
  search.max_length (128), the mask over the real length;
- a genai hybrid (models/lfm2-genai): conv states `past.N.conv`, zero at the
  start and carried, beside KV buffers on the attention layers;
- embeddings chained from an embedding model (models/tjs-vlm, transformers.js'
  image-text layout): every decoder call's `inputs_embeds` is the output of an
  `embed_tokens.onnx` call on that call's ids, `num_logits_to_keep` 1;
- several tokens onto a past (models/gpt2-tiny): a second user turn of 3
  tokens fed at once after two one-token steps.

Greedy, one thread per session, no random numbers: byte-reproducible traces.
"""
import argparse
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
from onnx_contract_trace import TraceRecorder  # noqa: E402

MODELS = ROOT / "models"
TRACES = ROOT / "tests" / "traces"
PROMPT = [1, 307, 42, 118]
CALLS = 7  # decoder calls after the prompt's


def load(path, rec, name=None):
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.log_severity_level = 4
    return rec.wrap(ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]), name)


def run(sess, feeds):
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def present_of(past):
    """past_key_values.N.key -> present.N.key; past.N.conv -> present.N.conv."""
    return past.replace("past_key_values", "present", 1) if past.startswith("past_key_values") else "present" + past[4:]


def zero_pasts(sess, buffer=None):
    """Every past input at its whole fixed shape, zeros; a symbolic sequence axis gets `buffer` (genai) or 0."""
    out = {}
    for i in sess.get_inputs():
        if not i.name.startswith("past"):
            continue
        shape = [d if isinstance(d, int) else None for d in i.shape]
        shape[0] = 1
        if shape[-1] is None:  # genai's kv_cache_dim: the head size
            shape[-1] = 16
        if None in shape:
            shape[shape.index(None)] = buffer if buffer is not None else 0
        out[i.name] = np.zeros(shape, np.float32)
    return out


def carried(out, pasts):
    return {p: out[present_of(p)] for p in pasts}


def greedy(out):
    return int(np.argmax(out["logits"][0, -1]))


# ---------------------------------------------------------------- static cache
def static_cache(rec, stuck=False):
    """One token per call into fixed buffers; `cache_position` the slot (stuck: always slot 0)."""
    dec = load(MODELS / "static-cache-llama" / "model.onnx", rec)
    past, tokens, new = zero_pasts(dec), list(PROMPT), []
    for slot in range(len(PROMPT) + CALLS - 1):
        tok = tokens[slot]
        feeds = {"input_ids": np.array([[tok]], np.int64),
                 "cache_position": np.array([0 if stuck else slot], np.int64), **past}
        out = run(dec, feeds)
        past = carried(out, past)
        if slot >= len(PROMPT) - 1:
            tokens.append(greedy(out))
            new.append(tokens[-1])
    return new


# ---------------------------------------------------------------- buffers the caller keeps
def kept_buffer(rec, sliding=False, mistake=False):
    """winml-cli's forms whose presents are the new token's rows only: the caller keeps [1, 2, 32, 16]
    buffers (zeros at the start), one token per call (the prompt too). static
    (models/static-cache-caller-writes): `cache_position` [p], mask ones on slots 0..p, each present
    written into the buffer at slot p (mistake: always at slot 0). sliding
    (models/sliding-cache-caller-rolls): `position_id` [[p]], mask ones on the last min(p + 1, 32)
    slots, buf = concat(buf[:, :, 1:], present) (mistake: the present overwrites the last slot)."""
    folder = "sliding-cache-caller-rolls" if sliding else "static-cache-caller-writes"
    dec = load(MODELS / folder / "model.onnx", rec)
    buf, tokens, new = zero_pasts(dec), list(PROMPT), []
    size = next(iter(buf.values())).shape[2]
    for p in range(len(PROMPT) + CALLS - 1):
        mask = np.zeros((1, size), np.int64)
        feeds = {"input_ids": np.array([[tokens[p]]], np.int64), "attention_mask": mask}
        if sliding:
            mask[0, size - min(p + 1, size):] = 1
            feeds["position_id"] = np.array([[p]], np.int64)
        else:
            mask[0, : p + 1] = 1
            feeds["cache_position"] = np.array([p], np.int64)
        out = run(dec, {**feeds, **buf})
        for name in buf:
            present = out["present" + name[4:]]  # past_0_key -> present_0_key
            if sliding and not mistake:
                buf[name] = np.concatenate([buf[name][:, :, 1:], present], axis=2)
            else:
                buf[name] = buf[name].copy()
                slot = size - 1 if sliding else 0 if mistake else p
                buf[name][:, :, slot:slot + 1] = present
        if p >= len(PROMPT) - 1:
            tokens.append(greedy(out))
            new.append(tokens[-1])
    return new


# ---------------------------------------------------------------- genai decoders
def genai(rec, folder, conv_reset=False):
    """Prompt at once, then one token per call; pasts are max_length buffers (shared), the mask the real length."""
    dec = load(MODELS / folder / "model.onnx", rec)
    past = zero_pasts(dec, buffer=128)
    tokens, new, length = list(PROMPT), [], 0
    for k in range(CALLS):
        ids = tokens if k == 0 else tokens[-1:]
        feeds = {"input_ids": np.array([ids], np.int64),
                 "attention_mask": np.ones((1, length + len(ids)), np.int64), **past}
        out = run(dec, feeds)
        length += len(ids)
        past = carried(out, past)
        if conv_reset and k >= 1:  # the mistake: states re-zeroed after call 1 instead of carried
            past.update({p: np.zeros_like(v) for p, v in past.items() if p.endswith(".conv")})
        tokens.append(greedy(out))
        new.append(tokens[-1])
    return new


# ---------------------------------------------------------------- embeddings split
def embeds(rec, stale=False):
    """embed_tokens.onnx on each call's ids, its output as the decoder's inputs_embeds
    (stale: from decoder call 2 on, the previous embedding call's output instead)."""
    embed = load(MODELS / "tjs-vlm" / "onnx" / "embed_tokens.onnx", rec)
    dec = load(MODELS / "tjs-vlm" / "onnx" / "decoder_model_merged.onnx", rec)
    past = zero_pasts(dec)
    tokens, new, previous = list(PROMPT), [], None
    for k in range(CALLS):
        ids = tokens if k == 0 else tokens[-1:]
        vectors = run(embed, {"input_ids": np.array([ids], np.int64)})["inputs_embeds"]
        length = past["past_key_values.0.key"].shape[2]
        fed = previous if stale and k >= 2 else vectors
        feeds = {"inputs_embeds": fed, "attention_mask": np.ones((1, length + len(ids)), np.int64),
                 "position_ids": np.arange(length, length + len(ids), dtype=np.int64)[None],
                 "num_logits_to_keep": np.array(1, np.int64), **past}
        out = run(dec, feeds)
        past, previous = carried(out, past), vectors
        tokens.append(greedy(out))
        new.append(tokens[-1])
    return new


# ---------------------------------------------------------------- a chunk onto a past
def chunk_after_past(rec, restart=False):
    """GPT-2: the prompt, two one-token steps, a second user turn of 3 tokens at once, two more steps
    (restart: the chunk's positions start again at 0 instead of continuing the past)."""
    dec = load(MODELS / "gpt2-tiny" / "model.onnx", rec)
    past = {f"past_key_values.{l}.{kv}": np.zeros((1, 4, 0, 8), np.float32) for l in range(2) for kv in ("key", "value")}
    tokens, new = [3, 14, 15, 92], []
    for ids in [tokens, None, None, [7, 21, 5], None, None]:
        ids = ids if ids is not None else tokens[-1:]
        if ids is not tokens and len(ids) > 1:
            tokens.extend(ids)
        length = past["past_key_values.0.key"].shape[2]
        feeds = {"input_ids": np.array([ids], np.int64), **past,
                 "attention_mask": np.ones((1, length + len(ids)), np.int64),
                 "position_ids": np.arange(length, length + len(ids), dtype=np.int64)[None]}
        if restart and len(ids) > 1 and length > 0:
            feeds["position_ids"] = np.arange(len(ids), dtype=np.int64)[None]
        out = run(dec, feeds)
        past = carried(out, past)
        tokens.append(greedy(out))
        new.append(tokens[-1])
    return new


CALLERS = {
    "static-cache-correct": static_cache,
    "static-cache-position-stuck": lambda rec: static_cache(rec, stuck=True),
    "static-caller-writes-correct": kept_buffer,
    "static-caller-writes-at-zero": lambda rec: kept_buffer(rec, mistake=True),
    "sliding-caller-rolls-correct": lambda rec: kept_buffer(rec, sliding=True),
    "sliding-caller-no-roll": lambda rec: kept_buffer(rec, sliding=True, mistake=True),
    "genai-shared-buffer-correct": lambda rec: genai(rec, "llama-genai"),
    "genai-hybrid-correct": lambda rec: genai(rec, "lfm2-genai"),
    "genai-hybrid-conv-reset": lambda rec: genai(rec, "lfm2-genai", conv_reset=True),
    "embeds-chained-correct": embeds,
    "embeds-stale": lambda rec: embeds(rec, stale=True),
    "gpt2-chunk-after-past": chunk_after_past,
    "gpt2-chunk-positions-restart": lambda rec: chunk_after_past(rec, restart=True),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--caller", choices=sorted(CALLERS), action="append", default=[])
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--out", type=Path, default=TRACES)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    for name in (list(CALLERS) if a.all else a.caller):
        rec = TraceRecorder(a.out / f"{name}.jsonl", timing=False, version=1)  # v1, as committed
        try:
            tokens = CALLERS[name](rec)
        finally:
            rec.close()
        print(f"{name}: {tokens}")


if __name__ == "__main__":
    main()
