"""Generate the transformers.js "consumer loading rules" fixtures in models/, and
record what transformers.js 4.3.1 itself does when it loads and generates from
them (and from the older transformers.js-layout fixtures).

Built from committed fixtures only: tjs-variants/ (generate_generation.py),
bart-tjs/ (generate.py) and gpt2-merged-decoders/ (generate_folder_kinds.py).
Nothing is exported or converted: every .onnx file that is unchanged is a
RELATIVE SYMLINK to the committed one (../../<fixture>/...); the new real files
are config.json / generation_config.json edits and, for the three
external-data folders, tjs-variants' fp32 model.onnx split into a graph file
and its weights (every new real file is under 0.5 MB). Versions: onnx 1.23.2
and onnxruntime 1.31.1 (system python3; only onnx is needed to build) for
this script; node 20 with @huggingface/transformers 4.3.1 (which brings
onnxruntime-node 1.30.0) for the recording:

    python3 models/generate_tjs_layouts.py [--out DIR] [name ...]   # build (onnx only)
    python3 models/generate_tjs_layouts.py --measure [--tjs DIR] [--write-expected]
        # run models/tjs_consumer_run.mjs on every folder and dtype, run the plain
        # onnxruntime greedy reference on every fp32 file, print the table and,
        # with --write-expected, write models/tjs-layouts-expected.json

    # transformers.js for --measure (a scratch folder outside the repo):
    mkdir -p /work/tjs-scratch && cd /work/tjs-scratch && npm init -y &&
      ONNXRUNTIME_NODE_INSTALL=skip npm install @huggingface/transformers@4.3.1
    # --tjs DIR / $TRANSFORMERS_JS_DIR: the package folder; default
    # /work/tjs-scratch/node_modules/@huggingface/transformers

Building is deterministic (no randomness; the external-data writer below lays
tensors out in initializer order with no padding): two full runs give
byte-identical files and identical symlink targets (see TJS-LAYOUT-NOTES.md).
Each folder is removed and rebuilt, so stale files never survive.

  tjs-external-data/           tjs-variants' fp32 model.onnx with every
                               initializer of >= 1024 bytes moved to
                               onnx/model.onnx_data (the name transformers.js
                               looks for), config.json's transformers.js_config
                               {"use_external_data_format": true}. Correct.
  tjs-external-data-dot-name/  the same split, but the data file is
                               onnx/model.onnx.data and the .onnx references
                               that name; config as above. transformers.js
                               looks for model.onnx_data and stops.
  tjs-external-chunks/         the same weights in TWO files, onnx/model.onnx_data
                               (the first initializers up to half the bytes) and
                               onnx/model.onnx_data_1 (the rest); each initializer
                               references its own file. transformers.js_config
                               {"use_external_data_format": 2}. Correct.
  tjs-dtype-missing/           tjs-variants (its four onnx/model*.onnx as
                               symlinks) whose transformers.js_config says
                               {"dtype": "q4f16"}: there is no model_q4f16.onnx.
  tjs-decoder-merged-only/     gpt2-merged-decoders' decoder_model_merged.onnx in
                               onnx/ (the transformers.js v2 layout of a
                               decoder-only model) and no onnx/model.onnx; its
                               config.json / generation_config.json.
  tjs-seq2seq-no-merged/       bart-tjs' encoder_model.onnx, decoder_model.onnx
                               and decoder_with_past_model.onnx in onnx/ (symlinks),
                               no decoder_model_merged.onnx; bart-tjs' configs.
  tjs-seq2seq-no-start/        bart-tjs (its four onnx files as symlinks) with
                               decoder_start_token_id removed from config.json
                               and generation_config.json (bos_token_id 0 stays;
                               the model was built with start 2).

--measure also covers the older transformers.js-layout folders tjs-variants,
bart-tjs, bart-tjs-variants and tjs-vlm. For every folder it tries "default"
(no dtype option) and every dtype whose files the folder has (plus q4f16 on
tjs-dtype-missing, the dtype its config names); it checks that the run left
the folder untouched (names, sizes, mtimes, symlink targets).
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import fixture_common as fc

fc.start(__name__)

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
SRC = HERE  # the committed fixtures are read from here
OUT = HERE  # where the folders are written (--out DIR)
SIZE_THRESHOLD = 1024  # onnx's default size_threshold for external data
NODE_SCRIPT = HERE / "tjs_consumer_run.mjs"
DEFAULT_TJS = Path("/work/tjs-scratch/node_modules/@huggingface/transformers")
EXPECTED = HERE / "tjs-layouts-expected.json"
PROMPT = [37, 205, 411, 89]  # the same as tjs_consumer_run.mjs
MAX_NEW = 16


# ---------------------------------------------------------------- helpers

def fresh(name: str) -> Path:
    d = OUT / name
    if d.is_symlink() or d.is_file():
        d.unlink()
    elif d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    return d


def write_json(path: Path, obj):
    """The formatting transformers' save_pretrained uses (indent 2, sorted keys,
    trailing newline): every committed config.json here is byte-equal to it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes((json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def read_json(path: Path):
    return json.loads(path.read_text())


def copy(src: Path, dst: Path):
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(src.read_bytes())


def link(target: Path, dst: Path):
    """dst -> target as a relative symlink (target must be a real file)."""
    assert target.is_file() and not target.is_symlink(), target
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.symlink_to(os.path.relpath(target, dst.parent))


def with_tjs_config(cfg: dict, tjs_cfg: dict) -> dict:
    cfg = dict(cfg)
    cfg["transformers.js_config"] = tjs_cfg
    return cfg


def externalize(src_onnx: Path, out_dir: Path, onnx_name: str, data_names: list):
    """Write src_onnx's graph to out_dir/onnx_name and every initializer of
    >= SIZE_THRESHOLD bytes into out_dir/data_names[k]: with one name, all of
    them; with two, the first initializers (in graph order) until half the
    externalized bytes are reached go to the first file, the rest to the
    second. Tensors are laid back to back, in initializer order, no padding;
    each initializer's external_data is location / offset / length (what
    onnx.external_data_helper writes)."""
    import onnx
    from onnx import numpy_helper
    from onnx.external_data_helper import set_external_data

    m = onnx.load(src_onnx)
    big = []
    for t in m.graph.initializer:
        if not t.HasField("raw_data"):
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t), t.name))
        if len(t.raw_data) >= SIZE_THRESHOLD:
            big.append(t)
    total = sum(len(t.raw_data) for t in big)
    blobs = [bytearray() for _ in data_names]
    acc = 0
    for t in big:
        k = 0 if len(data_names) == 1 or acc < total / 2 else 1
        acc += len(t.raw_data)
        raw = t.raw_data
        set_external_data(t, location=data_names[k], offset=len(blobs[k]), length=len(raw))
        blobs[k] += raw
        t.ClearField("raw_data")
        t.data_location = onnx.TensorProto.EXTERNAL
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, blob in zip(data_names, blobs):
        assert blob, f"{name} would be empty"
        (out_dir / name).write_bytes(bytes(blob))
    (out_dir / onnx_name).write_bytes(m.SerializeToString())
    onnx.checker.check_model(str(out_dir / onnx_name))  # a path: the checker opens the data files
    return [len(b) for b in blobs]


# ---------------------------------------------------------------- folders

def _external(name: str, data_names: list, flag):
    src = SRC / "tjs-variants"
    d = fresh(name)
    write_json(d / "config.json", with_tjs_config(read_json(src / "config.json"), {"use_external_data_format": flag}))
    copy(src / "generation_config.json", d / "generation_config.json")
    externalize(src / "onnx" / "model.onnx", d / "onnx", "model.onnx", data_names)


def gen_external_data():
    """The transformers.js name, one chunk."""
    _external("tjs-external-data", ["model.onnx_data"], True)


def gen_external_data_dot_name():
    """onnx's usual <model>.onnx.data name; transformers.js wants model.onnx_data."""
    _external("tjs-external-data-dot-name", ["model.onnx.data"], True)


def gen_external_chunks():
    """Two chunks named the transformers.js way (model.onnx_data, model.onnx_data_1)."""
    _external("tjs-external-chunks", ["model.onnx_data", "model.onnx_data_1"], 2)


def gen_dtype_missing():
    src = SRC / "tjs-variants"
    d = fresh("tjs-dtype-missing")
    write_json(d / "config.json", with_tjs_config(read_json(src / "config.json"), {"dtype": "q4f16"}))
    copy(src / "generation_config.json", d / "generation_config.json")
    for f in sorted((src / "onnx").glob("*.onnx")):
        link(f, d / "onnx" / f.name)


def gen_decoder_merged_only():
    src = SRC / "gpt2-merged-decoders"
    d = fresh("tjs-decoder-merged-only")
    for name in ("config.json", "generation_config.json"):
        copy(src / name, d / name)
    link(src / "decoder_model_merged.onnx", d / "onnx" / "decoder_model_merged.onnx")


def gen_seq2seq_no_merged():
    src = SRC / "bart-tjs"
    d = fresh("tjs-seq2seq-no-merged")
    for name in ("config.json", "generation_config.json", "tokenizer_config.json"):
        copy(src / name, d / name)
    for f in ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx"):
        link(src / "onnx" / f, d / "onnx" / f)


def gen_seq2seq_no_start():
    src = SRC / "bart-tjs"
    d = fresh("tjs-seq2seq-no-start")
    for name in ("config.json", "generation_config.json"):
        cfg = read_json(src / name)
        assert cfg.pop("decoder_start_token_id") == 2, name
        write_json(d / name, cfg)
    copy(src / "tokenizer_config.json", d / "tokenizer_config.json")
    for f in sorted((src / "onnx").glob("*.onnx")):
        link(f, d / "onnx" / f.name)


GENERATORS = {
    "tjs-external-data": gen_external_data,
    "tjs-external-data-dot-name": gen_external_data_dot_name,
    "tjs-external-chunks": gen_external_chunks,
    "tjs-dtype-missing": gen_dtype_missing,
    "tjs-decoder-merged-only": gen_decoder_merged_only,
    "tjs-seq2seq-no-merged": gen_seq2seq_no_merged,
    "tjs-seq2seq-no-start": gen_seq2seq_no_start,
}
EXISTING = ["tjs-variants", "bart-tjs", "bart-tjs-variants", "tjs-vlm"]


def listing(name: str):
    """Every entry of a folder: path, kind, size, sha256 (files) or target (links)."""
    rows = []
    root = OUT / name
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(OUT)
        if p.is_symlink():
            rows.append((str(rel), "link", os.readlink(p), (p.resolve().stat().st_size)))
        elif p.is_file():
            rows.append((str(rel), "file", hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_size))
    return rows


# ---------------------------------------------------------------- transformers.js runs

SUFFIX = {"": "fp32", "_fp16": "fp16", "_quantized": "q8", "_q4": "q4", "_q4f16": "q4f16", "_int8": "int8",
          "_uint8": "uint8", "_bnb4": "bnb4", "_q2": "q2", "_q2f16": "q2f16", "_q1": "q1", "_q1f16": "q1f16"}
ORDER = ["default", "fp32", "fp16", "q8", "int8", "uint8", "q4", "q4f16", "bnb4", "q2", "q2f16", "q1", "q1f16"]


def offered_dtypes(folder: Path):
    """dtypes whose files the folder has: the suffix of any onnx/<base><suffix>.onnx."""
    bases = ["model", "encoder_model", "decoder_model_merged", "decoder_model", "decoder_with_past_model",
             "embed_tokens", "vision_encoder"]
    found = set()
    for f in (folder / "onnx").glob("*.onnx"):
        stem = f.stem
        for b in sorted(bases, key=len, reverse=True):
            if stem.startswith(b) and stem[len(b):] in SUFFIX:
                found.add(SUFFIX[stem[len(b):]])
                break
    return found


def dtypes_for(name: str):
    ds = {"default"} | offered_dtypes(OUT / name)
    if name == "tjs-dtype-missing":
        ds.add("q4f16")
    return [d for d in ORDER if d in ds]


def snapshot(folder: Path):
    return [(str(p), p.is_symlink(), os.readlink(p) if p.is_symlink() else None, os.lstat(p).st_size,
             os.lstat(p).st_mtime_ns) for p in sorted(folder.rglob("*"))]


def run_tjs(folder: Path, dtype: str, tjs_dir: Path, extra=()):
    env = dict(os.environ, TRANSFORMERS_JS_DIR=str(tjs_dir))
    before = snapshot(folder)
    p = subprocess.run(["node", str(NODE_SCRIPT), str(folder), dtype, *extra], capture_output=True, text=True,
                       env=env, timeout=300)
    assert snapshot(folder) == before, f"{folder} changed by the run"
    lines = p.stdout.strip().splitlines()
    assert p.returncode == 0 and len(lines) == 1, (p.returncode, p.stdout, p.stderr)
    return json.loads(lines[0])


# ---------------------------------------------------------------- onnxruntime greedy reference

session = fc.session


def empty_past(sess, prefix="past_key_values."):
    """0-length pasts shaped from the declared dims (batch 1, dim 2 = 0)."""
    out = {}
    for i in sess.get_inputs():
        if i.name.startswith(prefix):
            shape = [1 if k == 0 else (0 if k == 2 else d) for k, d in enumerate(i.shape)]
            assert all(isinstance(x, int) for x in shape), (i.name, i.shape)
            out[i.name] = np.zeros(shape, np.float32)
    return out


def _stop_rules(gen_cfg: dict, start_len: int):
    eos = gen_cfg.get("eos_token_id")
    eos = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
    forced = gen_cfg.get("forced_eos_token_id")
    max_length = start_len + MAX_NEW
    return eos, forced, max_length


def greedy_loop(step, tokens, gen_cfg):
    """argmax, stop after an eos token, and forced_eos_token_id on the last
    position (transformers.js' ForcedEOSTokenLogitsProcessor: when
    len == max_length - 1); step(tokens_so_far, new_tokens) -> last logits."""
    eos, forced, max_length = _stop_rules(gen_cfg, len(tokens))
    seq = list(tokens)
    new = list(tokens)
    while len(seq) < max_length:
        logits = step(seq, new)
        if forced is not None and len(seq) == max_length - 1:
            t = int(forced)
        else:
            t = int(np.argmax(logits))
        seq.append(t)
        new = [t]
        if t in eos:
            break
    return seq


def ort_decoder_only(path: Path, gen_cfg: dict):
    """model.onnx (cache in, present out) or decoder_model_merged.onnx
    (use_cache_branch): prompt at step 0 with 0-length pasts, then one token."""
    s = session(path)
    names = [i.name for i in s.get_inputs()]
    outs = [o.name for o in s.get_outputs()]
    state = {"past": empty_past(s)}

    def step(seq, new):
        feed = {"input_ids": np.array([new], np.int64), "attention_mask": np.ones((1, len(seq)), np.int64)}
        if "position_ids" in names:
            feed["position_ids"] = np.arange(len(seq) - len(new), len(seq), dtype=np.int64)[None]
        if "use_cache_branch" in names:
            feed["use_cache_branch"] = np.array([len(seq) != len(new)])
        feed.update(state["past"])
        r = dict(zip(outs, s.run(None, feed)))
        state["past"] = {k.replace("present.", "past_key_values."): v for k, v in r.items() if k.startswith("present.")}
        return r["logits"][0, -1]

    return greedy_loop(step, PROMPT, gen_cfg)


def ort_vlm(folder: Path, gen_cfg: dict):
    """tjs-vlm text only: embed_tokens, then the one-graph decoder (always a
    past, num_logits_to_keep 1)."""
    emb = session(folder / "onnx" / "embed_tokens.onnx")
    dec = session(folder / "onnx" / "decoder_model_merged.onnx")
    outs = [o.name for o in dec.get_outputs()]
    state = {"past": empty_past(dec)}

    def step(seq, new):
        e = emb.run(None, {"input_ids": np.array([new], np.int64)})[0]
        feed = {"inputs_embeds": e, "attention_mask": np.ones((1, len(seq)), np.int64),
                "position_ids": np.arange(len(seq) - len(new), len(seq), dtype=np.int64)[None],
                "num_logits_to_keep": np.array(1, np.int64), **state["past"]}
        r = dict(zip(outs, dec.run(None, feed)))
        state["past"] = {k.replace("present.", "past_key_values."): v for k, v in r.items() if k.startswith("present.")}
        return r["logits"][0, -1]

    return greedy_loop(step, PROMPT, gen_cfg)


def ort_seq2seq(folder: Path, gen_cfg: dict, start: int, pair=False):
    """encoder_model.onnx, then decoder_model_merged.onnx (use_cache_branch;
    step 0's encoder K/V kept: the cached branch returns placeholders) or, with
    pair=True, decoder_model.onnx then decoder_with_past_model.onnx."""
    enc = session(folder / "onnx" / "encoder_model.onnx")
    mask = np.ones((1, len(PROMPT)), np.int64)
    hidden = enc.run(None, {"input_ids": np.array([PROMPT], np.int64), "attention_mask": mask})[0]
    if pair:
        first = session(folder / "onnx" / "decoder_model.onnx")
        later = session(folder / "onnx" / "decoder_with_past_model.onnx")
    else:
        first = later = session(folder / "onnx" / "decoder_model_merged.onnx")
    state = {"past": None, "enc": {}}

    def step(seq, new):
        s = first if state["past"] is None else later
        names = [i.name for i in s.get_inputs()]
        outs = [o.name for o in s.get_outputs()]
        feed = {"input_ids": np.array([new], np.int64)}
        if "encoder_attention_mask" in names:
            feed["encoder_attention_mask"] = mask
        if "encoder_hidden_states" in names:
            feed["encoder_hidden_states"] = hidden
        if "use_cache_branch" in names:
            feed["use_cache_branch"] = np.array([state["past"] is not None])
        if any(n.startswith("past_key_values.") for n in names):
            feed.update(empty_past(s) if state["past"] is None else {**state["past"], **state["enc"]})
        r = dict(zip(outs, s.run(None, feed)))
        pres = {k.replace("present.", "past_key_values."): v for k, v in r.items() if k.startswith("present.")}
        state["past"] = {k: v for k, v in pres.items() if ".decoder." in k}
        if not state["enc"]:
            state["enc"] = {k: v for k, v in pres.items() if ".encoder." in k}
        return r["logits"][0, -1]

    return greedy_loop(step, [start], gen_cfg)


def ort_reference(name: str):
    """The plain onnxruntime (python) greedy run of the folder's fp32 file(s):
    a list of (label, tokens)."""
    d = OUT / name
    gen = read_json(d / "generation_config.json")
    cfg = read_json(d / "config.json")
    onnx_dir = d / "onnx"
    if cfg.get("model_type") == "llava":
        return [("fp32", ort_vlm(d, gen))]
    if cfg.get("is_encoder_decoder"):
        start = gen.get("decoder_start_token_id", cfg.get("decoder_start_token_id"))
        res = []
        if start is None:  # transformers.js (and transformers) fall back to bos_token_id
            start = gen.get("bos_token_id", cfg.get("bos_token_id"))
            res.append(("fp32, start 2 (what the model was built with)", None))
        merged = (onnx_dir / "decoder_model_merged.onnx").exists()
        main = ("fp32 merged" if merged else "fp32 decoder_model + decoder_with_past_model") + f", start {start}"
        res.insert(0, (main, ort_seq2seq(d, gen, start, pair=not merged)))
        if res[-1][1] is None:
            res[-1] = (res[-1][0], ort_seq2seq(d, gen, 2, pair=not merged))
        return res
    f = onnx_dir / "model.onnx"
    if not f.exists():
        f = onnx_dir / "decoder_model_merged.onnx"
    return [(f"fp32 {f.name}", ort_decoder_only(f, gen))]


# ---------------------------------------------------------------- measure

def measure(tjs_dir: Path, write_expected: bool):
    names = list(GENERATORS) + EXISTING
    expected = {}
    print(f"transformers.js at {tjs_dir}; prompt {PROMPT}, max_new_tokens {MAX_NEW}, do_sample false")
    for name in names:
        folder = OUT / name
        expected[name] = {}
        for dt in dtypes_for(name):
            r = run_tjs(folder, dt, tjs_dir)
            expected[name][dt] = {"ok": r["ok"], "tokens": r["tokens"], "error": r["error"], "stage": r["stage"]}
            what = r["tokens"] if r["ok"] else f"{r['stage']}: {r['error']}"
            print(f"{name:28} {dt:8} {r['class']:28} ok={str(r['ok']):5} {what}", flush=True)
            for w in r["warnings"]:
                print(f"{'':28} {dt:8} logged: {w}", flush=True)
        fp32 = expected[name].get("fp32")
        for label, toks in ort_reference(name):
            if fp32 and fp32["ok"]:
                agree = "agree" if toks == fp32["tokens"] else "DIFFER"
            else:
                agree = "(transformers.js fp32 did not run)"
            print(f"{name:28} ORT python {label}: {toks} -> {agree}", flush=True)
    # Probes that are not a dtype of the folder: the same script with one more option.
    probes = [("tjs-decoder-merged-only", "fp32", ["--model-file-name", "decoder_model_merged"]),
              ("bart-tjs", "fp32", ["--no-attention-mask"]),
              ("tjs-variants", "fp32", ["--no-attention-mask"])]
    for name, dt, extra in probes:
        r = run_tjs(OUT / name, dt, tjs_dir, extra)
        what = r["tokens"] if r["ok"] else f"{r['stage']}: {r['error']}"
        print(f"probe {name} {dt} {' '.join(extra)}: ok={r['ok']} {what}", flush=True)
    if write_expected:
        EXPECTED.write_text(dump_expected(expected))
        print(f"wrote {EXPECTED}")


def dump_expected(expected: dict) -> str:
    """{folder: {dtype: {"ok", "tokens", "error", "stage"}}}, one line per (folder, dtype)."""
    folders = []
    for name, runs in expected.items():
        rows = [f"    {json.dumps(dt)}: {json.dumps(r)}" for dt, r in runs.items()]
        folders.append(f"  {json.dumps(name)}: {{\n" + ",\n".join(rows) + "\n  }")
    return "{\n" + ",\n".join(folders) + "\n}\n"


if __name__ == "__main__":
    # [--out DIR] [name ...] builds (--verify-only: only lists what is there);
    # --measure [--tjs DIR] [--write-expected] records transformers.js' runs.
    args = fc.parse_args(GENERATORS, values=("--tjs",), flags=("--measure", "--write-expected"))
    OUT = args.out or OUT
    tjs_dir = Path(args.tjs).resolve() if args.tjs else Path(os.environ.get("TRANSFORMERS_JS_DIR", DEFAULT_TJS))
    if args.measure:
        measure(tjs_dir, args.write_expected)
        sys.exit(0)
    if not args.verify_only:
        for name in args.names:
            print(f"== generate {name}", flush=True)
            GENERATORS[name]()
    for name in args.names:
        for rel, kind, what, size in listing(name):
            print(f"{rel}  {kind}  {size} bytes  {what}")
