"""Benchmark: a 4-step `onnx-contract check` (both step-0 past lengths, parity
at every cached step) on a full-size random-weight Marian merged decoder, next
to a minimal Python onnxruntime script doing the same runs.

    cargo build --release && python3 bench/runtime_bench.py [--runs 3]

Generates (never commits) $BENCH_DIR/marian-full/decoder_model_merged.onnx:
opus-mt-en-zh's sizes (d_model 512, 6+6 layers, 8 heads, ffn 2048, vocab
65001), random weights, exported with optimum (needs models/requirements-gen.txt).
Both sides create one session and run the same 27 inference calls:
per step-0 past length (0 and 1): 4 cached steps + 3 uncached parity runs
(14); step 0 of the first run re-run once on the same session
(repeatability, bit for bit); then the padded-source batch check on seeded
encoder states (no encoder is given): states [2, 7, 512] with the second
row's mask zero over its last 3 positions, the first row alone [1, 7, 512]
and the second row's first 4 positions alone [1, 4, 512], each decoded for
step 0 + 3 teacher-forced cached steps with its encoder mask (12), each row
compared with its run alone.
Goal (issue 3): onnx-contract <= 1.1x the Python script, wall time.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target" / "release" / "onnx-contract"
SPEC = ROOT / "specs" / "marian-decoder-merged.yaml"

PY_DRIVER = r'''
import sys, numpy as np, onnxruntime as ort
path, steps = sys.argv[1], 4
s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
L, H, D, V, E, HID = 6, 8, 64, 65001, 7, 512
LONG, SHORT, FORCED = 7, 4, 3
rng = np.random.default_rng(0)
enc = rng.standard_normal((1, E, HID), dtype=np.float32)
mask = np.ones((1, E), np.int64)
names = [o.name for o in s.get_outputs()]
def feeds(ids, flag, dec, encp, st=None, em=None):
    f = {"encoder_attention_mask": mask if em is None else em, "input_ids": ids,
         "encoder_hidden_states": enc if st is None else st, "use_cache_branch": np.array([flag])}
    for l in range(L):
        f[f"past_key_values.{l}.decoder.key"], f[f"past_key_values.{l}.decoder.value"] = dec[l]
        f[f"past_key_values.{l}.encoder.key"], f[f"past_key_values.{l}.encoder.value"] = encp[l]
    return f
def presents(out, kind):
    return [(out[f"present.{l}.{kind}.key"], out[f"present.{l}.{kind}.value"]) for l in range(L)]
for dummy in (0, 1):
    z = np.zeros((1, H, dummy, D), np.float32)
    dec, encp = [(z, z)] * L, [(z, z)] * L
    tokens = [V - 1]
    for step in range(steps):
        ids = np.array([[tokens[-1]]], np.int64)
        f = feeds(ids, step > 0, dec, encp)
        out = dict(zip(names, s.run(None, f)))
        if step == 0 and dummy == 0:
            again = dict(zip(names, s.run(None, f)))
            assert np.array_equal(again["logits"], out["logits"])
        if step > 0:
            full = dict(zip(names, s.run(None, feeds(np.array([tokens], np.int64), False, [(z, z)] * L, [(z, z)] * L))))
            assert np.abs(full["logits"][:, -1] - out["logits"][:, -1]).max() < 1e-3
        if step == 0:
            encp = presents(out, "encoder")
        dec = presents(out, "decoder")
        tokens.append(int(out["logits"][0, -1].argmax()))

# Padded-source batch check on seeded states: 3 decodes of step 0 + FORCED
# teacher-forced cached steps; each row against its run alone.
def decode(st, em, forced):
    b = st.shape[0]
    z = np.zeros((b, H, 0, D), np.float32)
    dec, encp = [(z, z)] * L, [(z, z)] * L
    new, logits = np.full((b, 1), V - 1, np.int64), []
    for step in range(FORCED + 1):
        out = dict(zip(names, s.run(None, feeds(new, step > 0, dec, encp, st, em))))
        logits.append(out["logits"])
        if step == 0:
            encp = presents(out, "encoder")
        dec = presents(out, "decoder")
        if step < FORCED:
            new = np.full((b, 1), forced[step], np.int64)
    return logits
both = rng.standard_normal((2, LONG, HID), dtype=np.float32)
bmask = np.array([[1] * LONG, [1] * SHORT + [0] * (LONG - SHORT)], np.int64)
forced = rng.integers(0, V, FORCED)
lb = decode(both, bmask, forced)
la = [decode(both[0:1], np.ones((1, LONG), np.int64), forced), decode(both[1:2, :SHORT].copy(), np.ones((1, SHORT), np.int64), forced)]
for step in range(FORCED + 1):
    for r in (0, 1):
        assert np.abs(lb[step][r:r + 1] - la[r][step]).max() < 1e-3
'''


def generate(out: Path) -> Path:
    model = out / "marian-full" / "decoder_model_merged.onnx"
    if model.exists():
        return model
    code = r'''
import sys, os, shutil, tempfile, torch, transformers
os.environ.setdefault("HF_HUB_OFFLINE", "1")
from optimum.exporters.onnx import onnx_export_from_model
torch.manual_seed(0)
cfg = transformers.MarianConfig(vocab_size=65001, d_model=512, encoder_layers=6, decoder_layers=6,
    encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
    max_position_embeddings=512, pad_token_id=65000, decoder_start_token_id=65000, eos_token_id=0)
m = transformers.MarianMTModel(cfg).eval()
with tempfile.TemporaryDirectory() as tmp:
    onnx_export_from_model(m, tmp, task="text2text-generation-with-past", do_validation=False)
    os.makedirs(sys.argv[1], exist_ok=True)
    shutil.copy(os.path.join(tmp, "decoder_model_merged.onnx"), sys.argv[1])
'''
    subprocess.run([sys.executable, "-c", code, str(model.parent)], check=True)
    return model


def timed(cmd):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return time.perf_counter() - t0, p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    if not BIN.exists():
        sys.exit(f"{BIN} not found: run `cargo build --release` first")
    out = Path(os.environ.get("BENCH_DIR", "/tmp/onnx-contract-bench"))
    model = generate(out)
    print(f"model: {model} ({model.stat().st_size / 1e6:.0f} MB)")
    ours, theirs = [], []
    for _ in range(args.runs):
        t, p = timed([BIN, "check", model, "--contract", SPEC, "--format", "json", "--no-fetch"])
        assert p.returncode == 0, p.stdout.decode()[-2000:] + p.stderr.decode()[-2000:]
        ours.append(t)
        t, p = timed([sys.executable, "-c", PY_DRIVER, model])
        assert p.returncode == 0, p.stderr.decode()[-2000:]
        theirs.append(t)
    import json
    report = json.loads(p_out) if (p_out := subprocess.run([BIN, "check", model, "--contract", SPEC, "--format", "json", "--no-fetch"], capture_output=True).stdout) else {}
    rt = report.get("runtime") or {}
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"onnx-contract check (static + 2x4 steps + parity + repeat + padded batch): median {a:.2f} s over {args.runs} runs {['%.2f' % x for x in ours]}")
    print(f"python onnxruntime, same 27 runs:                                         median {b:.2f} s over {args.runs} runs {['%.2f' % x for x in theirs]}")
    print(f"session creation inside onnx-contract: {rt.get('session_seconds', float('nan')):.2f} s; ort {rt.get('ort_version')}")
    steps = rt.get("steps", [])
    print("parity max |diff| per cached step:", [f"{s['parity_max_abs_diff']:.1e}" for s in steps if s.get("parity_max_abs_diff") is not None])
    print(f"ratio {a / b:.2f}x (goal <= 1.1x): {'MET' if a / b <= 1.1 else 'NOT MET'}")


if __name__ == "__main__":
    main()
