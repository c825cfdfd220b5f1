"""Generate the "generation the way applications run it" fixtures in models/
and measure them in onnxruntime.

Built from the committed fp32 fixtures (made by generate.py) by graph surgery
or by the converters transformers.js uses, except mistral-sliding-window, which
is a fresh optimum export. Versions: those of requirements-gen.txt (torch 2.9.1,
transformers 4.57.6, optimum 2.1.0, optimum-onnx 0.1.0, onnx 1.23.2,
onnxruntime 1.31.1) plus onnxconverter-common 1.16.0 (as generate_numeric.py)
and, for the 4-bit quantizer only, onnx-ir 1.1.0 in a folder of its own
(onnxruntime 1.31's MatMulNBitsQuantizer imports it; the system python lacks it):

    pip install --no-deps --target /tmp/onnx-ir-site onnx-ir==1.1.0   # or $ONNX_IR_SITE
    HF_HUB_OFFLINE=1 python models/generate_generation.py [--out DIR] [name ...]
    python models/generate_generation.py --verify-only [name ...]   # only the measurements

Generating ends with the measurements (see GENERATION-NOTES.md); two more
names, llama-tiny and gemma-tiny, only measure those committed rotary fixtures
(batch 2 with left padding, as for the gpt2 pair). Everything runs on one
thread (torch.set_num_threads(1), ORT intra_op_num_threads 1).

  gpt2-no-position-ids/   gpt2-tiny with its position_ids input removed by graph
                          surgery: positions are computed inside the graph as
                          past_sequence_length + arange(sequence_length), the same
                          for every row (what transformers does from
                          cache_position when no position_ids are passed). Right
                          at batch 1; a left-padded row is shifted by its padding.
  gpt2-with-position-ids/ its correct counterpart: gpt2-tiny's model.onnx, copied
                          (same weights, takes position_ids).
  tjs-variants/           transformers.js layout of llama-tiny: config files at the
                          root, onnx/model.onnx (llama-tiny's fp32 file, copied),
                          onnx/model_fp16.onnx (float16 weights, float32 I/O:
                          keep_io_types=True as transformers.js' quantize.py),
                          onnx/model_quantized.onnx (dynamic int8, transformers.js'
                          q8 recipe) and onnx/model_q4.onnx (MatMulNBits, 4 bits,
                          block 32, symmetric: transformers.js' q4 recipe).
                          The fp16 file's graph consumers of a graph output are
                          rewired to the float16 tensor, as transformers.js'
                          float16.py fork does (ORT refuses the file otherwise).
  tjs-variants-broken-q4/ the same layout and the same model.onnx, model_fp16.onnx
                          and model_quantized.onnx bytes; its model_q4.onnx is a
                          4-bit file with a scale-layout bug: block 16, and every
                          MatMulNBits' scales written block-major ([k_blocks, N])
                          where the kernel reads them row-major ([N, k_blocks]).
                          Constant weights, so it is self-consistent (cached ==
                          uncached) but far from fp32.
  gpt2-past-key-names/    gpt2-tiny with its cache inputs and outputs renamed to
                          past_key_<i> / past_value_<i> and present_key_<i> /
                          present_value_<i> (graph inputs, graph outputs and
                          every use). Nothing else changed.
  mistral-sliding-window/ a tiny Mistral whose config.json has sliding_window 4
                          while its graph attends to every earlier token (full
                          causal attention). optimum 2.1.0 + transformers 4.57.6
                          export the window faithfully (measured, see the
                          notes), so the graph is optimum's export of the same
                          weights with sliding_window None, and config.json /
                          generation_config.json are the model's own (window 4).
                          torch (eager, window 4) and the graph agree on
                          positions 0-3 and differ from position 4 on. (Without
                          the window a Mistral is a Llama: model.onnx comes out
                          byte-identical to llama-tiny/model.onnx.)

Every folder has config.json and generation_config.json (copied from the
fixture it was cut from, or written by transformers from the model's config).
The script re-executes itself with PYTHONHASHSEED=0 like generate.py.
"""
import json
import os
import shutil
import sys
import tempfile
import warnings
from collections import Counter
from pathlib import Path

import fixture_common as fc
from fixture_common import compare, copy_configs, quantize_q8, session

fc.start(__name__)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper  # noqa: E402

HERE = Path(__file__).resolve().parent
# onnxruntime 1.31's MatMulNBitsQuantizer imports onnx_ir, which the system
# python lacks: it lives in its own folder, appended to sys.path (so it can
# never shadow an installed package).
ONNX_IR_SITE = Path(os.environ.get("ONNX_IR_SITE", "/tmp/onnx-ir-site"))
ONNX_IR_PIN = "onnx-ir==1.1.0"
SRC = HERE  # the committed fp32 fixtures (generate.py) are read from here
OUT = HERE  # where the folders are written (--out DIR)
SEED = 0
TJS_FILES = ["model.onnx", "model_fp16.onnx", "model_quantized.onnx", "model_q4.onnx"]
_torch = fc.one_thread_torch


# ---------------------------------------------------------------- position_ids

def gen_gpt2_with_position_ids():
    """The correct counterpart: gpt2-tiny's optimum export (takes position_ids)."""
    src, out = SRC / "gpt2-tiny", OUT / "gpt2-with-position-ids"
    copy_configs(src, out)
    shutil.copy(src / "model.onnx", out / "model.onnx")


def gen_gpt2_no_position_ids():
    """gpt2-tiny without a position_ids input. In its place the graph computes
    past_len + arange(seq) (past_len = past_key_values.0.key's axis 2, seq =
    input_ids' axis 1), unsqueezed and expanded to input_ids' shape: every row
    gets the same positions. Batch 1 (and unpadded batches) are exact; a
    left-padded row gets positions shifted by its number of pad tokens, and
    GPT-2's learned absolute position embeddings make that visible."""
    m = onnx.load(SRC / "gpt2-tiny" / "model.onnx")
    g = m.graph
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, dtype=np.int64), name)
    g.initializer.extend([i64("nopos/one", 1), i64("nopos/two", 2), i64("nopos/axes", [0])])
    nodes = [
        h.make_node("Shape", ["input_ids"], ["nopos/ids_shape"], name="nopos/Shape"),
        h.make_node("Gather", ["nopos/ids_shape", "nopos/one"], ["nopos/seq"], axis=0, name="nopos/Gather"),
        h.make_node("Shape", ["past_key_values.0.key"], ["nopos/past_shape"], name="nopos/Shape_1"),
        h.make_node("Gather", ["nopos/past_shape", "nopos/two"], ["nopos/past_len"], axis=0, name="nopos/Gather_1"),
        h.make_node("Add", ["nopos/past_len", "nopos/seq"], ["nopos/end"], name="nopos/Add"),
        h.make_node("Range", ["nopos/past_len", "nopos/end", "nopos/one"], ["nopos/range"], name="nopos/Range"),
        h.make_node("Unsqueeze", ["nopos/range", "nopos/axes"], ["nopos/row"], name="nopos/Unsqueeze"),
        h.make_node("Expand", ["nopos/row", "nopos/ids_shape"], ["nopos/position_ids"], name="nopos/Expand"),
    ]
    for n in g.node:
        n.input[:] = ["nopos/position_ids" if x == "position_ids" else x for x in n.input]
    for k, n in enumerate(nodes):
        g.node.insert(k, n)
    keep = [i for i in g.input if i.name != "position_ids"]
    del g.input[:]
    g.input.extend(keep)
    onnx.checker.check_model(m)
    out = OUT / "gpt2-no-position-ids"
    copy_configs(SRC / "gpt2-tiny", out)
    onnx.save(m, out / "model.onnx")


# ---------------------------------------------------------------- transformers.js variants

def to_fp16_tjs(model: onnx.ModelProto) -> onnx.ModelProto:
    """transformers.js quantize_fp16: its float16.py fork with keep_io_types=True
    (float32 inputs and outputs, float16 inside). Its block list is
    onnxconverter-common's default plus RandomNormalLike and Cast, minus Range;
    onnxconverter-common 1.16.0 loops forever with "Cast" in op_block_list, so
    the Cast(to=FLOAT) nodes are blocked by name (as generate_numeric.py does).
    onnxslim is not run."""
    from onnxconverter_common import float16

    ops = [op for op in float16.DEFAULT_OP_BLOCK_LIST if op != "Range"] + ["RandomNormalLike"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "the float32 number ... will be truncated to ..."
        m = float16.convert_float_to_float16(
            model, keep_io_types=True, op_block_list=ops, node_block_list=sorted(fc.float_casts(model.graph)),
        )
    _rewire_output_consumers(m.graph)
    return m


def _rewire_output_consumers(g):
    """keep_io_types=True puts a Cast(to=FLOAT) between each float output's
    producer and the output. onnxconverter-common 1.16.0 leaves the graph's
    own consumers of that output (llama's repeat_kv Unsqueeze reads
    present.<i>.value) on the float32 name while annotating their outputs
    float16, which ORT refuses ("Type (tensor(float16)) of output arg
    (/model/layers.0/self_attn/Unsqueeze_21_output_0) ... does not match
    expected type (tensor(float))"). transformers.js' fork of float16.py
    rewires those consumers to the float16 tensor before the Cast; so does this."""
    outputs = {o.name for o in g.output}
    casts = {n.output[0]: n for n in g.node if n.op_type == "Cast" and n.output[0] in outputs}
    for n in g.node:
        if n.output and n.output[0] in casts and casts[n.output[0]] is n:
            continue
        n.input[:] = [casts[x].input[0] if x in casts else x for x in n.input]


def quantize_q4(model: onnx.ModelProto, block_size=32) -> onnx.ModelProto:
    """transformers.js q4: MatMul4BitsQuantizer(block_size 32, is_symmetric True,
    accuracy_level None). onnxruntime 1.31 has only MatMulNBitsQuantizer (bits=4
    is the same quantizer): every MatMul with a constant 2-D B becomes
    com.microsoft MatMulNBits."""
    try:
        import onnx_ir  # noqa: F401
    except ImportError:
        if not (ONNX_IR_SITE / "onnx_ir").is_dir():
            raise SystemExit(f"no onnx_ir: pip install --no-deps --target {ONNX_IR_SITE} {ONNX_IR_PIN}") from None
        sys.path.append(str(ONNX_IR_SITE))
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    q = MatMulNBitsQuantizer(model, bits=4, block_size=block_size, is_symmetric=True, accuracy_level=None)
    q.process()
    return q.model.model


def _tjs_folder(out: Path):
    src = SRC / "llama-tiny"
    copy_configs(src, out)
    d = out / "onnx"
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(src / "model.onnx", d / "model.onnx")
    onnx.save(to_fp16_tjs(onnx.load(src / "model.onnx")), d / "model_fp16.onnx")
    quantize_q8(src / "model.onnx", d / "model_quantized.onnx")
    return d


def gen_tjs_variants():
    """llama-tiny in the four forms transformers.js ships (fp32, fp16, q8, q4),
    each made the way transformers.js' scripts/quantize.py makes it."""
    d = _tjs_folder(OUT / "tjs-variants")
    onnx.save(quantize_q4(onnx.load(d / "model.onnx")), d / "model_q4.onnx")


def scramble_scales(model: onnx.ModelProto) -> list:
    """The bug: every MatMulNBits' scales, computed as [N, k_blocks], are
    written block-major (the transpose, flattened) into the same tensor. The
    kernel reads them row-major, so column n's block b gets the scale of
    another (column, block). Packed weights untouched. Returns what changed."""
    inits = {i.name: i for i in model.graph.initializer}
    changed = []
    for n in model.graph.node:
        if n.op_type != "MatMulNBits":
            continue
        attrs = {a.name: h.get_attribute_value(a) for a in n.attribute}
        N, K, bs = attrs["N"], attrs["K"], attrs["block_size"]
        kb = (K + bs - 1) // bs
        t = inits[n.input[2]]
        s = numpy_helper.to_array(t)
        assert s.size == N * kb, (n.name, s.shape, N, kb)
        bad = s.reshape(N, kb).T.reshape(s.shape).copy()
        t.CopyFrom(numpy_helper.from_array(bad, t.name))
        changed.append((n.name, N, K, kb))
    return changed


BROKEN_BLOCK = 16


def gen_tjs_variants_broken_q4():
    """tjs-variants with a model_q4.onnx whose scales are laid out wrongly
    (block 16 so every weight has at least 2 blocks per column; scales written
    [k_blocks, N] while MatMulNBits reads [N, k_blocks]). The other three
    files are the same as tjs-variants'."""
    d = _tjs_folder(OUT / "tjs-variants-broken-q4")
    m = quantize_q4(onnx.load(d / "model.onnx"), block_size=BROKEN_BLOCK)
    scramble_scales(m)
    onnx.save(m, d / "model_q4.onnx")


# ---------------------------------------------------------------- cache names

def rename_cache(name: str) -> str:
    """past_key_values.<i>.key -> past_key_<i>, present.<i>.value -> present_value_<i>."""
    for old, new in (("past_key_values.", "past_"), ("present.", "present_")):
        if name.startswith(old):
            layer, kv = name[len(old):].split(".")
            return f"{new}{kv}_{layer}"
    return name


def gen_gpt2_past_key_names():
    """gpt2-tiny with the cache named past_key_<i> / past_value_<i> (inputs)
    and present_key_<i> / present_value_<i> (outputs): graph inputs, outputs,
    value_info and every node input/output that used the old names."""
    m = onnx.load(SRC / "gpt2-tiny" / "model.onnx")
    g = m.graph
    for v in list(g.input) + list(g.output) + list(g.value_info):
        v.name = rename_cache(v.name)
    for n in g.node:
        n.input[:] = [rename_cache(x) for x in n.input]
        n.output[:] = [rename_cache(x) for x in n.output]
    onnx.checker.check_model(m)
    out = OUT / "gpt2-past-key-names"
    copy_configs(SRC / "gpt2-tiny", out)
    onnx.save(m, out / "model.onnx")


# ---------------------------------------------------------------- sliding window

WINDOW = 4


def mistral_window_model(window=WINDOW, attn="eager"):
    """mistral-tiny's shape with sliding_window 4, seed 0."""
    import transformers

    torch = _torch()
    torch.manual_seed(SEED)
    cfg = transformers.MistralConfig(
        vocab_size=1000, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, sliding_window=window,
    )
    cfg._attn_implementation = attn
    return transformers.MistralForCausalLM(cfg).eval()


def export_decoder(model, dst: Path):
    fc.export_from_model(model, fc.TEXT_GENERATION, [dst.name], dst.parent)


def gen_mistral_sliding_window():
    """config.json says sliding_window 4; the graph is full causal attention.
    The model is built with window 4 (its configs are saved from that config),
    then exported by optimum with config.sliding_window set to None, which is
    what an exporter that drops the window produces."""
    import transformers

    model = mistral_window_model(attn="sdpa")  # optimum exports with sdpa, as generate.py's mistral-tiny
    out = OUT / "mistral-sliding-window"
    out.mkdir(parents=True, exist_ok=True)
    model.config.architectures = [type(model).__name__]
    model.config.save_pretrained(out)
    transformers.GenerationConfig.from_model_config(model.config).save_pretrained(out)
    model.config.sliding_window = None  # the export ignores the window
    export_decoder(model, out / "model.onnx")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["sliding_window"] == WINDOW, cfg["sliding_window"]


GENERATORS = {
    "gpt2-with-position-ids": gen_gpt2_with_position_ids,
    "gpt2-no-position-ids": gen_gpt2_no_position_ids,
    "tjs-variants": gen_tjs_variants,
    "tjs-variants-broken-q4": gen_tjs_variants_broken_q4,
    "gpt2-past-key-names": gen_gpt2_past_key_names,
    "mistral-sliding-window": gen_mistral_sliding_window,
}


# ---------------------------------------------------------------- measurements

class Decoder:
    """Drives a decoder-only ONNX file with explicit masks and positions.
    names: past-input name -> present-output name (discovered from the graph)."""

    def __init__(self, path):
        self.path = Path(path)
        self.s = session(path)
        self.inputs = {i.name: i for i in self.s.get_inputs()}
        self.outputs = [o.name for o in self.s.get_outputs()]
        self.past_names = [n for n in self.inputs if n.startswith("past")]
        self.present_of = {}
        for n in self.past_names:
            if n.startswith("past_key_values."):
                self.present_of[n] = "present." + n[len("past_key_values."):]
            else:  # past_key_0 -> present_key_0
                self.present_of[n] = "present" + n[len("past"):]
            assert self.present_of[n] in self.outputs, (n, self.outputs)
        self.has_pos = "position_ids" in self.inputs

    def zero_past(self, batch):
        past = {}
        for n in self.past_names:
            shape = [d if isinstance(d, int) else 0 for d in self.inputs[n].shape]
            shape[0] = batch
            past[n] = np.zeros(shape, dtype=np.float16 if self.inputs[n].type == "tensor(float16)" else np.float32)
        return past

    def step(self, ids, mask, positions, past):
        """ids [b, s]; mask [b, past+s]; positions [b, s] (dropped if the graph
        has no position_ids input); past dict or None. Returns (logits, past)."""
        feeds = {"input_ids": ids.astype(np.int64), "attention_mask": mask.astype(np.int64)}
        if self.has_pos:
            feeds["position_ids"] = positions.astype(np.int64)
        feeds.update(past if past is not None else self.zero_past(ids.shape[0]))
        out = dict(zip(self.outputs, self.s.run(None, feeds)))
        return out["logits"], {n: out[self.present_of[n]] for n in self.past_names}

    def uncached(self, ids):
        """One batch-1 run over all of ids (mask of ones, positions 0..n-1)."""
        ids = ids[None] if ids.ndim == 1 else ids
        n = ids.shape[1]
        return self.step(ids, np.ones((1, n)), np.arange(n)[None], None)[0]


def fmt(c):
    return f"max|d| {c[0]:.3g}  rel {c[1]:.3g}  top-1 {'agrees' if c[2] else 'DIFFERS'}"


def nonfinite(a):
    return [w for w, f in (("NaN", np.isnan), ("Inf", np.isinf)) if f(a).any()]


def signature(path):
    ins, outs = fc.io_signature(session(path))
    print("  inputs: " + "; ".join(ins))
    print("  outputs: " + "; ".join(outs))


# --- batch 2, left padding, against batch 1

PAD_ROWS = [[3, 14, 15, 92], [65, 35]]  # the shorter row is left-padded
PAD_ID = 0
PAD_STEPS = 3


def positions_cumsum(mask):
    """transformers' rule: cumsum(mask) - 1, padded places clipped to 0."""
    return np.clip(np.cumsum(mask, axis=1) - 1, 0, None)


def positions_arange(mask):
    """What a graph without position_ids computes: past_len + arange, all rows alike."""
    return np.broadcast_to(np.arange(mask.shape[1]), mask.shape).copy()


def batch1_greedy(dec, row, steps=PAD_STEPS):
    """The row alone: prompt, then `steps` greedy cached steps. Returns the
    generated tokens and the last logits at each of the steps + 1 calls."""
    ids = np.array([row], dtype=np.int64)
    mask = np.ones_like(ids)
    logits, past = dec.step(ids, mask, positions_cumsum(mask), None)
    outs, toks = [logits[0, -1]], []
    for _ in range(steps):
        tok = int(np.asarray(outs[-1], np.float64).argmax())
        toks.append(tok)
        mask = np.concatenate([mask, [[1]]], axis=1)
        logits, past = dec.step(np.array([[tok]]), mask, positions_cumsum(mask)[:, -1:], past)
        outs.append(logits[0, -1])
    return toks, outs


def batch2_forced(dec, toks, pos_rule):
    """Both rows at once, the shorter left-padded; then each row's own batch-1
    tokens fed as the cached steps. Returns per call the [2, vocab] last logits."""
    width = max(len(r) for r in PAD_ROWS)
    ids = np.array([[PAD_ID] * (width - len(r)) + r for r in PAD_ROWS], dtype=np.int64)
    mask = np.array([[0] * (width - len(r)) + [1] * len(r) for r in PAD_ROWS], dtype=np.int64)
    logits, past = dec.step(ids, mask, pos_rule(mask), None)
    outs = [logits[:, -1]]
    for k in range(PAD_STEPS):
        mask = np.concatenate([mask, np.ones((2, 1), np.int64)], axis=1)
        step_ids = np.array([[t[k]] for t in toks], dtype=np.int64)
        logits, past = dec.step(step_ids, mask, pos_rule(mask)[:, -1:], past)
        outs.append(logits[:, -1])
    return outs, mask


def measure_padding(path, label, rules):
    dec = Decoder(path)
    ref = [batch1_greedy(dec, r) for r in PAD_ROWS]
    toks = [t for t, _ in ref]
    print(f"  {label}: batch-1 greedy tokens per row: {toks}")
    for rule_name, rule in rules:
        outs, mask = batch2_forced(dec, toks, rule)
        used = "position_ids " + rule_name if dec.has_pos else "no position_ids input (graph computes past_len + arange)"
        print(f"  {label}, batch 2, {used}; final mask {mask.tolist()}:")
        for k, o in enumerate(outs):
            cells = []
            for r in range(2):
                c = compare(o[r], ref[r][1][k])
                bad = nonfinite(o[r])
                cells.append(f"row {r} {fmt(c)}" + (f" NON-FINITE {bad}" if bad else ""))
            print(f"    {'prompt' if k == 0 else f'step {k}'}: " + " | ".join(cells))


def verify_padding(folder):
    signature(folder / "model.onnx")
    dec = Decoder(folder / "model.onnx")
    for row in PAD_ROWS:
        toks, outs = batch1_greedy(dec, row)
        seq = list(row)
        cs = []
        for k, t in enumerate(toks):
            seq.append(t)
            cs.append(compare(outs[k + 1], dec.uncached(np.array(seq))[0, -1]))
        print(f"  batch 1, prompt {row} + greedy {toks}: cached vs uncached per step: "
              + ", ".join(f"{c[0]:.2g}" for c in cs) + f"; top-1 agrees {sum(c[2] for c in cs)}/{len(cs)}")
    rules = [("cumsum(mask)-1 clipped at 0", positions_cumsum), ("past_len + arange (ignores padding)", positions_arange)]
    dec_has_pos = Decoder(folder / "model.onnx").has_pos
    measure_padding(folder / "model.onnx", folder.name, rules if dec_has_pos else rules[:1])


def verify_rotary_padding(folder):
    """The same measurement on a committed rotary fixture (models/llama-tiny,
    which takes position_ids; models/gemma-tiny, optimum's Gemma export,
    which has none). Nothing is written."""
    path = SRC / folder.name / "model.onnx"
    rules = [("cumsum(mask)-1 clipped at 0", positions_cumsum), ("past_len + arange (ignores padding)", positions_arange)]
    measure_padding(path, folder.name, rules if Decoder(path).has_pos else rules[:1])


# --- transformers.js variants

TEACHER = [3, 14, 15, 92, 65, 35, 89, 79]


def cached_logits(dec, tokens):
    """Token by token with the cache (batch 1): last logits after each token."""
    past, outs = None, []
    for k, t in enumerate(tokens):
        mask = np.ones((1, k + 1))
        logits, past = dec.step(np.array([[t]]), mask, np.array([[k]]), past)
        outs.append(logits[0, -1])
    return outs


def describe_q4(path):
    m = onnx.load(path)
    ops = Counter(n.op_type for n in m.graph.node)
    nb = [n for n in m.graph.node if n.op_type == "MatMulNBits"]
    a = {x.name: h.get_attribute_value(x) for x in nb[0].attribute} if nb else {}
    shapes = sorted({(h.get_attribute_value([x for x in n.attribute if x.name == "K"][0]),
                      h.get_attribute_value([x for x in n.attribute if x.name == "N"][0])) for n in nb})
    print(f"  {path.name}: {ops['MatMulNBits']} MatMulNBits (bits {a.get('bits')}, block_size {a.get('block_size')},"
          f" zero points {'yes' if nb and len(nb[0].input) > 3 and nb[0].input[3] else 'no'}; (K, N) {shapes}),"
          f" {ops['MatMul']} float MatMul left")


def verify_tjs(folder):
    d = folder / "onnx"
    for name in TJS_FILES:
        p = d / name
        m = onnx.load(p)
        io = {i.name: i.type.tensor_type.elem_type for i in list(m.graph.input) + list(m.graph.output)}
        print(f"  {name}: {p.stat().st_size} B, IR {m.ir_version}, opsets {[(o.domain or 'ai.onnx', o.version) for o in m.opset_import]},"
              f" I/O dtypes {sorted({onnx.TensorProto.DataType.Name(t) for t in io.values()})}")
    ops = Counter(n.op_type for n in onnx.load(d / "model_quantized.onnx").graph.node)
    print(f"  model_quantized.onnx: {ops['MatMulInteger']} MatMulInteger, {ops['DynamicQuantizeLinear']} DynamicQuantizeLinear,"
          f" {ops['MatMul']} float MatMul left")
    describe_q4(d / "model_q4.onnx")
    signature(d / "model.onnx")
    ref = cached_logits(Decoder(d / "model.onnx"), TEACHER)
    print(f"  teacher-forced tokens {TEACHER}, one token per call with the cache; fp32 top-1 per step:"
          f" {[int(r.argmax()) for r in ref]}")
    for name in TJS_FILES:
        dec = Decoder(d / name)
        outs = cached_logits(dec, TEACHER)
        if name != "model.onnx":
            print(f"  {name} vs model.onnx (fp32), per step:")
            for k, (a, r) in enumerate(zip(outs, ref), 1):
                print(f"    step {k}: {fmt(compare(a, r))}" + (f" NON-FINITE {nonfinite(a)}" if nonfinite(a) else ""))
            cs = [compare(a, r) for a, r in zip(outs, ref)]
            print(f"    summary: max|d| {max(c[0] for c in cs):.3g}, max rel {max(c[1] for c in cs):.3g},"
                  f" top-1 agrees {sum(c[2] for c in cs)}/{len(cs)}")
        par = [compare(outs[k - 1], dec.uncached(np.array(TEACHER[:k]))[0, -1]) for k in range(1, len(TEACHER) + 1)]
        print(f"  {name} cached vs uncached (same file), steps 1-{len(par)}: max|d| "
              + " ".join(f"{c[0]:.2g}" for c in par) + f"; top-1 agrees {sum(c[2] for c in par)}/{len(par)}")


# --- renamed cache

def verify_past_key_names(folder):
    signature(folder / "model.onnx")
    dec, ref = Decoder(folder / "model.onnx"), Decoder(SRC / "gpt2-tiny" / "model.onnx")
    print(f"  past -> present pairs: {dec.present_of}")
    prompt = [3, 14, 15, 92]
    ids = np.array([prompt])
    logits, past = dec.step(ids, np.ones_like(ids), np.arange(4)[None], None)
    rlogits, rpast = ref.step(ids, np.ones_like(ids), np.arange(4)[None], None)
    seq = list(prompt)
    print(f"  prompt: vs gpt2-tiny {fmt(compare(logits[0, -1], rlogits[0, -1]))}")
    for k in range(1, 4):
        tok = int(logits[0, -1].argmax())
        seq.append(tok)
        n = len(seq)
        args = (np.array([[tok]]), np.ones((1, n)), np.array([[n - 1]]))
        logits, past = dec.step(*args, past)
        rlogits, rpast = ref.step(*args, rpast)
        full = dec.uncached(np.array(seq))[0, -1]
        same = all(np.array_equal(past[a], rpast[b]) for a, b in zip(dec.past_names, ref.past_names))
        print(f"  step {k} (token {tok}, past {n - 1}): cached vs uncached {fmt(compare(logits[0, -1], full))};"
              f" vs gpt2-tiny's cached step: max|d| {compare(logits[0, -1], rlogits[0, -1])[0]:.3g},"
              f" presents {'bit-identical' if same else 'DIFFER'}")


# --- sliding window

SW_TOKENS = 12


def verify_sliding_window(folder):
    torch = _torch()
    cfg = json.loads((folder / "config.json").read_text())
    print(f"  config.json: sliding_window {cfg['sliding_window']}, model_type {cfg['model_type']}")
    signature(folder / "model.onnx")
    ids = np.random.default_rng(SEED).integers(3, 1000, size=SW_TOKENS)
    print(f"  tokens {ids.tolist()}")
    dec = Decoder(folder / "model.onnx")
    onnx_all = dec.uncached(ids)[0]
    onnx_cached = np.stack(cached_logits(dec, ids.tolist()))
    # A rolling cache: before each call keep only the last window - 1 past
    # positions (position_ids stay absolute), one token per call.
    W, past, rolled = cfg["sliding_window"], None, []
    for p_, t in enumerate(ids.tolist()):
        if past is not None:
            past = {k: v[:, :, -(W - 1):] for k, v in past.items()}
        plen = 0 if past is None else next(iter(past.values())).shape[2]
        logits, past = dec.step(np.array([[t]]), np.ones((1, plen + 1)), np.array([[p_]]), past)
        rolled.append(logits[0, -1])
    onnx_rolled = np.stack(rolled)
    with torch.no_grad():
        win = mistral_window_model(cfg["sliding_window"], "eager")(torch.tensor(ids[None])).logits[0].numpy()
        full = mistral_window_model(None, "eager")(torch.tensor(ids[None])).logits[0].numpy()
    rows = [("ONNX uncached vs torch eager, window 4", onnx_all, win),
            ("ONNX cached (1 token per call) vs torch eager, window 4", onnx_cached, win),
            ("ONNX cached, past trimmed to the last 3 positions before each call (rolling cache), vs torch eager, window 4",
             onnx_rolled, win),
            ("ONNX uncached vs torch eager, no window", onnx_all, full),
            ("torch window 4 vs torch no window", win, full)]
    for label, a, b in rows:
        cs = [compare(a[p], b[p]) for p in range(SW_TOKENS)]
        print(f"  {label}, per position 0-{SW_TOKENS - 1}:")
        print("    max|d| " + " ".join(f"{c[0]:.2g}" for c in cs))
        print("    rel    " + " ".join(f"{c[1]:.2g}" for c in cs))
        print("    top-1  " + " ".join("=" if c[2] else "X" for c in cs))
    # What optimum does with the window left in the config (not shipped).
    with tempfile.TemporaryDirectory() as tmp:
        export_decoder(mistral_window_model(cfg["sliding_window"], "sdpa"), Path(tmp) / "model.onnx")
        hdec = Decoder(Path(tmp) / "model.onnx")
        honest, honest_cached = hdec.uncached(ids)[0], np.stack(cached_logits(hdec, ids.tolist()))
        ops = Counter(n.op_type for n in onnx.load(Path(tmp) / "model.onnx").graph.node)
    full_ops = Counter(n.op_type for n in onnx.load(folder / "model.onnx").graph.node)
    extra = {k: ops[k] - full_ops[k] for k in sorted(set(ops) | set(full_ops)) if ops[k] != full_ops[k]}
    for label, a in (("uncached", honest), ("cached", honest_cached)):
        cs = [compare(a[p], win[p]) for p in range(SW_TOKENS)]
        print(f"  for comparison, optimum's export with sliding_window 4 left in the config (not shipped), {label},"
              f" vs torch window 4: max|d| over positions 0-{SW_TOKENS - 1}: {max(c[0] for c in cs):.3g}")
    print(f"  its graph has these nodes more than model.onnx: {extra}")


VERIFIERS = {
    "gpt2-with-position-ids": verify_padding,
    "gpt2-no-position-ids": verify_padding,
    "llama-tiny": verify_rotary_padding,  # measured only: models/llama-tiny, nothing written
    "gemma-tiny": verify_rotary_padding,  # measured only: models/gemma-tiny, nothing written
    "tjs-variants": verify_tjs,
    "tjs-variants-broken-q4": verify_tjs,
    "gpt2-past-key-names": verify_past_key_names,
    "mistral-sliding-window": verify_sliding_window,
}


if __name__ == "__main__":
    # llama-tiny and gemma-tiny are only measured; with no names, every folder
    # of VERIFIERS is (after generating those that have a generator).
    args = fc.parse_args(VERIFIERS, default=list(VERIFIERS))
    OUT = args.out or OUT
    fc.run_all(args, OUT, GENERATORS, VERIFIERS)
