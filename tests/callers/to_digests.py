"""A trace as an application's own minimal logger writes it: every tensor as
dtype, shape and the recorders' SHA-1 digest only (no values, no per-row
digests, no header line). Digests are unchanged, so the result is exactly
what such a logger records for the same run.

    python3 tests/callers/to_digests.py tests/traces/optimum-beam3.jsonl tests/traces/optimum-beam3-digests.jsonl
    python3 tests/callers/to_digests.py --all     # every trace tests/caller.rs replays in digest-only form
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from to_v1 import rewrite  # noqa: E402

TRACES = Path(__file__).resolve().parent.parent / "traces"
# The digest-only twins tests/caller.rs replays: correct and broken, greedy,
# beams (decoder-only and seq2seq), positions, a prefix on the cache and a crop.
ALL = [
    "gpt2-correct",
    "gpt2-positions-restart",
    "marian-prefix-on-past",
    "optimum-beam3",
    "optimum-seq2seq-beam2",
    "speculative-correct",
    "speculative-no-crop",
    # Caches fed back whole by a correct client: a fixed buffer written in place
    # (a static cache, genai's shared buffer) and a hybrid's conv states.
    "static-cache-correct",
    "genai-shared-buffer-correct",
    "genai-hybrid-correct",
    "genai-hybrid-conv-reset",
    # Buffers the caller keeps (presents of the new rows only, winml-cli's forms):
    # written in at cache_position or rolled in, correctly and not.
    "static-caller-writes-correct",
    "static-caller-writes-at-zero",
    "sliding-caller-rolls-correct",
    "sliding-caller-no-roll",
]


def convert(src, dst):
    rewrite(src, dst, lambda v: False)


if __name__ == "__main__":
    if sys.argv[1:] == ["--all"]:
        for name in ALL:
            convert(TRACES / f"{name}.jsonl", TRACES / f"{name}-digests.jsonl")
    else:
        convert(sys.argv[1], sys.argv[2])
