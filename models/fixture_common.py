"""What every fixture generator repeats, kept once.

Each generate_*.py keeps only what is its own (its models, graph edits and
measurements) and takes the rest from here:

- start(): HF_HUB_OFFLINE and the PYTHONHASHSEED=0 re-exec (byte reproducibility);
- one_thread_torch(), quiet_transformers(), seed_all(): the same numbers on every run;
- optimum_export(), eager_attention(), legacy_decoder_pair(), write_files():
  the save_pretrained -> optimum main_export round trip the exports go through;
- write_configs(), copy_configs(), save_source(), save_hf(), genai_builder():
  the files written beside a graph, and the onnxruntime-genai builder run;
- float_casts(), quantize_q8(): the converter settings transformers.js uses;
- session(), run(), maxdiff(), i64(), errmsg(), try_run(), margin(): running
  a file in onnxruntime (one thread) and comparing it with PyTorch;
- describe(), signature(), list_files(): what a written folder holds;
- parse_args(), run_all(): the command line `[--out DIR] [--verify-only] [NAME ...]`.

Nothing heavy is imported here at module level (torch, transformers, onnx,
onnxruntime and optimum are imported where used): importing this module must
stay cheap, since every generator imports it before its re-exec.
regenerate_all.py runs every generator in the order they depend on.
"""
import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SEED = 0
MAX_FILE = 3_000_000  # every committed fixture file stays under 3 MB
CONFIG_FILES = ("config.json", "generation_config.json")
TEXT_GENERATION = "text-generation-with-past"
# The onnxruntime-genai 0.18.0 builder needs transformers 5 (see
# GENAI-BUILDER-NOTES.md for how that venv is made).
BUILDER_PYTHON = Path(os.environ.get("GENAI_BUILDER_PYTHON", "/work/genvenv-tf5/bin/python"))


# ---------------------------------------------------------------- start-up

def start(name):
    """Call with __name__ before importing torch or optimum. A script run
    directly re-executes itself with PYTHONHASHSEED=0: optimum's
    merge_decoders (and other exporters) pick names by iterating Python sets,
    so without a fixed hash seed the same export gives other bytes. The hub
    is never asked for anything (HF_HUB_OFFLINE=1)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if name == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, *sys.argv])


def one_thread_torch():
    """torch on one thread: the same float sums on every machine and run."""
    import torch

    torch.set_num_threads(1)
    return torch


def quiet_transformers():
    from transformers.utils import logging as tlog

    tlog.set_verbosity_error()


def versions(*names):
    """The versions the numbers were made with, as the run's first line."""
    import importlib

    print(", ".join(f"{n} {importlib.import_module(n).__version__}" for n in names), flush=True)


def seed_all(seed=SEED):
    """optimum's dummy inputs draw from random, numpy and torch."""
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# ---------------------------------------------------------------- optimum exports

@contextlib.contextmanager
def eager_attention(announce=False):
    """optimum's main_export loads the checkpoint with
    TasksManager.get_model_from_task(..., **loading_kwargs); this adds
    attn_implementation="eager" to that call (transformers' default, sdpa,
    drops some of what eager attention computes, e.g. Gemma2's softcap)."""
    from optimum.exporters.tasks import TasksManager

    original = TasksManager.__dict__["get_model_from_task"]
    inner = TasksManager.get_model_from_task

    def get_model_from_task(*args, **kwargs):
        kwargs["attn_implementation"] = "eager"
        model = inner(*args, **kwargs)
        if announce:
            print(f"  optimum loaded {type(model).__name__} with attn_implementation "
                  f"{model.config._attn_implementation!r}")
        return model

    TasksManager.get_model_from_task = staticmethod(get_model_from_task)
    try:
        yield
    finally:
        TasksManager.get_model_from_task = original


def legacy_decoder_pair(model, config):
    """optimum 1.x's `legacy=True` branch of get_decoder_models_for_export
    (optimum/exporters/utils.py), without the `legacy` kwarg the 0.1.0 configs
    no longer take: decoder_model (past out, not in) and
    decoder_with_past_model (past in and out); optimum's post-processing
    merges the pair into decoder_model_merged.onnx."""
    kw = dict(task=config.task, int_dtype=config.int_dtype, float_dtype=config.float_dtype)
    no_past = config.__class__(model.config, use_past=config.use_past, use_past_in_inputs=False, **kw)
    out = {"decoder_model": (model, no_past)}
    if config.use_past:
        with_past = config.__class__(model.config, use_past=True, use_past_in_inputs=True, **kw)
        out["decoder_with_past_model"] = (model, with_past)
    return out


def optimum_export(model, task=TEXT_GENERATION, keep=None, patch=None, legacy=False, export=None,
                   label="optimum", **shapes):
    """save_pretrained(model) to a temporary folder, optimum's main_export
    from there (inside the `patch` context, if any; with the legacy decoder
    pair if asked; every random generator seeded just before), and return
    {file name: bytes}. keep=None: optimum must have written exactly
    config.json, generation_config.json and model.onnx, all returned;
    otherwise the `keep` files plus the config files it wrote.
    export(src, dst) replaces main_export (still seeded, still patched)."""
    import optimum.exporters.utils as exporters_utils
    from optimum.exporters.onnx import main_export

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "src", Path(tmp) / "onnx"
        model.save_pretrained(src)
        original = exporters_utils.get_decoder_models_for_export
        if legacy:
            exporters_utils.get_decoder_models_for_export = legacy_decoder_pair
        try:
            with patch() if patch else contextlib.nullcontext():
                seed_all()
                if export is not None:
                    export(src, dst)
                else:
                    main_export(str(src), str(dst), task=task, do_validation=False, **shapes)
        finally:
            exporters_utils.get_decoder_models_for_export = original
        written = sorted(p.name for p in dst.iterdir())
        print(f"  {label} wrote: {written}")
        if keep is None:
            assert written == ["config.json", "generation_config.json", "model.onnx"], written
            names = written
        else:
            names = list(keep) + [n for n in CONFIG_FILES if (dst / n).exists()]
        return {n: (dst / n).read_bytes() for n in names}


def export_from_model(model, task, keep, dest: Path):
    """optimum's onnx_export_from_model on an in-memory model (not seeded: the
    fixtures made this way were exported so), the `keep` files copied into
    folder dest."""
    import warnings

    from optimum.exporters.onnx import onnx_export_from_model

    with tempfile.TemporaryDirectory() as tmp:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            onnx_export_from_model(model, tmp, task=task, do_validation=False)
        dest.mkdir(parents=True, exist_ok=True)
        for name in keep:
            shutil.copy(Path(tmp) / name, dest / name)


def optimum_cli(src: Path, out: Path, task, **env):
    """`optimum-cli export onnx --model SRC --task TASK OUT` in a child process
    (one thread, PYTHONHASHSEED=0, offline; `env` adds variables). The
    command is printed with the temporary folder hidden; a failure prints the
    end of its output and stops the run. Returns stdout + stderr."""
    child_env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONHASHSEED="0", HF_HUB_OFFLINE="1",
                     **env)
    cli = Path(sys.executable).with_name("optimum-cli")
    if not cli.exists():
        cli = Path(shutil.which("optimum-cli") or cli)
    cmd = [str(cli), "export", "onnx", "--model", str(src), "--task", task, str(out)]
    print("  $ optimum-cli " + " ".join(cmd[1:]).replace(str(src), "<saved model>"), flush=True)
    r = subprocess.run(cmd, env=child_env, capture_output=True, text=True)
    text = r.stdout + r.stderr
    if r.returncode != 0:
        print(text[-4000:])
        raise SystemExit(f"optimum-cli failed with {r.returncode}")
    return text


def write_files(out: Path, files: dict, max_size=None):
    """{file name: bytes} into folder out (made if missing)."""
    out.mkdir(parents=True, exist_ok=True)
    for n, data in files.items():
        if max_size is not None:
            assert len(data) < max_size, n
        (out / n).write_bytes(data)


# ---------------------------------------------------------------- files beside the graph

def write_configs(model, out: Path, names=CONFIG_FILES):
    """config.json and generation_config.json exactly as save_pretrained writes them."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        for name in names:
            shutil.copy(Path(tmp) / name, out / name)


def copy_files(src: Path, dst: Path, names):
    """The named files of folder src into folder dst (made if missing)."""
    dst.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy(src / name, dst / name)


def copy_configs(src: Path, dst: Path, names=CONFIG_FILES):
    """A derived fixture ships the config files of the fixture it was made from."""
    copy_files(src, dst, names)


SOURCE_FILES = {"config.json", "generation_config.json", "model.safetensors"}


def save_source(model, out: Path, report=False):
    """The checkpoint a fixture was exported from, as save_pretrained writes
    it (safetensors): config.json, model.safetensors, generation_config.json.
    The folder is removed first, so nothing stale survives."""
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out, safe_serialization=True)
    written = {p.name for p in out.iterdir()}
    assert written <= SOURCE_FILES and {"config.json", "model.safetensors"} <= written, written
    for p in sorted(out.iterdir()):
        assert p.stat().st_size < MAX_FILE, p
    if report:
        print(f"  wrote {out.name}/: " + ", ".join(f"{p.name} {p.stat().st_size} B" for p in sorted(out.iterdir())))


def save_hf(hf: Path, model):
    """The HF folder the onnxruntime-genai builder reads: weights and configs
    (save_pretrained), and a WordLevel tokenizer whose vocabulary is exactly
    vocab_size (<unk> <s> </s> w3 ...)."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    model.save_pretrained(hf)
    words = ["<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(3, model.config.vocab_size)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(hf)


def genai_builder(model, out: Path, *, python=None, env=None, precision="fp32", extra_options=(),
                  config_files=CONFIG_FILES, prepare=None, quiet=True):
    """`python -m onnxruntime_genai.models.builder -i HF -o OUT -p PRECISION -e cpu`
    on `model`'s save_hf folder, in a child process (`python`, default
    BUILDER_PYTHON, with the environment `env`, default this one's with
    PYTHONPATH removed and one thread). Every file the builder writes is kept
    unchanged; `config_files` (from the HF folder: the builder writes no
    config.json) are copied in beside them. `prepare(hf_dir)` may touch the
    HF folder before the builder reads it."""
    python = Path(python or BUILDER_PYTHON)
    if not python.exists():
        raise SystemExit(f"no builder python {python}: see GENAI-BUILDER-NOTES.md")
    if env is None:
        env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONHASHSEED="0", OMP_NUM_THREADS="1")
        env.pop("PYTHONPATH", None)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        save_hf(tmp / "hf", model)
        if prepare is not None:
            prepare(tmp / "hf")
        extra = ["--extra_options", *extra_options] if extra_options else []
        subprocess.run(
            [str(python), "-m", "onnxruntime_genai.models.builder", "-i", str(tmp / "hf"), "-o", str(tmp / "out"),
             "-p", precision, "-e", "cpu", "-c", str(tmp / "cache"), *extra],
            env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL if quiet else None,
        )
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(tmp / "out", out)
        for name in config_files:
            shutil.copy(tmp / "hf" / name, out / name)


# ---------------------------------------------------------------- converters

def float_casts(graph, acc=None):
    """Names of every Cast(to=FLOAT) node, subgraphs included (the float16
    converters block them by name: onnxconverter-common 1.16.0 loops forever
    with "Cast" in op_block_list)."""
    import onnx

    acc = set() if acc is None else acc
    for n in graph.node:
        if n.op_type == "Cast" and onnx.helper.get_attribute_value(n.attribute[0]) == onnx.TensorProto.FLOAT:
            acc.add(n.name)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                float_casts(a.g, acc)
            for sub in a.graphs:
                float_casts(sub, acc)
    return acc


def quantize_q8(src: Path, dst: Path):
    """transformers.js q8 (scripts/quantize.py): IntegerOps, QInt8 weights (no
    Conv / GroupQueryAttention / MultiHeadAttention in these graphs),
    per_channel and reduce_range off, EnableSubgraph, MatMulConstBOnly."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        src, dst, weight_type=QuantType.QInt8, per_channel=False, reduce_range=False,
        extra_options={"EnableSubgraph": True, "MatMulConstBOnly": True},
    )


# ---------------------------------------------------------------- onnxruntime vs PyTorch

def session(path, severity=3, disable_all=False, level=None):
    """onnxruntime on one thread (CPU): the same numbers on every run. `path`
    may be a ModelProto. severity 4 where a refused input is the measurement."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = severity
    if disable_all:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    elif level is not None:
        so.graph_optimization_level = level
    src = path.SerializeToString() if hasattr(path, "SerializeToString") else str(path)
    return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])


def run(sess, feeds):
    """{output name: value}."""
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))


def maxdiff(a, b, same_shape=False):
    """max |a - b| in float64."""
    import numpy as np

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if same_shape:
        assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.abs(a - b).max())


d = maxdiff  # the short name most measurements use


def i64(x):
    import numpy as np

    return np.asarray(x, np.int64)


def next_past(past, out):
    """The next call's pasts from this call's presents (present.X ->
    past_key_values.X): decoder presents replace the past; encoder presents
    only if not yet held."""
    new = dict(past or {})
    for k, v in out.items():
        if k.startswith("present."):
            name = "past_key_values." + k[len("present."):]
            if ".encoder." in name and name in new:
                continue
            new[name] = v
    return new


def compare(a, ref):
    """max |a - ref| (float64), relative to max |ref|, and top-1 agreement."""
    import numpy as np

    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    d = float(np.abs(a - ref).max())
    return d, d / float(np.abs(ref).max()), int(a.argmax()) == int(ref.argmax())


def hf_positions(mask):
    """position_ids as transformers' generate() makes them for a padded
    batch: cumsum(mask) - 1, pads set to 1."""
    import numpy as np

    m = i64(mask)
    pos = np.cumsum(m, -1) - 1
    pos[m == 0] = 1
    return pos


def within(x, what, tol):
    """x, asserted <= tol (a parity figure)."""
    assert x <= tol, f"{what}: {x:.3e} > {tol}"
    return x


def margin(logits):
    """Smallest top-1/top-2 gap over the rows of a [rows, V] (or [V]) array."""
    import numpy as np

    x = np.asarray(logits, np.float64).reshape(-1, np.shape(logits)[-1])
    top = np.sort(x, axis=-1)[:, -2:]
    return float((top[:, 1] - top[:, 0]).min())


def errmsg(e):
    """An onnxruntime error, shortened: the node and the kernel's own words."""
    text = " ".join(str(e).split())
    node = text.split("Name:")[1].split(" Status Message:")[0] if "Name:" in text else ""
    tail = text.split("Status Message:")[-1].strip()
    tail = tail.split(") ")[-1] if "onnxruntime_src" in tail else tail
    return f"error at node {node}: {tail}" if node else f"error: {tail}"


def try_run(fn):
    """fn(), or its shortened onnxruntime error (the message is the measurement)."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001
        return errmsg(e)


class WithPastRunner:
    """optimum's text-generation-with-past model.onnx, batch 1: step 0 with
    past length 0, then one token per call; position_ids fed when the graph
    has that input. run() returns (logits [seq, vocab], presents)."""

    def __init__(self, path: Path):
        self.s = session(path)
        self.names = [i.name for i in self.s.get_inputs()]
        self.past = [i for i in self.s.get_inputs() if i.name.startswith("past_key_values.")]
        self.has_pos = "position_ids" in self.names

    def run(self, ids, total, past):
        import numpy as np

        if past is None:
            past = [np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32) for i in self.past]
        feed = {"input_ids": i64([ids]), "attention_mask": i64([[1] * total]),
                **{i.name: p for i, p in zip(self.past, past)}}
        if self.has_pos:
            feed["position_ids"] = i64([list(range(total - len(ids), total))])
        o = self.s.run(None, feed)
        return o[0][0], o[1:]


def const_values(m):
    """{tensor name: numpy value} of every initializer and Constant node."""
    from onnx import numpy_helper

    vals = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            vals[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    return vals


# ---------------------------------------------------------------- what a folder holds

def _dims(v):
    return [x.dim_param if x.HasField("dim_param") else x.dim_value for x in v.type.tensor_type.shape.dim]


def _dtype(v):
    import onnx

    return onnx.TensorProto.DataType.Name(v.type.tensor_type.elem_type).lower()


def signature(path, show=None, limit=None):
    """One ONNX file's header (IR, opsets, producer, nodes, initializers,
    size) and its inputs and outputs with dtypes and dims; external data is
    not read. show(value) picks the values printed; limit caps them per side."""
    import onnx

    path = Path(path)
    m = onnx.load(str(path), load_external_data=False)
    ops = {n.op_type for n in m.graph.node}
    print(f"  {path.name}: IR {m.ir_version}, opsets {[(o.domain or 'ai.onnx', o.version) for o in m.opset_import]}, "
          f"producer {m.producer_name} {m.producer_version}, {len(m.graph.node)} top-level nodes, "
          f"{len(m.graph.initializer)} initializers, If: {'If' in ops}, {path.stat().st_size} bytes")
    for kind, vs in (("in ", m.graph.input), ("out", m.graph.output)):
        shown = [v for v in vs if show is None or show(v)]
        for v in shown[:limit]:
            print(f"    {kind} {v.name}  {_dtype(v)}  {_dims(v)}")
        if len(shown) < len(vs) or (limit is not None and len(vs) > limit):
            print(f"    {kind} ... ({len(vs)} in all)")


def io_signature(sess):
    """A loaded session's inputs and outputs as 'name type shape' lines."""
    t = lambda v: f"{v.name} {v.type} {v.shape}"
    return [t(v) for v in sess.get_inputs()], [t(v) for v in sess.get_outputs()]


def describe(folder: Path, onnx_files="*.onnx", max_size=MAX_FILE, show=None, limit=None):
    """Every file of a written folder with its size (each under max_size),
    then the signature of each ONNX file."""
    for f in sorted(folder.iterdir()):
        print(f"  {f.name}  {f.stat().st_size} B")
        if max_size is not None and f.is_file():
            assert f.stat().st_size < max_size, f
    for f in sorted(folder.glob(onnx_files)):
        signature(f, show=show, limit=limit)


def list_files(out: Path, names, max_size=MAX_FILE):
    """What the run wrote: every file under each named folder with its size."""
    for name in names:
        for f in sorted((out / name).rglob("*")):
            if f.is_file():
                print(f"{f.relative_to(out)}  {f.stat().st_size} bytes")
                assert f.stat().st_size < max_size, f


# ---------------------------------------------------------------- command line

def parse_args(known, default=None, values=(), flags=(), argv=None):
    """`[--out DIR] [--verify-only] [NAME ...]`, plus a generator's own
    `values` (options taking one value) and `flags`. Names must be in
    `known`; none given means `default` (else all of `known`). args.out is
    None unless --out was given (the generator keeps its own default)."""
    p = argparse.ArgumentParser(allow_abbrev=False)
    p.add_argument("--out", type=lambda s: Path(s).resolve(), default=None,
                   help="write the folders under DIR instead of models/")
    p.add_argument("--verify-only", action="store_true", help="only measure the folders already there")
    for v in values:
        p.add_argument(v)
    for f in flags:
        p.add_argument(f, action="store_true")
    p.add_argument("names", nargs="*", metavar="NAME")
    args = p.parse_intermixed_args(argv)
    unknown = [n for n in args.names if n not in known]
    if unknown:
        sys.exit(f"unknown folder(s) {unknown}; known: {list(known)}")
    args.given = list(args.names)
    args.names = args.names or list(default if default is not None else known)
    return args


def run_all(args, out: Path, generators, verify, describe_folder=None, listing=True):
    """Generate every named folder that has a generator (unless
    --verify-only), list what was written, then verify each named folder.
    verify: {name: fn(folder)}, fn(name), or None (nothing to verify)."""
    if not args.verify_only:
        made = [n for n in args.names if n in generators]
        for name in made:
            print(f"== generate {name}", flush=True)
            t = time.time()
            generators[name]()
            print(f"  {time.time() - t:.1f} s", flush=True)
        if listing:
            list_files(out, made)
    for name in args.names if verify is not None else ():
        print(f"== verify {name}", flush=True)
        if describe_folder is not None:
            describe_folder(out / name)
        if callable(verify):
            verify(name)
        else:
            verify[name](out / name)
