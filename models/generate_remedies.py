"""Generate four fixtures for what a tool should say (and try) when a model
crashes ONNX Runtime (in an encoder, or in a decoder on cached calls only),
when config.json's sizes are all wrong, and when a float16 overflow reaches the
KV cache; then measure them in onnxruntime.

    python3 models/generate_remedies.py [--out DIR] [NAME ...]
    python3 models/generate_remedies.py --verify-only [--out DIR] [NAME ...]

Default: all four. Versions: torch 2.9.1, transformers 4.57.6, optimum 2.1.0 +
optimum-onnx 0.1.0, onnx 1.23.2, onnxruntime 1.31.1 (requirements-gen.txt),
plus onnxconverter-common 1.16.0 for the float16 conversion (as
generate_numeric.py). Every folder is made from the committed fixtures that
generate.py wrote (marian-tiny, llama-tiny, gpt2-tiny: seeded tiny random
models exported with optimum's main_export), read from models/ (SRC); nothing
is exported again and no hub is reached. See REMEDIES-NOTES.md for the figures.

  crash-gather-oob/         marian-tiny's folder (config.json,
                            generation_config.json and the three decoder files
                            copied byte for byte) with an encoder_model.onnx that
                            KILLS THE PROCESS in onnxruntime 1.31.1's CPU provider:
                            14 nodes spliced in after layer 2 of 6 compute, from
                            the hidden state, a divisor of -1 (ArgMax + 1, Sign,
                            Neg) and an int64 tensor filled with INT64_MIN, and
                            `/bucket/Div` (node 364 of 620) divides them. x86-64's
                            idiv traps on INT64_MIN / -1: SIGFPE (return code -8)
                            in session.run() for every input, at every
                            optimization level. ORT 1.31.1's Div checks integer
                            divisors for zero (microsoft/onnxruntime#16998) but
                            not this overflow. The result would be added to the
                            hidden state times 0, so the encoder's output would
                            be marian-tiny's. The name is the brief's: every
                            out-of-range gather/scatter index tried (Gather,
                            GatherElements, GatherND, ScatterND, ScatterElements,
                            GatherBlockQuantized, MaxUnpool, RoiAlign, ...) is
                            bounds-checked in 1.31.1 (a Python exception or
                            zeros), see the notes.
  crash-decoder-cached/     gpt2-tiny's folder (config.json,
                            generation_config.json copied byte for byte) with a
                            model.onnx that KILLS THE PROCESS only on CACHED
                            calls: 14 nodes spliced in after the embeddings
                            (/transformer/Add_1, wte + wpe) take the past length
                            P (Shape of past_key_values.0.key, Gather axis 2),
                            make a divisor 1 - 2 * Min(P, 1) (1 at P = 0, -1
                            otherwise) and `/crash/Div` (node 49 of 567) divides
                            a Constant int64 [1] of INT64_MIN by it. With an
                            empty past (the prompt) the quotient is INT64_MIN,
                            times 0 added to the hidden state: the outputs are
                            gpt2-tiny's, bitwise. With any past (P >= 1):
                            SIGFPE (return code -8) in session.run(), at every
                            optimization level (ORT keeps the Div: its divisor
                            comes from an input's symbolic dim).
  llama-config-wrong-sizes/ llama-tiny's model.onnx and generation_config.json
                            (byte for byte) with a config.json claiming
                            num_hidden_layers 4, num_attention_heads 8,
                            num_key_value_heads 8 and no head_dim (so head_dim
                            derives as 32 / 8 = 4); hidden_size 32 and
                            vocab_size 1000 are right. The graph has 2 layers,
                            4 attention heads, 2 KV heads, head_dim 8.
  gpt2-fp16-overflow-cache/ gpt2-tiny in float16 (float16 I/O, the conversion of
                            generate_numeric.py) after the VALUE columns of layer
                            1's c_attn weight (transformer.h.1.attn.c_attn.weight
                            [:, 64:96]) were scaled by 1e6 and clipped to +-1e4 in
                            the float32 graph (the converter's own clamp, done
                            first so that the float32 twin and the float16 file
                            hold the same weights). v = x.W reaches ~1e5:
                            /transformer/h.1/attn/c_attn/Gemm overflows float16,
                            present.1.value holds +-Inf and the logits are NaN,
                            while present.0.*, present.1.key stay finite and the
                            float32 twin is finite everywhere. Keeping the 11-node
                            chain c_attn/Gemm .. c_proj/Gemm in float32, with
                            present.1.value and past_key_values.1.value declared
                            float32, gives finite logits within ~1e-3 relative of
                            the float32 twin (the verifier writes that repair to
                            /tmp/gpt2-fp16-overflow-cache-island, $REMEDY_OUT,
                            never into models/). The same chain with the cache
                            left float16 does not; under ORT 1.31.1 CPU its 8
                            data-movement nodes (+ the cache) are enough.

The script re-executes itself with PYTHONHASHSEED=0 and HF_HUB_OFFLINE=1 and
runs ONNX Runtime on one thread. Anything that may crash runs in a
subprocess (`python -c`), never in this process.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import fixture_common as fc
from fixture_common import copy_files, describe, session

fc.start(__name__)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as oh  # noqa: E402
from onnx import numpy_helper  # noqa: E402

warnings.filterwarnings("ignore")

HERE = Path(__file__).resolve().parent
import generate_numeric as gn  # noqa: E402  (to_fp16 and the overflow helpers)

SRC = HERE  # the committed fixtures (generate.py)
OUT = HERE  # --out DIR
SEED = 0
CONFIG_FILES = list(fc.CONFIG_FILES)
REMEDY_OUT = Path(os.environ.get("REMEDY_OUT", "/tmp/gpt2-fp16-overflow-cache-island"))


def dims(v):
    return [d.dim_param if d.HasField("dim_param") else d.dim_value for d in v.type.tensor_type.shape.dim]


def dtype_name(elem):
    return TP.DataType.Name(elem).lower()


# ================================================================ crash-gather-oob

CRASH_SRC = "marian-tiny"
CRASH_COPIED = ["config.json", "generation_config.json", "decoder_model.onnx", "decoder_model_merged.onnx",
                "decoder_with_past_model.onnx"]
CRASH_AFTER = "/layers.2/final_layer_norm/LayerNormalization_output_0"  # layer 2 of 0..5
CRASH_SCOPE = "/bucket"
CRASH_NODE = "/bucket/Div"
INT64_MIN = np.iinfo(np.int64).min


def crash_nodes(h):
    """The spliced nodes, in graph order. From the hidden state h [B, S, 32]:
    ArgMax over the features (0..31) + 1 -> Sign -> Neg: -1 everywhere; an
    int64 [B, S] tensor of INT64_MIN; Div of the two (SIGFPE); the quotient,
    as float times 0, added back to h."""
    P = CRASH_SCOPE
    c = lambda name, a: oh.make_node("Constant", [], [f"{P}/{name}_output_0"], name=f"{P}/{name}",
                                     value=numpy_helper.from_array(a))
    return [
        oh.make_node("ArgMax", [h], [f"{P}/ArgMax_output_0"], name=f"{P}/ArgMax", axis=-1, keepdims=0),
        c("Constant", np.array(1, np.int64)),
        oh.make_node("Add", [f"{P}/ArgMax_output_0", f"{P}/Constant_output_0"], [f"{P}/Add_output_0"], name=f"{P}/Add"),
        oh.make_node("Sign", [f"{P}/Add_output_0"], [f"{P}/Sign_output_0"], name=f"{P}/Sign"),
        oh.make_node("Neg", [f"{P}/Sign_output_0"], [f"{P}/Neg_output_0"], name=f"{P}/Neg"),
        oh.make_node("Shape", [f"{P}/ArgMax_output_0"], [f"{P}/Shape_output_0"], name=f"{P}/Shape"),
        oh.make_node("ConstantOfShape", [f"{P}/Shape_output_0"], [f"{P}/ConstantOfShape_output_0"],
                     name=f"{P}/ConstantOfShape", value=numpy_helper.from_array(np.array([INT64_MIN], np.int64))),
        oh.make_node("Div", [f"{P}/ConstantOfShape_output_0", f"{P}/Neg_output_0"], [f"{P}/Div_output_0"], name=CRASH_NODE),
        oh.make_node("Cast", [f"{P}/Div_output_0"], [f"{P}/Cast_output_0"], name=f"{P}/Cast", to=TP.FLOAT),
        c("Constant_1", np.array(0.0, np.float32)),
        oh.make_node("Mul", [f"{P}/Cast_output_0", f"{P}/Constant_1_output_0"], [f"{P}/Mul_output_0"], name=f"{P}/Mul"),
        c("Constant_2", np.array([-1], np.int64)),
        oh.make_node("Unsqueeze", [f"{P}/Mul_output_0", f"{P}/Constant_2_output_0"], [f"{P}/Unsqueeze_output_0"],
                     name=f"{P}/Unsqueeze"),
        oh.make_node("Add", [h, f"{P}/Unsqueeze_output_0"], [f"{P}/Add_1_output_0"], name=f"{P}/Add_1"),
    ]


def splice(m: onnx.ModelProto, after: str, make_nodes, full_check=False) -> onnx.ModelProto:
    """`make_nodes(after)` inserted right after the node writing `after`; its
    readers read the spliced nodes' last output instead."""
    g = m.graph
    at = next(k for k, n in enumerate(g.node) if after in n.output)
    new = make_nodes(after)
    out = new[-1].output[0]
    users = [n.name for n in g.node[at + 1:] if after in n.input]
    print(f"  spliced after node {at} {g.node[at].name}; its consumers now read {out}: {users}")
    for n in g.node[at + 1:]:
        n.input[:] = [out if x == after else x for x in n.input]
    for k, n in enumerate(new):
        g.node.insert(at + 1 + k, n)
    names = [n.name for n in g.node]
    assert len(set(names)) == len(names), "node names must stay unique"
    onnx.checker.check_model(m, full_check=full_check)
    return m


def splice_crash(m: onnx.ModelProto) -> onnx.ModelProto:
    return splice(m, CRASH_AFTER, crash_nodes)


def gen_crash():
    src, out = SRC / CRASH_SRC, OUT / "crash-gather-oob"
    copy_files(src, out, CRASH_COPIED)
    m = splice_crash(onnx.load(src / "encoder_model.onnx"))
    onnx.save(m, out / "encoder_model.onnx")


# A child process: create the session, say so, run, say so, save the outputs.
CHILD = r"""
import sys, numpy as np, onnxruntime as ort
path, feeds, level, save = sys.argv[1:5]
so = ort.SessionOptions()
so.intra_op_num_threads = 1
so.inter_op_num_threads = 1
so.log_severity_level = 3
if level == "disable_all":
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
elif level == "enable_all":  # the Python default, said explicitly
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
print("session created", flush=True)
out = s.run(None, dict(np.load(feeds)))
print("run returned", flush=True)
if save != "-":
    np.savez(save, **{o.name: v for o, v in zip(s.get_outputs(), out)})
"""


def child_run(path, feeds: dict, level="default", save=None):
    """Run `path` on `feeds` in a fresh python; returns (return code, how it ended)."""
    with tempfile.TemporaryDirectory() as tmp:
        fp = Path(tmp) / "feeds.npz"
        np.savez(fp, **feeds)
        env = dict(os.environ, OMP_NUM_THREADS="1")
        r = subprocess.run([sys.executable, "-c", CHILD, str(path), str(fp), level, str(save) if save else "-"],
                           capture_output=True, text=True, env=env, timeout=300)
    said = r.stdout.split()
    stage = "during session.run()" if "created" in said and "returned" not in said else (
        "at session creation" if "created" not in said else "after run")
    if r.returncode < 0:
        how = f"killed by {signal.Signals(-r.returncode).name} ({r.returncode}) {stage}"
    elif r.returncode == 0:
        how = "ran, exit 0"
    else:
        last = [x for x in r.stderr.strip().splitlines() if x.strip()][-1:] or [""]
        how = f"exit {r.returncode}: {last[0][:200]}"
    return r.returncode, how


def crash_inputs():
    ids = np.array([[5, 6, 7, 8, 9]], np.int64)
    padded = np.array([[5, 6, 7, 8, 9, 10], [11, 12, 13, 999, 999, 999]], np.int64)
    return [
        ("batch 1, 5 tokens [[5,6,7,8,9]], mask ones", {"input_ids": ids, "attention_mask": np.ones_like(ids)}),
        ("batch 2 right-padded with pad 999, mask [[1]*6,[1,1,1,0,0,0]]",
         {"input_ids": padded, "attention_mask": (padded != 999).astype(np.int64)}),
        ("batch 1, 1 token [[0]]", {"input_ids": np.array([[0]], np.int64), "attention_mask": np.ones((1, 1), np.int64)}),
    ]


def truncated_before(m: onnx.ModelProto, node_name: str) -> onnx.ModelProto:
    """The graph's nodes before `node_name` (graph order), the node's inputs as
    the outputs (typed by shape inference)."""
    inferred = onnx.shape_inference.infer_shapes(m)
    vi = {v.name: v for v in inferred.graph.value_info}
    t = onnx.ModelProto()
    t.CopyFrom(m)
    g = t.graph
    at = next(k for k, n in enumerate(g.node) if n.name == node_name)
    node = g.node[at]
    del g.node[at:]
    del g.output[:]
    for x in node.input:
        g.output.append(vi[x])
    onnx.checker.check_model(t)
    return t


def one_node(m: onnx.ModelProto, node_name: str, values: dict) -> onnx.ModelProto:
    """The node alone, its inputs as graph inputs (fed `values`)."""
    node = next(n for n in m.graph.node if n.name == node_name)
    ins = [oh.make_tensor_value_info(x, oh.np_dtype_to_tensor_dtype(values[x].dtype), list(values[x].shape)) for x in node.input]
    x0 = values[node.input[0]]
    outs = [oh.make_tensor_value_info(o, oh.np_dtype_to_tensor_dtype(x0.dtype), list(x0.shape)) for o in node.output]  # Div: as the dividend
    g = oh.make_graph([node], "one_node", ins, outs)
    one = oh.make_model(g, opset_imports=list(m.opset_import), ir_version=m.ir_version)
    onnx.checker.check_model(one)
    return one


def verify_crash(folder: Path):
    describe(folder)
    src = SRC / CRASH_SRC
    same = {n: (folder / n).read_bytes() == (src / n).read_bytes() for n in CRASH_COPIED}
    print(f"  byte-identical to {CRASH_SRC}/: {same}")
    assert all(same.values())
    path = folder / "encoder_model.onnx"
    m = onnx.load(path)
    g = m.graph
    idx = next(k for k, n in enumerate(g.node) if n.name == CRASH_NODE)
    node = g.node[idx]
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(m).graph.value_info}
    print(f"  crashing node: {node.name} ({node.op_type}), node {idx} of {len(g.node)} in graph order; "
          f"spliced nodes {[n.name for n in g.node if n.name.startswith(CRASH_SCOPE + '/')]}")
    for x in node.input:
        print(f"    input {x}: {dtype_name(inferred[x].type.tensor_type.elem_type)} {dims(inferred[x])}")
    print(f"    output {node.output[0]} -> {[n.name for n in g.node if node.output[0] in n.input]}")

    print("  encoder_model.onnx in a child python, ordinary inputs:")
    rcs = []
    for label, feeds in crash_inputs():
        for level in ("default", "disable_all"):
            rc, how = child_run(path, feeds, level)
            rcs.append(rc)
            print(f"    {label}, {level}: {how}")
        rc, how = child_run(src / "encoder_model.onnx", feeds)
        print(f"      the same input through {CRASH_SRC}'s encoder_model.onnx: {how}")
        assert rc == 0
    assert all(rc == -signal.SIGFPE for rc in rcs), rcs

    label, feeds = crash_inputs()[0]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t = truncated_before(m, CRASH_NODE)
        onnx.save(t, tmp / "truncated.onnx")
        rc, how = child_run(tmp / "truncated.onnx", feeds, save=tmp / "values.npz")
        print(f"  truncated just before {CRASH_NODE} (nodes 0..{idx - 1}, outputs = its inputs {list(node.input)}), {label}: {how}")
        assert rc == 0
        values = dict(np.load(tmp / "values.npz"))
        for k, v in values.items():
            print(f"    {k}: {v.dtype} {list(v.shape)}, values {sorted(set(v.ravel().tolist()))}")
        onnx.save(one_node(m, CRASH_NODE, values), tmp / "one.onnx")
        for level in ("default", "disable_all"):
            rc, how = child_run(tmp / "one.onnx", values, level)
            print(f"  {CRASH_NODE} alone in a one-node model (inputs as graph inputs) fed those values, {level}: {how}")
            assert rc == -signal.SIGFPE
        # The same node on inputs where INT64_MIN / -1 does not occur.
        ok = {k: v.copy() for k, v in values.items()}
        ok[node.input[0]][...] = 7
        rc, how = child_run(tmp / "one.onnx", ok)
        print(f"  the one-node model with the dividend 7 instead of INT64_MIN: {how}")
        assert rc == 0


# ================================================================ crash-decoder-cached

CACHED_SRC = "gpt2-tiny"
CACHED_AFTER = "/transformer/Add_1_output_0"  # wte + wpe: the hidden state layer 0 reads
CACHED_PAST = "past_key_values.0.key"  # [batch_size, 4, past_sequence_length, 8]
CACHED_SCOPE = "/crash"
CACHED_NODE = "/crash/Div"
CACHED_PROMPT = [3, 14, 15, 92]


def cached_crash_nodes(h):
    """The spliced nodes, in graph order. The past length P (Shape of
    past_key_values.0.key, Gather axis 2) -> Min(P, 1) -> 1 - 2 * that: 1 at
    P = 0, -1 for P >= 1; a Constant int64 [1] of INT64_MIN; Div of the two
    (SIGFPE when the divisor is -1); the quotient, as float times 0, added to
    the hidden state h [B, S, 32]."""
    P = CACHED_SCOPE
    c = lambda name, a: oh.make_node("Constant", [], [f"{P}/{name}_output_0"], name=f"{P}/{name}",
                                     value=numpy_helper.from_array(a))
    return [
        oh.make_node("Shape", [CACHED_PAST], [f"{P}/Shape_output_0"], name=f"{P}/Shape"),
        c("Constant", np.array(2, np.int64)),
        oh.make_node("Gather", [f"{P}/Shape_output_0", f"{P}/Constant_output_0"], [f"{P}/Gather_output_0"],
                     name=f"{P}/Gather", axis=0),
        c("Constant_1", np.array(1, np.int64)),
        oh.make_node("Min", [f"{P}/Gather_output_0", f"{P}/Constant_1_output_0"], [f"{P}/Min_output_0"], name=f"{P}/Min"),
        c("Constant_2", np.array(2, np.int64)),
        oh.make_node("Mul", [f"{P}/Min_output_0", f"{P}/Constant_2_output_0"], [f"{P}/Mul_output_0"], name=f"{P}/Mul"),
        oh.make_node("Sub", [f"{P}/Constant_1_output_0", f"{P}/Mul_output_0"], [f"{P}/Sub_output_0"], name=f"{P}/Sub"),
        c("Constant_3", np.array([INT64_MIN], np.int64)),
        oh.make_node("Div", [f"{P}/Constant_3_output_0", f"{P}/Sub_output_0"], [f"{P}/Div_output_0"], name=CACHED_NODE),
        oh.make_node("Cast", [f"{P}/Div_output_0"], [f"{P}/Cast_output_0"], name=f"{P}/Cast", to=TP.FLOAT),
        c("Constant_4", np.array(0.0, np.float32)),
        oh.make_node("Mul", [f"{P}/Cast_output_0", f"{P}/Constant_4_output_0"], [f"{P}/Mul_1_output_0"], name=f"{P}/Mul_1"),
        oh.make_node("Add", [h, f"{P}/Mul_1_output_0"], [f"{P}/Add_output_0"], name=f"{P}/Add"),
    ]


def splice_cached(m: onnx.ModelProto) -> onnx.ModelProto:
    return splice(m, CACHED_AFTER, cached_crash_nodes, full_check=True)


def gen_crash_cached():
    src, out = SRC / CACHED_SRC, OUT / "crash-decoder-cached"
    others = sorted(p.name for p in src.iterdir() if p.suffix != ".onnx")
    assert others == sorted(CONFIG_FILES), others
    copy_files(src, out, others)
    m = splice_cached(onnx.load(src / "model.onnx"))
    onnx.save(m, out / "model.onnx")


def verify_crash_cached(folder: Path):
    describe(folder)
    src = SRC / CACHED_SRC
    same = {n: (folder / n).read_bytes() == (src / n).read_bytes() for n in CONFIG_FILES}
    print(f"  byte-identical to {CACHED_SRC}/: {same}")
    assert all(same.values())
    path = folder / "model.onnx"
    m, m0 = onnx.load(path), onnx.load(src / "model.onnx")
    g = m.graph
    onnx.checker.check_model(m, full_check=True)
    assert len({n.name for n in g.node}) == len(g.node)
    assert [(v.name, v.type) for v in g.input] == [(v.name, v.type) for v in m0.graph.input]
    assert [(v.name, v.type) for v in g.output] == [(v.name, v.type) for v in m0.graph.output]
    print(f"  inputs {[(v.name, dims(v)) for v in g.input]} (gpt2-tiny's, same order and types); outputs gpt2-tiny's")
    idx = next(k for k, n in enumerate(g.node) if n.name == CACHED_NODE)
    node = g.node[idx]
    spliced = [(k, n.name) for k, n in enumerate(g.node) if n.name.startswith(CACHED_SCOPE + "/")]
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(m).graph.value_info}
    print(f"  crashing node: {node.name} ({node.op_type}), node {idx} of {len(g.node)} in graph order (0-based); "
          f"spliced nodes {spliced[0][0]}..{spliced[-1][0]}: {[n for _, n in spliced]}")
    for x in node.input:
        print(f"    input {x}: {dtype_name(inferred[x].type.tensor_type.elem_type)} {dims(inferred[x])}")
    print(f"    output {node.output[0]} -> {[n.name for n in g.node if node.output[0] in n.input]}")

    # Optimized graphs (session creation only, in this process: it never runs).
    with tempfile.TemporaryDirectory() as tmp:
        import onnxruntime as ort

        for level, lv in (("ORT_ENABLE_ALL", ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
                          ("ORT_DISABLE_ALL", ort.GraphOptimizationLevel.ORT_DISABLE_ALL)):
            so = ort.SessionOptions()
            so.intra_op_num_threads = 1
            so.log_severity_level = 3
            so.graph_optimization_level = lv
            so.optimized_model_filepath = str(Path(tmp) / "opt.onnx")
            ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
            opt = onnx.load(Path(tmp) / "opt.onnx")
            kept = [n for n in opt.graph.node if n.name == CACHED_NODE]
            consts = {i.name for i in opt.graph.initializer}
            print(f"  {level}, optimized graph saved by ORT: {len(opt.graph.node)} nodes; {CACHED_NODE} kept: {bool(kept)}"
                  + (f", inputs {list(kept[0].input)} (initializers among them: "
                     f"{[x for x in kept[0].input if x in consts]})" if kept else ""))
            assert kept and kept[0].input[1] not in consts

    ref = session(src / "model.onnx")
    ref_off = session(src / "model.onnx", disable_all=True)
    names = [o.name for o in ref.get_outputs()]
    levels = (("enable_all", ref), ("disable_all", ref_off))
    empty = [
        (f"prompt {CACHED_PROMPT}", np.array([CACHED_PROMPT], np.int64), None),
        ("1 token [[0]]", np.array([[0]], np.int64), None),
        ("batch 2 x 3 tokens [[5,6,7],[11,12,13]]", np.array([[5, 6, 7], [11, 12, 13]], np.int64), None),
    ]
    print("  empty past (past_key_values.N.* float32 [B, 4, 0, 8], mask ones, position_ids 0..S-1), model.onnx in a "
          "child python vs gpt2-tiny's model.onnx at the same level:")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for label, ids, _ in empty:
            feeds = feeds_for(ref, ids)
            for level, r in levels:
                rc, how = child_run(path, feeds, level, save=tmp / "out.npz")
                assert rc == 0, how
                got = dict(np.load(tmp / "out.npz"))
                want = dict(zip(names, r.run(None, feeds)))
                d = {k: float(np.abs(got[k] - want[k]).max()) for k in names}
                bitwise = all(np.array_equal(got[k], want[k]) and got[k].shape == want[k].shape for k in names)
                print(f"    {label}, {level}: {how}; logits {list(got['logits'].shape)} max|d| {d['logits']:.3g}, "
                      f"presents max|d| {max(v for k, v in d.items() if k != 'logits'):.3g}; bitwise equal: {bitwise}")
                assert max(d.values()) <= 1e-6, d

        print("  cached calls (past = gpt2-tiny's own presents; next token = its argmax; mask ones, position_ids P..):")
        rcs = []
        cached = []
        for prompt in ([0], CACHED_PROMPT):
            ids = np.array([prompt], np.int64)
            out = dict(zip(names, ref.run(None, feeds_for(ref, ids))))
            past = gn.next_past(None, out)
            tok = np.array([[int(out["logits"][0, -1].argmax())]], np.int64)
            cached.append((f"past length {len(prompt)} (after prompt {prompt}), token {tok.tolist()}", feeds_for(ref, tok, past)))
        for label, feeds in cached:
            for level, r in levels:
                rc, how = child_run(path, feeds, level)
                rcs.append(rc)
                print(f"    {label}, {level}: {how}")
            r.run(None, feeds)  # gpt2-tiny itself runs it
            print(f"      the same feeds through {CACHED_SRC}'s model.onnx: runs")
        assert all(rc == -signal.SIGFPE for rc in rcs), rcs

        label, feeds = cached[-1]
        t = truncated_before(m, CACHED_NODE)
        onnx.save(t, tmp / "truncated.onnx")
        rc, how = child_run(tmp / "truncated.onnx", feeds, save=tmp / "values.npz")
        print(f"  truncated just before {CACHED_NODE} (nodes 0..{idx - 1}, outputs = its inputs {list(node.input)}), "
              f"{label}: {how}")
        assert rc == 0
        values = dict(np.load(tmp / "values.npz"))
        for k, v in values.items():
            print(f"    {k}: {v.dtype} {list(v.shape)}, values {sorted(set(v.ravel().tolist()))}")
        onnx.save(one_node(m, CACHED_NODE, values), tmp / "one.onnx")
        for level in ("enable_all", "disable_all"):
            rc, how = child_run(tmp / "one.onnx", values, level)
            print(f"  {CACHED_NODE} alone in a one-node model fed those values, {level}: {how}")
            assert rc == -signal.SIGFPE
        ok = {k: v.copy() for k, v in values.items()}
        ok[node.input[1]][...] = 1
        rc, how = child_run(tmp / "one.onnx", ok)
        print(f"  the one-node model with the divisor 1 (an empty past's) instead of -1: {how}")
        assert rc == 0


# ================================================================ llama-config-wrong-sizes

WRONG_SIZES = {"num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8}
TRUE_SIZES = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8}


def gen_llama_wrong_sizes():
    src, out = SRC / "llama-tiny", OUT / "llama-config-wrong-sizes"
    copy_files(src, out, ["model.onnx", "generation_config.json"])
    cfg = json.loads((src / "config.json").read_text())
    assert json.dumps(cfg, indent=2, sort_keys=True) + "\n" == (src / "config.json").read_text()
    assert {k: cfg[k] for k in TRUE_SIZES} == TRUE_SIZES, cfg
    cfg.update(WRONG_SIZES)  # the lies
    del cfg["head_dim"]
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def graph_sizes(m: onnx.ModelProto):
    """Layers, KV heads, head_dim read off the past inputs; attention heads from
    the q_proj weight's width / head_dim."""
    g = m.graph
    past = [v for v in g.input if v.name.startswith("past_key_values.")]
    layers = len({v.name.split(".")[1] for v in past})
    (kv, hd), = {(dims(v)[1], dims(v)[3]) for v in past}
    inits = {i.name: i for i in g.initializer}
    q = next(n for n in g.node if n.name == "/model/layers.0/self_attn/q_proj/MatMul")
    k = next(n for n in g.node if n.name == "/model/layers.0/self_attn/k_proj/MatMul")
    qw, kw = list(inits[q.input[1]].dims), list(inits[k.input[1]].dims)
    return dict(num_hidden_layers=layers, num_attention_heads=qw[1] // hd, num_key_value_heads=kv, head_dim=hd,
                hidden_size=qw[0], q_proj=(q.input[1], qw), k_proj=(k.input[1], kw))


def verify_llama_wrong_sizes(folder: Path):
    import transformers

    describe(folder)
    src = SRC / "llama-tiny"
    for n in ("model.onnx", "generation_config.json"):
        same = (folder / n).read_bytes() == (src / n).read_bytes()
        print(f"  {n} byte-identical to llama-tiny's: {same}")
        assert same
    cfg = json.loads((folder / "config.json").read_text())
    hf = transformers.AutoConfig.from_pretrained(folder)
    m = onnx.load(folder / "model.onnx")
    gs = graph_sizes(m)
    print(f"  graph: past inputs {[v.name for v in m.graph.input if v.name.startswith('past')]}, "
          f"dims {dims(m.graph.input[3])}; q_proj weight {gs['q_proj'][0]} {gs['q_proj'][1]}, "
          f"k_proj weight {gs['k_proj'][0]} {gs['k_proj'][1]}")
    print("  | field | config.json | transformers' LlamaConfig | the graph |")
    for key in ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_size", "vocab_size"):
        graph = gs.get(key, dims(m.graph.output[0])[2] if key == "vocab_size" else None)
        print(f"  | {key} | {cfg.get(key, '(absent)')} | {getattr(hf, key, '(none)')} | {graph} |")
    for key, v in TRUE_SIZES.items():
        assert gs[key] == v, (key, gs[key])
    assert cfg["hidden_size"] == gs["hidden_size"] and cfg["vocab_size"] == dims(m.graph.output[0])[2]
    assert "head_dim" not in cfg and hf.head_dim == 4

    s = session(folder / "model.onnx")
    ids = np.array([[1, 37, 205, 411, 89]], np.int64)

    def feeds(ids, past, past_len, kv, hd, layers):
        f = {"input_ids": ids, "attention_mask": np.ones((1, past_len + ids.shape[1]), np.int64),
             "position_ids": np.arange(past_len, past_len + ids.shape[1], dtype=np.int64)[None]}
        for i in range(layers):
            for t in ("key", "value"):
                n = f"past_key_values.{i}.{t}"
                f[n] = past[n] if past else np.zeros((1, kv, 0, hd), np.float32)
        return f

    names = [o.name for o in s.get_outputs()]
    out = dict(zip(names, s.run(None, feeds(ids, None, 0, 2, 8, 2))))
    past = {k.replace("present.", "past_key_values."): v for k, v in out.items() if k.startswith("present.")}
    tok = np.array([[int(out["logits"][0, -1].argmax())]], np.int64)
    step = dict(zip(names, s.run(None, feeds(tok, past, ids.shape[1], 2, 8, 2))))
    full = s.run(None, feeds(np.concatenate([ids, tok], 1), None, 0, 2, 8, 2))[0]
    dd = float(np.abs(step["logits"][0, -1] - full[0, -1]).max())
    print(f"  graph sizes (2 layers, past [1, 2, 0, 8]): prompt {ids.tolist()} -> presents {list(out['present.0.key'].shape)}; "
          f"cached step vs uncached max|d| {dd:.2e}")
    assert dd <= 1e-4
    L, kvh = hf.num_hidden_layers, hf.num_key_value_heads
    for label, layers, kv, hd in (("config's sizes: 4 layers of past [1, 8, 0, 4]", L, kvh, hf.head_dim),
                                  ("config's heads and head_dim on the graph's 2 layers: past [1, 8, 0, 4]", 2, kvh, hf.head_dim)):
        try:
            s.run(None, feeds(ids, None, 0, kv, hd, layers))
            print(f"  {label}: RUNS")
        except Exception as e:  # noqa: BLE001
            print(f"  {label}: refused: {' / '.join(x.strip() for x in str(e).splitlines() if x.strip())[:400]}")


# ================================================================ gpt2-fp16-overflow-cache

V_WEIGHT, V_COLUMNS, V_SCALE, V_CLIP = "transformer.h.1.attn.c_attn.weight", slice(64, 96), 1e6, 1e4
OVERFLOW_PROMPT = gn.OVERFLOW_PROMPT  # [3, 14, 15, 92]
RANDOM = 50
# Every node whose float32 output goes beyond 65504 (the verifier finds them
# in the float32 twin), in graph order: v out of the Gemm, split into heads,
# the cache, the attention product, heads merged, the out-projection (back to
# <= ~1.1e4).
CHAIN = [
    "/transformer/h.1/attn/c_attn/Gemm",
    "/transformer/h.1/attn/c_attn/Reshape_1",
    "/transformer/h.1/attn/Split",
    "/transformer/h.1/attn/Reshape_1",
    "/transformer/h.1/attn/Transpose_1",
    "/transformer/h.1/attn/Concat_4",
    "/transformer/h.1/attn/MatMul_1",
    "/transformer/h.1/attn/Transpose_4",
    "/transformer/h.1/attn/Reshape_3",
    "/transformer/h.1/attn/c_proj/Reshape",
    "/transformer/h.1/attn/c_proj/Gemm",
]
CACHE_F32 = ["present.1.value", "past_key_values.1.value"]


def overflow_fp32() -> onnx.ModelProto:
    """gpt2-tiny's float32 graph, layer 1's value projection x 1e6 clipped to +-1e4."""
    m = onnx.load(SRC / "gpt2-tiny" / "model.onnx")
    init = next(i for i in m.graph.initializer if i.name == V_WEIGHT)
    w = numpy_helper.to_array(init).copy()
    w[:, V_COLUMNS] = np.clip(w[:, V_COLUMNS] * np.float32(V_SCALE), -V_CLIP, V_CLIP)
    init.CopyFrom(numpy_helper.from_array(w, init.name))
    return m


def gen_gpt2_overflow_cache():
    src, out = SRC / "gpt2-tiny", OUT / "gpt2-fp16-overflow-cache"
    copy_files(src, out, CONFIG_FILES)
    onnx.save(gn.to_fp16(overflow_fp32()), out / "model.onnx")


def keep_float32(m: onnx.ModelProto, chain, f32_io=()) -> onnx.ModelProto:
    """The float16 file with the `chain` nodes computed in float32.
    - A float16 input of a chain node from outside the chain (activation,
      initializer, graph input) is read through a Cast to float32.
    - Inside the chain the float32 values flow on.
    - A float32 value that a node outside the chain reads (a chain output, or
      a graph input in `f32_io`) reaches it through a Cast to float16 (Shape
      reads it as is).
    - Graph inputs/outputs in `f32_io` are declared float32; any other graph
      output a chain node writes keeps its name and float16 type through a
      Cast back (the chain reads the float32 value)."""
    m = onnx.shape_inference.infer_shapes(m)
    g = m.graph
    types = {v.name: v.type.tensor_type.elem_type for v in list(g.value_info) + list(g.input) + list(g.output)}
    types.update({i.name: i.data_type for i in g.initializer})
    chain = set(chain)
    assert chain <= {n.name for n in g.node}, chain - {n.name for n in g.node}
    for v in list(g.input) + list(g.output):
        if v.name in f32_io:
            assert types[v.name] == TP.FLOAT16, v.name
            v.type.tensor_type.elem_type = TP.FLOAT
    outputs = {o.name for o in g.output} - set(f32_io)
    written = {o for n in g.node if n.name in chain for o in n.output}
    assert all(o.name in written for o in g.output if o.name in f32_io), "a float32 graph output must be written by the chain"
    f32 = set(f32_io) | {o for n in g.node if n.name in chain for o in n.output if types.get(o) == TP.FLOAT16}
    renamed = {o: f"{o}/f32" for o in f32 & outputs}  # chain-written float16 graph outputs
    cast_in, cast_out, new = {}, {}, []

    def cast(x, to, cache, tag):
        if x not in cache:
            cache[x] = f"{x}/{tag}"
            new.append(oh.make_node("Cast", [x], [cache[x]], name=f"/keep_float32/Cast_{tag}_{len(cache) - 1}", to=to))
        return cache[x]

    for n in g.node:
        if n.name in chain:
            for j, x in enumerate(n.input):
                if x in renamed:
                    n.input[j] = renamed[x]
                elif x and x not in f32 and types.get(x) == TP.FLOAT16:
                    n.input[j] = cast(x, TP.FLOAT, cast_in, "f32")
            new.append(n)
            for j, o in enumerate(n.output):
                if o in renamed:
                    n.output[j] = renamed[o]
                    new.append(oh.make_node("Cast", [renamed[o]], [o], name=f"/keep_float32/CastBack_{o}", to=TP.FLOAT16))
        else:
            if n.op_type not in ("Shape", "Size"):
                for j, x in enumerate(n.input):
                    if x in f32 and x not in renamed:
                        n.input[j] = cast(x, TP.FLOAT16, cast_out, "f16")
            new.append(n)
    del g.node[:]
    g.node.extend(new)
    del g.value_info[:]
    onnx.checker.check_model(m)
    return m


def feeds_for(s, ids, past=None, mask=None):
    pl = 0 if not past else next(iter(past.values())).shape[2]
    f = {}
    for i in s.get_inputs():
        n = i.name
        if n == "input_ids":
            f[n] = ids
        elif n == "attention_mask":
            f[n] = np.ones((ids.shape[0], pl + ids.shape[1]), np.int64) if mask is None else mask
        elif n == "position_ids":
            f[n] = np.repeat(np.arange(pl, pl + ids.shape[1], dtype=np.int64)[None], ids.shape[0], 0)
        else:
            f[n] = past[n] if past else np.zeros((ids.shape[0], 4, 0, 8), gn.NP[i.type])
    return f


def run_all(s, ids, past=None):
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds_for(s, ids, past))))


def bad(out):
    return {k: gn.nonfinite(v) for k, v in out.items() if gn.nonfinite(v)}


def max_finite(v):
    v = np.asarray(v, np.float64)
    f = v[np.isfinite(v)]
    return float(np.abs(f).max()) if f.size else 0.0


def verify_gpt2_overflow_cache(folder: Path):
    describe(folder)
    src = SRC / "gpt2-tiny"
    for n in CONFIG_FILES:
        assert (folder / n).read_bytes() == (src / n).read_bytes()
    path = folder / "model.onnx"
    m16 = onnx.load(path)
    w16 = numpy_helper.to_array(next(i for i in m16.graph.initializer if i.name == V_WEIGHT)).astype(np.float64)
    w32 = numpy_helper.to_array(next(i for i in overflow_fp32().graph.initializer if i.name == V_WEIGHT))
    print(f"  {V_WEIGHT} [:, 64:96] (value columns) in the file: float16, |w| max {np.abs(w16[:, V_COLUMNS]).max():g}, "
          f"{(np.abs(w16[:, V_COLUMNS]) == V_CLIP).mean():.1%} at +-1e4; q/k columns |w| max {np.abs(w16[:, :64]).max():.4g}; "
          f"max|d| to the float32 twin's {float(np.abs(w16 - w32).max()):.2g} (float16 rounding: spacing 8 near 1e4)")
    s = session(path)
    ins, outs = gn.signature(s)
    print("  inputs:", ins)
    print("  outputs:", outs)
    prompt = np.array([OVERFLOW_PROMPT], np.int64)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        onnx.save(overflow_fp32(), tmp / "fp32.onnx")
        r = session(tmp / "fp32.onnx")

        # ---- the float16 file vs its float32 twin
        for label, disable in (("default session", False), ("ORT_DISABLE_ALL", True)):
            s = session(path, disable_all=disable)
            out = run_all(s, prompt)
            print(f"  {label}, prompt {OVERFLOW_PROMPT}, zero-length float16 past:")
            for k, v in out.items():
                print(f"    {k}: {gn.nonfinite(v) or 'finite'} ({int(np.isnan(v).sum())} NaN, {int(np.isinf(v).sum())} Inf of {v.size})")
            assert set(bad(out)) == {"logits", "present.1.value"}, bad(out)
            assert not np.isnan(out["present.1.value"]).any()
            step = run_all(s, np.array([[0]], np.int64), gn.next_past(None, out))
            print("    cached step (token 0, past 4): " + ", ".join(f"{k} {gn.nonfinite(v) or 'finite'}" for k, v in step.items()))
        ref = run_all(r, prompt)
        print(f"  float32 twin, same prompt: every output finite: {not bad(ref)}; max|present.1.value| "
              f"{float(np.abs(ref['present.1.value']).max()):.6g}; max|present.0.*, present.1.key| "
              f"{max(float(np.abs(ref[k]).max()) for k in ref if k.startswith('present.') and k != 'present.1.value'):.4g}; "
              f"max|logits| {float(np.abs(ref['logits']).max()):.4g}")
        assert not bad(ref)
        s = session(path)
        rng, counts, names, fp32_bad = np.random.default_rng(SEED), dict(logits=0, pv=0, other=0), set(), 0
        for _ in range(RANDOM):
            ids = rng.integers(0, 1000, size=(1, 4), dtype=np.int64)
            o = run_all(s, ids)
            counts["logits"] += bool(gn.nonfinite(o["logits"]))
            counts["pv"] += bool(gn.nonfinite(o["present.1.value"]))
            counts["other"] += any(gn.nonfinite(v) for k, v in o.items() if k.startswith("present.") and k != "present.1.value")
            names.update(bad(o))
            fp32_bad += bool(bad(run_all(r, ids)))
        print(f"  {RANDOM} random 4-token prompts (default_rng({SEED})): non-finite logits {counts['logits']}/{RANDOM}, "
              f"present.1.value {counts['pv']}/{RANDOM}, any other present {counts['other']}/{RANDOM}; outputs ever non-finite "
              f"{sorted(names)}; float32 twin with a non-finite output {fp32_bad}/{RANDOM}")
        assert fp32_bad == 0 and counts["other"] == 0

        # ---- coverage: every token at every position
        m32 = overflow_fp32()
        gn._expose_all(m32)
        onnx.save(m32, tmp / "fp32-all.onnx")
        a = session(tmp / "fp32-all.onnx")
        names_all = [o.name for o in a.get_outputs()]
        big, n_over, n_pairs, lo_v = {}, 0, 0, np.inf
        for lo in range(0, 1000, 100):
            ids = np.repeat(np.arange(lo, lo + 100, dtype=np.int64)[:, None], 128, axis=1)
            outs16 = s.run(["present.1.value"], feeds_for(s, ids))[0]
            n_over += int(np.isinf(outs16).any(axis=(1, 3)).sum())
            n_pairs += ids.size
            vals = dict(zip(names_all, a.run(None, feeds_for(a, ids))))
            per = np.abs(vals["present.1.value"]).max(axis=(1, 3))
            lo_v = min(lo_v, float(per.min()))
            for k, v in vals.items():
                if v.dtype == np.float32:
                    big[k] = max(big.get(k, 0.0), max_finite(v))
        print(f"  every token id at every position (1000 x 128, one token repeated): (token, position) pairs whose "
              f"present.1.value holds an Inf in the float16 file: {n_over}/{n_pairs}; float32 twin's smallest per-pair "
              f"max|v| {lo_v:.6g}")
        producers = {o: n.name for n in m32.graph.node for o in n.output}
        over = [(producers[k], k, v) for k, v in big.items() if v > 65504 and k in producers]
        order = {n.name: i for i, n in enumerate(m32.graph.node)}
        over.sort(key=lambda t: order[t[0]])
        print("  float32 twin, same pairs: node outputs whose largest finite |value| is beyond 65504, graph order:")
        for node, k, v in over:
            print(f"    {node}  ->  {k}  {v:.6g}")
        after = {k: v for k, v in big.items() if k in ("/transformer/h.1/attn/c_proj/Gemm_output_0", "/transformer/h.1/Add_output_0",
                                                       "/transformer/h.1/Add_1_output_0")}
        print(f"    after the chain: {', '.join(f'{k} {v:.6g}' for k, v in after.items())}")
        chain_found = list(dict.fromkeys(n for n, _, _ in over))
        assert chain_found == CHAIN[:-1], chain_found  # c_proj/Gemm brings it back below 65504

        first_nonfinite(path, prompt, tmp)

        # ---- remedies
        print(f"  float32 island = {len(CHAIN)} nodes {CHAIN[0]} .. {CHAIN[-1]} (the nodes above + c_proj/Gemm, whose "
              f"output is back below 65504), float16 file edited (keep_float32):")
        REMEDY_OUT.mkdir(parents=True, exist_ok=True)
        copy_files(src, REMEDY_OUT, CONFIG_FILES)
        fixed = keep_float32(onnx.load(path), CHAIN, CACHE_F32)
        onnx.save(fixed, REMEDY_OUT / "model.onnx")
        print(f"  repaired: {REMEDY_OUT}/model.onnx ({(REMEDY_OUT / 'model.onnx').stat().st_size} B), "
              f"{sum(n.name.startswith('/keep_float32/') for n in fixed.graph.node)} Casts added; "
              f"{CACHE_F32} declared float32")
        casts = [n for n in fixed.graph.node if n.name.startswith("/keep_float32/")]
        print(f"    read through a Cast to float32: {[n.input[0] for n in casts if n.attribute[0].i == TP.FLOAT]}")
        print(f"    written through a Cast to float16: {[n.input[0] for n in casts if n.attribute[0].i == TP.FLOAT16]}")
        remedy_check(REMEDY_OUT / "model.onnx", r, must_pass=True)
        print("  variant: the chain, but present.1.value / past_key_values.1.value left float16 (a Cast back at the output):")
        onnx.save(keep_float32(onnx.load(path), CHAIN, ()), tmp / "variant.onnx")
        remedy_check(tmp / "variant.onnx", r, must_pass=False)
        # Which parts of the chain are needed under this ORT? Prefixes (the
        # way an island grows from the first overflowing node) and the chain
        # with one node left out. present/past float32 whenever Concat_4 (the
        # node writing present.1.value) is in the island.
        print(f"  islands tried (present/past float32 iff {CHAIN[5]} is in): calls with a non-finite output of "
              f"{1 + 4 + RANDOM} (prompt + 4 cached steps + {RANDOM} random prompts), worst rel of the finite logits "
              f"vs the float32 twin; default session | ORT_DISABLE_ALL")
        tried = [(f"prefix {k:2d}: {CHAIN[0]} .. {CHAIN[k - 1]}", CHAIN[:k]) for k in range(1, len(CHAIN) + 1)]
        tried += [(f"all but {x}", [c for c in CHAIN if c != x]) for x in CHAIN]
        moves = [c for c in CHAIN if c not in (CHAIN[0], CHAIN[6], CHAIN[10])]
        tried += [(f"the data-movement nodes only (all but the Gemms and MatMul_1): {[c.rsplit('/', 1)[-1] for c in moves]}", moves)]
        for label, chain in tried:
            io = CACHE_F32 if CHAIN[5] in chain else ()
            onnx.save(keep_float32(onnx.load(path), chain, io), tmp / "variant.onnx")
            cells = []
            for disable in (False, True):
                n_bad, worst = remedy_counts(session(tmp / "variant.onnx", disable_all=disable), r)
                cells.append(f"{n_bad:2d}/{1 + 4 + RANDOM} {worst:.2g}")
            print(f"    {' | '.join(cells)}   {label}")
        try:
            onnx.save(gn.to_fp16(overflow_fp32(), keep_float32=CHAIN), tmp / "blocked.onnx")
            session(tmp / "blocked.onnx")
            print("  onnxconverter-common node_block_list = the Casts + CHAIN: loads")
        except Exception as e:  # noqa: BLE001
            print(f"  onnxconverter-common node_block_list = the Casts + CHAIN (converting the float32 twin again): "
                  f"ORT refuses it: {str(e).splitlines()[0][:240]}")


def first_nonfinite(path, prompt, tmp):
    """ORT_DISABLE_ALL, every node output exposed: the first node (graph
    order) whose output is non-finite while its float inputs are finite
    (generate_numeric's helpers; Constants that are -inf by design skipped)."""
    m = onnx.load(path)
    missing = gn._expose_all(m)
    onnx.save(m, tmp / "all16.onnx")
    s = session(tmp / "all16.onnx", disable_all=True)
    print(f"  every node output exposed ({len(m.graph.output)} outputs, {len(missing)} without a type left out), ORT_DISABLE_ALL:")
    consts, first = gn._first_nonfinite(m, run_all(s, prompt))
    print(f"    skipped Constants non-finite by design: {[c.name for c in consts]}")
    n, ranges, outs = first
    print(f"    prompt {OVERFLOW_PROMPT}: first node with finite float inputs and a non-finite output: {n.name} ({n.op_type}) -> {outs}")
    for name, dt, lo, hi in ranges:
        print(f"      input {name} {dt}: min {lo:.6g} max {hi:.6g}")
    assert n.name == CHAIN[0]
    vals = run_all(s, prompt)
    nan = lambda x: x in vals and vals[x].dtype.kind == "f" and bool(np.isnan(vals[x]).any())
    first_nan = next((k for k in m.graph.node if any(nan(o) for o in k.output) and not any(nan(i) for i in k.input)), None)
    if first_nan is not None:
        print(f"    first node whose output has NaN while no input has: {first_nan.name} ({first_nan.op_type}) <- "
              f"{[(i, gn.nonfinite(vals[i]) or 'finite') for i in first_nan.input if i in vals]}")
    rng, seen = np.random.default_rng(SEED), {}
    for _ in range(RANDOM):
        _, f = gn._first_nonfinite(m, run_all(s, rng.integers(0, 1000, size=(1, 4), dtype=np.int64)))
        key = f"{f[0].name} ({f[0].op_type})" if f else "none"
        seen[key] = seen.get(key, 0) + 1
    print(f"    over the {RANDOM} random prompts: {seen}")


def remedy_counts(s, r, steps=4):
    """(calls with a non-finite output, worst rel of the finite logits vs the
    twin) over the prompt, `steps` cached steps on the model's own presents
    (tokens: the twin's greedy choice) and RANDOM random 4-token prompts."""
    prompt = np.array([OVERFLOW_PROMPT], np.int64)
    o, ref = run_all(s, prompt), run_all(r, prompt)
    calls = [(o, ref)]
    past, rpast = gn.next_past(None, o), gn.next_past(None, ref)
    for _ in range(steps):
        tok = np.array([[int(ref["logits"][0, -1].argmax())]], np.int64)
        o, ref = run_all(s, tok, past), run_all(r, tok, rpast)
        past, rpast = gn.next_past(past, o), gn.next_past(rpast, ref)
        calls.append((o, ref))
    rng = np.random.default_rng(SEED)
    for _ in range(RANDOM):
        ids = rng.integers(0, 1000, size=(1, 4), dtype=np.int64)
        calls.append((run_all(s, ids), run_all(r, ids)))
    n_bad, worst = 0, 0.0
    for a, b in calls:
        if bad(a):
            n_bad += 1
        else:
            worst = max(worst, gn.compare(a["logits"][0, -1], b["logits"][0, -1])[1])
    return n_bad, worst


def remedy_check(path, r, must_pass, steps=4):
    """Prompt + `steps` greedy cached steps fed the model's own presents, vs the
    float32 twin's own cached loop; random prompts vs the twin."""
    s = session(path)
    prompt = np.array([OVERFLOW_PROMPT], np.int64)
    o, ref = run_all(s, prompt), run_all(r, prompt)
    dtypes = {k: str(v.dtype) for k, v in o.items()}
    nonf = sorted(set(bad(o)))
    rows = [gn.compare(o["logits"][0], ref["logits"][0])]
    pv = gn.compare(o["present.1.value"], ref["present.1.value"]) if not bad(o) else None
    past, rpast, seq = gn.next_past(None, o), gn.next_past(None, ref), prompt
    for _ in range(steps):
        tok = np.array([[int(ref["logits"][0, -1].argmax())]], np.int64)
        seq = np.concatenate([seq, tok], 1)
        o, ref = run_all(s, tok, past), run_all(r, tok, rpast)
        past, rpast = gn.next_past(past, o), gn.next_past(rpast, ref)
        nonf = sorted(set(nonf) | set(bad(o)))
        rows.append(gn.compare(o["logits"][0, -1], ref["logits"][0, -1]))
    rng, n_bad, worst = np.random.default_rng(SEED), 0, 0.0
    for _ in range(RANDOM):
        ids = rng.integers(0, 1000, size=(1, 4), dtype=np.int64)
        a, b = run_all(s, ids), run_all(r, ids)
        n_bad += bool(bad(a))
        if not bad(a):
            worst = max(worst, gn.compare(a["logits"][0], b["logits"][0])[1])
    print(f"    output dtypes {dtypes}")
    print(f"    prompt {OVERFLOW_PROMPT} + {steps} cached steps (tokens {seq[0].tolist()}, the twin's greedy choice): "
          f"non-finite outputs {nonf or 'none'}")
    if pv:
        print("    " + gn.fmt("prompt present.1.value vs float32 twin", pv))
    for k, c in enumerate(rows):
        if np.isfinite(c[0]):
            print("    " + gn.fmt(f"call {k} logits vs float32 twin (cached)", c))
        else:
            print(f"    call {k} logits: non-finite")
    print(f"    {RANDOM} random 4-token prompts: with a non-finite output {n_bad}/{RANDOM}; logits vs float32 twin worst rel "
          f"{worst:.3g} (over the finite ones)")
    if must_pass:
        assert not nonf and n_bad == 0, (nonf, n_bad)
        assert all(c[1] < 1e-2 and c[2] for c in rows) and worst < 1e-2, (rows, worst)
    else:
        assert nonf or n_bad, "the variant repairs it too"


GENERATORS = {
    "crash-gather-oob": gen_crash,
    "crash-decoder-cached": gen_crash_cached,
    "llama-config-wrong-sizes": gen_llama_wrong_sizes,
    "gpt2-fp16-overflow-cache": gen_gpt2_overflow_cache,
}
VERIFIERS = {
    "crash-gather-oob": verify_crash,
    "crash-decoder-cached": verify_crash_cached,
    "llama-config-wrong-sizes": verify_llama_wrong_sizes,
    "gpt2-fp16-overflow-cache": verify_gpt2_overflow_cache,
}


if __name__ == "__main__":
    args = fc.parse_args(GENERATORS)
    OUT = args.out or OUT
    fc.versions("onnx", "onnxruntime")
    fc.run_all(args, OUT, GENERATORS, VERIFIERS)
