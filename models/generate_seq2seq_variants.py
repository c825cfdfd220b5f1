"""Generate the seq2seq numeric-variant fixtures in models/ and measure them in
onnxruntime: a transformers.js-layout BART whose encoder AND merged decoder
come in fp32, dynamic int8 (`_quantized`) and float16 (`_fp16`), so that a
tool can compare each variant pair (encoder_model_X + decoder_model_merged_X)
with the fp32 pair.

Built from the committed bart-tjs/ fixture (made by generate.py) with the same
converters and settings as tjs-variants/ (generate_generation.py's
quantize_q8 and to_fp16_tjs are imported, not copied). Versions: those of
requirements-gen.txt (onnx 1.23.2, onnxruntime 1.31.1) plus
onnxconverter-common 1.16.0; no torch, no network.

    python models/generate_seq2seq_variants.py [--out DIR] [--cross-attn-gain G] [name ...]
    python models/generate_seq2seq_variants.py --verify-only [name ...]   # only the measurements

Generating ends with the measurements (see NUMERIC-NOTES.md). Everything is
deterministic (no random numbers in the conversion; the measurement inputs
come from numpy default_rng(0)); the script re-executes itself with
PYTHONHASHSEED=0 like the other generators. ORT runs on one thread.

  bart-tjs-variants/     config.json, generation_config.json and
                         tokenizer_config.json from bart-tjs; in onnx/:
                         encoder_model.onnx and decoder_model_merged.onnx
                         (bart-tjs' fp32 files, copied);
                         *_quantized.onnx: quantize_dynamic, QInt8 weights,
                         per_channel and reduce_range off, EnableSubgraph,
                         MatMulConstBOnly (transformers.js' q8; the If branches
                         of the merged decoder are quantized too);
                         *_fp16.onnx: onnxconverter-common float16 with
                         keep_io_types=True (float32 inputs and outputs) and
                         transformers.js' block list, as tjs-variants'
                         model_fp16.onnx. For the merged decoder one more fix,
                         also what transformers.js' float16.py fork does: its
                         float inputs are read only inside the If branches, and
                         onnxconverter-common 1.16.0 looks for input consumers in
                         the top-level graph only, so it casts none of them and
                         ORT refuses the file ("Type (tensor(float16)) of output
                         arg (/model/decoder/layers.0/encoder_attn/Transpose_1_
                         output_0) ... does not match expected type
                         (tensor(float))"). Each such input gets one top-level
                         Cast(to=FLOAT16) "<name>_fp16" and the branch nodes read
                         that (_cast_subgraph_inputs).
                         decoder_model.onnx / decoder_with_past_model.onnx are
                         left out.
  bart-tjs-variants-broken-encoder/
                         the same files, byte for byte, except
                         onnx/encoder_model_quantized.onnx: the good int8 encoder
                         with every MatMulInteger weight's per-tensor scale
                         initializer multiplied by 8 (all 18: q/k/v/out_proj,
                         fc1, fc2 of 3 layers), as a converter that writes the
                         wrong scale would. int8 weights, zero points, graph and
                         signature are unchanged; the file is valid and loads.
                         The embedding Gathers' DequantizeLinear scales are left
                         alone. decoder_model_merged_quantized.onnx is the good one.

bart-tjs' decoder hardly listens to its encoder: with init_std 0.02 and tied
embeddings each step's logits are dominated by the input token's own embedding
(fp32 top-1 = the step's input token), and even standard-normal encoder states
move the logits by only ~1.5% of their max. So the broken encoder (1.7x the
fp32 encoder output's max) barely moves the pair's logits (rel ~0.03, below
the good int8 decoder's own noise): it shows in the encoder outputs, not in
the logits. --cross-attn-gain G (default 1, not used for the committed folders)
multiplies the decoder's cross-attention v_proj and out_proj weights by G in
the fp32 merged decoder before converting, so that the encoder matters.
"""
import shutil
from collections import Counter
from pathlib import Path

import fixture_common as fc
from fixture_common import quantize_q8, session

fc.start(__name__)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper  # noqa: E402

from generate_generation import to_fp16_tjs  # noqa: E402  (the tjs-variants recipe)

HERE = Path(__file__).resolve().parent

SRC = HERE / "bart-tjs"  # the committed fp32 fixture (generate.py)
OUT = HERE  # where the folders are written (--out DIR)
SEED = 0
ROOT_FILES = ["config.json", "generation_config.json", "tokenizer_config.json"]
PARTS = ["encoder_model", "decoder_model_merged"]
VARIANTS = ["", "_quantized", "_fp16"]  # "" is fp32
BROKEN_SCALE = 8.0
GAIN = 1.0  # --cross-attn-gain G: see cross_attention_gain (default: plain bart-tjs copies)
MAX_BYTES = 3 * 1024 * 1024


# ---------------------------------------------------------------- float16

def _subgraphs(g):
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield a.g
            for sub in a.graphs:
                yield sub


def _subgraph_readers(g, names, acc):
    """Which of `names` are read by a node inside any subgraph of g (nested too)."""
    for sub in _subgraphs(g):
        for n in sub.node:
            acc.update(x for x in n.input if x in names)
        _subgraph_readers(sub, names, acc)
    return acc


def _rename_in_subgraphs(g, mapping):
    for sub in _subgraphs(g):
        for n in sub.node:
            n.input[:] = [mapping.get(x, x) for x in n.input]
        _rename_in_subgraphs(sub, mapping)


def _cast_subgraph_inputs(model: onnx.ModelProto) -> list:
    """keep_io_types=True leaves the float graph inputs float32 and casts them
    for their consumers, but onnxconverter-common 1.16.0 looks for consumers in
    the top-level graph only. The merged decoder's top level is one If node, so
    no input is cast while the branches become float16: ORT refuses the file.
    transformers.js' float16.py fork searches the subgraphs too, adds one
    Cast(to=FLOAT16) "<input>_fp16" per input and renames the branch reads;
    this does the same after converting. Returns the inputs it cast."""
    g = model.graph
    floats = {i.name for i in g.input if i.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
    top = {x for n in g.node for x in n.input}
    assert not floats & top, floats & top  # the converter already handled top-level readers
    used = sorted(_subgraph_readers(g, floats, set()))
    mapping = {x: x + "_fp16" for x in used}
    _rename_in_subgraphs(g, mapping)
    for k, x in enumerate(used):
        g.node.insert(k, h.make_node("Cast", [x], [mapping[x]], to=onnx.TensorProto.FLOAT16, name=mapping[x]))
    g.value_info.extend(
        h.make_tensor_value_info(mapping[x], onnx.TensorProto.FLOAT16, None) for x in used
    )
    return used


def fp16(src: Path, dst: Path):
    m = to_fp16_tjs(onnx.load(src))
    if any(True for _ in _subgraphs(m.graph)):
        _cast_subgraph_inputs(m)
    onnx.checker.check_model(m)
    onnx.save(m, dst)


# ---------------------------------------------------------------- int8 with a wrong scale

def weight_scale_names(model: onnx.ModelProto) -> list:
    """The per-tensor weight scale initializer of every MatMulInteger, in node
    order. quantize_dynamic names them <W>_scale beside <W>_quantized and
    <W>_zero_point; each is used by exactly one weight."""
    inits = {i.name: i for i in model.graph.initializer}
    names = []
    for n in model.graph.node:
        if n.op_type != "MatMulInteger":
            continue
        w = n.input[1]
        assert w.endswith("_quantized"), w
        s = w[: -len("_quantized")] + "_scale"
        assert s in inits and numpy_helper.to_array(inits[s]).shape == (), s
        names.append(s)
    assert len(names) == len(set(names))
    return names


def break_scales(model: onnx.ModelProto, factor=BROKEN_SCALE) -> list:
    """The bug: every MatMulInteger weight scale times `factor`."""
    inits = {i.name: i for i in model.graph.initializer}
    names = weight_scale_names(model)
    for s in names:
        t = inits[s]
        t.CopyFrom(numpy_helper.from_array((numpy_helper.to_array(t) * np.float32(factor)).astype(np.float32), s))
    return names


# ---------------------------------------------------------------- folders

def cross_attention_gain(model: onnx.ModelProto, gain: float) -> list:
    """Not used by default (--cross-attn-gain G). Multiplies the decoder's
    cross-attention v_proj and out_proj weights (both If branches share them)
    by `gain`. bart-tjs' decoder barely listens to the encoder (init_std 0.02,
    tied embeddings: each step's logits are dominated by the input token's own
    embedding), so an encoder bug hardly moves the pair's logits; with gain 10
    it does (see NUMERIC-NOTES.md)."""
    names = set()
    for g in [model.graph, *_subgraphs(model.graph)]:
        for n in g.node:
            if n.op_type == "MatMul" and "/encoder_attn/" in n.name and ("/v_proj/" in n.name or "/out_proj/" in n.name):
                names.add(n.input[1])
    inits = {i.name: i for i in model.graph.initializer}
    assert names and names <= set(inits), names
    for x in sorted(names):
        t = inits[x]
        t.CopyFrom(numpy_helper.from_array((numpy_helper.to_array(t) * np.float32(gain)).astype(np.float32), x))
    return sorted(names)


def _variants_folder(out: Path):
    if out.exists():
        shutil.rmtree(out)
    d = out / "onnx"
    d.mkdir(parents=True)
    for name in ROOT_FILES:
        shutil.copy(SRC / name, out / name)
    for part in PARTS:
        src = SRC / "onnx" / f"{part}.onnx"
        if part == "decoder_model_merged" and GAIN != 1.0:
            m = onnx.load(src)
            cross_attention_gain(m, GAIN)
            onnx.save(m, d / f"{part}.onnx")
        else:
            shutil.copy(src, d / f"{part}.onnx")
        quantize_q8(d / f"{part}.onnx", d / f"{part}_quantized.onnx")
        fp16(d / f"{part}.onnx", d / f"{part}_fp16.onnx")
    return d


def gen_variants():
    """bart-tjs' encoder and merged decoder in fp32, q8 and fp16."""
    _variants_folder(OUT / "bart-tjs-variants")


def gen_broken_encoder():
    """bart-tjs-variants with an int8 encoder whose weight scales are 8x too
    large; everything else (the int8 decoder included) is the good conversion."""
    d = _variants_folder(OUT / "bart-tjs-variants-broken-encoder")
    p = d / "encoder_model_quantized.onnx"
    m = onnx.load(p)
    break_scales(m)
    onnx.checker.check_model(m)
    onnx.save(m, p)


GENERATORS = {
    "bart-tjs-variants": gen_variants,
    "bart-tjs-variants-broken-encoder": gen_broken_encoder,
}


# ---------------------------------------------------------------- measurements

class Pair:
    """encoder_model<v>.onnx + decoder_model_merged<v>.onnx of one folder."""

    def __init__(self, folder: Path, variant: str):
        self.enc = session(folder / "onnx" / f"encoder_model{variant}.onnx")
        self.dec = session(folder / "onnx" / f"decoder_model_merged{variant}.onnx")
        self.dec_in = {i.name: i for i in self.dec.get_inputs()}
        self.dec_out = [o.name for o in self.dec.get_outputs()]
        self.past = [n for n in self.dec_in if n.startswith("past_key_values.")]

    def encode(self, ids):
        return self.enc.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})[0]

    def decode(self, hidden, src_ids, dec_ids, past=None):
        """One merged-decoder call. past None: use_cache_branch False with empty
        (length 0) pasts, dec_ids the whole prefix. Returns (logits, presents)."""
        feeds = {"input_ids": np.asarray(dec_ids, np.int64), "encoder_attention_mask": np.ones_like(src_ids),
                 "encoder_hidden_states": hidden, "use_cache_branch": np.array([past is not None])}
        for n in self.past:
            heads, hd = self.dec_in[n].shape[1], self.dec_in[n].shape[3]
            feeds[n] = past[n] if past is not None else np.zeros((src_ids.shape[0], heads, 0, hd), np.float32)
        out = dict(zip(self.dec_out, self.dec.run(None, feeds)))
        return out["logits"], {n: out["present." + n[len("past_key_values."):]] for n in self.past}

    def uncached_steps(self, hidden, src_ids, prefix):
        """Step k (k = 0..len-1): an uncached call on prefix[:k+1], its last logits."""
        return [self.decode(hidden, src_ids, [prefix[: k + 1]])[0][0, -1] for k in range(len(prefix))]

    def cached_steps(self, hidden, src_ids, prefix):
        """Step 0 uncached on prefix[:1], then one token per call with the cache."""
        logits, past = self.decode(hidden, src_ids, [prefix[:1]])
        outs = [logits[0, -1]]
        for t in prefix[1:]:
            logits, present = self.decode(hidden, src_ids, [[t]], past)
            # The cached branch returns placeholder present.*.encoder.* (optimum's
            # merge; shape [0, heads, 1, head]): keep step 0's cross-attention K/V.
            past = {n: present[n] if ".decoder." in n else past[n] for n in past}
            outs.append(logits[0, -1])
        return outs


def rel(a, ref):
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    d = float(np.abs(a - ref).max())
    return d, d / float(np.abs(ref).max())


def describe(path: Path):
    m = onnx.load(path)
    ops = Counter()
    inits = Counter()

    def walk(g):
        ops.update(n.op_type for n in g.node)
        inits.update(onnx.TensorProto.DataType.Name(t.data_type) for t in g.initializer)
        for sub in _subgraphs(g):
            walk(sub)

    walk(m.graph)
    io = sorted({onnx.TensorProto.DataType.Name(v.type.tensor_type.elem_type) for v in list(m.graph.input) + list(m.graph.output)})
    keep = ["MatMulInteger", "DynamicQuantizeLinear", "DequantizeLinear", "MatMul", "Cast", "If"]
    print(f"  {path.name}: {path.stat().st_size} B, IR {m.ir_version}, I/O {io}, "
          + ", ".join(f"{ops[k]} {k}" for k in keep if ops[k])
          + f" (subgraphs included); initializers {dict(inits)}")
    assert path.stat().st_size < MAX_BYTES, path


SRC_LEN, DEC_LEN = 7, 8


def verify(folder: Path):
    files = sorted((folder / "onnx").iterdir())
    for p in files:
        describe(p)
        session(p)  # loads
    cfg_start = 2  # decoder_start_token_id (config.json / generation_config.json)
    rng = np.random.default_rng(SEED)
    src_ids = rng.integers(3, 1200, size=(1, SRC_LEN)).astype(np.int64)
    print(f"  source ids {src_ids[0].tolist()} (attention_mask ones)")
    pairs = {v: Pair(folder, v) for v in VARIANTS}
    hid = {v: p.encode(src_ids) for v, p in pairs.items()}
    ref_h = hid[""]
    for v in VARIANTS[1:]:
        d, r = rel(hid[v], ref_h)
        print(f"  encoder last_hidden_state encoder_model{v} vs fp32: max|d| {d:.3g}  rel {r:.3g}"
              f"  (max|fp32| {np.abs(ref_h).max():.3g})")
    # Teacher-forced decoder prefix: decoder_start_token_id, then random ids (the
    # fp32 pair's greedy continuation is 2, 2, 2, ...: eos, random weights).
    prefix = [cfg_start] + rng.integers(3, 1200, size=DEC_LEN - 1).tolist()
    ref = pairs[""].uncached_steps(ref_h, src_ids, prefix)
    top = [int(r.argmax()) for r in ref]
    print(f"  decoder prefix (teacher-forced) {prefix}; fp32 top-1 per step {top}"
          f" (= that step's own input token at {sum(a == b for a, b in zip(top, prefix))}/{DEC_LEN} steps)")
    for v in VARIANTS[1:]:
        outs = pairs[v].uncached_steps(hid[v], src_ids, prefix)
        cs = [(*rel(a, r), int(a.argmax()) == int(r.argmax())) for a, r in zip(outs, ref)]
        print(f"  pair{v} vs fp32 pair, uncached steps 0-{DEC_LEN - 1}:")
        print("    max|d| " + " ".join(f"{c[0]:.3g}" for c in cs))
        print("    rel    " + " ".join(f"{c[1]:.3g}" for c in cs))
        print("    top-1  " + " ".join("=" if c[2] else "X" for c in cs))
        print(f"    summary: max|d| {max(c[0] for c in cs):.3g}, max rel {max(c[1] for c in cs):.3g},"
              f" top-1 agrees {sum(c[2] for c in cs)}/{len(cs)}")
        # Where the gap comes from: only the encoder swapped, only the decoder swapped.
        enc_only = pairs[""].uncached_steps(hid[v], src_ids, prefix)
        dec_only = pairs[v].uncached_steps(ref_h, src_ids, prefix)
        e = max(rel(a, r)[1] for a, r in zip(enc_only, ref))
        dd = max(rel(a, r)[1] for a, r in zip(dec_only, ref))
        print(f"    max rel with only the encoder swapped (encoder{v} -> fp32 decoder): {e:.3g};"
              f" only the decoder (fp32 encoder -> decoder{v}): {dd:.3g}")
    for v in VARIANTS:
        p = pairs[v]
        un = p.uncached_steps(hid[v], src_ids, prefix)
        ca = p.cached_steps(hid[v], src_ids, prefix)
        cs = [rel(a, r)[0] for a, r in zip(ca, un)]
        agree = sum(int(a.argmax()) == int(r.argmax()) for a, r in zip(ca, un))
        print(f"  pair{v or ' fp32'} own cached (use_cache_branch True) vs uncached, steps 0-{DEC_LEN - 1}: max|d| "
              + " ".join(f"{c:.2g}" for c in cs) + f"; top-1 agrees {agree}/{DEC_LEN}")
    # A random-states probe: how much can encoder states move these logits at all?
    rnd = np.random.default_rng(SEED + 1).standard_normal(ref_h.shape).astype(np.float32)
    probe = pairs[""].uncached_steps(rnd, src_ids, prefix)
    print(f"  probe: standard-normal encoder states into the fp32 decoder vs fp32 pair: max rel"
          f" {max(rel(a, r)[1] for a, r in zip(probe, ref)):.3g}")


VERIFIERS = {
    "bart-tjs-variants": verify,
    "bart-tjs-variants-broken-encoder": verify,
}


if __name__ == "__main__":
    args = fc.parse_args(GENERATORS, values=("--cross-attn-gain",))
    OUT = args.out or OUT
    if args.cross_attn_gain is not None:
        GAIN = float(args.cross_attn_gain)
    fc.run_all(args, OUT, GENERATORS, VERIFIERS)
