"""Benchmark: `onnx-contract check DIR` with no flags on a full-size
random-weight Marian export folder (encoder, the split pair and the merged
decoder, as optimum writes them), next to a minimal Python onnxruntime script
doing the same runs.

    cargo build --release && python3 bench/folder_bench.py [--runs 3]

Generates (never commits) $BENCH_DIR/marian-folder/: opus-mt-en-zh's sizes
(d_model 512, 6+6 layers, 8 heads, ffn 2048, vocab 65001), random weights,
exported with optimum (needs models/requirements-gen.txt), with config.json
and generation_config.json.

The same runs on both sides, each model's session created once per use:
  merged decoder: encoder once; per step-0 past length (0 and 1) 4 cached
  steps + 3 uncached parity runs (14 decoder runs); step 0 of the first run
  re-run once on the same session (repeatability, bit for bit); then the
  padded-source batch check: the same encoder session run 3 times (batch
  2 of sources of 7 and 4 tokens, the shorter right-padded with mask zeros;
  the 7 alone; the 4 alone), and 3 decodes (batch 2, row 0 alone, row 1
  alone) of step 0 + 3 teacher-forced cached steps with that encoder mask,
  each row compared with its run alone (12 decoder runs): 27 decoder runs,
  4 encoder runs;
  split pair: encoder once; the no-past decoder at step 0, 3 with-past steps,
  3 uncached parity runs on the no-past decoder (7 runs; no repeatability
  re-run: step 0 of the pair is on the no-past decoder); then the same
  padded-source batch check, each decode's step 0 on the no-past decoder and
  its 3 cached steps on the with-past one (12 decoder runs): 19 decoder runs,
  4 encoder runs.
onnx-contract runs the two decoder jobs at once (one worker per core, 2 here)
as two threads of one host process, sharing the encoder's session, after the
static check of all 4 files; the Python script runs everything in one
process, one after the other.
Goal (issue 7): onnx-contract <= 1.0x the Python script, wall time; issue 32: <= 0.6x.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target" / "release" / "onnx-contract"

PY_DRIVER = r'''
import sys, os, numpy as np, onnxruntime as ort
d = sys.argv[1]
L, H, D, V, E = 6, 8, 64, 65001, 7
START = PAD = 65000
LONG, SHORT, FORCED = 7, 4, 3
def sess(name):
    return ort.InferenceSession(os.path.join(d, name), providers=["CPUExecutionProvider"])
rng = np.random.default_rng(0)
ids_e = rng.integers(0, V, (1, E), dtype=np.int64)
mask = np.ones((1, E), np.int64)
def encode():
    enc = sess("encoder_model.onnx")
    return enc.run(None, {"input_ids": ids_e, "attention_mask": mask})[0], enc
def pasts(f, dec, encp):
    for l in range(L):
        f[f"past_key_values.{l}.decoder.key"], f[f"past_key_values.{l}.decoder.value"] = dec[l]
        f[f"past_key_values.{l}.encoder.key"], f[f"past_key_values.{l}.encoder.value"] = encp[l]
    return f
def presents(out, kind):
    return [(out[f"present.{l}.{kind}.key"], out[f"present.{l}.{kind}.value"]) for l in range(L)]

# Padded-source batch check: the job's encoder session, 3 runs; 3 decodes of
# step 0 + FORCED teacher-forced cached steps; each row against its run alone.
def batch_check(decode, enc):
    long, short = rng.integers(0, V - 1, LONG), rng.integers(0, V - 1, SHORT)
    bmask = np.array([[1] * LONG, [1] * SHORT + [0] * (LONG - SHORT)], np.int64)
    ids = np.stack([long, np.concatenate([short, np.full(LONG - SHORT, PAD)])])
    both = enc.run(None, {"input_ids": ids, "attention_mask": bmask})[0]
    one = lambda x: (enc.run(None, {"input_ids": x[None], "attention_mask": np.ones((1, len(x)), np.int64)})[0], np.ones((1, len(x)), np.int64))
    alone = [one(long), one(short)]
    forced = rng.integers(0, V, FORCED)
    lb = decode(both, bmask, forced)
    la = [decode(s, m, forced) for s, m in alone]
    for step in range(FORCED + 1):
        for r in (0, 1):
            assert np.abs(lb[step][r:r + 1] - la[r][step]).max() < 1e-3

# Merged decoder.
states, enc = encode()
m = sess("decoder_model_merged.onnx")
names = [o.name for o in m.get_outputs()]
def feeds(ids, flag, dec, encp, st=None, em=None):
    f = {"encoder_attention_mask": mask if em is None else em, "input_ids": ids,
         "encoder_hidden_states": states if st is None else st, "use_cache_branch": np.array([flag])}
    return pasts(f, dec, encp)
for dummy in (0, 1):
    z = np.zeros((1, H, dummy, D), np.float32)
    dec, encp = [(z, z)] * L, [(z, z)] * L
    tokens = [START]
    for step in range(4):
        f = feeds(np.array([[tokens[-1]]], np.int64), step > 0, dec, encp)
        out = dict(zip(names, m.run(None, f)))
        if step == 0 and dummy == 0:
            again = dict(zip(names, m.run(None, f)))
            assert np.array_equal(again["logits"], out["logits"])
        if step > 0:
            full = dict(zip(names, m.run(None, feeds(np.array([tokens], np.int64), False, [(z, z)] * L, [(z, z)] * L))))
            assert np.abs(full["logits"][:, -1] - out["logits"][:, -1]).max() < 1e-3
        if step == 0:
            encp = presents(out, "encoder")
        dec = presents(out, "decoder")
        tokens.append(int(out["logits"][0, -1].argmax()))
def decode_merged(st, em, forced):
    b = st.shape[0]
    z = np.zeros((b, H, 0, D), np.float32)
    dec, encp = [(z, z)] * L, [(z, z)] * L
    new, logits = np.full((b, 1), START, np.int64), []
    for step in range(FORCED + 1):
        out = dict(zip(names, m.run(None, feeds(new, step > 0, dec, encp, st, em))))
        logits.append(out["logits"])
        if step == 0:
            encp = presents(out, "encoder")
        dec = presents(out, "decoder")
        if step < FORCED:
            new = np.full((b, 1), forced[step], np.int64)
    return logits
batch_check(decode_merged, enc)

# Split pair.
states, enc = encode()
d0, dp = sess("decoder_model.onnx"), sess("decoder_with_past_model.onnx")
n0, npast = [o.name for o in d0.get_outputs()], [o.name for o in dp.get_outputs()]
tokens = [START]
out = dict(zip(n0, d0.run(None, {"encoder_attention_mask": mask, "input_ids": np.array([tokens], np.int64), "encoder_hidden_states": states})))
encp, dec = presents(out, "encoder"), presents(out, "decoder")
tokens.append(int(out["logits"][0, -1].argmax()))
for step in range(1, 4):
    f = pasts({"encoder_attention_mask": mask, "input_ids": np.array([[tokens[-1]]], np.int64)}, dec, encp)
    out = dict(zip(npast, dp.run(None, f)))
    full = d0.run(None, {"encoder_attention_mask": mask, "input_ids": np.array([tokens], np.int64), "encoder_hidden_states": states})[0]
    assert np.abs(full[:, -1] - out["logits"][:, -1]).max() < 1e-3
    dec = presents(out, "decoder")
    tokens.append(int(out["logits"][0, -1].argmax()))
def decode_pair(st, em, forced):
    b = st.shape[0]
    new = np.full((b, 1), START, np.int64)
    out = dict(zip(n0, d0.run(None, {"encoder_attention_mask": em, "input_ids": new, "encoder_hidden_states": st})))
    encp, dec, logits = presents(out, "encoder"), presents(out, "decoder"), [out["logits"]]
    for t in forced:
        new = np.full((b, 1), t, np.int64)
        out = dict(zip(npast, dp.run(None, pasts({"encoder_attention_mask": em, "input_ids": new}, dec, encp))))
        logits.append(out["logits"])
        dec = presents(out, "decoder")
    return logits
batch_check(decode_pair, enc)
'''


# Issue 41's minimal script: what a user would write instead. Default
# SessionOptions, the four sessions created one after the other, the encoder
# once on a 7-token source; the merged decoder 4 cached steps + 3 uncached
# recomputes, the pair likewise: 15 runs in all.
MIN_DRIVER = r'''
import sys, os, numpy as np, onnxruntime as ort
d = sys.argv[1]
L, H, D, V, E, START = 6, 8, 64, 65001, 7, 65000
sess = lambda n: ort.InferenceSession(os.path.join(d, n), providers=["CPUExecutionProvider"])
enc, d0, dp, m = (sess(n) for n in ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx", "decoder_model_merged.onnx"))
ids_e = np.random.default_rng(0).integers(0, V, (1, E), dtype=np.int64)
mask = np.ones((1, E), np.int64)
states = enc.run(None, {"input_ids": ids_e, "attention_mask": mask})[0]
def pasts(f, dec, encp):
    for l in range(L):
        f[f"past_key_values.{l}.decoder.key"], f[f"past_key_values.{l}.decoder.value"] = dec[l]
        f[f"past_key_values.{l}.encoder.key"], f[f"past_key_values.{l}.encoder.value"] = encp[l]
    return f
presents = lambda out, k: [(out[f"present.{l}.{k}.key"], out[f"present.{l}.{k}.value"]) for l in range(L)]
names = [o.name for o in m.get_outputs()]
z = np.zeros((1, H, 0, D), np.float32)
empty = [(z, z)] * L
feeds = lambda ids, flag, dec, encp: pasts({"encoder_attention_mask": mask, "input_ids": ids, "encoder_hidden_states": states, "use_cache_branch": np.array([flag])}, dec, encp)
tokens, dec, encp = [START], empty, empty
for step in range(4):
    out = dict(zip(names, m.run(None, feeds(np.array([[tokens[-1]]], np.int64), step > 0, dec, encp))))
    if step > 0:
        full = m.run(None, feeds(np.array([tokens], np.int64), False, empty, empty))[0]
        assert np.abs(full[:, -1] - out["logits"][:, -1]).max() < 1e-3
    if step == 0:
        encp = presents(out, "encoder")
    dec = presents(out, "decoder")
    tokens.append(int(out["logits"][0, -1].argmax()))
n0, npast = [o.name for o in d0.get_outputs()], [o.name for o in dp.get_outputs()]
run0 = lambda ids: dict(zip(n0, d0.run(None, {"encoder_attention_mask": mask, "input_ids": np.array([ids], np.int64), "encoder_hidden_states": states})))
tokens = [START]
out = run0(tokens)
encp, dec = presents(out, "encoder"), presents(out, "decoder")
tokens.append(int(out["logits"][0, -1].argmax()))
for step in range(1, 4):
    out = dict(zip(npast, dp.run(None, pasts({"encoder_attention_mask": mask, "input_ids": np.array([[tokens[-1]]], np.int64)}, dec, encp))))
    assert np.abs(run0(tokens)["logits"][:, -1] - out["logits"][:, -1]).max() < 1e-3
    dec = presents(out, "decoder")
    tokens.append(int(out["logits"][0, -1].argmax()))
'''


def generate(out: Path) -> Path:
    folder = out / "marian-folder"
    if (folder / "decoder_model_merged.onnx").exists():
        return folder
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
    for name in ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx", "decoder_model_merged.onnx"):
        shutil.copy(os.path.join(tmp, name), sys.argv[1])
cfg.save_pretrained(sys.argv[1])
transformers.GenerationConfig.from_model_config(cfg).save_pretrained(sys.argv[1])
'''
    subprocess.run([sys.executable, "-c", code, str(folder)], check=True, env=dict(os.environ, PYTHONHASHSEED="0"))
    return folder


def timed(cmd):
    """Wall time and peak memory (MiB) summed over the process tree (the check's children count)."""
    from treemem import run
    wall, peak, rc, out, err = run([str(c) for c in cmd])
    return wall, peak, subprocess.CompletedProcess(cmd, rc, out.encode(), err.encode())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    if not BIN.exists():
        sys.exit(f"{BIN} not found: run `cargo build --release` first")
    folder = generate(Path(os.environ.get("BENCH_DIR", "/tmp/onnx-contract-bench")))
    size = sum(f.stat().st_size for f in folder.glob("*.onnx"))
    print(f"folder: {folder} ({size / 1e6:.0f} MB of ONNX in 4 files)")
    # (label, command): the check at zero flags, the check without the
    # consumer's own generation (optimum importing torch: where the rest of
    # the time goes), the minimal script, the all-runs script.
    cases = [
        ("onnx-contract check DIR (zero flags)", [BIN, "check", folder, "--format", "json", "--no-fetch"], None),
        ("onnx-contract check DIR --no-consumer-run", [BIN, "check", folder, "--format", "json", "--no-fetch", "--no-consumer-run"], None),
        ("python minimal script (4 sessions, 15 runs)", [sys.executable, "-c", MIN_DRIVER, folder], None),
        ("python all-runs script (the check's 46 decoder + 8 encoder runs)", [sys.executable, "-c", PY_DRIVER, folder], None),
    ]
    walls = {c[0]: [] for c in cases}
    peaks = {c[0]: [] for c in cases}
    report = None
    for _ in range(args.runs):
        for label, cmd, _ in cases:
            t, m, p = timed(cmd)
            assert p.returncode == 0, label + p.stdout.decode()[-3000:] + p.stderr.decode()[-2000:]
            walls[label].append(t)
            peaks[label].append(m)
            if cmd[0] == BIN:
                report = json.loads(p.stdout)
    med = {k: statistics.median(v) for k, v in walls.items()}
    for label, _, _ in cases:
        print(f"{label:66s} median {med[label]:6.2f} s {['%.2f' % x for x in walls[label]]}  peak {max(peaks[label]):5.0f} MiB (process tree)")
    for f in report["files"]:
        steps = (f.get("runtime") or {}).get("steps", [])
        parity = [s["parity_max_abs_diff"] for s in steps if s.get("parity_max_abs_diff") is not None]
        print(f"  {f['path']}: {f['role']}, {f['verdict']}, {len(steps)} steps, parity max {max(parity) if parity else '-'}")
    minimal, allruns = cases[2][0], cases[3][0]
    for label in (cases[0][0], cases[1][0]):
        print(f"{label}: {med[label] / med[minimal]:.2f}x the minimal script (goal <= 0.5x, issue 41), {med[label] / med[allruns]:.2f}x the all-runs script")

if __name__ == "__main__":
    main()
