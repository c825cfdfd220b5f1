"""Benchmark: `onnx-contract check DIR --verbose` on a REAL-SIZE decoder-only
export (Qwen2-0.5B's shapes, 2.5 GB of fp32 weights in model.onnx_data), from
/tmp and from inside the folder, next to a minimal Python onnxruntime script.

    cargo build --release && python3 bench/real_size.py [--family qwen2|llama|granite|bloom] [--head-dim 128]
                                                        [--bin PATH] [--runs 1] [--no-consumer-run]
    python3 bench/real_size.py --make-only          # only generate the folders

Generates (never commits) under $BENCH_DIR (default /tmp/onnx-contract-bench):
  qwen2-0.5b/        a random-weight Qwen2ForCausalLM with Qwen2-0.5B's shapes
                     (hidden 896, 24 layers, 14 heads, 2 KV heads, head_dim 64,
                     intermediate 4864, vocab 151936, rope_theta 1e6,
                     max_position_embeddings 32768, tied embeddings), built from
                     a config (no hub: HF_HUB_OFFLINE=1), torch.manual_seed(0),
                     initializer_range INIT_STD (so that greedy tokens vary),
                     exported with optimum's main_export(task=
                     "text-generation-with-past") in fp32: model.onnx (1.1 MB)
                     + model.onnx_data (2.52 GB: without accelerate optimum does
                     not deduplicate, so the tied head is stored a second time,
                     transposed), config.json, generation_config.json; about
                     3 min, 5.7 GB peak RSS;
  qwen2-0.5b-theta/  a twin: relative symlinks to ../qwen2-0.5b/model.onnx and
                     model.onnx_data, generation_config.json copied, config.json
                     with rope_theta 10000 (the graph rotates with 1e6): the
                     rotary audit must name the base.
  --family llama: tinyllama-1.1b/ (TinyLlama-1.1B's shapes: hidden 2048, 22
  layers, 32 heads, 4 KV heads, head_dim 64, intermediate 5632, vocab 32000,
  rope_theta 1e4; 4.40 GB, about 3.5 min, 9.5 GB peak RSS) and its -theta twin
  (config.json rope_theta 5e5).
  --family granite: granite-0.7b/ (GraniteForCausalLM, about 0.7B parameters:
  hidden 1536, 24 layers, 12 heads, 4 KV heads, head_dim 128, intermediate
  4096, vocab 49155, rope_theta 1e4, max_position_embeddings 4096,
  embedding_multiplier 12, logits_scaling 8, residual_multiplier 0.22,
  attention_multiplier 1/128, tied embeddings) and its -logits-scaling twin
  (config.json logits_scaling 1.0 where the graph divides by 8): the
  config-scale audit must name logits_scaling.
  --family bloom: bloom-560m/ (BloomForCausalLM with bloom-560m's shapes:
  hidden 1024, 24 layers, 16 heads, vocab 250880, ALiBi, tied) and its
  -alibi-doubled twin: config.json unchanged, model.onnx a COPY of the
  folder's with the ALiBi slope constant (the float constant of n_head values
  that a Mul multiplies with the positions derived from attention_mask's
  CumSum) rewritten to the first n_head slopes of a 2*n_head-head model
  (BLOOM's build_alibi_tensor), model.onnx_data a HARD link to the folder's
  (the copy is written with onnx, external data untouched): the alibi audit
  must fail it. Not a symlink: ONNX Runtime 1.31 resolves it and refuses data
  outside the real model.onnx's folder ("External data path escapes model
  directory"), a model-load error before any audit; --twin-data-symlink
  builds that layout anyway. Both folders must be on one filesystem.
  Each family's twin is `twin` (config.json overrides) plus, for BLOOM,
  `twin_graph` (a rewrite of model.onnx); `twin_code`/`twin_words`: the
  finding the twin's check must fail with and the words it must contain.
  --head-dim 128: the same hidden size with hidden/128 heads (Qwen2: 7 heads,
  so 1 KV head; Llama: 16 heads, 4 KV heads), folder suffix -hd128.
A folder is reused when its .stamp.json holds the same parameters; the twin
is rebuilt on every run (seconds).

The check runs with its defaults (COLUMNS=400 only unwraps its lines) on the
folder and on the twin, each from /tmp and from inside. The Python script
(PY_DRIVER) runs once per folder (the twin has the same graph): one session
with default SessionOptions, a prompt of 8 tokens and 3 cached one-token
steps, each cached step compared with an uncached recompute of the whole
prefix (1 + 3 + 3 = 7 runs), greedy. The check does more (its prompt is 4
tokens; it adds a padded batch of 2, 3 tokens onto a cache, the rotary
subgraph). Wall time, CPU time (user + system, what a busy machine does not
inflate) and peak RSS (the largest single process of the tree) come from
/usr/bin/time -v, each side timed as a whole process. --no-consumer-run sets
ONNX_CONTRACT_NO_CONSUMER_RUN=1 for the check runs (optimum's own generation,
a child process holding a second copy of the weights, is then not run).
The summary ends with the expectations: the GOOD folder passes with no error
or warning finding and no config-scale/alibi/config-unaudited/rotary finding
of any severity; the twin fails with an error of `twin_code` whose text
holds every word of `twin_words`.
Goal (issue 41): the rotary audit runs at real size (no external-data error,
from any cwd, through symlinks) and names the twin's wrong rope_theta; the
check costs about what the minimal script costs. The same for the config
audit (config-scale, alibi).
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target" / "release" / "onnx-contract"
SEED = 0
# Std of the random weights (initializer_range). Measured on the Qwen2 shapes,
# 8 greedy tokens after the bench prompt: 0.02 (transformers' default) gives
# logits of std 0.6 and repeats a token; 0.05 gives 8 distinct tokens, logits
# of std 1.5 and a top-1/top-2 margin of at least 0.027 at every position.
INIT_STD = 0.05

FAMILIES = {
    "qwen2": dict(
        name="qwen2-0.5b", cls="Qwen2",
        twin={"rope_theta": 10000.0}, twin_suffix="-theta", twin_code="rotary", twin_words=("rope_theta",),
        config=dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                    num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                    rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, use_sliding_window=False,
                    sliding_window=32768, max_window_layers=24, bos_token_id=151643, eos_token_id=151643)),
    "llama": dict(
        name="tinyllama-1.1b", cls="Llama",
        twin={"rope_theta": 500000.0}, twin_suffix="-theta", twin_code="rotary", twin_words=("rope_theta",),
        config=dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                    num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=2048,
                    rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                    bos_token_id=1, eos_token_id=2)),
    "granite": dict(
        name="granite-0.7b", cls="Granite",
        twin={"logits_scaling": 1.0}, twin_suffix="-logits-scaling", twin_code="config-scale",
        twin_words=("logits_scaling",),
        config=dict(vocab_size=49155, hidden_size=1536, intermediate_size=4096, num_hidden_layers=24,
                    num_attention_heads=12, num_key_value_heads=4, max_position_embeddings=4096,
                    rope_theta=10000.0, rms_norm_eps=1e-5, embedding_multiplier=12.0, logits_scaling=8.0,
                    residual_multiplier=0.22, attention_multiplier=0.0078125, tie_word_embeddings=True,
                    bos_token_id=0, eos_token_id=0, pad_token_id=0)),
    "bloom": dict(
        name="bloom-560m", cls="Bloom",
        twin={}, twin_graph="alibi_doubled", twin_suffix="-alibi-doubled", twin_code="alibi",
        twin_words=("ALiBi slope", "n_head 16"),
        config=dict(vocab_size=250880, hidden_size=1024, n_layer=24, n_head=16, layer_norm_epsilon=1e-5,
                    tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=3)),
}
# Findings of the audits this bench exercises: on the GOOD folder, none of
# these at any severity (an info "applied" line is the audit line, not a finding).
AUDIT_CODES = ("config-scale", "alibi", "config-unaudited", "rotary", "rotary-unaudited")

# The export, in its own process (a fresh torch, nothing else in memory).
GEN = r'''
import sys, os, json, random, tempfile, shutil
os.environ["HF_HUB_OFFLINE"] = "1"
import numpy as np, torch, transformers
from optimum.exporters.onnx import main_export
p = json.loads(sys.argv[1]); out = sys.argv[2]
torch.set_num_threads(os.cpu_count())
random.seed(p["seed"]); np.random.seed(p["seed"]); torch.manual_seed(p["seed"])
cfg = getattr(transformers, p["cls"] + "Config")(initializer_range=p["init_std"], **p["config"])
model = getattr(transformers, p["cls"] + "ForCausalLM")(cfg).eval()
ids = torch.from_numpy(np.random.default_rng(0).integers(0, cfg.vocab_size, (1, 8)))
with torch.no_grad():
    greedy = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False,
                            pad_token_id=cfg.eos_token_id)[0, 8:].tolist()
print("torch greedy after the bench prompt:", greedy, flush=True)
with tempfile.TemporaryDirectory(dir=os.path.dirname(out)) as tmp:
    src = os.path.join(tmp, "src")
    model.save_pretrained(src)
    del model
    random.seed(p["seed"]); np.random.seed(p["seed"]); torch.manual_seed(p["seed"])
    main_export(src, out, task="text-generation-with-past", do_validation=False)
json.dump(dict(p, greedy=greedy), open(os.path.join(out, ".stamp.json"), "w"), indent=1)
'''

# The minimal Python script the check is compared with.
PY_DRIVER = r'''
import sys, os, json, numpy as np, onnxruntime as ort
d = sys.argv[1]
c = json.load(open(os.path.join(d, "config.json")))
L, V = c.get("num_hidden_layers", c.get("n_layer")), c["vocab_size"]
H = c.get("num_attention_heads", c.get("n_head"))  # BLOOM: n_layer, n_head
KV = c.get("num_key_value_heads", H)
D = c.get("head_dim") or c["hidden_size"] // H
s = ort.InferenceSession(os.path.join(d, "model.onnx"), providers=["CPUExecutionProvider"])
names = [o.name for o in s.get_outputs()]
has_pos = any(i.name == "position_ids" for i in s.get_inputs())
def run(tokens, past, start):
    ids = np.array([tokens], np.int64)
    f = {"input_ids": ids, "attention_mask": np.ones((1, start + ids.shape[1]), np.int64)}
    if has_pos:
        f["position_ids"] = np.arange(start, start + ids.shape[1], dtype=np.int64)[None]
    for l in range(L):
        f[f"past_key_values.{l}.key"], f[f"past_key_values.{l}.value"] = past[l]
    out = dict(zip(names, s.run(None, f)))
    return out["logits"][0, -1], [(out[f"present.{l}.key"], out[f"present.{l}.value"]) for l in range(L)]
z = np.zeros((1, KV, 0, D), np.float32)
tokens = [int(t) for t in np.random.default_rng(0).integers(0, V, 8)]
logits, past = run(tokens, [(z, z)] * L, 0)
tokens.append(int(logits.argmax()))
diffs = []
for step in range(1, 4):
    logits, past = run(tokens[-1:], past, len(tokens) - 1)
    full, _ = run(tokens, [(z, z)] * L, 0)
    diffs.append(float(np.abs(full - logits).max()))
    assert diffs[-1] < 1e-3, diffs
    tokens.append(int(logits.argmax()))
print("greedy", tokens[8:], "parity max |diff|", ["%.1e" % x for x in diffs])
'''


def params(family: str, head_dim: int | None) -> dict:
    f = FAMILIES[family]
    config, name = dict(f["config"]), f["name"]
    if head_dim:
        if "num_attention_heads" not in config:
            sys.exit(f"--head-dim is for the rotary families, not {family}")
        config["num_attention_heads"] = config["hidden_size"] // head_dim
        config["head_dim"] = head_dim
        if config["num_attention_heads"] % config["num_key_value_heads"]:
            config["num_key_value_heads"] = 1
        name += f"-hd{head_dim}"
    import transformers
    import torch
    import optimum.version
    versions = dict(torch=torch.__version__, transformers=transformers.__version__, optimum=optimum.version.__version__)
    return dict(name=name, cls=f["cls"], config=config, seed=SEED, init_std=INIT_STD, versions=versions)


def stamp_ok(folder: Path, p: dict) -> bool:
    try:
        s = json.loads((folder / ".stamp.json").read_text())
    except (OSError, ValueError):
        return False
    s.pop("greedy", None)
    s.pop("gen_s", None)
    return s == p and all((folder / n).exists() for n in ("model.onnx", "model.onnx_data", "config.json"))


def generate(out: Path, family: str, head_dim: int | None, twin_data_symlink: bool = False) -> tuple[Path, Path]:
    p = params(family, head_dim)
    folder = out / p["name"]
    if stamp_ok(folder, p):
        print(f"reusing {folder} (stamp matches)")
    else:
        shutil.rmtree(folder, ignore_errors=True)
        out.mkdir(parents=True, exist_ok=True)
        print(f"generating {folder} ...", flush=True)
        t0 = time.perf_counter()
        env = dict(os.environ, PYTHONHASHSEED="0", HF_HUB_OFFLINE="1")
        subprocess.run([sys.executable, "-c", GEN, json.dumps(p), str(folder)], check=True, env=env)
        gen_s = time.perf_counter() - t0
        written = sorted(n.name for n in folder.iterdir())
        print(f"generated in {gen_s:.0f} s: {written}")
        stamp = json.loads((folder / ".stamp.json").read_text())
        (folder / ".stamp.json").write_text(json.dumps(dict(stamp, gen_s=round(gen_s, 1)), indent=1))
    fam = FAMILIES[family]
    twin = out / (p["name"] + fam["twin_suffix"])
    shutil.rmtree(twin, ignore_errors=True)
    twin.mkdir()
    rewrite = fam.get("twin_graph")
    for n in ("model.onnx_data", "model.onnx"):  # the data first: the rewrite checks it resolves
        if n == "model.onnx" and rewrite:
            TWIN_GRAPHS[rewrite](folder / n, twin / n, p["config"])
        elif n == "model.onnx_data" and rewrite and not twin_data_symlink:
            # A hard link: ONNX Runtime (1.31) resolves a symlinked data file and
            # refuses it when it lands outside the real model.onnx's folder
            # ("External data path escapes model directory").
            os.link(folder / n, twin / n)
        else:
            (twin / n).symlink_to(Path("..") / folder.name / n)
    shutil.copy(folder / "generation_config.json", twin)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(fam["twin"])
    (twin / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return folder, twin


def bloom_slopes(num_heads: int):
    """transformers' own ALiBi slopes for num_heads (BLOOM's build_alibi_tensor
    on a [1, 2] all-ones mask: slope * position 1 in column 1)."""
    import torch
    from transformers.models.bloom import modeling_bloom
    ones = torch.ones(1, 2, dtype=torch.long)
    return modeling_bloom.build_alibi_tensor(ones, num_heads, torch.float32)[:, 0, 1].numpy()


def alibi_doubled(src: Path, dst: Path, config: dict):
    """Copy src's model.onnx to dst with its ALiBi slope constant (a float
    constant of n_head values, read by a Mul whose other operand derives from
    attention_mask through a CumSum) holding the first n_head slopes of a
    2*n_head-head model. The external data is neither read nor written: every
    external location of the copy must resolve beside dst (the symlink)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper
    from onnx.external_data_helper import _get_all_tensors, uses_external_data
    n_head = config["n_head"]
    m = onnx.load(str(src), load_external_data=False)
    g = m.graph
    prod = {o: n for n in g.node for o in n.output}
    consts = {n.output[0]: n.attribute[0].t for n in g.node
              if n.op_type == "Constant" and len(n.attribute) == 1 and n.attribute[0].name == "value"}
    consts.update({t.name: t for t in g.initializer if not uses_external_data(t)})

    def from_mask_cumsum(name: str) -> bool:
        seen, todo, cumsum, mask = set(), [name], False, False
        while todo and len(seen) < 200:
            t = todo.pop()
            if t in seen:
                continue
            seen.add(t)
            mask |= t == "attention_mask"
            if t in prod:
                cumsum |= prod[t].op_type == "CumSum"
                todo.extend(i for i in prod[t].input if i)
        return cumsum and mask

    hits = []
    for n in g.node:
        if n.op_type != "Mul":
            continue
        for i, name in enumerate(n.input):
            t = consts.get(name)
            if t is None or t.data_type != onnx.TensorProto.FLOAT:
                continue
            v = numpy_helper.to_array(t)
            if v.size == n_head and max(v.shape) == n_head and from_mask_cumsum(n.input[1 - i]):
                hits.append((n, name, t, v))
    assert len(hits) == 1, f"{src}: {len(hits)} candidate ALiBi slope constants: {[(h[0].name, h[1]) for h in hits]}"
    node, name, t, v = hits[0]
    good = bloom_slopes(n_head)
    assert np.allclose(v.ravel(), good, rtol=1e-6), f"{name} holds {v.ravel().tolist()}, not BLOOM's {good.tolist()}"
    bad = bloom_slopes(2 * n_head)[:n_head].astype(v.dtype).reshape(v.shape)
    t.CopyFrom(numpy_helper.from_array(bad, t.name))
    # Serialized as is: onnx.save is not trusted to leave unloaded external tensors alone.
    dst.write_bytes(m.SerializeToString())
    missing = sorted({e.value for x in _get_all_tensors(m) if uses_external_data(x)
                      for e in x.external_data if e.key == "location" and not (dst.parent / e.value).exists()})
    assert not missing, f"{dst}: external data locations do not resolve: {missing}"
    check = onnx.load(str(dst), load_external_data=False)
    got = [numpy_helper.to_array(n.attribute[0].t).ravel() for n in check.graph.node
           if n.op_type == "Constant" and n.output[0] == name]
    got += [numpy_helper.to_array(x).ravel() for x in check.graph.initializer if x.name == name]
    assert len(got) == 1 and np.array_equal(got[0], bad.ravel()), "rewrite did not take"
    print(f"{dst}: {name} (read by {node.op_type} `{node.name}`, shape {list(v.shape)}) rewritten from "
          f"{[float('%.6g' % x) for x in v.ravel()]} to the first {n_head} of {2 * n_head} heads' "
          f"{[float('%.6g' % x) for x in bad.ravel()]}")


TWIN_GRAPHS = {"alibi_doubled": alibi_doubled}


def timed(cmd, cwd=None, env=None):
    """Wall time, peak memory (MB, summed over the whole process tree: the
    check's children and consumer programs count, as a runner's limit counts
    them), CPU time (user + system, s: what a busy machine does not inflate)
    and the process, under /usr/bin/time -v."""
    from treemem import run
    wall, peak, rc, out, err = run(["/usr/bin/time", "-v", *map(str, cmd)], cwd=cwd, env=env)
    p = subprocess.CompletedProcess(cmd, rc, out, err)
    cpu = sum(float(x) for x in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", p.stderr))
    return wall, peak * 1.048576, cpu, p


def findings(stdout: str) -> list[tuple[str, str, str]]:
    """(severity, code, text) of every row of the findings tables of the
    human output (wrapped rows joined), each once."""
    out, cur, in_table = [], None, False
    for line in stdout.splitlines():
        if not line.startswith("│"):
            in_table = in_table and not line.startswith("└")
            if cur:
                out.append(cur)
                cur = None
            continue
        cells = [c.strip() for c in line.strip().strip("│").split("┆")]
        if cells[:3] == ["severity", "code", "finding"]:
            in_table = True
            continue
        if not in_table or len(cells) < 3:
            continue
        if cells[0]:
            if cur:
                out.append(cur)
            cur = [cells[0], cells[1], cells[2]]
        elif cur:
            cur[2] += " " + cells[2]
    if cur:
        out.append(cur)
    seen, uniq = set(), []
    for f in map(tuple, out):
        if f not in seen:
            seen.add(f)
            uniq.append(f)
    return uniq


def expectation(good: bool, rc: int, fs: list, fam: dict) -> str:
    """'ok' or what is unexpected (see the module's docstring)."""
    bad = []
    if good:
        if rc != 0:
            bad.append(f"exit {rc}")
        bad += [f"{sev} {code}: {text[:150]}" for sev, code, text in fs
                if sev in ("error", "warning") or code in AUDIT_CODES]
    else:
        hit = [f for f in fs if f[0] == "error" and f[1] == fam["twin_code"]
               and all(w in f[2] for w in fam["twin_words"])]
        if rc == 0:
            bad.append("exit 0")
        if not hit:
            bad.append(f"no error {fam['twin_code']} naming {list(fam['twin_words'])}")
    return "ok" if not bad else "UNEXPECTED: " + " | ".join(bad)


def size(folder: Path) -> str:
    files = [f for f in folder.iterdir() if f.is_file() and not f.is_symlink()]
    return f"{sum(f.stat().st_size for f in files) / 1e9:.2f} GB in {len(files)} files"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", choices=sorted(FAMILIES), default="qwen2")
    ap.add_argument("--head-dim", type=int, help="another head_dim at the same hidden size (e.g. 128)")
    ap.add_argument("--make-only", action="store_true", help="only generate the folders")
    ap.add_argument("--bin", type=Path, default=BIN)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--no-consumer-run", action="store_true",
                    help="ONNX_CONTRACT_NO_CONSUMER_RUN=1 for the check runs (no optimum generation child)")
    ap.add_argument("--twin-data-symlink", action="store_true",
                    help="a graph-rewriting twin (bloom) symlinks model.onnx_data instead of hard-linking it: "
                         "ONNX Runtime refuses to load it (the data escapes the model's folder)")
    args = ap.parse_args()
    out = Path(os.environ.get("BENCH_DIR", "/tmp/onnx-contract-bench"))
    fam = FAMILIES[args.family]
    folder, twin = generate(out, args.family, args.head_dim, args.twin_data_symlink)
    made = (f"model.onnx rewritten ({fam['twin_graph']}), model.onnx_data "
            f"{'symlinked' if args.twin_data_symlink else 'hard-linked'}") if fam.get("twin_graph") else "symlinks"
    print(f"{folder}: {size(folder)}; {twin}: {made} + config.json "
          f"({', '.join(f'{k} {v:g}' for k, v in fam['twin'].items()) or 'unchanged'})")
    if args.make_only:
        return
    if not args.bin.exists():
        sys.exit(f"{args.bin} not found: run `cargo build --release` first, or give --bin")
    rows = {}
    wide = dict(os.environ, COLUMNS="400")  # unwrapped lines, for the log and the summary
    if args.no_consumer_run:
        wide["ONNX_CONTRACT_NO_CONSUMER_RUN"] = "1"
    print(f"ONNX_CONTRACT_NO_CONSUMER_RUN={wide.get('ONNX_CONTRACT_NO_CONSUMER_RUN', '(unset)')} for the check runs")
    for _ in range(args.runs):
        for d in (folder, twin):
            for cwd, arg in (("/tmp", d), (d, ".")):
                wall, rss, cpu, p = timed([args.bin.resolve(), "check", arg, "--verbose", "--no-fetch"], cwd=cwd, env=wide)
                print(f"\n=== onnx-contract check {arg} --verbose (cwd {cwd}): exit {p.returncode}, {wall:.1f} s, CPU {cpu:.1f} s, peak {rss:.0f} MB over the process tree")
                print(p.stdout.rstrip())
                err = p.stderr.split("\tCommand being timed")[0].strip()
                if err:
                    print("stderr:", err[-3000:])
                audit = re.findall(r"^(?:rotary|config) audit.*$", p.stdout, re.M)
                audit = "\n    ".join(audit) if audit else "(no rotary or config audit line)"
                fs = findings(p.stdout)
                audit += "".join(f"\n    {sev} {code}: {text}" for sev, code, text in fs if sev != "info" or code in AUDIT_CODES)
                audit += "\n    expectation: " + expectation(d == folder, p.returncode, fs, fam)
                rows.setdefault(f"check {d.name} (cwd {'/tmp' if cwd == '/tmp' else 'the folder'})", []).append((wall, rss, p.returncode, audit, cpu))
        wall, rss, cpu, p = timed([sys.executable, "-c", PY_DRIVER, folder], cwd="/tmp")
        print(f"\n=== python onnxruntime, 7 runs (8-token prompt, 3 cached steps, 3 uncached recomputes): exit {p.returncode}, {wall:.1f} s, CPU {cpu:.1f} s, peak {rss:.0f} MB over the process tree")
        print(p.stdout.strip(), p.stderr.split("\tCommand being timed")[0].strip()[-2000:])
        rows.setdefault(f"python script {folder.name}", []).append((wall, rss, p.returncode, p.stdout.strip(), cpu))
    print("\n=== summary (wall and CPU: median of runs; peak: summed over the process tree)")
    try:
        gen_s = json.loads((folder / ".stamp.json").read_text()).get("gen_s")
    except (OSError, ValueError):
        gen_s = None
    print(f"generation of {folder.name}: {f'{gen_s:.0f} s' if gen_s else '(not recorded)'}; "
          f"ONNX_CONTRACT_NO_CONSUMER_RUN={wide.get('ONNX_CONTRACT_NO_CONSUMER_RUN', '(unset)')}")
    for label, rs in rows.items():
        walls = sorted(r[0] for r in rs)
        cpu = statistics.median(r[4] for r in rs)
        print(f"{label:48s} {statistics.median(walls):6.1f} s {['%.1f' % w for w in walls]}  CPU {cpu:5.1f} s  {max(r[1] for r in rs):5.0f} MB  exit {sorted({r[2] for r in rs})}")
        print(f"    {rs[-1][3]}")


if __name__ == "__main__":
    main()
