"""Generate models/marian-ignores-encoder-mask/ and measure it in onnxruntime.

What it makes
-------------
  marian-ignores-encoder-mask/  an optimum-style Marian export whose merged
                                decoder ignores its encoder_attention_mask.
      config.json, generation_config.json  copied from marian-tiny/
      encoder_model.onnx                   copied from marian-tiny/ (unchanged)
      decoder_model_merged.onnx            marian-tiny's merged decoder, edited:
          the graph input `encoder_attention_mask` is still declared (same
          name, dtype int64, shape [batch_size, encoder_sequence_length]), but
          two nodes added at the top of the main graph compute
              ones = ConstantOfShape(Shape(encoder_attention_mask), value=1)
          and every node that read `encoder_attention_mask` (the main graph
          and both `If` branches, which read it from the outer scope) reads
          `ones` instead. Only the new Shape node still reads the input.
      No decoder_model.onnx / decoder_with_past_model.onnx: only the merged
      decoder and the encoder.

Why
---
A real failure mode: a decoder that does not mask the padded encoder
positions in cross-attention. At batch 1 (or with a batch of equal-length
sources) the mask is all ones, so the fixture is numerically identical to the
correct model, and cached-vs-uncached parity is perfect. In a batch with a
right-padded shorter source, the padded row attends to the pad positions of
the encoder output and its logits are wrong, while the unpadded row is fine.

Usage (system python: onnx 1.23.2, onnxruntime 1.31.1, numpy):

    python3 models/generate_batch_seq2seq.py              # write, then measure
    python3 models/generate_batch_seq2seq.py --out DIR    # write into DIR/
    python3 models/generate_batch_seq2seq.py --verify-only [--out DIR]

The output is deterministic: rerunning regenerates the folder byte-identically
from marian-tiny/. The measurements are described in GENERATION-NOTES.md.
"""

import os
import shutil

import fixture_common as fc

fc.start(__name__)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import helper  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "marian-tiny")
NAME = "marian-ignores-encoder-mask"
MASK = "encoder_attention_mask"
ONES = "encoder_attention_mask_ones"
SHAPE_OUT = "/ignore_encoder_mask/Shape_output_0"


def _rewire(graph, counter):
    """Replace every node input MASK by ONES in graph and nested subgraphs."""
    for node in graph.node:
        if node.name == "/ignore_encoder_mask/Shape":
            continue
        for i, name in enumerate(node.input):
            if name == MASK:
                node.input[i] = ONES
                counter[0] += 1
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                _rewire(attr.g, counter)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    _rewire(g, counter)


def _all_names(graph, names):
    for v in list(graph.input) + list(graph.output) + list(graph.value_info):
        names.add(v.name)
    for t in graph.initializer:
        names.add(t.name)
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
        names.add(node.name)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                _all_names(attr.g, names)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    _all_names(g, names)
    return names


def edit_merged_decoder(src_path, dst_path):
    model = onnx.load(src_path)
    graph = model.graph
    (mask_in,) = [i for i in graph.input if i.name == MASK]
    elem_type = mask_in.type.tensor_type.elem_type
    taken = _all_names(graph, set())
    for n in (ONES, SHAPE_OUT, "/ignore_encoder_mask/Shape",
              "/ignore_encoder_mask/ConstantOfShape"):
        assert n not in taken, n

    counter = [0]
    _rewire(graph, counter)
    shape = helper.make_node("Shape", [MASK], [SHAPE_OUT],
                             name="/ignore_encoder_mask/Shape")
    const = helper.make_node(
        "ConstantOfShape", [SHAPE_OUT], [ONES],
        name="/ignore_encoder_mask/ConstantOfShape",
        value=helper.make_tensor("value", elem_type, [1], [1]))
    graph.node.insert(0, const)
    graph.node.insert(0, shape)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, dst_path)
    return counter[0]


def generate(out_root):
    dst = os.path.join(out_root, NAME)
    if os.path.isdir(dst):
        shutil.rmtree(dst)
    os.makedirs(dst)
    for f in ("config.json", "generation_config.json", "encoder_model.onnx"):
        shutil.copyfile(os.path.join(SRC, f), os.path.join(dst, f))
    n = edit_merged_decoder(os.path.join(SRC, "decoder_model_merged.onnx"),
                            os.path.join(dst, "decoder_model_merged.onnx"))
    print(f"{NAME}: rewired {n} uses of {MASK} to {ONES}")
    for f in sorted(os.listdir(dst)):
        size = os.path.getsize(os.path.join(dst, f))
        assert size < 3_000_000, (f, size)
        print(f"  {f:28s} {size:>9,d} B")


# ----------------------------------------------------------------- measuring

_session = fc.session


class Seq2Seq:
    def __init__(self, folder):
        self.enc = _session(os.path.join(folder, "encoder_model.onnx"))
        self.dec = _session(os.path.join(folder, "decoder_model_merged.onnx"))
        self.past_names = [i.name for i in self.dec.get_inputs()
                           if i.name.startswith("past_key_values.")]
        self.heads = self.dec.get_inputs()[3].shape[1]
        self.head_dim = self.dec.get_inputs()[3].shape[3]

    def encode(self, ids, mask):
        return self.enc.run(None, {"input_ids": ids, "attention_mask": mask})[0]

    def step(self, ids, enc_out, enc_mask, past=None):
        """past None: use_cache_branch False with length-0 past inputs."""
        b = ids.shape[0]
        feed = {"input_ids": ids, "encoder_hidden_states": enc_out,
                MASK: enc_mask}
        if past is None:
            empty = np.zeros((b, self.heads, 0, self.head_dim), np.float32)
            for n in self.past_names:
                feed[n] = empty
            feed["use_cache_branch"] = np.array([False])
        else:
            for n in self.past_names:
                feed[n] = past[n.replace("past_key_values.", "present.")]
            feed["use_cache_branch"] = np.array([True])
        outs = self.dec.run(None, feed)
        names = [o.name for o in self.dec.get_outputs()]
        res = dict(zip(names, outs))
        return res["logits"], res


_maxdiff = fc.maxdiff


def measure(out_root):
    import json
    with open(os.path.join(SRC, "config.json")) as f:
        cfg = json.load(f)
    pad, start = cfg["pad_token_id"], cfg["decoder_start_token_id"]
    orig = Seq2Seq(SRC)
    edit = Seq2Seq(os.path.join(out_root, NAME))
    print("merged decoder inputs:",
          ", ".join(f"{i.name} {i.type} {i.shape}"
                    for i in edit.dec.get_inputs() if not i.name.startswith("past_")),
          f"+ {len(edit.past_names)} past_key_values.<i>.<decoder|encoder>.<key|value>")

    src0 = [37, 412, 85, 903, 261, 14, 0]      # length 7, ends in eos
    src1 = [520, 77, 318, 0]                   # length 4, ends in eos
    forced = 123                                # token fed at the cached step

    # 1. batch 1: edited == original (mask all ones), uncached and cached
    ids = np.array([src0], np.int64)
    mask = np.ones_like(ids)
    prefix = np.array([[start, 211, 57]], np.int64)
    print("\n1. batch 1, source", src0, "decoder prefix", prefix[0].tolist(),
          "mask all ones")
    eo = orig.encode(ids, mask)
    ee = edit.encode(ids, mask)
    print(f"   encoder output edited vs original: max|d| {_maxdiff(eo, ee):.3g}")
    lo, po = orig.step(prefix, eo, mask)
    le, pe = edit.step(prefix, ee, mask)
    pres = max(_maxdiff(po[k], pe[k]) for k in po if k.startswith("present."))
    print(f"   uncached (use_cache_branch False) logits max|d| {_maxdiff(lo, le):.3g}"
          f", presents max|d| {pres:.3g}, bit-identical {np.array_equal(lo, le)}")
    nxt = np.array([[forced]], np.int64)
    lo2, _ = orig.step(nxt, eo, mask, po)
    le2, _ = edit.step(nxt, ee, mask, pe)
    print(f"   cached step (token {forced}) logits max|d| {_maxdiff(lo2, le2):.3g}"
          f", bit-identical {np.array_equal(lo2, le2)}")
    full = np.concatenate([prefix, nxt], axis=1)
    lf, _ = orig.step(full, eo, mask)
    print(f"   original cached vs uncached (last position): "
          f"{_maxdiff(lo2[:, -1], lf[:, -1]):.3g}")

    # 2. padded batch of 2 vs each row alone
    n = len(src0)
    batch_ids = np.array([src0, src1 + [pad] * (n - len(src1))], np.int64)
    batch_mask = np.array([[1] * n, [1] * len(src1) + [0] * (n - len(src1))],
                          np.int64)
    print("\n2. batch 2: input_ids", batch_ids.tolist(), "attention_mask",
          batch_mask.tolist())
    print("   decoder: step 0 = [decoder_start_token_id] per row, use_cache_branch"
          f" False, past length 0; step 1 = token {forced}, use_cache_branch True"
          " with the presents")
    rows = []
    for label, m in (("original", orig), ("edited", edit)):
        enc_b = m.encode(batch_ids, batch_mask)
        d0 = np.full((2, 1), start, np.int64)
        lb0, pb = m.step(d0, enc_b, batch_mask)
        lb1, _ = m.step(np.full((2, 1), forced, np.int64), enc_b, batch_mask, pb)
        res = {}
        for r, src in ((0, src0), (1, src1)):
            ids1 = np.array([src], np.int64)
            m1 = np.ones_like(ids1)
            enc_1 = m.encode(ids1, m1)
            if r == 1:
                res["enc"] = _maxdiff(enc_b[1, :len(src1)], enc_1[0])
            la0, pa = m.step(np.array([[start]], np.int64), enc_1, m1)
            la1, _ = m.step(np.array([[forced]], np.int64), enc_1, m1, pa)
            res["alone", r] = (la0[0], la1[0])
            res[r] = (_maxdiff(lb0[r], la0[0]), _maxdiff(lb1[r], la1[0]),
                      int(lb0[r, -1].argmax()), int(la0[0, -1].argmax()),
                      int(lb1[r, -1].argmax()), int(la1[0, -1].argmax()),
                      float(np.max(np.abs(la0[0]))))
        rows.append((label, res))
        print(f"   {label}: encoder row 1 (first 4 positions) vs alone: "
              f"max|d| {res['enc']:.3g}")
        (a0, a1), (b0, b1) = res["alone", 0], res["alone", 1]
        print(f"   {label}: scale of the encoder's effect: row 0 alone vs row 1"
              f" alone (different sources) step 0 max|d| {_maxdiff(a0, b0):.3g},"
              f" cached step 1 {_maxdiff(a1, b1):.3g}")
        for r in (0, 1):
            s0, s1, a, b, c, d, ref = res[r]
            print(f"   {label}: row {r} batched vs alone  step 0 max|d| {s0:.3g}"
                  f" (rel {s0 / ref:.3g}, top-1 {a} vs {b})   cached step 1 max|d|"
                  f" {s1:.3g} (top-1 {c} vs {d})")
    return rows


def main():
    args = fc.parse_args({})  # [--out DIR] [--verify-only]: the one folder
    out = str(args.out) if args.out else HERE
    if not args.verify_only:
        generate(out)
    measure(out)


if __name__ == "__main__":
    main()
