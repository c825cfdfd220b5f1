#!/usr/bin/env bash
# Seeds the fuzz corpora from the committed models and contracts.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p corpus/reader corpus/contract corpus/graph_edit corpus/trace corpus/folder_config corpus/weights_in_place
for f in ../models/*/*.onnx ../tests/fixtures/*.onnx ../tests/fixtures/external/*.onnx; do
  cp "$f" "corpus/reader/$(echo "$f" | tr '/.' '__')"
  cp "$f" "corpus/graph_edit/$(echo "$f" | tr '/.' '__')"
  cp "$f" "corpus/weights_in_place/$(echo "$f" | tr '/.' '__')"
done
for f in ../specs/*.yaml ../tests/contracts/*.yaml; do
  cp "$f" "corpus/contract/$(basename "$f")"
done
for f in ../tests/traces/*.jsonl ../tests/bad/traces/*; do
  cp "$f" "corpus/trace/$(basename "$f")"
done
# config.json, generation_config.json and genai_config.json of every fixture (the consumers' rules read them).
for f in ../models/*/*config*.json; do
  cp "$f" "corpus/folder_config/$(echo "$f" | tr '/.' '__')"
done
