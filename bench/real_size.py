"""Benchmark: `onnx-contract check DIR --verbose` on a REAL-SIZE decoder-only
export (Qwen2-0.5B's shapes, 2.5 GB of fp32 weights in model.onnx_data), from
/tmp and from inside the folder, next to a minimal Python onnxruntime script.

    cargo build --release && python3 bench/real_size.py [--family qwen2|llama] [--head-dim 128] [--bin PATH] [--runs 1]
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
  --head-dim 128: the same hidden size with hidden/128 heads (Qwen2: 7 heads,
  so 1 KV head; Llama: 16 heads, 4 KV heads), folder suffix -hd128.
A folder is reused when its .stamp.json holds the same parameters.

The check runs with its defaults (COLUMNS=400 only unwraps its lines) on the
folder and on the twin, each from /tmp and from inside. The Python script
(PY_DRIVER) runs once per folder (the twin has the same graph): one session
with default SessionOptions, a prompt of 8 tokens and 3 cached one-token
steps, each cached step compared with an uncached recompute of the whole
prefix (1 + 3 + 3 = 7 runs), greedy. The check does more (its prompt is 4
tokens; it adds a padded batch of 2, 3 tokens onto a cache, the rotary
subgraph). Wall time, CPU time (user + system, what a busy machine does not
inflate) and peak RSS (the largest single process of the tree) come from
/usr/bin/time -v, each side timed as a whole process.
Goal (issue 41): the rotary audit runs at real size (no external-data error,
from any cwd, through symlinks) and names the twin's wrong rope_theta; the
check costs about what the minimal script costs.
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
        name="qwen2-0.5b", cls="Qwen2", twin_theta=10000.0,
        config=dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                    num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                    rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, use_sliding_window=False,
                    sliding_window=32768, max_window_layers=24, bos_token_id=151643, eos_token_id=151643)),
    "llama": dict(
        name="tinyllama-1.1b", cls="Llama", twin_theta=500000.0,
        config=dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                    num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=2048,
                    rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                    bos_token_id=1, eos_token_id=2)),
}

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
L, KV, V = c["num_hidden_layers"], c["num_key_value_heads"], c["vocab_size"]
D = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
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
    return s == p and all((folder / n).exists() for n in ("model.onnx", "model.onnx_data", "config.json"))


def generate(out: Path, family: str, head_dim: int | None) -> tuple[Path, Path]:
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
        written = sorted(n.name for n in folder.iterdir())
        print(f"generated in {time.perf_counter() - t0:.0f} s: {written}")
    twin = out / (p["name"] + "-theta")
    shutil.rmtree(twin, ignore_errors=True)
    twin.mkdir()
    for n in ("model.onnx", "model.onnx_data"):
        (twin / n).symlink_to(Path("..") / folder.name / n)
    shutil.copy(folder / "generation_config.json", twin)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["rope_theta"] = FAMILIES[family]["twin_theta"]
    (twin / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return folder, twin


def timed(cmd, cwd=None, env=None):
    """Wall time, peak RSS (MB), CPU time (user + system, s: what a busy
    machine does not inflate) and the process, under /usr/bin/time -v."""
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-v", *map(str, cmd)], cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    cpu = sum(float(x) for x in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", p.stderr))
    return wall, int(rss.group(1)) / 1024 if rss else float("nan"), cpu, p


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
    args = ap.parse_args()
    out = Path(os.environ.get("BENCH_DIR", "/tmp/onnx-contract-bench"))
    folder, twin = generate(out, args.family, args.head_dim)
    print(f"{folder}: {size(folder)}; {twin}: symlinks + config.json (rope_theta {FAMILIES[args.family]['twin_theta']:g})")
    if args.make_only:
        return
    if not args.bin.exists():
        sys.exit(f"{args.bin} not found: run `cargo build --release` first, or give --bin")
    rows = {}
    wide = dict(os.environ, COLUMNS="400")  # unwrapped lines, for the log and the summary
    for _ in range(args.runs):
        for d in (folder, twin):
            for cwd, arg in (("/tmp", d), (d, ".")):
                wall, rss, cpu, p = timed([args.bin.resolve(), "check", arg, "--verbose", "--no-fetch"], cwd=cwd, env=wide)
                print(f"\n=== onnx-contract check {arg} --verbose (cwd {cwd}): exit {p.returncode}, {wall:.1f} s, CPU {cpu:.1f} s, peak RSS {rss:.0f} MB")
                print(p.stdout.rstrip())
                err = p.stderr.split("\tCommand being timed")[0].strip()
                if err:
                    print("stderr:", err[-3000:])
                audit = re.search(r"^rotary audit.*$", p.stdout, re.M)
                audit = audit.group(0) if audit else "(no rotary audit line)"
                rows.setdefault(f"check {d.name} (cwd {'/tmp' if cwd == '/tmp' else 'the folder'})", []).append((wall, rss, p.returncode, audit, cpu))
        wall, rss, cpu, p = timed([sys.executable, "-c", PY_DRIVER, folder], cwd="/tmp")
        print(f"\n=== python onnxruntime, 7 runs (8-token prompt, 3 cached steps, 3 uncached recomputes): exit {p.returncode}, {wall:.1f} s, CPU {cpu:.1f} s, peak RSS {rss:.0f} MB")
        print(p.stdout.strip(), p.stderr.split("\tCommand being timed")[0].strip()[-2000:])
        rows.setdefault(f"python script {folder.name}", []).append((wall, rss, p.returncode, p.stdout.strip(), cpu))
    print("\n=== summary (wall and CPU: median of runs; peak RSS: the largest single process of the tree)")
    for label, rs in rows.items():
        walls = sorted(r[0] for r in rs)
        cpu = statistics.median(r[4] for r in rs)
        print(f"{label:48s} {statistics.median(walls):6.1f} s {['%.1f' % w for w in walls]}  CPU {cpu:5.1f} s  {max(r[1] for r in rs):5.0f} MB  exit {sorted({r[2] for r in rs})}")
        print(f"    {rs[-1][3]}")


if __name__ == "__main__":
    main()
