#!/usr/bin/env bash
# Seeds the fuzz corpora from the committed models and contracts.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p corpus/reader corpus/contract corpus/graph_edit corpus/trace
for f in ../models/*/*.onnx ../tests/fixtures/*.onnx ../tests/fixtures/external/*.onnx; do
  cp "$f" "corpus/reader/$(echo "$f" | tr '/.' '__')"
  cp "$f" "corpus/graph_edit/$(echo "$f" | tr '/.' '__')"
done
for f in ../specs/*.yaml ../tests/contracts/*.yaml; do
  cp "$f" "corpus/contract/$(basename "$f")"
done
for f in ../tests/traces/*.jsonl ../tests/bad/traces/*; do
  cp "$f" "corpus/trace/$(basename "$f")"
done
