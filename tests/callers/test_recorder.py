"""Tests of python/onnx_contract_trace.py and of the committed traces.

    python3 tests/callers/test_recorder.py      (no pytest needed; exits 1 on failure)

Digests are equal exactly when dtype, shape and bytes are equal; a present fed
back has its output's digest; errors are recorded and re-raised; record_sessions
records `run(None, feeds)` and `run([names], feeds)`; format version 2: the header
line opens a new (or empty) file only, every tensor of rank >= 2 has one row digest
per index along axis 0, int/bool tensors keep their values up to 4096 elements
(a [4, 30] prompt's 120 ids), version=1 writes neither header nor rows and keeps
values up to 16 elements; every committed trace in
tests/traces/ has the documented form (v1 without a header, v2 with one, and the one
foreign-recorder trace incident2-raw-digests.jsonl).
"""
import json
import shutil
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
import onnx_contract_trace as oct  # noqa: E402

MARIAN = ROOT / "models" / "marian-tiny"
GPT2 = ROOT / "models" / "gpt2-tiny" / "model.onnx"
TMP = Path(tempfile.mkdtemp(prefix="trace-test-"))
rng = np.random.default_rng(0)


def session(path):
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.log_severity_level = 4
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


HEADER = {"onnx_contract_trace": 2}


def lines(path):
    return [json.loads(l) for l in open(path, encoding="utf-8")]


def calls_of(path):
    """The call lines of a v2 trace: the first line must be the header."""
    first, *rest = lines(path)
    assert first == HEADER, first
    return rest


def gpt2_feeds(batch=1, past=0):
    return {"input_ids": np.array([[3, 14, 15, 92]] * batch, np.int64),
            **{f"past_key_values.{l}.{kv}": np.zeros((batch, 4, past, 8), np.float32)
               for l in range(2) for kv in ("key", "value")},
            "attention_mask": np.ones((batch, past + 4), np.int64),
            "position_ids": np.tile(np.arange(past, past + 4, dtype=np.int64), (batch, 1))}


def test_digest_bytes_dtype_shape():
    a = rng.standard_normal((2, 3)).astype(np.float32)
    assert oct.digest(a) == oct.digest(a.copy())
    assert oct.digest(a.T) == oct.digest(np.ascontiguousarray(a.T))  # a view hashes as its C-order copy
    assert oct.digest(a.T) != oct.digest(a.T.copy().reshape(2, 3))  # same bytes, other shape
    b = a.copy()
    b[1, 2] = np.nextafter(b[1, 2], np.float32(np.inf))  # one ulp
    assert oct.digest(a) != oct.digest(b)
    assert oct.digest(np.zeros(2, np.float32)) != oct.digest(np.zeros(4, np.float16))  # same bytes, other dtype
    assert oct.digest(np.zeros((1, 8, 0, 4), np.float32)) != oct.digest(np.zeros((1, 8, 4, 0), np.float32))
    assert oct.digest(a.astype(">f4")) == oct.digest(a)  # byte order does not matter, values do
    assert oct.describe(np.array([True])) == {"dtype": "bool", "shape": [1],
                                              "digest": oct.digest(np.array([True])), "value": [1]}
    assert "value" not in oct.describe(np.zeros(17, np.int64), rows=False)  # v1: int/bool tensors up to 16 keep values
    assert oct.describe(np.zeros(16, np.int64), rows=False)["value"] == [0] * 16
    assert oct.describe(np.zeros(17, np.int64))["value"] == [0] * 17  # v2: up to 4096
    assert oct.SMALL == 16 and oct.SMALL_V2 == 4096
    assert oct.describe(np.ones(4096, bool))["value"] == [1] * 4096 and "value" not in oct.describe(np.ones(4097, bool))
    assert "value" not in oct.describe(np.zeros(4, np.float32))  # never a float's values
    assert oct.describe([[1, 2]])["dtype"] == "int64"
    assert oct.describe(ort.OrtValue.ortvalue_from_numpy(a)) == oct.describe(a)


def test_rows_are_digests_along_axis_0():
    a = rng.standard_normal((3, 2, 4)).astype(np.float32)
    d = oct.describe(a)
    assert list(d) == ["dtype", "shape", "digest", "rows"]
    assert d["rows"] == [oct.digest(a[i]) for i in range(3)] and len(set(d["rows"])) == 3
    assert oct.describe(a[[2, 0, 0]])["rows"] == [d["rows"][2], d["rows"][0], d["rows"][0]]  # a gather keeps row digests
    assert oct.describe(a[:, :, ::2])["rows"][1] == oct.digest(np.ascontiguousarray(a[1, :, ::2]))
    assert oct.describe(np.zeros((0, 8, 1, 4), np.float32))["rows"] == []
    assert oct.describe(np.zeros((1, 8, 0, 4), np.float32))["rows"] == [oct.digest(np.zeros((8, 0, 4), np.float32))]
    assert "rows" not in oct.describe(np.zeros(4, np.float32)) and "rows" not in oct.describe(np.float32(1))
    ids = oct.describe(np.array([[3, 14], [15, 92]], np.int64))
    assert list(ids) == ["dtype", "shape", "digest", "rows", "value"] and ids["value"] == [3, 14, 15, 92]
    assert ids["rows"] == [oct.digest(np.array([3, 14], np.int64)), oct.digest(np.array([15, 92], np.int64))]
    assert "rows" not in oct.describe(a, rows=False)
    assert oct.digest(np.array(["a", "é"])) == oct.digest(np.array(["a", "é"], dtype=object))  # str, however held
    s = oct.describe(np.array([["a", "b"], ["c", "d"]], dtype=object))
    assert s["dtype"] == "str" and s["rows"][1] == oct.digest(np.array(["c", "d"], dtype=object))


def test_prompt_values_kept_in_version_2_only():
    """A [4, 30] int64 tensor (a 30-token prompt x 4 beams: 120 ids) keeps its 120 values in
    version 2 and none in version 1, in the recorder's files as in describe()."""
    ids = np.arange(120, dtype=np.int64).reshape(4, 30) * 1000 - 7  # negative and > 2^16 values too
    ids[3, 29] = 2**62 + 1  # beyond a double's 2^53: written exactly
    assert oct.describe(ids)["value"] == [int(v) for v in ids.ravel()] and len(oct.describe(ids)["value"]) == 120
    assert "value" not in oct.describe(ids, rows=False)

    class Out:
        name = "y"

    class Stub:
        def get_outputs(self):
            return [Out()]

        def run(self, names, feeds, options=None):
            return [feeds["input_ids"]]

    kept = {}
    for version in (1, 2):
        path = TMP / f"prompt-v{version}.jsonl"
        with oct.TraceRecorder(path, timing=False, version=version) as rec:
            rec.wrap(Stub(), "m.onnx").run(None, {"input_ids": ids, "attention_mask": np.ones((4, 30), np.int64),
                                                   "flag": np.array([True])})
        call = lines(path)[-1]
        kept[version] = {n: t.get("value") for n, t in [*call["feeds"].items(), *call["outputs"].items()]}
    text = open(TMP / "prompt-v2.jsonl", encoding="utf-8").read()
    assert '"value": [-7, 993, 1993, ' in text and f", {2**62 + 1}]" in text
    assert kept[2]["input_ids"] == kept[2]["y"] == [int(v) for v in ids.ravel()]
    assert kept[2]["attention_mask"] == [1] * 120 and kept[2]["flag"] == [1]
    assert kept[1] == {"input_ids": None, "attention_mask": None, "y": None, "flag": [1]}


def test_header_and_version_1():
    path = TMP / "header.jsonl"
    with oct.TraceRecorder(path, timing=False) as rec:
        rec.wrap(session(GPT2)).run(["logits"], gpt2_feeds(batch=2, past=3))
    text = open(path, encoding="utf-8").read()
    assert text.startswith('{"onnx_contract_trace": 2}\n'), text[:60]
    (call,) = calls_of(path)
    past = call["feeds"]["past_key_values.0.key"]
    assert past["shape"] == [2, 4, 3, 8] and len(past["rows"]) == 2 and past["rows"][0] == past["rows"][1]
    assert call["outputs"]["logits"]["rows"] == [oct.digest(r) for r in session(GPT2).run(["logits"], gpt2_feeds(2, 3))[0]]
    assert call["feeds"]["input_ids"]["rows"] == [oct.digest(np.array([3, 14, 15, 92], np.int64))] * 2
    old = TMP / "v1.jsonl"
    with oct.TraceRecorder(old, timing=False, version=1) as rec:
        rec.wrap(session(GPT2)).run(["logits"], gpt2_feeds(batch=2, past=3))
    (v1,) = lines(old)  # no header, no rows, the same digests
    assert v1["call"] == 0 and all("rows" not in t for t in [*v1["feeds"].values(), *v1["outputs"].values()])
    strip = lambda tensors: {n: {k: v for k, v in t.items() if k != "rows"} for n, t in tensors.items()}
    assert v1["feeds"] == strip(call["feeds"]) and v1["outputs"] == strip(call["outputs"])


def test_present_fed_back_has_its_digest():
    """Marian merged decoder: step 1's pasts are step 0's presents (same digest);
    fresh zeros of the present's shape are not (different digest)."""
    path = TMP / "marian.jsonl"
    with oct.record(path, timing=False) as rec:
        enc, dec = rec.wrap(session(MARIAN / "encoder_model.onnx")), rec.wrap(session(MARIAN / "decoder_model_merged.onnx"))
        ids = np.array([[5, 17, 42, 7, 9, 3, 0]], np.int64)
        hidden = enc.run(["last_hidden_state"], {"input_ids": ids, "attention_mask": np.ones_like(ids)})[0]
        base = {"encoder_attention_mask": np.ones_like(ids), "encoder_hidden_states": hidden}
        names = [o.name for o in dec.get_outputs()]
        zeros = {i.name: np.zeros((1, 8, 0, 4), np.float32) for i in dec.get_inputs() if i.name.startswith("past_")}
        out0 = dict(zip(names, dec.run(None, {**base, "input_ids": np.array([[999]]), **zeros,
                                              "use_cache_branch": np.array([False])})))
        past = {"past_key_values." + n[len("present."):]: v for n, v in out0.items() if n.startswith("present.")}
        dec.run(None, {**base, "input_ids": np.array([[int(out0["logits"].argmax())]]), **past,
                       "use_cache_branch": np.array([True])})
    enc_line, step0, step1 = calls_of(path)
    assert [l["call"] for l in (enc_line, step0, step1)] == [0, 1, 2]
    assert [l["model"] for l in (enc_line, step0, step1)] == ["encoder_model.onnx"] + ["decoder_model_merged.onnx"] * 2
    assert list(enc_line["outputs"]) == ["last_hidden_state"]
    assert enc_line["outputs"]["last_hidden_state"]["digest"] == step0["feeds"]["encoder_hidden_states"]["digest"]
    assert list(step0["outputs"]) == names and "error" not in step0
    assert step0["feeds"]["use_cache_branch"]["dtype"] == "bool"
    for name, fed in step1["feeds"].items():
        if name.startswith("past_key_values."):
            assert fed == step0["outputs"]["present." + name[len("past_key_values."):]], name
    present = out0["present.0.decoder.key"]
    assert present.shape == (1, 8, 1, 4) and present.any()
    assert oct.digest(np.zeros_like(present)) != step0["outputs"]["present.0.decoder.key"]["digest"]
    assert oct.describe(np.zeros_like(present))["shape"] == step0["outputs"]["present.0.decoder.key"]["shape"]
    assert all("time_ms" not in l for l in (enc_line, step0, step1))


def test_error_recorded_and_reraised():
    path = TMP / "error.jsonl"
    rec = oct.TraceRecorder(path)
    sess = rec.wrap(session(GPT2), name="gpt2.onnx")
    sess.run(None, gpt2_feeds())
    feeds = gpt2_feeds()
    feeds["input_ids"] = np.array([[3, 14, 15, 92]] * 2, np.int64)  # batch 2 against batch-1 pasts
    try:
        sess.run(["logits"], feeds)
    except Exception as e:
        raised = str(e)
    else:
        raise AssertionError("ORT accepted a batch-2 input_ids with batch-1 mask")
    rec.close()
    ok, bad = calls_of(path)
    assert ok["model"] == bad["model"] == "gpt2.onnx"
    assert "outputs" not in bad and bad["error"] == raised and raised
    assert bad["feeds"]["input_ids"]["shape"] == [2, 4] and bad["call"] == 1
    assert isinstance(ok["time_ms"], float) and isinstance(bad["time_ms"], float)
    assert list(ok["outputs"]) == ["logits", "present.0.key", "present.0.value", "present.1.key", "present.1.value"]


def test_record_sessions_patches_run():
    path = TMP / "global.jsonl"
    rec = oct.record_sessions(path, timing=False)
    try:
        sess = session(GPT2)  # created after patching, as in an app
        full = sess.run(None, gpt2_feeds())
        only = sess.run(["present.1.value", "logits"], gpt2_feeds())
        oct.TraceRecorder(TMP / "other.jsonl").wrap(sess)  # wrapped too: recorded once, by the wrapper
        sess.run(None, gpt2_feeds())
    finally:
        oct.unpatch()
        rec.close()
    assert ort.InferenceSession.run is ort.capi.onnxruntime_inference_collection.Session.run
    a, b = calls_of(path)
    assert a["model"] == "model.onnx" and a["call"] == 0 and b["call"] == 1
    assert list(a["outputs"]) == [o.name for o in sess.get_outputs()]
    assert list(b["outputs"]) == ["present.1.value", "logits"]
    assert b["outputs"]["logits"]["digest"] == a["outputs"]["logits"]["digest"] == oct.digest(full[0])
    assert b["outputs"]["present.1.value"]["digest"] == oct.digest(only[0])
    assert len(calls_of(TMP / "other.jsonl")) == 1


def test_append_continues_numbering():
    path = TMP / "append.jsonl"
    path.write_text("")  # appending to an empty file: the header, as a new trace
    for _ in range(2):
        with oct.TraceRecorder(path, append=True, timing=False) as rec:
            rec.wrap(session(GPT2)).run(["logits"], gpt2_feeds())
    assert [l["call"] for l in calls_of(path)] == [0, 1]  # one header, calls numbered after the file's
    with oct.TraceRecorder(path, timing=False):  # default: a new trace
        pass
    assert lines(path) == [HEADER]
    missing = TMP / "append-new.jsonl"  # appending to a missing file: the header too
    with oct.TraceRecorder(missing, append=True, timing=False) as rec:
        rec.wrap(session(GPT2)).run(["logits"], gpt2_feeds())
    with oct.TraceRecorder(missing, append=True, timing=False) as rec:
        rec.wrap(session(GPT2)).run(["logits"], gpt2_feeds())
    assert [l["call"] for l in calls_of(missing)] == [0, 1]
    old = TMP / "append-v1.jsonl"  # a v1 file appended to stays without a header
    for version in (1, 2):
        with oct.TraceRecorder(old, append=True, timing=False, version=version) as rec:
            rec.wrap(session(GPT2)).run(["logits"], gpt2_feeds())
    assert [l["call"] for l in lines(old)] == [0, 1]


def test_command_line_runner():
    app = TMP / "app.py"
    app.write_text("import sys, numpy as np, onnxruntime as ort\n"
                   f"s = ort.InferenceSession({str(GPT2)!r}, providers=['CPUExecutionProvider'])\n"
                   "f = {i.name: np.zeros((1, 4, 0, 8), np.float32) for i in s.get_inputs()[1:5]}\n"
                   "f.update(input_ids=np.ones((1, 2), np.int64), attention_mask=np.ones((1, 2), np.int64),\n"
                   "         position_ids=np.arange(2).reshape(1, 2))\n"
                   "s.run(None, f)\nprint(sys.argv[1:])\n")
    out = subprocess.run([sys.executable, str(ROOT / "python" / "onnx_contract_trace.py"), str(TMP / "cli.jsonl"),
                          str(app), "x", "y"], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['x', 'y']", out
    (line,) = calls_of(TMP / "cli.jsonl")
    assert line["model"] == "model.onnx" and "outputs" in line


FOREIGN = {"incident2-raw-digests.jsonl"}  # an older, foreign recorder: md5 of the bytes, no values, no header
# An application's logger: our digests, no values at all (incident2's, and tests/callers/to_digests.py's).
DIGEST_ONLY = {"incident2-no-cache-digests.jsonl"} | {
    f"{n}-digests.jsonl"
    for n in ["gpt2-correct", "gpt2-positions-restart", "marian-prefix-on-past", "optimum-beam3",
              "optimum-seq2seq-beam2", "speculative-correct", "speculative-no-crop", "static-cache-correct",
              "genai-shared-buffer-correct", "genai-hybrid-correct", "genai-hybrid-conv-reset",
              "static-caller-writes-correct", "static-caller-writes-at-zero", "sliding-caller-rolls-correct",
              "sliding-caller-no-roll"]
}


def test_committed_traces_have_the_format():
    traces = sorted((ROOT / "tests" / "traces").glob("*.jsonl"))
    assert traces, "no traces: run tests/callers/caller.py --all"
    dtypes = {"float32", "float16", "int64", "int32", "bool"}
    versions = {}
    for path in traces:
        calls = lines(path)
        version = calls.pop(0)["onnx_contract_trace"] if calls and "call" not in calls[0] else 1
        versions[path.name] = version
        assert version in (1, 2) and calls, path
        assert [c["call"] for c in calls] == list(range(len(calls))), path
        for c in calls:
            assert set(c) <= {"call", "model", "feeds", "outputs", "error", "time_ms"}, (path, c["call"])
            assert ("outputs" in c) != ("error" in c), (path, c["call"])
            for t in [*c["feeds"].values(), *c.get("outputs", {}).values()]:
                assert t["dtype"] in dtypes and all(isinstance(d, int) for d in t["shape"])
                if path.name in FOREIGN:
                    assert set(t) == {"dtype", "shape", "digest"} and t["digest"].startswith("md5:"), (path, c["call"])
                    assert len(t["digest"]) == 36
                    continue
                assert t["digest"].startswith("sha1:") and len(t["digest"]) == 45
                keys = ["dtype", "shape", "digest"] + ["rows"] * (version == 2 and len(t["shape"]) >= 2)
                assert list(t)[:len(keys)] == keys and set(t) <= set(keys) | {"value"}, (path, c["call"], list(t))
                if "rows" in t:
                    assert len(t["rows"]) == t["shape"][0] and all(r.startswith("sha1:") for r in t["rows"])
                size = int(np.prod(t["shape"]))  # values: every int/bool tensor up to 16 (v1) or 4096 (v2) elements
                kept = t["dtype"] in ("int64", "int32", "bool") and size <= (16 if version == 1 else 4096)
                kept = kept and path.name not in DIGEST_ONLY
                # An application's logger keeping every integer (to_v1.py --keep-ints).
                kept = kept or (path.name.endswith("-ints-v1.jsonl") and t["dtype"] in ("int64", "int32", "bool"))
                assert ("value" in t) == kept and len(t.get("value", [])) == size * kept, (path, c["call"], t["shape"])
        assert path.stat().st_size < (64_000 if version == 1 else 512_000), path
    assert versions.get("gpt2-correct.jsonl") == 1 and versions.get("marian-correct.jsonl") == 1  # old traces stay v1


if __name__ == "__main__":
    failed = 0
    for name, test in [(n, f) for n, f in list(globals().items()) if n.startswith("test_")]:
        try:
            test()
            print(f"ok    {name}")
        except Exception:
            failed += 1
            print(f"FAIL  {name}\n{traceback.format_exc()}")
    shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(1 if failed else 0)
