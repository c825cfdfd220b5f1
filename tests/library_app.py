"""The library as an application uses it (issue 12): examples/library-app, a
separate crate depending on onnx-contract by path.

1. default-features = false: builds with no ort, clap or comfy-table in its
   dependency tree, and the static Checker passes the bundled Marian;
2. features = ["runtime"]: the 4-step check (child process = the app itself,
   via init_child) passes the bundled Marian and fails the baked-past export
   with the same verdict and finding codes as `onnx-contract check --format json`.

Run by .ci/run after `cargo test` (which builds target/debug/onnx-contract).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "examples" / "library-app"
TARGET = ROOT / "target" / "library-app"
SPEC = "specs/marian-decoder-merged.yaml"
PARAMS = ["hidden=32", "head_dim=4", "vocab=1000"]
GOOD = "models/marian-tiny/decoder_model_merged.onnx"
BAD = "models/marian-baked-past/decoder_model_merged.onnx"
env = dict(os.environ, CARGO_TARGET_DIR=str(TARGET))


def cargo(*args):
    subprocess.run(["cargo", *args, "--manifest-path", str(APP / "Cargo.toml")], check=True, env=env, cwd=ROOT)


def app(*args):
    p = subprocess.run([str(TARGET / "debug" / "library-app"), *args], capture_output=True, text=True, cwd=ROOT)
    if p.returncode not in (0, 2):
        sys.exit(f"library-app {args} exited {p.returncode}: {p.stderr}")
    return p.returncode, json.loads(p.stdout)


def codes(report):
    return sorted({f["code"] for f in report["findings"] if f["severity"] == "error"})


cargo("build", "--locked")
tree = subprocess.run(
    ["cargo", "tree", "--locked", "-e", "normal", "--prefix", "none", "--manifest-path", str(APP / "Cargo.toml")],
    capture_output=True, text=True, check=True, env=env, cwd=ROOT,
).stdout
banned = [l for l in tree.splitlines() if l.split(" ")[0] in ("ort", "ort-sys", "clap", "comfy-table", "ndarray")]
assert not banned, f"default-features = false still pulls in: {banned}"
code, r = app(GOOD, SPEC, *PARAMS)
assert (code, r["verdict"], r["runtimes"]) == (0, "pass", []), r
code, r = app(BAD.replace("baked-past", "15-inputs"), SPEC, *PARAMS)
assert (code, r["verdict"], r["findings"][0]["code"]) == (2, "fail", "input-count"), r
print("static library app: no ort/clap/comfy-table, pass on marian-tiny, input-count on the 15-input export")

cargo("build", "--locked", "--features", "runtime")
for model, want in ((GOOD, "pass"), (BAD, "fail")):
    code, r = app(model, SPEC, *PARAMS, "--steps", "4")
    cli = subprocess.run(
        [str(ROOT / "target" / "debug" / "onnx-contract"), "check", "--format", "json", model, "--contract", SPEC,
         *[x for p in PARAMS for x in ("--param", p)], "--steps", "4", "--no-fetch"],
        capture_output=True, text=True, cwd=ROOT,
    )
    c = json.loads(cli.stdout)
    assert r["verdict"] == want == c["verdict"], (r["verdict"], c["verdict"])
    assert codes(r) == codes(c), (codes(r), codes(c))
    assert len(r["runtimes"][0]["steps"]) == len(c["runtimes"][0]["steps"]) > 0
    print(f"runtime library app on {model}: {r['verdict']} {codes(r)}, same as the CLI")
