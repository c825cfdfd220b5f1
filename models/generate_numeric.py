"""Generate the numeric-form fixtures in models/ (float16, int8, onnxruntime-genai)
and measure them in onnxruntime.

Built from the committed fp32 fixtures (made by generate.py) the way real
converters do it, except llama-genai, which the onnxruntime-genai builder makes
from a tiny random Llama. Versions: those of requirements-gen.txt, plus
onnxconverter-common 1.16.0 (system python) and, for the genai builder only, a
separate site folder (it needs a newer transformers than optimum 2.1 allows):

    pip install onnxconverter-common==1.16.0
    pip install --target /tmp/genai-site onnxruntime-genai==0.18.0 onnx-ir==1.1.0 transformers==5.23.0
    HF_HUB_OFFLINE=1 python models/generate_numeric.py [--out DIR] [--genai-site DIR] [name ...]
    python models/generate_numeric.py --verify-only [name ...]   # only the measurements

The genai site folder is put on PYTHONPATH for the builder's subprocess only
(default /tmp/genai-site, or $GENAI_SITE); the system site-packages are never
touched. Generating ends with the measurements (see NUMERIC-NOTES.md).

  marian-fp16/          marian-tiny's encoder_model.onnx and
                        decoder_model_merged.onnx in float16 with float16 I/O
                        (onnxconverter-common, keep_io_types=False; the If
                        branches are converted too). Cast-to-float nodes are
                        blocked, as transformers.js' float16.py blocks Cast:
                        without that ORT refuses the files (marian-fp16-cast-bug).
                        Loads and runs; cached vs uncached differ by fp16 noise.
  marian-fp16-cast-bug/ the same conversion with onnxconverter-common's default
                        block list: the Cast(to=FLOAT) nodes inside the merged
                        decoder's If branches keep to=FLOAT while their outputs are
                        re-annotated float16 for their float16 consumers. ORT
                        refuses the decoder at session creation. The encoder is the
                        good one (same bytes as marian-fp16's).
  gpt2-int8/            transformers.js layout: onnx/model.onnx (gpt2-tiny's fp32
                        file, copied) and onnx/model_quantized.onnx, dynamic int8
                        as transformers.js' quantize.py makes q8 for gpt2 (QInt8
                        weights, per_channel and reduce_range off, EnableSubgraph,
                        MatMulConstBOnly). Cached vs uncached differ by
                        quantization noise only.
  gpt2-int8-cache-bug/  the same quantization of gpt2-position-bug (positions
                        restart at 0 on every call), in the same layout: a real
                        cache bug whose gap is far above the int8 noise.
  llama-genai/          onnxruntime-genai builder export (-p fp32 -e cpu) of a
                        tiny random Llama: model.onnx + model.onnx.data (external
                        data), genai_config.json, GroupQueryAttention, no
                        position_ids, past head size as a symbolic dim.
  llama-genai-config-mismatch/  the same files with genai_config.json claiming
                        num_key_value_heads 4 (the graph has 2).
  gpt2-fp16-overflow/   gpt2-tiny in float16 (float16 I/O) after scaling the
                        h.0 attention c_attn weight by 1e6 (the converter clamps
                        it to +-1e4): /transformer/h.0/attn/c_attn/Gemm overflows
                        65504 for every token at every position, so present.0.*
                        hold +-Inf and logits and present.1.* are NaN under a
                        default ORT session (and with optimizations off).
  gpt2-fp16-island/ gpt2-tiny in float16 (float16 I/O) after scaling the
                        h.1 MLP weights (c_fc x 50, c_proj x 2e5; none clamped):
                        /transformer/h.1/mlp/c_proj/Gemm writes ~1e5, rounded to
                        +-Inf where /transformer/h.1/Add_1 meets ln_f's float16
                        LayerNormalization, so the logits are NaN while every
                        present.* stays finite. Converting the same fp32 graph with
                        node_block_list = the Casts + ["/transformer/ln_f/
                        LayerNormalization"] (or the chain c_proj/Gemm,
                        c_proj/Reshape_1, h.1/Add_1, ln_f) repairs it; the verifier
                        writes those to /tmp/gpt2-fp16-island-blocked[-chain]
                        ($ISLAND_BLOCKED), never into models/.
  mistral-genai/        the same builder export (plus --extra_options
                        windowed_kv_cache=false) of a tiny random Mistral with
                        sliding_window 8 and layer_types marking both layers
                        sliding (without layer_types the builder writes no
                        window): GroupQueryAttention local_window_size 8,
                        full-length past, llama-genai's signature.
  mistral-genai-no-window/  the same files with every GroupQueryAttention's
                        local_window_size set to -1 (onnx package; model.onnx.data
                        copied as-is): the graph attends to everything while
                        config.json states window 8.
"""
import json
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

import fixture_common as fc
from fixture_common import compare, copy_configs, quantize_q8

fc.start(__name__)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402

HERE = Path(__file__).resolve().parent
SRC = HERE  # the committed fp32 fixtures (generate.py) read from here
OUT = HERE  # where the folders are written (--out DIR)
SEED = 0
GENAI_SITE = Path(os.environ.get("GENAI_SITE", "/tmp/genai-site"))
GENAI_PINS = "onnxruntime-genai==0.18.0 onnx-ir==1.1.0 transformers==5.23.0"


# ---------------------------------------------------------------- float16

def to_fp16(model: onnx.ModelProto, block_casts=True, keep_float32=()) -> onnx.ModelProto:
    """onnxconverter-common's convert_float_to_float16 with float16 I/O.

    block_casts=True is what transformers.js' float16.py does (its op block list
    has "Cast", and "Range" is left out): a Cast to float keeps its float output
    and a Cast back to float16 is put after it. onnxconverter-common cannot take
    "Cast" in op_block_list (it loops forever on the casts it inserts), so the
    Cast(to=FLOAT) nodes go in node_block_list by name.
    block_casts=False is onnxconverter-common's defaults: the broken result.
    keep_float32: more node names for node_block_list (a float32 island), after
    the Casts; empty for every fixture except the repaired copies that
    verify_island writes outside models/.
    """
    from onnxconverter_common import float16

    kwargs = {}
    if block_casts:
        kwargs["op_block_list"] = [op for op in float16.DEFAULT_OP_BLOCK_LIST if op != "Range"] + ["RandomNormalLike"]
        kwargs["node_block_list"] = sorted(fc.float_casts(model.graph)) + list(keep_float32)
    elif keep_float32:
        kwargs["node_block_list"] = list(keep_float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "the float32 number ... will be truncated to ..."
        return float16.convert_float_to_float16(model, keep_io_types=False, **kwargs)


def gen_marian_fp16():
    """marian-tiny's encoder and merged decoder in float16, float16 I/O,
    converted so that ONNX Runtime loads and runs them."""
    src, out = SRC / "marian-tiny", OUT / "marian-fp16"
    copy_configs(src, out)
    for name in ("encoder_model.onnx", "decoder_model_merged.onnx"):
        onnx.save(to_fp16(onnx.load(src / name)), out / name)


def gen_marian_fp16_cast_bug():
    """A float16 conversion ORT refuses: onnxconverter-common's default block
    list leaves Cast(to=FLOAT) nodes inside the If branches of the merged
    decoder while re-annotating their outputs float16 (their consumers are
    float16 now). The encoder is the good conversion (same bytes as marian-fp16)."""
    src, out = SRC / "marian-tiny", OUT / "marian-fp16-cast-bug"
    copy_configs(src, out)
    onnx.save(to_fp16(onnx.load(src / "encoder_model.onnx")), out / "encoder_model.onnx")
    onnx.save(to_fp16(onnx.load(src / "decoder_model_merged.onnx"), block_casts=False), out / "decoder_model_merged.onnx")


OVERFLOW_WEIGHT, OVERFLOW_SCALE = "transformer.h.0.attn.c_attn.weight", 1e6


def gen_gpt2_fp16_overflow():
    """gpt2-tiny in float16 (float16 I/O) with one Gemm weight scaled so its
    output overflows float16 in every ORT session: the h.0 attention c_attn
    weight (q, k and v projections) times 1e6; the converter clamps values
    beyond 1e4 to +-1e4 (62% of the entries). For every token id at every
    position some k or v output is beyond 65504 (the verifier counts 128000 of
    128000 pairs in ORT), so present.0.key/value hold +-Inf; an Inf in v turns
    the attention product into NaN (0 * Inf, Inf - Inf), which reaches the
    logits and present.1.*.

    Why c_attn: ORT's CPU provider (1.31.1, x86-64) runs this graph's
    arithmetic (Gemm, MatMul, Add, Mul, Pow, Tanh, the softmax) in float32
    behind Casts it inserts at every optimization level, ORT_DISABLE_ALL
    included; only LayerNormalization and data movement (Reshape, Split,
    Concat, Transpose) run in float16. A value is rounded to float16 only where
    it meets one of those or a graph output. The MLP (c_fc, GELU, c_proj, the
    residual Add) is one float32 stretch: an overflow inside it (the earlier
    c_fc x 3e5) never reached float16, so a plain session gave finite outputs.
    c_attn's output goes through Reshape/Split into the present outputs, so it
    is rounded to float16 right after the Gemm."""
    src, out = SRC / "gpt2-tiny", OUT / "gpt2-fp16-overflow"
    copy_configs(src, out)
    m = onnx.load(src / "model.onnx")
    for init in m.graph.initializer:
        if init.name == OVERFLOW_WEIGHT:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(OVERFLOW_SCALE), init.name))
            break
    else:
        raise KeyError(OVERFLOW_WEIGHT)
    onnx.save(to_fp16(m), out / "model.onnx")


# The h.1 MLP (the last layer's) scaled so that its output, and with it the
# residual stream into ln_f, is beyond 65504 at every position; ln_f brings it
# back to unit scale. c_fc x 50 keeps |c_fc| (and gelu_new's x**3) inside float16
# so that c_proj is the first node that overflows; c_proj x 2e5 keeps every
# weight below the converter's 1e4 clamp (largest 7852).
OVERFLOW_Q_SCALES = {"transformer.h.1.mlp.c_fc.weight": 50.0, "transformer.h.1.mlp.c_proj.weight": 2e5}
# The float32 island that repairs it: the chain from the overflowing Gemm to the
# LayerNormalization that brings the values back (what `onnx-contract check
# --remedy` grows to), and the one node that is enough under ORT 1.31.1's CPU
# provider (see verify_island).
ISLAND_CHAIN = [
    "/transformer/h.1/mlp/c_proj/Gemm",
    "/transformer/h.1/mlp/c_proj/Reshape_1",
    "/transformer/h.1/Add_1",
    "/transformer/ln_f/LayerNormalization",
]
OVERFLOW_Q_MINIMAL = ["/transformer/ln_f/LayerNormalization"]
# Where verify_island writes the repaired conversions (never into models/).
ISLAND_BLOCKED = Path(os.environ.get("ISLAND_BLOCKED", "/tmp/gpt2-fp16-island-blocked"))


def island_fp32() -> onnx.ModelProto:
    """gpt2-tiny's fp32 graph with the h.1 MLP weights scaled (OVERFLOW_Q_SCALES)."""
    m = onnx.load(SRC / "gpt2-tiny" / "model.onnx")
    todo = dict(OVERFLOW_Q_SCALES)
    for init in m.graph.initializer:
        if init.name in todo:
            w = numpy_helper.to_array(init) * np.float32(todo.pop(init.name))
            assert float(np.abs(w).max()) < 1e4, (init.name, float(np.abs(w).max()))  # below the converter's clamp
            init.CopyFrom(numpy_helper.from_array(w, init.name))
    if todo:
        raise KeyError(sorted(todo))
    return m


def gen_gpt2_fp16_island():
    """gpt2-tiny in float16 (float16 I/O, the same conversion as marian-fp16 and
    gpt2-fp16-overflow) whose overflow a float32 island repairs: the last
    layer's MLP weights scaled (c_fc x 50, c_proj x 2e5, no weight clamped) so
    /transformer/h.1/mlp/c_proj/Gemm writes ~1e5 at every position. ORT's CPU
    provider keeps the MLP and the residual /transformer/h.1/Add_1 in float32 and
    rounds to float16 where that sum meets ln_f's float16 LayerNormalization:
    +-Inf there, NaN out of ln_f, NaN logits. Every present.* is finite (the
    overflow is after the last attention), and keeping that chain (or, under
    ORT 1.31.1 CPU, ln_f alone) in float32 gives finite logits that pass.

    The folder name is the brief's: the plan was layer 0's q projection. That
    overflow is real (+-Inf out of the Split, NaN out of the Softmax), but the
    graph's own IsNaN -> Where_1 after each Softmax zeroes the NaN weights, so
    the logits stay finite and the check passes (verify_island shows it)."""
    src, out = SRC / "gpt2-tiny", OUT / "gpt2-fp16-island"
    copy_configs(src, out)
    onnx.save(to_fp16(island_fp32()), out / "model.onnx")


# ---------------------------------------------------------------- int8

def _q8_folder(src: Path, out: Path):
    copy_configs(src, out)
    (out / "onnx").mkdir(parents=True, exist_ok=True)
    shutil.copy(src / "model.onnx", out / "onnx" / "model.onnx")
    quantize_q8(src / "model.onnx", out / "onnx" / "model_quantized.onnx")


def gen_gpt2_int8():
    """gpt2-tiny quantized to int8 beside its fp32 file, transformers.js layout:
    cached and uncached logits differ only by dynamic-quantization noise."""
    _q8_folder(SRC / "gpt2-tiny", OUT / "gpt2-int8")


def gen_gpt2_int8_cache_bug():
    """gpt2-position-bug (positions restart at 0 each call) quantized the same
    way, same layout: a real cache bug on top of int8 noise."""
    _q8_folder(SRC / "gpt2-position-bug", OUT / "gpt2-int8-cache-bug")


# ---------------------------------------------------------------- onnxruntime-genai

LLAMA = dict(
    vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=128, bos_token_id=1, eos_token_id=2,
)
# hidden 64 / 4 heads = head size 16: ORT's CPU GroupQueryAttention refuses head
# size 8 at run time ("head_size shall be a multiple of 16").


def llama_model():
    import torch
    import transformers

    torch.manual_seed(SEED)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA)).eval()


def genai_export(model, out: Path, extra_options=()):
    """onnxruntime-genai builder export (-p fp32 -e cpu) of `model` into `out`,
    plus the HF config.json and generation_config.json the builder does not write.
    The builder runs on this python with the genai site folder on PYTHONPATH."""
    if not (GENAI_SITE / "onnxruntime_genai").is_dir():
        raise SystemExit(f"no onnxruntime_genai in {GENAI_SITE}: pip install --target {GENAI_SITE} {GENAI_PINS}")
    env = dict(os.environ, PYTHONPATH=str(GENAI_SITE), HF_HUB_OFFLINE="1", PYTHONHASHSEED="0")
    fc.genai_builder(model, out, python=sys.executable, env=env, extra_options=extra_options, quiet=False)


def gen_llama_genai():
    """onnxruntime-genai builder export (fp32, cpu) of a tiny random Llama:
    GroupQueryAttention, external data, genai_config.json."""
    genai_export(llama_model(), OUT / "llama-genai")


def gen_llama_genai_config_mismatch():
    """llama-genai's files with a genai_config.json that disagrees with the
    graph: decoder.num_key_value_heads 4, the graph's past has 2 KV heads."""
    src, out = OUT / "llama-genai", OUT / "llama-genai-config-mismatch"
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(src, out)
    path = out / "genai_config.json"
    cfg = json.loads(path.read_text())
    assert cfg["model"]["decoder"]["num_key_value_heads"] == 2
    cfg["model"]["decoder"]["num_key_value_heads"] = 4  # the lie
    path.write_text(json.dumps(cfg, indent=4))  # the builder writes no final newline


MISTRAL = dict(LLAMA, head_dim=16, sliding_window=8)
# MistralConfig has no layer_types, and the builder (0.18.0) windows only the
# layers that layer_types marks "sliding_attention" (Model.is_local): from a
# plain MistralConfig it writes local_window_size -1 on every layer (and a
# genai_config sliding_window with "layers": []). So every layer is marked.
# windowed_kv_cache=false: without it the builder's CPU default is a window-sized
# cache (GQA sliding_window_cache=1, past axis "past_sliding_length"); with it the
# past/present are full length as in llama-genai and only local_window_size differs.
MISTRAL_LAYER_TYPES = ["sliding_attention"] * MISTRAL["num_hidden_layers"]


def mistral_model(sliding_window=MISTRAL["sliding_window"]):
    """The tiny random Mistral; sliding_window only changes the torch mask (the
    weights depend on the seed alone), so the verifier can move it."""
    import torch
    import transformers

    torch.manual_seed(SEED)
    config = transformers.MistralConfig(**dict(MISTRAL, sliding_window=sliding_window))
    config.layer_types = MISTRAL_LAYER_TYPES  # set after: as a kwarg MistralConfig warns
    return transformers.MistralForCausalLM(config).eval()


def gen_mistral_genai():
    """onnxruntime-genai builder export (fp32, cpu) of a tiny random Mistral
    with sliding_window 8 on every layer: GroupQueryAttention local_window_size 8."""
    out = OUT / "mistral-genai"
    genai_export(mistral_model(), out, ["windowed_kv_cache=false"])
    m = onnx.load(out / "model.onnx", load_external_data=False)
    windows = [_gqa_window(n) for n in m.graph.node if n.op_type == "GroupQueryAttention"]
    assert windows == [MISTRAL["sliding_window"]] * MISTRAL["num_hidden_layers"], windows


def _gqa_window(node):
    return next(onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == "local_window_size")


def gen_mistral_genai_no_window():
    """mistral-genai's files with every GroupQueryAttention's local_window_size
    set to -1: the graph attends to everything while config.json states window 8.
    model.onnx.data is copied as-is (the initializers are not loaded, so their
    external-data references stay "model.onnx.data" at the same offsets)."""
    src, out = OUT / "mistral-genai", OUT / "mistral-genai-no-window"
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(src, out)
    m = onnx.load(out / "model.onnx", load_external_data=False)
    gqa = [n for n in m.graph.node if n.op_type == "GroupQueryAttention"]
    assert gqa and all(_gqa_window(n) == MISTRAL["sliding_window"] for n in gqa)
    for n in gqa:
        a = next(a for a in n.attribute if a.name == "local_window_size")
        a.i = -1  # the lie
    onnx.save(m, out / "model.onnx")


GENERATORS = {
    "marian-fp16": gen_marian_fp16,
    "marian-fp16-cast-bug": gen_marian_fp16_cast_bug,
    "gpt2-int8": gen_gpt2_int8,
    "gpt2-int8-cache-bug": gen_gpt2_int8_cache_bug,
    "llama-genai": gen_llama_genai,
    "llama-genai-config-mismatch": gen_llama_genai_config_mismatch,
    "gpt2-fp16-overflow": gen_gpt2_fp16_overflow,
    "gpt2-fp16-island": gen_gpt2_fp16_island,
    "mistral-genai": gen_mistral_genai,
    "mistral-genai-no-window": gen_mistral_genai_no_window,
}


# ---------------------------------------------------------------- measurements

session = fc.session


NP = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


def zero_past(inp, head_size=None):
    shape = []
    for k, d in enumerate(inp.shape):
        if isinstance(d, int):
            shape.append(d)
        elif k == 3 and head_size is not None:
            shape.append(head_size)  # genai: the head axis is the symbolic "kv_cache_dim"
        else:
            shape.append(1 if k == 0 else 0)
    return np.zeros(shape, dtype=NP[inp.type])


def run(sess, ids, past=None, *, enc_mask=None, enc_hidden=None, head_size=None, past_shape=None):
    """past: dict past_key_values.* -> array; None for the first call."""
    past_len = 0
    if past:
        past_len = next(v.shape[2] for k, v in past.items() if ".encoder." not in k)
    feeds = {}
    for inp in sess.get_inputs():
        n = inp.name
        if n == "input_ids":
            feeds[n] = ids
        elif n == "attention_mask":
            feeds[n] = np.ones((1, past_len + ids.shape[1]), dtype=np.int64)
        elif n == "position_ids":
            feeds[n] = np.arange(past_len, past_len + ids.shape[1], dtype=np.int64)[None]
        elif n == "encoder_attention_mask":
            feeds[n] = enc_mask
        elif n == "encoder_hidden_states":
            feeds[n] = enc_hidden
        elif n == "use_cache_branch":
            feeds[n] = np.array([past is not None])
        elif n.startswith("past_key_values."):
            if past is not None:
                feeds[n] = past[n]
            elif past_shape is not None:
                feeds[n] = np.zeros(past_shape, dtype=NP[inp.type])
            else:
                feeds[n] = zero_past(inp, head_size)
        else:
            raise ValueError(f"no feed for {n}")
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))


next_past = fc.next_past


def fmt(label, c):
    return f"{label}: max|d| {c[0]:.3g}  rel {c[1]:.3g}  argmax {'agrees' if c[2] else 'DIFFERS'}"


def cached_steps(sess, first_ids, steps=3, **kw):
    """first_ids, then `steps` greedy cached steps; each cached step against an
    uncached run over all tokens so far. Returns (token rows, per-step comparisons)."""
    out = run(sess, first_ids, None, **kw)
    seq, past, rows = first_ids, next_past(None, out), []
    for _ in range(steps):
        tok = np.array([[int(out["logits"][0, -1].astype(np.float64).argmax())]], dtype=np.int64)
        seq = np.concatenate([seq, tok], axis=1)
        out = run(sess, tok, past, **kw)
        past = next_past(past, out)
        full = run(sess, seq, None, **kw)
        rows.append(compare(out["logits"][0, -1], full["logits"][0, -1]))
    return seq, rows


def nonfinite(a):
    return [w for w, f in (("NaN", np.isnan), ("+Inf", np.isposinf), ("-Inf", np.isneginf)) if f(a).any()]


signature = fc.io_signature  # (inputs, outputs) as 'name type shape' lines


def verify_marian_fp16(folder):
    enc16 = session(folder / "encoder_model.onnx")
    dec16 = session(folder / "decoder_model_merged.onnx")
    enc32 = session(SRC / "marian-tiny" / "encoder_model.onnx")
    dec32 = session(SRC / "marian-tiny" / "decoder_model_merged.onnx")
    ins, outs = signature(dec16)
    print("  decoder inputs:", ins[:4], f"... ({len(ins)})")
    print("  decoder outputs:", outs[:2], f"... ({len(outs)})")
    src = np.array([[5, 6, 7, 8, 9]], dtype=np.int64)
    mask = np.ones_like(src)
    h16 = enc16.run(None, {"input_ids": src, "attention_mask": mask})[0]
    h32 = enc32.run(None, {"input_ids": src, "attention_mask": mask})[0]
    print(f"  encoder: last_hidden_state {h16.dtype} {list(h16.shape)}; vs fp32 encoder: " + fmt("", compare(h16.ravel(), h32.ravel()))[2:])
    start = json.loads((folder / "config.json").read_text())["decoder_start_token_id"]
    kw16, kw32 = dict(enc_mask=mask, enc_hidden=h16), dict(enc_mask=mask, enc_hidden=h32)
    s0 = run(dec16, np.array([[start]]), None, **kw16)
    print(f"  step 0 (use_cache_branch False, past 0, float16 zeros): logits {s0['logits'].dtype} {list(s0['logits'].shape)}")
    seq, rows = cached_steps(dec16, np.array([[start]], dtype=np.int64), **kw16)
    print(f"  tokens {seq[0].tolist()}")
    for k, c in enumerate(rows, 1):
        print("  " + fmt(f"step {k} cached vs uncached", c))
    # fp16 against fp32 (marian-tiny), uncached, same tokens
    for k in range(seq.shape[1]):
        a = run(dec16, seq[:, : k + 1], None, **kw16)["logits"][0, -1]
        b = run(dec32, seq[:, : k + 1], None, **kw32)["logits"][0, -1]
        print("  " + fmt(f"{k + 1} tokens: fp16 vs fp32 (marian-tiny)", compare(a, b)))


def verify_cast_bug(folder):
    session(folder / "encoder_model.onnx")
    print("  encoder_model.onnx: loads")
    try:
        session(folder / "decoder_model_merged.onnx")
        print("  decoder_model_merged.onnx: LOADS (unexpected)")
    except Exception as e:  # noqa: BLE001
        print(f"  decoder_model_merged.onnx refused: {e}")
    m = onnx.load(folder / "decoder_model_merged.onnx")
    for branch in m.graph.node[0].attribute:
        g = branch.g
        types = {v.name: v.type.tensor_type.elem_type for v in list(g.value_info) + list(g.output)}
        for n in g.node:
            if n.op_type == "Cast" and n.attribute[0].i == onnx.TensorProto.FLOAT and types.get(n.output[0]) == onnx.TensorProto.FLOAT16:
                users = [u.name + f" ({u.op_type})" for u in g.node if n.output[0] in u.input]
                print(f"  {m.graph.node[0].name} {branch.name}: Cast {n.name} to=FLOAT, output {n.output[0]} annotated float16, used by {users}")


def verify_decoder_only(folder, model="model.onnx", ref=None):
    s = session(folder / model)
    ins, outs = signature(s)
    print(f"  {model} inputs:", ins)
    prompt = np.array([[3, 14, 15, 92]], dtype=np.int64)
    seq, rows = cached_steps(s, prompt)
    print(f"  tokens {seq[0].tolist()}")
    for k, c in enumerate(rows, 1):
        print("  " + fmt(f"{model} step {k} cached vs uncached", c))
    if ref is not None:
        r = session(ref)
        for k in range(prompt.shape[1], seq.shape[1] + 1):
            a = run(s, seq[:, :k])["logits"][0, -1]
            b = run(r, seq[:, :k])["logits"][0, -1]
            print("  " + fmt(f"{k} tokens: {model} vs {ref.relative_to(ref.parents[2])} (uncached)", compare(a, b)))


def verify_gpt2_int8(folder):
    q = onnx.load(folder / "onnx" / "model_quantized.onnx")
    from collections import Counter

    ops = Counter(n.op_type for n in q.graph.node)
    print(f"  model_quantized.onnx: {ops['MatMulInteger']} MatMulInteger, {ops['DynamicQuantizeLinear']} DynamicQuantizeLinear, {ops['DequantizeLinear']} DequantizeLinear (Gather), {ops['MatMul']} float MatMul left")
    verify_decoder_only(folder / "onnx", "model.onnx")
    verify_decoder_only(folder / "onnx", "model_quantized.onnx", ref=folder / "onnx" / "model.onnx")


def verify_genai(folder):
    cfg = json.loads((folder / "genai_config.json").read_text())["model"]["decoder"]
    s = session(folder / cfg["filename"])
    ins, outs = signature(s)
    print("  inputs:", ins)
    print("  outputs:", outs)
    L, kvh, hs = cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_size"]
    names = [cfg["inputs"]["past_key_names"] % i for i in range(L)] + [cfg["inputs"]["past_value_names"] % i for i in range(L)]
    missing = [n for n in names if n not in {i.name for i in s.get_inputs()}]
    print(f"  genai_config: {L} layers, {kvh} KV heads, head_size {hs}; past names missing from graph: {missing}")
    kw = dict(past_shape=(1, kvh, 0, hs))
    try:
        prompt = np.array([[3, 14, 15, 92]], dtype=np.int64)
        seq, rows = cached_steps(s, prompt, **kw)
    except Exception as e:  # noqa: BLE001
        print(f"  driven with genai_config's shapes: FAILS: {e}")
        return
    print(f"  tokens {seq[0].tolist()}")
    for k, c in enumerate(rows, 1):
        print("  " + fmt(f"step {k} cached vs uncached", c))
    import torch

    with torch.no_grad():
        ref = llama_model()(torch.tensor(seq)).logits[0, -1].numpy()
    print("  " + fmt(f"{seq.shape[1]} tokens: ONNX (uncached) vs torch LlamaForCausalLM", compare(run(s, seq, None, **kw)["logits"][0, -1], ref)))
    search = json.loads((folder / "genai_config.json").read_text())["search"]
    if search.get("past_present_share_buffer"):
        # What genai does with past_present_share_buffer: past and present are one
        # max_length buffer; attention_mask covers only the tokens so far.
        buf = search["max_length"]
        names = [o.name for o in s.get_outputs()]

        def shared(ids, past, total):
            feeds = {"input_ids": ids, "attention_mask": np.ones((1, total), dtype=np.int64)}
            for inp in s.get_inputs():
                if inp.name.startswith("past_key_values."):
                    feeds[inp.name] = past[inp.name] if past else np.zeros((1, kvh, buf, hs), dtype=np.float32)
            return dict(zip(names, s.run(None, feeds)))

        out = shared(seq[:, :4], None, 4)
        print(f"  shared buffer ({buf}): present.0.key {list(out['present.0.key'].shape)} while attention_mask is [1, 4]")
        for k in range(4, seq.shape[1]):
            out = shared(seq[:, k : k + 1], next_past(None, out), k + 1)
            full = shared(seq[:, : k + 1], None, k + 1)
            print("  " + fmt(f"shared buffer step {k - 3} cached vs uncached", compare(out["logits"][0, -1], full["logits"][0, -1])))


WINDOW_PROMPT = 12  # tokens; also the seeded past's length
WINDOW_LONG = 24  # a prompt longer than the two layers' reach (2 x (window + 1))


def verify_sliding_window(folder):
    """Does a change outside the window move the last position's logits?
    Uncached: a token changed at each position of a prompt. Cached: one new
    token on a seeded random past, one past position changed in every layer."""
    cfg = json.loads((folder / "genai_config.json").read_text())["model"]["decoder"]
    stated = json.loads((folder / "config.json").read_text())["sliding_window"]
    m = onnx.load(folder / cfg["filename"], load_external_data=False)
    windows = {n.name: _gqa_window(n) for n in m.graph.node if n.op_type == "GroupQueryAttention"}
    print(f"  config.json sliding_window {stated}; GroupQueryAttention local_window_size: {windows}")
    s = session(folder / cfg["filename"])
    ins, outs = signature(s)
    print("  inputs:", ins)
    print("  outputs:", outs)
    L, kvh, hs = cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_size"]
    kw = dict(past_shape=(1, kvh, 0, hs))
    rng = np.random.default_rng(SEED)
    last = lambda ids, past=None: run(s, ids, past, **kw)["logits"][0, -1]

    def changed(ids, k):
        alt = ids.copy()
        alt[0, k] = (alt[0, k] + 500) % 1000
        return alt

    for n in (WINDOW_PROMPT, WINDOW_LONG):
        ids = rng.integers(3, 1000, size=(1, n), dtype=np.int64)
        ref = last(ids)
        d = [compare(last(changed(ids, k)), ref)[0] for k in range(n)]
        print(f"  uncached, {n} tokens, token k changed, max|d| of the last logits:")
        print("    " + "  ".join(f"{k}:{v:.3g}" for k, v in enumerate(d)))
    # cached: past of WINDOW_PROMPT random positions in every layer, one new token at position WINDOW_PROMPT
    past = {i.name: rng.standard_normal((1, kvh, WINDOW_PROMPT, hs)).astype(np.float32)
            for i in s.get_inputs() if i.name.startswith("past_key_values.")}
    tok = np.array([[7]], dtype=np.int64)
    ref = last(tok, past)
    d = []
    for k in range(WINDOW_PROMPT):
        alt = {n: v.copy() for n, v in past.items()}
        for v in alt.values():
            v[:, :, k, :] = rng.standard_normal((1, kvh, hs))
        d.append(compare(last(tok, alt), ref)[0])
    print(f"  cached, past {WINDOW_PROMPT} random + 1 token, past position k changed in every layer (key and value), max|d|:")
    print("    " + "  ".join(f"{k}:{v:.3g}" for k, v in enumerate(d)))
    import torch

    ids = np.random.default_rng(SEED).integers(3, 1000, size=(1, WINDOW_PROMPT), dtype=np.int64)
    onnx_last = last(ids)
    for w in (stated, stated + 1, None):
        with torch.no_grad():
            ref = mistral_model(w)(torch.tensor(ids), use_cache=False).logits[0, -1].numpy()
        print("  " + fmt(f"{WINDOW_PROMPT} tokens: ONNX vs torch MistralForCausalLM sliding_window {w}", compare(onnx_last, ref)))


OVERFLOW_PROMPT = [3, 14, 15, 92]
OVERFLOW_RANDOM = 50  # random 4-token prompts, numpy default_rng(SEED)


def _overflow_session(path, disable_all):
    """A default InferenceSession (CPU, default graph optimizations), or one with
    ORT_DISABLE_ALL. Default thread count: the point is what a plain session does."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if disable_all:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _presents_bad(out):
    return sorted(k for k, v in out.items() if k.startswith("present.") and nonfinite(v))


def _overflow_run_report(path, label, disable, prompt, what):
    """One session's report for an overflow fixture: the prompt's outputs, the
    cached step after it, and the counts over the random prompts. Returns the session."""
    s = _overflow_session(path, disable)
    out = run(s, prompt)
    step = run(s, np.array([[0]], dtype=np.int64), next_past(None, out))
    print(f"  {label}, prompt {OVERFLOW_PROMPT}{what}:")
    for k, v in out.items():
        print(f"    {k}: {nonfinite(v) or 'finite'} ({int(np.isnan(v).sum())} NaN, {int(np.isinf(v).sum())} Inf of {v.size})")
    print("    cached step (token 0, past 4): " + ", ".join(f"{k} {nonfinite(v) or 'finite'}" for k, v in step.items()))
    c, names = _overflow_counts(s, np.random.default_rng(SEED))
    n = OVERFLOW_RANDOM
    print(f"  {label}, {n} random 4-token prompts: non-finite logits {c['logits']}/{n}, presents {c['presents']}/{n};"
          f" cached step: logits {c['step_logits']}/{n}, presents {c['step_presents']}/{n}")
    print(f"    outputs that went non-finite: {names}")
    return s


def _overflow_counts(s, rng):
    """Per prompt: the prompt (zero-length float16 past), then one cached step
    with the argmax token (NaN counted as -inf). Counts of non-finite outputs."""
    c = dict(logits=0, presents=0, step_logits=0, step_presents=0)
    names = set()
    for _ in range(OVERFLOW_RANDOM):
        ids = rng.integers(0, 1000, size=(1, 4), dtype=np.int64)
        out = run(s, ids)
        c["logits"] += bool(nonfinite(out["logits"]))
        c["presents"] += bool(_presents_bad(out))
        names.update(k for k, v in out.items() if nonfinite(v))
        last = np.nan_to_num(out["logits"][0, -1].astype(np.float64), nan=-np.inf)
        tok = np.array([[int(last.argmax())]], dtype=np.int64)
        step = run(s, tok, next_past(None, out))
        c["step_logits"] += bool(nonfinite(step["logits"]))
        c["step_presents"] += bool(_presents_bad(step))
        names.update(k for k, v in step.items() if nonfinite(v))
    return c, sorted(names)


def _expose_all(m):
    """Every node output as a graph output (the types from shape inference)."""
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(m).graph.value_info}
    have = {o.name for o in m.graph.output}
    missing = []
    for n in m.graph.node:
        for o in n.output:
            if o in have:
                continue
            if o not in inferred:
                missing.append(o)
                continue
            m.graph.output.append(inferred[o])
            have.add(o)
    return missing


def _first_nonfinite(m, out):
    """Nodes (graph order, which is topological) whose output has NaN/Inf while
    every float input is finite. Returns (constants, first non-Constant node)."""
    vals = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    vals.update(out)
    bad = lambda name: name in vals and vals[name].dtype.kind == "f" and bool(nonfinite(vals[name]))
    consts = []
    for n in m.graph.node:
        if any(bad(o) for o in n.output) and not any(bad(i) for i in n.input):
            if n.op_type == "Constant":
                consts.append(n)  # the attention-mask fill: -inf by design
                continue
            ranges = [(i, str(vals[i].dtype), float(vals[i].min()), float(vals[i].max()))
                      for i in n.input if i in vals and vals[i].dtype.kind == "f"]
            outs = [(o, nonfinite(vals[o])) for o in n.output if bad(o)]
            return consts, (n, ranges, outs)
    return consts, None


def _overflow_coverage(s, vocab=1000, positions=128, rows=100):
    """Every token id at every position (rows of one token repeated over all
    positions, zero-length past): does present.0.key or .value hold an Inf for
    that (token, position)? And single-token prompts at position 0: logits?"""
    covered = covered_v = 0
    for lo in range(0, vocab, rows):
        ids = np.repeat(np.arange(lo, lo + rows, dtype=np.int64)[:, None], positions, axis=1)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids),
                 "position_ids": np.repeat(np.arange(positions, dtype=np.int64)[None], rows, axis=0)}
        for inp in s.get_inputs():
            if inp.name.startswith("past_key_values."):
                feeds[inp.name] = np.zeros((rows, inp.shape[1], 0, inp.shape[3]), dtype=np.float16)
        names = ["present.0.key", "present.0.value"]
        out = dict(zip(names, s.run(names, feeds)))
        inf_v = np.isinf(out["present.0.value"]).any(axis=(1, 3))
        covered += int((np.isinf(out["present.0.key"]).any(axis=(1, 3)) | inf_v).sum())
        covered_v += int(inf_v.sum())
    print(f"    (token, position) pairs whose present.0.key/value hold an Inf: {covered}/{vocab * positions};"
          f" present.0.value alone: {covered_v}/{vocab * positions}")
    ids = np.arange(vocab, dtype=np.int64)[:, None]
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "position_ids": np.zeros_like(ids)}
    for inp in s.get_inputs():
        if inp.name.startswith("past_key_values."):
            feeds[inp.name] = np.zeros((vocab, inp.shape[1], 0, inp.shape[3]), dtype=np.float16)
    logits = s.run(["logits"], feeds)[0]
    finite = [int(t) for t in np.flatnonzero(np.isfinite(logits).reshape(vocab, -1).all(axis=1))]
    print(f"    single-token prompts (position 0) with non-finite logits: {vocab - len(finite)}/{vocab}; finite for token ids {finite}")


def verify_overflow(folder):
    path = folder / "model.onnx"
    s = _overflow_session(path, False)
    ins, outs = signature(s)
    print("  inputs:", ins)
    print("  outputs:", outs)
    prompt = np.array([OVERFLOW_PROMPT], dtype=np.int64)
    for label, disable in (("default session", False), ("ORT_DISABLE_ALL", True)):
        s = _overflow_run_report(path, label, disable, prompt, "")
        if not disable:
            _overflow_coverage(s)
    _first_nonfinite_report(path, prompt)


def _first_nonfinite_report(path, prompt):
    """Where it starts: optimizations off, every node output exposed."""
    m = onnx.load(path)
    missing = _expose_all(m)
    with tempfile.TemporaryDirectory() as tmp:
        onnx.save(m, Path(tmp) / "all.onnx")
        s = _overflow_session(Path(tmp) / "all.onnx", True)
        print(f"  every node output exposed ({len(m.graph.output)} outputs, {len(missing)} without a type left out), ORT_DISABLE_ALL:")
        consts, first = _first_nonfinite(m, run(s, prompt))
        print(f"    skipped Constant nodes that are non-finite by design: {[(c.name, nonfinite(numpy_helper.to_array(c.attribute[0].t))) for c in consts]}")
        if first is None:
            print("    no node turns finite inputs into NaN/Inf")
        else:
            n, ranges, outs = first
            print(f"    prompt {OVERFLOW_PROMPT}: first node with finite float inputs and a non-finite output: {n.name} ({n.op_type}) -> {outs}")
            for name, dt, lo, hi in ranges:
                print(f"      input {name} {dt}: min {lo:.6g} max {hi:.6g}")
        rng, same = np.random.default_rng(SEED), {}
        for _ in range(OVERFLOW_RANDOM):
            _, f = _first_nonfinite(m, run(s, rng.integers(0, 1000, size=(1, 4), dtype=np.int64)))
            key = f"{f[0].name} ({f[0].op_type})" if f else "none"
            same[key] = same.get(key, 0) + 1
        print(f"    over the {OVERFLOW_RANDOM} random prompts: {same}")


def _run_batch(sess, ids, mask):
    """A batch with an attention_mask, position_ids = cumsum(mask) - 1 (1 where
    masked, as transformers does), zero-length float16 past."""
    pos = np.cumsum(mask, axis=1) - 1
    pos[mask == 0] = 1
    feeds = {"input_ids": ids, "attention_mask": mask, "position_ids": pos}
    for inp in sess.get_inputs():
        if inp.name.startswith("past_key_values."):
            feeds[inp.name] = np.zeros((ids.shape[0], inp.shape[1], 0, inp.shape[3]), dtype=NP[inp.type])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))


def _island_coverage(s, fp32, vocab=1000, positions=128, rows=100):
    """Every token id at every position (rows of one token repeated, zero-length
    past): non-finite logits / presents in the float16 session `s`; and from the
    fp32 graph `fp32` (OVERFLOW_Q_SCALES applied) the smallest per-position
    max|c_proj| and the largest |c_fc| (gelu_new cubes it: 40**3 > 65504)."""
    bad_logits = bad_presents = 0
    lo_proj, hi_fc = np.inf, 0.0
    names32 = ["/transformer/h.1/mlp/c_proj/Gemm_output_0", "/transformer/h.1/mlp/c_fc/Gemm_output_0"]
    for lo in range(0, vocab, rows):
        ids = np.repeat(np.arange(lo, lo + rows, dtype=np.int64)[:, None], positions, axis=1)
        out = _run_batch(s, ids, np.ones_like(ids))
        bad_logits += int((~np.isfinite(out["logits"])).any(axis=2).sum())
        bad_presents += sum(int((~np.isfinite(v)).any()) for k, v in out.items() if k.startswith("present."))
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids),
                 "position_ids": np.repeat(np.arange(positions, dtype=np.int64)[None], rows, axis=0)}
        for inp in fp32.get_inputs():
            if inp.name.startswith("past_key_values."):
                feeds[inp.name] = np.zeros((rows, inp.shape[1], 0, inp.shape[3]), dtype=np.float32)
        proj, fc = fp32.run(names32, feeds)
        lo_proj = min(lo_proj, float(np.abs(proj).max(axis=-1).min()))
        hi_fc = max(hi_fc, float(np.abs(fc).max()))
    n = vocab * positions
    print(f"    (token, position) pairs with non-finite logits: {bad_logits}/{n}; present tensors with a NaN/Inf: {bad_presents} of {4 * (vocab // rows)} ({vocab // rows} batches x 4)")
    print(f"    fp32 graph over the same pairs: smallest per-position max|c_proj/Gemm| {lo_proj:.6g} (float16's largest finite is 65504); largest |c_fc/Gemm| {hi_fc:.6g}")


def _repaired_check(path, ref32, steps=4):
    """A repaired conversion: prompt + `steps` cached greedy steps (every output
    of every call finite?), each cached step against an uncached recompute,
    float16-with-island vs the fp32 graph, random prompts, a left-padded batch."""
    s = _overflow_session(path, False)
    r = _overflow_session(ref32, False)
    prompt = np.array([OVERFLOW_PROMPT], dtype=np.int64)
    out = run(s, prompt)
    bad = [k for k, v in out.items() if nonfinite(v)]
    seq, past, rows = prompt, next_past(None, out), []
    for _ in range(steps):
        tok = np.array([[int(out["logits"][0, -1].astype(np.float64).argmax())]], dtype=np.int64)
        seq = np.concatenate([seq, tok], axis=1)
        out = run(s, tok, past)
        past = next_past(past, out)
        full = run(s, seq)
        bad += [k for o in (out, full) for k, v in o.items() if nonfinite(v)]
        rows.append(compare(out["logits"][0, -1], full["logits"][0, -1]))
    print(f"    prompt {OVERFLOW_PROMPT} + {steps} cached greedy steps: tokens {seq[0].tolist()}; non-finite outputs: {sorted(set(bad)) or 'none'}")
    for k, c in enumerate(rows, 1):
        print("    " + fmt(f"step {k} cached vs uncached", c))
    print("    " + fmt(f"{seq.shape[1]} tokens uncached: repaired float16 vs the fp32 graph", compare(run(s, seq)["logits"][0, -1], run(r, seq)["logits"][0, -1])))
    rng, n_bad, worst = np.random.default_rng(SEED), 0, 0.0
    for _ in range(OVERFLOW_RANDOM):
        ids = rng.integers(0, 1000, size=(1, 4), dtype=np.int64)
        o = run(s, ids)
        n_bad += any(bool(nonfinite(v)) for v in o.values())
        worst = max(worst, compare(o["logits"][0, -1], run(r, ids)["logits"][0, -1])[1])
    print(f"    {OVERFLOW_RANDOM} random 4-token prompts: with a non-finite output {n_bad}/{OVERFLOW_RANDOM}; last logits vs fp32 graph worst rel {worst:.3g}")
    pad = 2
    ids = np.concatenate([np.zeros((1, pad), dtype=np.int64), prompt], axis=1)
    batch = np.concatenate([rng.integers(0, 1000, size=(1, pad + prompt.shape[1]), dtype=np.int64), ids])
    mask = np.ones_like(batch)
    mask[1, :pad] = 0
    padded = _run_batch(s, batch, mask)["logits"][1, pad:]
    alone = run(s, prompt)["logits"][0]
    print("    " + fmt(f"left-padded batch (row 1 of 2, padded by {pad}) vs the prompt alone, all positions", compare(padded.ravel(), alone.ravel()))
          + f"; non-finite in the batch: {nonfinite(padded) or 'none'}")


Q_ONLY_SCALE = 1e6  # the first plan: layer 0's q columns of c_attn x 1e6 (clamped to 1e4)


def _q_only_demo():
    """The first plan: only the q part (first n_embd columns) of layer 0's
    c_attn weight scaled. Where does the overflow go in a default session?"""
    m = onnx.load(SRC / "gpt2-tiny" / "model.onnx")
    init = next(i for i in m.graph.initializer if i.name == OVERFLOW_WEIGHT)
    w = numpy_helper.to_array(init).copy()
    w[:, :32] *= np.float32(Q_ONLY_SCALE)
    init.CopyFrom(numpy_helper.from_array(w, init.name))
    m16 = to_fp16(m)
    names = ["/transformer/h.0/attn/Split_output_0", "/transformer/h.0/attn/MatMul_output_0",
             "/transformer/h.0/attn/Softmax_output_0", "/transformer/h.0/attn/Where_1_output_0", "logits",
             "present.0.key", "present.0.value", "present.1.key", "present.1.value"]
    with tempfile.TemporaryDirectory() as tmp:
        onnx.save(m16, Path(tmp) / "plain.onnx")
        _expose_all(m16)
        onnx.save(m16, Path(tmp) / "all.onnx")
        s = _overflow_session(Path(tmp) / "all.onnx", False)
        out = run(s, np.array([OVERFLOW_PROMPT], dtype=np.int64))
        print(f"    q columns x {Q_ONLY_SCALE:g} (converter clamps to 1e4), every output exposed, default session, prompt {OVERFLOW_PROMPT}:")
        for k in names:
            v = out[k]
            print(f"      {k}: {int(np.isnan(v).sum())} NaN, {int(np.isinf(v).sum())} Inf of {v.size}")
        s = _overflow_session(Path(tmp) / "plain.onnx", False)
        rng, n_bad = np.random.default_rng(SEED), 0
        for _ in range(OVERFLOW_RANDOM):
            n_bad += any(bool(nonfinite(v)) for v in run(s, rng.integers(0, 1000, size=(1, 4), dtype=np.int64)).values())
        print(f"    the same model unexposed: {OVERFLOW_RANDOM} random prompts with a non-finite output: {n_bad}/{OVERFLOW_RANDOM}")


def verify_island(folder):
    import itertools

    path = folder / "model.onnx"
    s = _overflow_session(path, False)
    ins, outs = signature(s)
    print("  inputs:", ins)
    print("  outputs:", outs)
    prompt = np.array([OVERFLOW_PROMPT], dtype=np.int64)
    fp32 = island_fp32()
    with tempfile.TemporaryDirectory() as tmp:
        ref32 = Path(tmp) / "fp32.onnx"
        onnx.save(fp32, ref32)
        for label, disable in (("default session", False), ("ORT_DISABLE_ALL", True)):
            s = _overflow_run_report(path, label, disable, prompt, ", zero-length float16 past")
            if not disable:
                m32 = onnx.load(ref32)
                _expose_all(m32)
                onnx.save(m32, Path(tmp) / "fp32-all.onnx")
                _island_coverage(s, _overflow_session(Path(tmp) / "fp32-all.onnx", False))
        _first_nonfinite_report(path, prompt)

        print(f"  float32 islands: convert_float_to_float16(the same fp32 graph, keep_io_types=False, node_block_list=<the Casts> + island);"
              f" default session, {OVERFLOW_RANDOM} random 4-token prompts with a non-finite output:")
        for k in range(1, len(ISLAND_CHAIN) + 1):
            for island in itertools.combinations(ISLAND_CHAIN, k):
                onnx.save(to_fp16(fp32, keep_float32=island), Path(tmp) / "island.onnx")
                s = _overflow_session(Path(tmp) / "island.onnx", False)
                rng, n_bad = np.random.default_rng(SEED), 0
                for _ in range(OVERFLOW_RANDOM):
                    n_bad += any(bool(nonfinite(v)) for v in run(s, rng.integers(0, 1000, size=(1, 4), dtype=np.int64)).values())
                print(f"    {n_bad:2d}/{OVERFLOW_RANDOM}  {list(island)}")
        for island, dst in ((OVERFLOW_Q_MINIMAL, ISLAND_BLOCKED),
                            (ISLAND_CHAIN, ISLAND_BLOCKED.with_name(ISLAND_BLOCKED.name + "-chain"))):
            copy_configs(SRC / "gpt2-tiny", dst)
            onnx.save(to_fp16(fp32, keep_float32=island), dst / "model.onnx")
            print(f"  repaired: {dst}/model.onnx ({(dst / 'model.onnx').stat().st_size} bytes), node_block_list island {island}")
            _repaired_check(dst / "model.onnx", ref32)
    print("  why not the q projection (the first plan):")
    _q_only_demo()


VERIFIERS = {
    "marian-fp16": verify_marian_fp16,
    "marian-fp16-cast-bug": verify_cast_bug,
    "gpt2-int8": verify_gpt2_int8,
    "gpt2-int8-cache-bug": verify_gpt2_int8,
    "llama-genai": verify_genai,
    "llama-genai-config-mismatch": verify_genai,
    "gpt2-fp16-overflow": verify_overflow,
    "gpt2-fp16-island": verify_island,
    "mistral-genai": verify_sliding_window,
    "mistral-genai-no-window": verify_sliding_window,
}


if __name__ == "__main__":
    args = fc.parse_args(GENERATORS, values=("--genai-site",))
    OUT = args.out or OUT
    if args.genai_site:
        GENAI_SITE = Path(args.genai_site).resolve()
    fc.run_all(args, OUT, GENERATORS, VERIFIERS)
