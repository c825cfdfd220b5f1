"""Benchmark: `sig` and `check --static-only` on a >= 1.5 GB model, as whole
processes, next to Python `onnx.load` on the same file.

    cargo build --release && python3 bench/static_bench.py [--gb 1.6] [--runs 5]

Generates (never commits) under $BENCH_DIR (default /tmp/onnx-contract-bench):
  big.onnx                  the real tiny Marian merged decoder plus ~1.6 GB of
                            embedded initializers (raw_data inside the protobuf)
  big_ext.onnx + .onnx_data the same with every initializer in external data
Goal (issue 2): <= 20 ms wall and <= 50 MB peak RSS per command, flat in size.
Peak RSS is read per child with os.wait4; wall time is the median of --runs.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target" / "release" / "onnx-contract"
SPEC = ROOT / "specs" / "marian-decoder-merged.yaml"
PARAMS = ["--param", "hidden=32", "--param", "head_dim=4", "--param", "vocab=1000"]


def generate(out: Path, gb: float):
    import numpy as np
    import onnx
    from onnx import numpy_helper

    big, ext = out / "big.onnx", out / "big_ext.onnx"
    if big.exists() and ext.exists() and big.stat().st_size >= gb * 0.95e9:
        return big, ext
    out.mkdir(parents=True, exist_ok=True)
    model = onnx.load(ROOT / "models" / "marian-tiny" / "decoder_model_merged.onnx")
    chunk = 64 * 1024 * 1024  # bytes per initializer, like a large embedding
    n = int(gb * 1e9 // chunk) + 1
    rng = np.random.default_rng(0)
    block = rng.standard_normal(chunk // 4, dtype=np.float32)
    for i in range(n):
        model.graph.initializer.append(numpy_helper.from_array(block, f"bench.weight.{i}"))
    onnx.save(model, big)
    onnx.save(model, ext, save_as_external_data=True, all_tensors_to_one_file=True, location="big_ext.onnx_data", size_threshold=1024)
    return big, ext


GNU_TIME = Path("/usr/bin/time")


def run(cmd):
    """(wall seconds, peak RSS MiB, exit code) of one child process.

    Peak RSS comes from GNU time when present: ru_maxrss read here with
    wait4 would include this Python parent's RSS, which Linux carries into a
    child across fork and exec (~15 MB)."""
    if GNU_TIME.exists():
        with tempfile.NamedTemporaryFile("r") as tf:
            t0 = time.perf_counter()
            code = subprocess.call([GNU_TIME, "-f", "%M", "-o", tf.name, *cmd], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wall = time.perf_counter() - t0
            return wall, int(tf.read().strip().splitlines()[-1]) / 1024, code
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    return wall, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def measure(label, cmd, runs, expect=0):
    samples = [run(cmd) for _ in range(runs)]
    codes = {s[2] for s in samples}
    assert codes == {expect}, f"{label}: exit codes {codes}, expected {expect}"
    wall = statistics.median(s[0] for s in samples) * 1000
    rss = max(s[1] for s in samples)
    print(f"{label:<46} {wall:>9.1f} ms {rss:>9.1f} MiB")
    return wall, rss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=1.6)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--generate-only", action="store_true")
    args = ap.parse_args()
    if not BIN.exists():
        sys.exit(f"{BIN} not found: run `cargo build --release` first")
    out = Path(os.environ.get("BENCH_DIR", "/tmp/onnx-contract-bench"))
    if args.generate_only:
        generate(out, args.gb)
        return
    # Generate in a child: Linux children inherit the parent's peak RSS
    # (ru_maxrss) across fork, which would hide the figures measured below.
    subprocess.run([sys.executable, __file__, "--generate-only", "--gb", str(args.gb)], check=True)
    big, ext = out / "big.onnx", out / "big_ext.onnx"
    data = ext.with_suffix(".onnx_data")
    print(f"big.onnx {big.stat().st_size / 1e9:.2f} GB; big_ext.onnx {ext.stat().st_size / 1e6:.2f} MB + data {data.stat().st_size / 1e9:.2f} GB")
    print(f"{'command':<46} {'wall':>12} {'peak RSS':>13}")
    results = {}
    for name, path in [("embedded", big), ("external", ext)]:
        results[name, "sig"] = measure(f"onnx-contract sig ({name})", [BIN, "sig", path], args.runs)
        results[name, "check"] = measure(
            f"onnx-contract check --static-only ({name})",
            [BIN, "check", path, "--contract", SPEC, "--static-only", *PARAMS],
            args.runs,
        )
        py = f"import onnx; onnx.load({str(path)!r})"
        measure(f"python onnx.load ({name})", [sys.executable, "-c", py], max(1, args.runs // 2))
    worst_wall = max(v[0] for v in results.values())
    worst_rss = max(v[1] for v in results.values())
    ok = worst_wall <= 20 and worst_rss <= 50
    print(f"goal <= 20 ms and <= 50 MiB: worst {worst_wall:.1f} ms, {worst_rss:.1f} MiB -> {'MET' if ok else 'NOT MET'}")


if __name__ == "__main__":
    main()
