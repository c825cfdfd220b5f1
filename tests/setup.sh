#!/usr/bin/env bash
# Everything the tests need, on a fresh Debian-like machine that reaches the
# package registries: README's test command is `tests/setup.sh && cargo test`
# and .ci/run runs exactly that. Idempotent: a second run only checks.
#
# - the pinned Python wheels (onnx, onnxruntime, numpy, jsonschema, pyyaml, and
#   the consumers onnxruntime-genai and optimum with torch);
# - Chromium (Debian's package) for the HTML report's browser test;
# - onnxruntime-node for the JavaScript recorder and the emitted JS loops, and
#   transformers.js (the consumer whose own generation check compares);
# - the older ONNX Runtime libraries of the multi-runtime test.
#
# A step that cannot be done here (no root, no apt-get, no npm) says what to
# install, by name, and stops with exit 1.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1

need() {
  echo "tests/setup.sh: $1" >&2
  exit 1
}

command -v python3 >/dev/null || need "python3 is missing: install Python 3 with pip (Debian: apt-get install python3 python3-pip)"
python3 -m pip --version >/dev/null 2>&1 || need "pip is missing: install it (Debian: apt-get install python3-pip)"

echo "setup: python wheels (tests/requirements.txt)"
python3 -m pip install --quiet -r tests/requirements.txt

if ! command -v chromium >/dev/null 2>&1; then
  echo "setup: chromium (Debian package) for the HTML report's browser test"
  if [ "$(id -u)" = 0 ]; then sudo=""; elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo="sudo -n"; else
    need "Chromium is missing and this user cannot install it: run \`sudo apt-get install chromium\` (Debian) or put a \`chromium\` on PATH"
  fi
  command -v apt-get >/dev/null || need "Chromium is missing and there is no apt-get: install the \`chromium\` browser so that \`chromium --version\` works"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
fi
chromium --version

command -v node >/dev/null && command -v npm >/dev/null || need "Node.js 20+ and npm are missing (Debian: apt-get install nodejs npm)"
# The lock file pins onnxruntime-node; its install script only fetches optional
# GPU binaries (the CPU ones ship in the package), so it is skipped.
# A copy of the lock beside the packages says which lock they were installed from.
if ! cmp -s tests/callers/package-lock.json tests/callers/node_modules/.setup-lock 2>/dev/null; then
  echo "setup: onnxruntime-node for the JavaScript recorder (npm ci)"
  ONNXRUNTIME_NODE_INSTALL=skip npm ci --ignore-scripts --no-audit --no-fund --prefix tests/callers >/dev/null
  cp tests/callers/package-lock.json tests/callers/node_modules/.setup-lock
fi

echo "setup: older ONNX Runtime libraries for the multi-runtime test"
python3 tests/fetch_runtimes.py >/dev/null
echo "setup: done"
