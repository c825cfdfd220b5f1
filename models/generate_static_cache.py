"""Generate the static-cache fixtures in models/ and measure them in onnxruntime.

transformers' StaticCache programs cannot be exported to ONNX as they are
(torch.onnx.export of the exported program fails with "duplicated inputs that
are mutated", pytorch/pytorch#155862), so the static-cache ONNX files seen in
the wild come from hand-written wrappers that take the cache buffers as graph
inputs. The wrapper here is the usual one: it builds a transformers
StaticCache(max_cache_len=MAX), points each layer's keys/values at the input
buffers, calls the model with cache_position and returns the logits and the
updated buffers. StaticLayer.update writes the new key/value with
index_copy_(2, cache_position, ...) (ScatterElements in ONNX), and transformers
builds the causal mask over the whole MAX buffer from cache_position
(kv_index <= cache_position), so the empty tail of the buffer is never attended.

Base model: a tiny LlamaForCausalLM (2 layers, hidden 64, 4 heads, 2 kv heads,
head_dim 16, vocab 500), random weights from torch.manual_seed(0). MAX = 32.
Exporter: the TorchScript exporter (torch.onnx.export(..., dynamo=False)),
opset 17. Versions: torch 2.9.1, transformers 4.57.6, onnx 1.23.2,
onnxruntime 1.31.1 (the venv /work/genvenv).

    python models/generate_static_cache.py [--out DIR] [name ...]
    python models/generate_static_cache.py --verify-only [name ...]

Everything runs on one thread (torch.set_num_threads(1), ORT intra/inter-op 1).
The script re-executes itself with PYTHONHASHSEED=0 and sets HF_HUB_OFFLINE=1;
no weights are downloaded. config.json and generation_config.json are the ones
model.save_pretrained() writes.

  static-cache-llama/        the wrapper traced at one token. Every shape is
                             static: input_ids [1,1], cache_position [1],
                             past_key_values.N.key/value [1,2,32,16] ->
                             logits [1,1,500], present.N.key/value [1,2,32,16].
                             Driven token by token (the prompt too, one token
                             per call, ExecuTorch style) from zeroed buffers,
                             present fed back as the next past, cache_position
                             = the token's absolute position.
  static-cache-traced-at-4/  the same wrapper traced with a 4-token chunk
                             (input_ids [1,4], cache_position [4]) with the
                             sequence axis declared dynamic. The trace baked
                             the chunk length 4 into a Reshape of
                             cache_position, so a 4-token call runs and matches
                             PyTorch, and the first 1-token call fails in ORT.
  static-cache-with-mask/    static-cache-llama plus an attention_mask input
                             [1,32] int64 over the whole buffer (ones for the
                             slots 0..cache_position, zeros after), passed to
                             the model as its attention_mask, the way
                             microsoft/winml-cli's static-cache decoders take
                             one (attention_mask / decoder_attention_mask
                             [batch, max_cache_len]). Inputs and outputs use
                             winml-cli's names past_<i>_key / present_<i>_key.
  static-cache-writes-at-zero/ (broken) static-cache-llama with the cache
                             write index frozen at slot 0, as a trace that
                             captured the write position as a constant leaves
                             it (the model was traced at position 0): the 4
                             cache ScatterElements take Mul(index, 0). The mask
                             and the positions still follow cache_position, so
                             every call overwrites slot 0 and attends to slots
                             that were never written. Derived from
                             static-cache-llama/model.onnx with onnx alone.
  static-cache-caller-writes/ winml-cli's WinMLStaticCache export form: the
                             presents hold only the new token's rows. In:
                             input_ids [1,1], attention_mask [1,32] int64
                             (ones on slots 0..cache_position), cache_position
                             [1], past_<i>_key/value [1,2,32,16]; out: logits
                             [1,1,500], present_<i>_key/value [1,2,1,16]. The
                             graph writes the new rows into a copy of the past
                             (ScatterND) to attend; the caller writes each
                             present into its own buffer at cache_position.
  sliding-cache-caller-rolls/ winml-cli's WinMLSlidingWindowCache form: as
                             above with position_id [1,1] (absolute, RoPE)
                             for cache_position and the mask right-aligned
                             (ones on the last min(p+1, 32) slots); inside,
                             cat(past[:, :, 1:], new); the caller rolls its
                             buffer the same way. Both dynamo-exported like
                             static-cache-with-mask, the per-node stack traces
                             removed. Fed presents as pasts, ORT refuses them.
"""
import shutil
import warnings
from collections import Counter
from pathlib import Path

import fixture_common as fc
from fixture_common import write_configs

fc.start(__name__)

import numpy as np  # noqa: E402
import onnx  # noqa: E402

HERE = Path(__file__).resolve().parent
OUT = HERE  # where the folders are written (--out DIR)
SEED = 0
MAX = 32  # static cache length
LAYERS, KV_HEADS, HEAD_DIM, VOCAB = 2, 2, 16, 500
PROMPT = [1, 307, 42, 118]  # bos + 3 tokens: 4 tokens, one chunk for the traced-at-4 file
NEW_TOKENS = 8
OPSET = 17  # TorchScript exporter
OPSET_DYNAMO = 18  # torch.export-based exporter (its minimum)


# The dynamo exporter records the Python frames each node came from, file and
# line, in the graph (pkg.torch.onnx.stack_trace metadata): for
# static-cache-with-mask/model.onnx, StaticCacheLM.forward's `out = self.model(`
# below, committed as line 137. Keep it there (add as many lines above it as you
# remove); gen_static_cache_with_mask checks it before exporting.
FORWARD_CALL_LINE = 137


def make_wrapper(model, with_mask=False):
    torch = _torch()
    from transformers import StaticCache

    class StaticCacheLM(torch.nn.Module):
        """forward(input_ids, [attention_mask,] cache_position, *past) ->
        (logits, *present). past / present: key, value per layer, each
        [batch, kv_heads, MAX, head_dim]; the new key/value are written at
        cache_position by StaticLayer.update (index_copy_)."""

        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, *args):
            if with_mask:
                attention_mask, cache_position, *past = args
            else:
                attention_mask = None
                cache_position, *past = args
            cache = StaticCache(config=self.model.config, max_cache_len=past[0].shape[2])
            cache.early_initialization(
                batch_size=past[0].shape[0], num_heads=past[0].shape[1], head_dim=past[0].shape[3],
                dtype=past[0].dtype, device=past[0].device,
            )
            for i, layer in enumerate(cache.layers):
                layer.keys, layer.values = past[2 * i], past[2 * i + 1]
            out = self.model(
                input_ids=input_ids, attention_mask=attention_mask, cache_position=cache_position,
                past_key_values=cache, use_cache=True,
            )
            result = [out.logits]
            for layer in cache.layers:
                result += [layer.keys, layer.values]
            return tuple(result)

    return StaticCacheLM(model).eval()


_torch = fc.one_thread_torch  # used by the functions above too (looked up when called)


def build_model():
    """The seeded tiny Llama (transformers' default attention, sdpa)."""
    torch = _torch()
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    cfg = LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS,
        num_attention_heads=4, num_key_value_heads=KV_HEADS, max_position_embeddings=128,
        rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
    )
    return LlamaForCausalLM(cfg).eval()


def make_new_rows_wrapper(model, sliding=False):
    """winml-cli's export form where the caller keeps the buffers: the graph
    returns only the new tokens' keys/values. forward(input_ids,
    attention_mask, cache_position | position_id, *past) -> (logits,
    *present), past [1, kv_heads, MAX, head_dim], present [1, kv_heads, n,
    head_dim]. Inside, each layer attends over a copy of its buffer updated
    as the caller will update its own: the new rows written at cache_position
    (index_copy, out of place) or, sliding, the n oldest rows dropped and the
    new ones appended (cat(old[:, :, n:], new)); the sliding form's
    cache_position (HF's query buffer index, for the causal mask) is
    [MAX-n, MAX) and position_id (absolute) drives RoPE."""
    torch = _torch()
    from transformers import StaticCache

    class NewRowsCache(StaticCache):
        def update(self, key_states, value_states, layer_idx, cache_kwargs=None):
            layer = self.layers[layer_idx]
            if sliding:
                n = key_states.shape[2]
                keys = torch.cat([layer.keys[:, :, n:], key_states], dim=2)
                values = torch.cat([layer.values[:, :, n:], value_states], dim=2)
            else:
                at = cache_kwargs["cache_position"]
                keys = layer.keys.index_copy(2, at, key_states)
                values = layer.values.index_copy(2, at, value_states)
            layer.keys, layer.values = keys, values
            self.new_rows[layer_idx] = (key_states, value_states)
            return keys, values

    class NewRowsLM(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, position, *past):
            cache = NewRowsCache(config=self.model.config, max_cache_len=past[0].shape[2])
            cache.early_initialization(
                batch_size=past[0].shape[0], num_heads=past[0].shape[1], head_dim=past[0].shape[3],
                dtype=past[0].dtype, device=past[0].device,
            )
            cache.new_rows = {}
            for i, layer in enumerate(cache.layers):
                layer.keys, layer.values = past[2 * i], past[2 * i + 1]
            if sliding:
                n, size = input_ids.shape[1], past[0].shape[2]
                cache_position = torch.arange(size - n, size, device=input_ids.device)
                position_ids = position
            else:
                cache_position, position_ids = position, None
            out = self.model(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                cache_position=cache_position, past_key_values=cache, use_cache=True,
            )
            result = [out.logits]
            for i in range(len(cache.layers)):
                result += list(cache.new_rows[i])
            return tuple(result)

    return NewRowsLM(model).eval()


def optimum_names():
    ins = [f"past_key_values.{i}.{kv}" for i in range(LAYERS) for kv in ("key", "value")]
    outs = [f"present.{i}.{kv}" for i in range(LAYERS) for kv in ("key", "value")]
    return ins, outs


def winml_names():
    ins = [f"past_{i}_{kv}" for i in range(LAYERS) for kv in ("key", "value")]
    outs = [f"present_{i}_{kv}" for i in range(LAYERS) for kv in ("key", "value")]
    return ins, outs


def export(wrapper, args, path: Path, input_names, output_names, dynamic_axes=None, dynamo=False):
    """TorchScript exporter (dynamo=False, opset 17, one file) or the
    torch.export-based exporter (dynamo=True, opset 18; torch 2.9 writes the
    larger weights to <name>.onnx.data by default, external_data=True)."""
    torch = _torch()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TracerWarning / legacy-exporter DeprecationWarning
        if dynamo:
            torch.onnx.export(
                wrapper, tuple(args), str(path), input_names=input_names, output_names=output_names,
                opset_version=OPSET_DYNAMO, dynamo=True, verbose=False,
            )
        else:
            torch.onnx.export(
                wrapper, tuple(args), str(path), input_names=input_names, output_names=output_names,
                dynamic_axes=dynamic_axes, opset_version=OPSET, do_constant_folding=True, dynamo=False,
            )
    onnx.checker.check_model(str(path))


def zero_past():
    torch = _torch()
    return [torch.zeros(1, KV_HEADS, MAX, HEAD_DIM) for _ in range(2 * LAYERS)]


# ---------------------------------------------------------------- generators

def gen_static_cache_llama():
    """Traced at one token: input_ids [1,1], cache_position [1], all static."""
    torch = _torch()
    model = build_model()
    out = OUT / "static-cache-llama"
    write_configs(model, out)
    past_names, present_names = optimum_names()
    with torch.no_grad():
        export(
            make_wrapper(model), [torch.tensor([[PROMPT[0]]]), torch.tensor([0]), *zero_past()],
            out / "model.onnx", ["input_ids", "cache_position", *past_names], ["logits", *present_names],
        )


def gen_static_cache_traced_at_4():
    """Traced with a 4-token chunk, sequence axis declared dynamic."""
    torch = _torch()
    model = build_model()
    out = OUT / "static-cache-traced-at-4"
    write_configs(model, out)
    past_names, present_names = optimum_names()
    dyn = {
        "input_ids": {1: "sequence_length"},
        "cache_position": {0: "sequence_length"},
        "logits": {1: "sequence_length"},
    }
    with torch.no_grad():
        export(
            make_wrapper(model), [torch.tensor([PROMPT[:4]]), torch.arange(4), *zero_past()],
            out / "model.onnx", ["input_ids", "cache_position", *past_names], ["logits", *present_names],
            dynamic_axes=dyn,
        )


def gen_static_cache_with_mask():
    """Exported at one token with attention_mask [1, MAX] (int64) over the
    buffer, with the torch.export-based exporter (dynamo=True), as winml-cli
    exports its Qwen3 static-cache decoder: the TorchScript exporter cannot
    trace transformers 4.57's padding mask (vmap + TransformGetItemToIndex;
    it stops with "RuntimeError: unordered_map::at")."""
    import inspect

    lines, start = inspect.getsourcelines(make_wrapper)
    at = [start + k for k, line in enumerate(lines) if line.strip() == "out = self.model("]
    assert at == [FORWARD_CALL_LINE], f"the traced call moved to line {at}, the committed graph says {FORWARD_CALL_LINE}"
    torch = _torch()
    model = build_model()
    out = OUT / "static-cache-with-mask"
    write_configs(model, out)
    past_names, present_names = winml_names()
    mask = torch.zeros(1, MAX, dtype=torch.int64)
    mask[0, 0] = 1
    with torch.no_grad():
        export(
            make_wrapper(model, with_mask=True),
            [torch.tensor([[PROMPT[0]]]), mask, torch.tensor([0]), *zero_past()],
            out / "model.onnx", ["input_ids", "attention_mask", "cache_position", *past_names],
            ["logits", *present_names], dynamo=True,
        )


# ---------------------------------------------------------------- measurements

def session(path):
    import onnxruntime as ort

    ort.set_default_logger_severity(4)  # the expected failure is printed once, by the caller
    return fc.session(path, severity=4)


def describe(path: Path):
    fc.signature(path)
    m = onnx.load(path)
    ops = Counter(n.op_type for n in m.graph.node)
    print("    ops:", ", ".join(f"{k} {ops[k]}" for k in ("ScatterElements", "ScatterND", "LessOrEqual", "Reshape") if ops[k]))
    return m


def torch_reference(tokens):
    """PyTorch references: greedy with transformers' own StaticCache
    (model.generate(cache_implementation="static"); generate sizes that cache
    itself, max_cache_len 11 here), and the uncached forward (use_cache=False)
    of the whole prefix. Logits are float32, compared in float64."""
    torch = _torch()
    model = build_model()
    with torch.no_grad():
        g = model.generate(
            torch.tensor([tokens]), max_new_tokens=NEW_TOKENS, do_sample=False, cache_implementation="static",
            output_logits=True, return_dict_in_generate=True, pad_token_id=0,
        )
        seq = g.sequences[0].tolist()
        gen_logits = [x[0].double().numpy() for x in g.logits]
        # uncached: one forward of the whole final sequence, logits at each position
        # (causal, so position p only sees tokens 0..p: equal to the prefix forward)
        full = model(torch.tensor([seq]), use_cache=False).logits[0].double().numpy()
        # and a fresh forward of each prefix, for the generated steps
        prefix = [model(torch.tensor([seq[: len(tokens) + k]]), use_cache=False).logits[0, -1].double().numpy()
                  for k in range(NEW_TOKENS)]
        # the keys/values of the whole sequence (DynamicCache) to compare with the buffers
        dyn = model(torch.tensor([seq[:-1]]), use_cache=True).past_key_values
        kv = [[dyn.layers[i].keys[0].numpy(), dyn.layers[i].values[0].numpy()] for i in range(LAYERS)]
    return seq[len(tokens):], gen_logits, full, prefix, kv


class Driver:
    """The static-cache caller: one token per call (prompt included), zeroed
    MAX buffers at the start, each present fed back as the next past,
    cache_position = [absolute position], and with a mask input: ones over
    slots 0..position, zeros after."""

    def __init__(self, path, past_names, present_names, mask=False):
        self.sess = session(path)
        self.past_names, self.present_names, self.mask = past_names, present_names, mask
        self.past = {n: np.zeros((1, KV_HEADS, MAX, HEAD_DIM), np.float32) for n in past_names}

    def feed(self, ids, pos):
        feed = {"input_ids": np.array([ids], np.int64), "cache_position": np.arange(pos, pos + len(ids), dtype=np.int64)}
        if self.mask:
            m = np.zeros((1, MAX), np.int64)
            m[0, : pos + len(ids)] = 1
            feed["attention_mask"] = m
        feed.update(self.past)
        return feed

    def step(self, ids, pos, feed=None):
        feed = feed or self.feed(ids, pos)
        outs = self.sess.run(None, feed)
        names = [o.name for o in self.sess.get_outputs()]
        res = dict(zip(names, outs))
        self.past = {p: res[q] for p, q in zip(self.past_names, self.present_names)}
        return res["logits"][0].astype(np.float64)


def fmt(x):
    return "0" if x == 0 else f"{x:.1e}"


def verify_token_by_token(folder: Path, names, mask=False):
    path = folder / "model.onnx"
    describe(path)
    ref_tokens, ref_gen_logits, full, prefix, kv = torch_reference(PROMPT)
    past_names, present_names = names
    d = Driver(path, past_names, present_names, mask=mask)
    seq = list(PROMPT)
    prompt_diffs = []
    for p, t in enumerate(PROMPT):
        logits = d.step([t], p)[-1]
        prompt_diffs.append(np.abs(logits - full[p]).max())
    print("  prompt, one token per call (cache_position 0..3) vs uncached forward, max|dlogits| per call:",
          ", ".join(fmt(x) for x in prompt_diffs))
    tokens, gen_vs_prefix, gen_vs_static = [], [], []
    for k in range(NEW_TOKENS):
        if k == 0:
            last = logits
        else:
            last = d.step([seq[-1]], len(seq) - 1)[-1]
        gen_vs_prefix.append(np.abs(last - prefix[k]).max())
        gen_vs_static.append(np.abs(last - ref_gen_logits[k]).max())
        tok = int(last.argmax())
        tokens.append(tok)
        seq.append(tok)
    print(f"  greedy tokens: ORT {tokens}")
    print(f"                 torch generate (StaticCache) {ref_tokens}  -> {'same' if tokens == ref_tokens else 'DIFFERENT'}")
    print("  generated step k=0..7, max|dlogits| vs uncached prefix forward:", ", ".join(fmt(x) for x in gen_vs_prefix))
    print("                          max|dlogits| vs torch StaticCache generate:", ", ".join(fmt(x) for x in gen_vs_static))
    # the buffers after the last call: slots 0..L-1 hold the keys/values of the
    # whole sequence, slots L..MAX-1 are still zero
    L = len(seq) - 1
    kd = max(np.abs(d.past[past_names[2 * i + j]][0, :, :L] - kv[i][j]).max() for i in range(LAYERS) for j in range(2))
    tail = max(np.abs(d.past[n][0, :, L:]).max() for n in past_names)
    print(f"  buffers after {L} calls: slots 0..{L - 1} vs torch's DynamicCache keys/values max|d| {fmt(kd)}; "
          f"slots {L}..{MAX - 1} max|x| {fmt(tail)}")
    # the unused tail is never attended: fill it with noise and rerun the next step
    rng = np.random.default_rng(SEED)
    feed = d.feed([seq[-1]], L)
    base = d.sess.run(None, feed)[0][0, -1].astype(np.float64)
    for n in past_names:
        feed[n] = feed[n].copy()
        feed[n][0, :, L + 1:] = rng.normal(0, 100, feed[n][0, :, L + 1:].shape)
    noisy = d.sess.run(None, feed)[0][0, -1].astype(np.float64)
    print(f"  step at position {L} with slots {L + 1}..{MAX - 1} of every past filled with N(0,100) noise: "
          f"max|dlogits| {fmt(np.abs(noisy - base).max())}")
    # an optimum-style caller (empty past of length 0) is refused by the static shape
    feed = d.feed([PROMPT[0]], 0)
    for n in past_names:
        feed[n] = np.zeros((1, KV_HEADS, 0, HEAD_DIM), np.float32)
    try:
        d.sess.run(None, feed)
        print("  optimum-style empty past [1,2,0,16]: ran")
    except Exception as e:  # noqa: BLE001
        print(f"  optimum-style empty past [1,2,0,16]: {type(e).__name__}: {str(e).strip()}")
    return d, seq


def verify_static_cache_llama(folder: Path):
    verify_token_by_token(folder, optimum_names())


def verify_static_cache_with_mask(folder: Path):
    names = winml_names()
    d, seq = verify_token_by_token(folder, names, mask=True)
    # the mask is redundant with cache_position's causal mask at batch 1: an
    # all-ones mask gives the same logits; zeros over earlier slots change them
    L = len(seq) - 1
    feed = d.feed([seq[-1]], L)
    base = d.sess.run(None, feed)[0][0, -1].astype(np.float64)
    ones = dict(feed, attention_mask=np.ones((1, MAX), np.int64))
    print(f"  step at position {L}: all-ones attention_mask vs ones-up-to-position: max|dlogits| "
          f"{fmt(np.abs(d.sess.run(None, ones)[0][0, -1] - base).max())}")
    hole = feed["attention_mask"].copy()
    hole[0, 1:3] = 0
    print(f"  step at position {L}: mask with slots 1,2 zeroed: max|dlogits| "
          f"{fmt(np.abs(d.sess.run(None, dict(feed, attention_mask=hole))[0][0, -1] - base).max())}")


def verify_static_cache_writes_at_zero(folder: Path):
    """Driven as static-cache-llama: call 0 matches, later calls depart from the uncached forward."""
    import numpy as np
    s = session(folder / "model.onnx")
    names = [i.name for i in s.get_inputs()]
    pasts = [n for n in names if n.startswith("past")]
    feed = {n: np.zeros((1, KV_HEADS, MAX, HEAD_DIM), np.float32) for n in pasts}
    _, _, full, _, _ = torch_reference(PROMPT)
    for p, tok in enumerate(PROMPT):
        out = s.run(None, {"input_ids": np.array([[tok]]), "cache_position": np.array([p]), **feed})
        got = out[0][0, -1].astype(np.float64)
        want = full[p]
        slots = sorted(set(np.nonzero(np.abs(out[1][0, 0]).sum(-1))[0].tolist()))
        print(f"  call {p}: |delta| vs uncached = {fmt(np.abs(got - want).max())}; written slots of present.0.key {slots}")
        feed = {n: o for n, o in zip(pasts, out[1:])}


def verify_static_cache_traced_at_4(folder: Path):
    path = folder / "model.onnx"
    m = describe(path)
    ref_tokens, _, full, _, _ = torch_reference(PROMPT)
    seq = PROMPT + ref_tokens
    names = optimum_names()
    d = Driver(path, *names)
    logits = d.step(PROMPT[:4], 0)
    print(f"  call 1: prompt chunk of 4 (cache_position [0,1,2,3]) vs uncached forward: max|dlogits| "
          f"{fmt(np.abs(logits - full[:4]).max())}; argmax of the last row {int(logits[-1].argmax())} "
          f"(torch's first greedy token {ref_tokens[0]})")
    saved = dict(d.past)
    logits = d.step(seq[4:8], 4)
    print(f"  (a second 4-token chunk, teacher-forced tokens {seq[4:8]} at cache_position [4..7]: max|dlogits| "
          f"{fmt(np.abs(logits - full[4:8]).max())})")
    d.past = saved
    try:
        d.step([seq[4]], 4)
        print("  call 2: one token at cache_position [4]: ran (unexpected)")
    except Exception as e:  # noqa: BLE001
        print(f"  call 2: one token (input_ids [1,1], cache_position [4]): {type(e).__name__}: {str(e).strip()}")
    for n in m.graph.node:
        if n.op_type == "Reshape" and "cache_position" in n.input:
            shape = [x for x in m.graph.node if x.output[0] == n.input[1]]
            val = onnx.numpy_helper.to_array(shape[0].attribute[0].t).tolist() if shape and shape[0].op_type == "Constant" else n.input[1]
            print(f"  node {n.name}: Reshape(cache_position, {val})")


def gen_static_cache_writes_at_zero():
    """static-cache-llama with every cache write frozen at slot 0."""
    import onnx
    from onnx import helper, numpy_helper
    import numpy as np
    src = OUT / "static-cache-llama"
    out = OUT / "static-cache-writes-at-zero"
    out.mkdir(parents=True, exist_ok=True)
    for f in ("config.json", "generation_config.json"):
        shutil.copy(src / f, out / f)
    m = onnx.load(src / "model.onnx")
    g = m.graph
    pasts = {i.name for i in g.input if i.name.startswith("past_key_values")}
    zero = numpy_helper.from_array(np.array(0, dtype=np.int64), "frozen_write_zero")
    g.initializer.append(zero)
    nodes = []
    frozen = 0
    for n in g.node:
        if n.op_type == "ScatterElements" and n.input[0] in pasts:
            idx = n.input[1]
            z = f"{idx}_frozen_at_zero"
            nodes.append(helper.make_node("Mul", [idx, "frozen_write_zero"], [z], name=f"/frozen_write_{frozen}"))
            n.input[1] = z
            frozen += 1
        nodes.append(n)
    assert frozen == 4, frozen
    del g.node[:]
    g.node.extend(nodes)
    onnx.checker.check_model(m)
    onnx.save(m, out / "model.onnx")


# ---------------------------------------------------------------- caller-kept buffers (new rows out)

STACK_TRACE_KEY = "pkg.torch.onnx.stack_trace"


def strip_stack_traces(path: Path):
    """Drop the dynamo exporter's per-node Python stack traces (file paths of
    this script and of the installed transformers, with line numbers), so the
    bytes do not depend on where Python lives or on this script's layout.
    External data is left as written (the proto keeps its references)."""
    m = onnx.load(str(path), load_external_data=False)
    graphs = [m.graph] + [f for f in m.functions]
    for g in graphs:
        for n in g.node:
            kept = [p for p in n.metadata_props if p.key != STACK_TRACE_KEY]
            del n.metadata_props[:]
            n.metadata_props.extend(kept)
    onnx.save(m, str(path))
    onnx.checker.check_model(str(path))


def gen_new_rows(name, sliding):
    """Exported at one token (step 0) with the dynamo exporter, as
    static-cache-with-mask: the masks below are the caller's at step 0."""
    torch = _torch()
    model = build_model()
    out = OUT / name
    write_configs(model, out)
    past_names, present_names = winml_names()
    mask = torch.zeros(1, MAX, dtype=torch.int64)
    if sliding:
        mask[0, -1] = 1
        position, position_name = torch.tensor([[0]]), "position_id"
    else:
        mask[0, 0] = 1
        position, position_name = torch.tensor([0]), "cache_position"
    with torch.no_grad():
        export(
            make_new_rows_wrapper(model, sliding=sliding),
            [torch.tensor([[PROMPT[0]]]), mask, position, *zero_past()],
            out / "model.onnx", ["input_ids", "attention_mask", position_name, *past_names],
            ["logits", *present_names], dynamo=True,
        )
    strip_stack_traces(out / "model.onnx")


def gen_static_cache_caller_writes():
    gen_new_rows("static-cache-caller-writes", sliding=False)


def gen_sliding_cache_caller_rolls():
    gen_new_rows("sliding-cache-caller-rolls", sliding=True)


class KeptDriver:
    """The caller of a new-rows export: it keeps MAX-slot buffers (zeros at
    the start), feeds them as the pasts and updates them with each call's
    presents (the new token's rows). static: cache_position [p], mask ones on
    slots 0..p, present written at slot p (`write_at` overrides the slot: a
    caller mistake). sliding: position_id [[p]], mask ones on the last
    min(p+1, MAX) slots, buf = concat(buf[:, :, 1:], present) (`roll=False`:
    the present overwrites the last slot instead, a caller mistake)."""

    def __init__(self, path, sliding, write_at=None, roll=True):
        self.sess = session(path)
        self.sliding, self.write_at, self.roll = sliding, write_at, roll
        self.past_names, self.present_names = winml_names()
        self.buf = {n: np.zeros((1, KV_HEADS, MAX, HEAD_DIM), np.float32) for n in self.past_names}

    def feed(self, tok, pos):
        m = np.zeros((1, MAX), np.int64)
        if self.sliding:
            m[0, MAX - min(pos + 1, MAX):] = 1
            feed = {"input_ids": np.array([[tok]], np.int64), "attention_mask": m,
                    "position_id": np.array([[pos]], np.int64)}
        else:
            m[0, : pos + 1] = 1
            feed = {"input_ids": np.array([[tok]], np.int64), "attention_mask": m,
                    "cache_position": np.array([pos], np.int64)}
        feed.update(self.buf)
        return feed

    def step(self, tok, pos):
        res = dict(zip([o.name for o in self.sess.get_outputs()], self.sess.run(None, self.feed(tok, pos))))
        for p, q in zip(self.past_names, self.present_names):
            new = res[q]
            if self.sliding and self.roll:
                self.buf[p] = np.concatenate([self.buf[p][:, :, 1:], new], axis=2)
            elif self.sliding:
                self.buf[p] = self.buf[p].copy()
                self.buf[p][:, :, -1:] = new
            else:
                self.buf[p] = self.buf[p].copy()
                slot = pos if self.write_at is None else self.write_at
                self.buf[p][:, :, slot:slot + 1] = new
        return res


def drive_greedy(d, calls):
    """Prompt one token per call, then greedy; `calls` calls in all. Returns
    (new tokens, last-row logits of every call)."""
    seq, logits = list(PROMPT), []
    for p in range(calls):
        row = d.step(seq[p], p)["logits"][0, -1].astype(np.float64)
        logits.append(row)
        if p >= len(PROMPT) - 1:
            seq.append(int(row.argmax()))
    return seq[len(PROMPT):], logits


def verify_new_rows(folder: Path, sliding):
    path = folder / "model.onnx"
    describe(path)
    m = onnx.load(str(path), load_external_data=False)
    ops = Counter(n.op_type for n in m.graph.node)
    print("    more ops:", ", ".join(f"{k} {ops[k]}" for k in ("Concat", "Slice", "Transpose", "GatherND", "And")
                                      if ops[k]),
          "| inputs read by nodes:", sorted({i for n in m.graph.node for i in n.input} & {i.name for i in m.graph.input}))
    ref_tokens, ref_gen_logits, full, prefix, kv = torch_reference(PROMPT)
    calls = len(PROMPT) + NEW_TOKENS - 1  # 11: the last token is not fed
    d = KeptDriver(path, sliding)
    tokens, logits = drive_greedy(d, calls)
    print(f"  greedy tokens: ORT {tokens}")
    print(f"                 torch generate (StaticCache) {ref_tokens}  -> {'same' if tokens == ref_tokens else 'DIFFERENT'}")
    seq = PROMPT + tokens
    diffs = [np.abs(logits[p] - full[p]).max() for p in range(calls)]
    print(f"  calls 0..{calls - 1} (positions 0..{calls - 1}) vs uncached forward of the prefix, max|dlogits|:",
          ", ".join(fmt(x) for x in diffs))
    print("  generated steps k=0..7 vs torch StaticCache generate, max|dlogits|:",
          ", ".join(fmt(np.abs(logits[len(PROMPT) - 1 + k] - ref_gen_logits[k]).max()) for k in range(NEW_TOKENS)))
    L = calls
    used = slice(MAX - L, MAX) if sliding else slice(0, L)
    empty = slice(0, MAX - L) if sliding else slice(L, MAX)
    kd = max(np.abs(d.buf[d.past_names[2 * i + j]][0, :, used] - kv[i][j]).max() for i in range(LAYERS) for j in range(2))
    tail = max(np.abs(d.buf[n][0, :, empty]).max() for n in d.past_names)
    print(f"  caller's buffers after {L} calls: slots {used.start}..{used.stop - 1} vs torch's DynamicCache "
          f"keys/values max|d| {fmt(kd)}; slots {empty.start}..{empty.stop - 1} max|x| {fmt(tail)}")
    # the mask: noise in the slots it zeroes changes nothing; an all-ones mask does
    feed = d.feed(seq[L], L)
    base = d.sess.run(None, feed)[0][0, -1].astype(np.float64)
    zeros = feed["attention_mask"][0] == 0
    rng = np.random.default_rng(SEED)
    noisy = dict(feed)
    for n in d.past_names:
        noisy[n] = feed[n].copy()
        noisy[n][0, :, zeros] = rng.normal(0, 100, noisy[n][0, :, zeros].shape)
    print(f"  call at position {L}: the {int(zeros.sum())} mask-zero slots of every past filled with N(0,100) noise: "
          f"max|dlogits| {fmt(np.abs(d.sess.run(None, noisy)[0][0, -1] - base).max())}; all-ones mask: max|dlogits| "
          f"{fmt(np.abs(d.sess.run(None, dict(feed, attention_mask=np.ones((1, MAX), np.int64)))[0][0, -1] - base).max())}")
    # the present is the new rows only: the key of position L is the rows written at this call
    out = d.sess.run(None, feed)
    print(f"  present_0_key {list(out[1].shape)} at position {L} vs torch's key of position {L}: max|d| "
          f"{fmt(np.abs(out[1][0, :, 0] - torch_key(seq[: L + 1])[:, L]).max())}")
    # a naive driver: each present fed back as the next past
    naive = session(path)
    past_names, present_names = winml_names()
    feed = KeptDriver(path, sliding).feed(PROMPT[0], 0)
    res = dict(zip([o.name for o in naive.get_outputs()], naive.run(None, feed)))
    feed = KeptDriver(path, sliding).feed(PROMPT[1], 1)
    feed.update({p: res[q] for p, q in zip(past_names, present_names)})
    try:
        naive.run(None, feed)
        print("  naive driver (present [1,2,1,16] fed back as the next past): call 1 ran (unexpected)")
    except Exception as e:  # noqa: BLE001
        print(f"  naive driver (present fed back as the next past), call 1: {type(e).__name__}: {str(e).strip()}")
    # the caller's mistakes recorded by tests/callers/forms.py
    wrong = KeptDriver(path, sliding, roll=False) if sliding else KeptDriver(path, sliding, write_at=0)
    wtokens, wlogits = drive_greedy(wrong, calls)
    what = "overwrites the last slot instead of rolling" if sliding else "writes every present at slot 0"
    print(f"  a caller that {what}: tokens {wtokens}; max|dlogits| vs uncached per call:",
          ", ".join(fmt(np.abs(wlogits[p] - full[p]).max()) if p < len(PROMPT) else
                    fmt(np.abs(wlogits[p] - prefix[p - len(PROMPT) + 1]).max()) for p in range(calls)))
    if sliding:
        # past MAX tokens the window drops the oldest: teacher-force 40 positions
        more = KeptDriver(path, sliding)
        rng = np.random.default_rng(SEED)
        ids = PROMPT + rng.integers(3, VOCAB, 40 - len(PROMPT)).tolist()
        rows = np.stack([more.step(t, p)["logits"][0, -1] for p, t in enumerate(ids)]).astype(np.float64)
        ref = uncached_logits(ids)
        print("  teacher-forced 40 tokens, max|dlogits| vs uncached at positions 28..39:",
              ", ".join(fmt(np.abs(rows[p] - ref[p]).max()) for p in range(28, 40)))


def torch_key(seq):
    """Layer 0's RoPE'd keys of every position of seq, [kv_heads, len, head_dim]."""
    torch = _torch()
    with torch.no_grad():
        return build_model()(torch.tensor([seq]), use_cache=True).past_key_values.layers[0].keys[0].numpy()


def uncached_logits(seq):
    torch = _torch()
    with torch.no_grad():
        return build_model()(torch.tensor([seq]), use_cache=False).logits[0].double().numpy()


def verify_static_cache_caller_writes(folder: Path):
    verify_new_rows(folder, sliding=False)


def verify_sliding_cache_caller_rolls(folder: Path):
    verify_new_rows(folder, sliding=True)


GENERATORS = {
    "static-cache-llama": gen_static_cache_llama,
    "static-cache-traced-at-4": gen_static_cache_traced_at_4,
    "static-cache-with-mask": gen_static_cache_with_mask,
    "static-cache-writes-at-zero": gen_static_cache_writes_at_zero,
    "static-cache-caller-writes": gen_static_cache_caller_writes,
    "sliding-cache-caller-rolls": gen_sliding_cache_caller_rolls,
}
VERIFIERS = {
    "static-cache-llama": verify_static_cache_llama,
    "static-cache-traced-at-4": verify_static_cache_traced_at_4,
    "static-cache-with-mask": verify_static_cache_with_mask,
    "static-cache-writes-at-zero": verify_static_cache_writes_at_zero,
    "static-cache-caller-writes": verify_static_cache_caller_writes,
    "sliding-cache-caller-rolls": verify_sliding_cache_caller_rolls,
}

if __name__ == "__main__":
    args = fc.parse_args(GENERATORS)
    OUT = args.out or OUT
    fc.run_all(args, OUT, GENERATORS, VERIFIERS)
