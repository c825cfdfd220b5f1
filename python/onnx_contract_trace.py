"""Record every ONNX Runtime inference call of an application as a JSONL trace
for `onnx-contract replay TRACE.jsonl --model PATH`. Usage (5 lines):

    import onnxruntime as ort
    from onnx_contract_trace import record
    with record("trace.jsonl") as rec:
        decoder = rec.wrap(ort.InferenceSession("decoder_model_merged.onnx"))
        logits, *presents = decoder.run(None, feeds)  # recorded, returned as usual

`TraceRecorder(path)` is the same object without `with` (call `.close()`).
For an application you cannot edit, `record_sessions("trace.jsonl")` patches
`onnxruntime.InferenceSession.run`, so every session of the process is recorded;
from a shell: `python3 onnx_contract_trace.py trace.jsonl app.py [ARGS...]`.

Trace format version 2 (this recorder's default). A new trace (or an append to
a missing or empty file) starts with the header line
  {"onnx_contract_trace": 2}
then one JSON line per call, no tensor values (but those of int/bool tensors of at
most SMALL_V2 = 4096 elements in version 2, SMALL = 16 in version 1):
  {"call": 0, "model": "decoder_model_merged.onnx",
   "feeds": {"input_ids": {"dtype": "int64", "shape": [1, 1], "digest": "sha1:...", "value": [999]},
             "past_key_values.0.key": {"dtype": "float32", "shape": [2, 4, 3, 8], "digest": "sha1:...",
                                       "rows": ["sha1:...", "sha1:..."]}, ...},
   "outputs": {...same form...} | "error": "<str(exception)>", "time_ms": 1.234}
`digest` is the SHA-1 of dtype name, shape and the C-contiguous little-endian
bytes: equal exactly when dtype, shape and bytes are equal, so a `present.*`
fed back as a past has the digest it had as an output. `rows` (tensors of rank
>= 2 only; `[]` when axis 0 is empty) is `digest(a[i])` for each index i along
axis 0, in order: a batch row (a beam) gathered, reordered or dropped by the
caller keeps its digest, so a replay can tell which rows of a present a past
was made of (beam search's reorder by beam_idx). `value` (the flat values) is
kept for integer and bool tensors of at most 4096 elements (SMALL_V2): a real
prompt's ids, mask and positions (20 tokens x 4 beams = 80 ids) are in the
trace, so a replay can feed the caller's own. Keys come in the order dtype,
shape, digest, rows, value. Appending to a non-empty file writes no header and
numbers the calls after the file's.

The header is the first line: an object with "onnx_contract_trace" (the
version) and no "call". Version 1 traces (no header line, no `rows`) are still
valid traces: a trace without a header is read as version 1, and a tensor
without `rows` simply has no per-row digests. `TraceRecorder(path, version=1)`
still writes them, with the values of int/bool tensors of at most 16 elements
only (tests/callers/caller.py and forms.py record their committed traces that
way).

Only `run` is recorded (not run_async, run_with_iobinding or
run_with_ort_values). Needs only numpy and onnxruntime; thread-safe.
"""
import functools
import hashlib
import json
import os
import threading
import time

import numpy as np

__all__ = ["TraceRecorder", "record", "record_sessions", "describe", "digest", "VERSION", "HEADER",
           "SMALL", "SMALL_V2"]
VERSION = 2  # the trace format this recorder writes by default
HEADER = "onnx_contract_trace"  # the header line's key: {"onnx_contract_trace": 2}
_local = threading.local()  # set while a call is being recorded: no double recording


def _array(value):
    """numpy view of a feed or output (ndarray, OrtValue, list or scalar)."""
    return np.asarray(value.numpy() if hasattr(value, "numpy") and not isinstance(value, np.ndarray) else value)


def digest(value):
    """"sha1:<hex>" of dtype name, shape and the C-contiguous little-endian bytes
    (string tensors: "str", shape, and the JSON list of the values)."""
    a = _array(value)
    text = a.dtype.hasobject or a.dtype.kind == "U"  # string tensors, named "str" as describe names them
    h = hashlib.sha1(f"{'str' if text else a.dtype.name}{list(a.shape)}\n".encode())
    if text:  # hash the values (JSON), not object pointers or UCS-4 padding
        h.update(json.dumps([str(x) for x in a.ravel()]).encode())
    else:
        h.update(np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes())
    return "sha1:" + h.hexdigest()


SMALL = 16  # version 1: integer and bool tensors up to this many elements also keep their values
SMALL_V2 = 4096  # version 2: the same, up to this many (a real prompt's ids, masks and positions)


def describe(value, rows=True):
    """{"dtype", "shape", "digest"} of one tensor; dtype is numpy's name ("float32", "bool").
    `rows=True` is format version 2, `rows=False` version 1. A tensor of rank >= 2 also carries
    "rows" in version 2: `digest(a[i])` for each index along axis 0. Integer or bool tensors
    (a branch flag, token ids, a mask, positions) also carry "value" (flat list) up to
    SMALL_V2 = 4096 elements in version 2 (SMALL = 16 in version 1), so a replay can reproduce
    the call with the caller's own flags, ids, masks and positions."""
    a = _array(value)
    name = "str" if a.dtype.hasobject or a.dtype.kind == "U" else a.dtype.name
    out = {"dtype": name, "shape": [int(d) for d in a.shape], "digest": digest(a)}
    if rows and a.ndim >= 2:
        out["rows"] = [digest(row) for row in a]
    if a.dtype.kind in "biu" and a.size <= (SMALL_V2 if rows else SMALL):
        out["value"] = [int(v) for v in a.reshape(-1)]
    return out


def _model_name(session):
    path = getattr(session, "_model_path", None)  # what the app passed to InferenceSession
    return os.path.basename(path) if isinstance(path, (str, os.PathLike)) else "<in-memory>"


def _is_header(line):
    try:
        obj = json.loads(line)
    except ValueError:
        return False
    return isinstance(obj, dict) and HEADER in obj and "call" not in obj


class TraceRecorder:
    """One JSON line per call, written whole and flushed (a crash leaves whole lines).
    `append=True` keeps the file's lines and numbers calls after them (default:
    a new trace). `timing=False` leaves out `time_ms` (byte-reproducible traces).
    `version=2` (default) starts a new or empty file with the header line
    `{"onnx_contract_trace": 2}`, gives tensors of rank >= 2 their `rows` and int/bool
    tensors of up to 4096 elements their `value`; `version=1` writes neither header nor
    rows and keeps values up to 16 elements (the format before the header).
    """

    def __init__(self, path, append=False, timing=True, version=VERSION):
        if version not in (1, 2):
            raise ValueError(f"trace format version {version!r}: this recorder writes 1 or 2")
        self.path, self.timing, self.version = os.fspath(path), timing, version
        self._lock, self._next = threading.Lock(), 0
        empty = True
        if append and os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                lines = [line for line in f if line.strip()]
            empty = not lines
            self._next = sum(1 for line in lines if not _is_header(line))
        self._file = open(self.path, "a" if append else "w", encoding="utf-8")
        if version >= 2 and empty:
            self._file.write(json.dumps({HEADER: version}, separators=(", ", ": ")) + "\n")
            self._file.flush()

    def wrap(self, session, name=None):
        """Wrap `session.run` in place (recording each call) and return the session."""
        original, label = session.run, name or _model_name(session)

        @functools.wraps(original)
        def run(output_names, input_feed, run_options=None):
            return self.record_call(original, label, output_names, input_feed, run_options,
                                    [o.name for o in session.get_outputs()])

        session.run = run
        return session

    def record_call(self, run, model, output_names, input_feed, run_options, all_outputs):
        """Run `run(output_names, input_feed, run_options)`, recording feeds and outputs/error."""
        if getattr(_local, "busy", False):  # already recorded one level up
            return run(output_names, input_feed, run_options)
        rows = self.version >= 2
        feeds = {k: describe(v, rows) for k, v in dict(input_feed).items()}
        with self._lock:
            entry, self._next = {"call": self._next, "model": model, "feeds": feeds}, self._next + 1
        _local.busy, start = True, time.perf_counter()
        try:
            results = run(output_names, input_feed, run_options)
        except BaseException as e:
            entry["error"] = str(e)
            raise
        finally:
            _local.busy, elapsed = False, (time.perf_counter() - start) * 1000.0
            if "error" in entry:
                self._write(entry, elapsed)
        names = list(output_names) if output_names else all_outputs
        entry["outputs"] = {n: describe(v, rows) for n, v in zip(names, results)}
        self._write(entry, elapsed)
        return results

    def _write(self, entry, elapsed_ms):
        if self.timing:
            entry["time_ms"] = round(elapsed_ms, 3)
        line = json.dumps(entry, separators=(", ", ": ")) + "\n"
        with self._lock:
            if not self._file.closed:
                self._file.write(line)
                self._file.flush()

    def close(self):
        with self._lock:
            self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


record = TraceRecorder  # `with record("trace.jsonl") as rec:` reads better
_saved = []  # the InferenceSession.run that record_sessions replaced


def record_sessions(path, **kwargs):
    """Record every `onnxruntime.InferenceSession.run` call of the process to
    `path`. Returns the recorder; `unpatch()` restores the original method."""
    import onnxruntime

    unpatch()
    rec, original = TraceRecorder(path, **kwargs), onnxruntime.InferenceSession.run

    @functools.wraps(original)
    def run(self, output_names, input_feed, run_options=None):
        return rec.record_call(functools.partial(original, self), _model_name(self), output_names,
                               input_feed, run_options, [o.name for o in self.get_outputs()])

    _saved.append(onnxruntime.InferenceSession.__dict__.get("run"))
    onnxruntime.InferenceSession.run = run
    return rec


def unpatch():
    """Undo `record_sessions` (no-op when nothing is patched)."""
    import onnxruntime

    if _saved:
        own = _saved.pop()
        if own is None:
            del onnxruntime.InferenceSession.run  # back to the inherited Session.run
        else:
            onnxruntime.InferenceSession.run = own


if __name__ == "__main__":
    import runpy
    import sys

    if len(sys.argv) < 3:
        sys.exit(__doc__)
    record_sessions(sys.argv[1])
    sys.argv = sys.argv[2:]
    runpy.run_path(sys.argv[0], run_name="__main__")
