#!/usr/bin/env bash
# The Python distribution (issue 10): build the wheel that carries the binary
# (maturin, bindings = "bin"), install it into a fresh virtualenv with nothing
# else, and check a bundled export folder with no other setup: the wheel's
# onnxruntime dependency must be the runtime it finds, even with a bare PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check "maturin>=1.7,<2"
rm -rf target/wheels
# .ci/run builds the wheel in the test profile (optimised dependencies, the
# tool at opt-level 1): it reuses what `cargo test` compiled, where a release
# build compiles every dependency again (minutes of a 2-core CI). What this
# checks — the packaging, the runtime the installed tool finds — is the same;
# a published wheel is built with WHEEL_PROFILE=release.
maturin build --profile "${WHEEL_PROFILE:-dev}" --locked --quiet -o target/wheels
venv="$(mktemp -d)/venv"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check target/wheels/onnx_contract-*.whl
report="$(mktemp)"
(cd / && env -i HOME="$(mktemp -d)" PATH=/usr/bin:/bin "$venv/bin/onnx-contract" check "$OLDPWD/models/marian-tiny" --no-fetch --format json) > "$report"
python3 - "$venv" "$report" <<'PY'
import json, sys
r = json.load(open(sys.argv[2]))
assert r["verdict"] == "pass", r["verdict"]
paths = {f["runtime"]["ort_path"] for f in r["files"] if f.get("runtime")}
assert paths and all(p.startswith(sys.argv[1]) for p in paths), paths
print("wheel: pip install in a fresh venv, check models/marian-tiny: pass, runtime", paths.pop())
PY
