"""A format-2 trace as the format-1 recorder would have written it: no header
line, no per-row digests, integer values kept only up to 16 elements. Digests
are unchanged (the same scheme in both formats), so the result is exactly what
python/onnx_contract_trace.py with version=1 records for the same run.

    python3 tests/callers/to_v1.py tests/traces/optimum-beam3.jsonl tests/traces/optimum-beam3-v1.jsonl
    python3 tests/callers/to_v1.py --keep-ints SRC DST   # an application's logger keeping every integer (a Rust engine's)
"""
import json
import sys

SMALL_V1 = 16


def rewrite(src, dst, keep_value):
    """Copies trace `src` to `dst` without the header line and the per-row
    digests, keeping a tensor's values only where `keep_value(values)`."""
    with open(src, encoding="utf-8") as f, open(dst, "w", encoding="utf-8") as out:
        for line in f:
            entry = json.loads(line)
            if "onnx_contract_trace" in entry:
                continue
            for part in ("feeds", "outputs"):
                for t in (entry.get(part) or {}).values():
                    t.pop("rows", None)
                    if "value" in t and not keep_value(t["value"]):
                        del t["value"]
            out.write(json.dumps(entry, separators=(", ", ": ")) + "\n")


def convert(src, dst):
    rewrite(src, dst, lambda v: len(v) <= SMALL_V1)


if __name__ == "__main__":
    if sys.argv[1] == "--keep-ints":
        rewrite(sys.argv[2], sys.argv[3], lambda v: True)
    else:
        convert(sys.argv[1], sys.argv[2])
