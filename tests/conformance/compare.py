"""Conformance: `onnx-contract sig --format json` against the Python `onnx`
package's own reading, on every model the onnx wheel ships.

    python3 tests/conformance/compare.py path/to/onnx-contract

Corpus: onnx/backend/test/data/**/model.onnx, plus the model of every node
test case (onnx.backend.test.case.node.collect_testcases), written to a
temporary folder. Compared per model: IR version, opsets (in order), and for
every graph input (initializers excluded) and output, in order: name, full
type (element type, sequence/map/optional/sparse/opaque nesting) and every dim
(fixed value / symbol exactly as written / unknown). Exit 1 on any difference.
"""
import concurrent.futures
import glob
import json
import os
import subprocess
import sys
import tempfile
import warnings

import onnx

ELEM = [
    "undefined", "float32", "uint8", "int8", "uint16", "int16", "int32", "int64", "string", "bool",
    "float16", "float64", "uint32", "uint64", "complex64", "complex128", "bfloat16", "float8e4m3fn",
    "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "uint4", "int4", "float4e2m1", "float8e8m0",
    "uint2", "int2", "float6e2m3", "float6e3m2",
]


def elem(code):
    return ELEM[code] if 0 <= code < len(ELEM) else f"elem_type({code})"


def dims(shape_proto):
    out = []
    for d in shape_proto.dim:
        if d.HasField("dim_value"):
            out.append(d.dim_value)
        elif d.HasField("dim_param"):
            out.append(d.dim_param)
        else:
            out.append(None)
    return out


def type_str(t):
    which = t.WhichOneof("value")
    if which is None:
        return "none", None
    if which == "tensor_type":
        shape = dims(t.tensor_type.shape) if t.tensor_type.HasField("shape") else None
        return f"tensor({elem(t.tensor_type.elem_type)})", shape
    if which == "sparse_tensor_type":
        s = t.sparse_tensor_type
        return f"sparse_tensor({elem(s.elem_type)})", (dims(s.shape) if s.HasField("shape") else None)
    if which == "sequence_type":
        return f"sequence({type_str(t.sequence_type.elem_type)[0]})", None
    if which == "optional_type":
        return f"optional({type_str(t.optional_type.elem_type)[0]})", None
    if which == "map_type":
        return f"map({elem(t.map_type.key_type)}, {type_str(t.map_type.value_type)[0]})", None
    if which == "opaque_type":
        return f"opaque({t.opaque_type.domain}, {t.opaque_type.name})", None
    return f"unsupported({which})", None


def expected(path):
    m = onnx.load(path, load_external_data=False)
    g = m.graph
    inits = {t.name for t in g.initializer} | {s.values.name for s in g.sparse_initializer}
    ports = lambda vs: [
        {"name": v.name, "type": type_str(v.type)[0], "shape": type_str(v.type)[1]} for v in vs
    ]
    return {
        "ir_version": m.ir_version,
        "opsets": [{"domain": o.domain, "version": o.version} for o in m.opset_import],
        "inputs": ports([v for v in g.input if v.name not in inits]),
        "outputs": ports(g.output),
    }


def actual(binary, path):
    p = subprocess.run([binary, "sig", "--format", "json", path], capture_output=True, timeout=60)
    if p.returncode != 0:
        return {"error": f"exit {p.returncode}: {p.stderr.decode(errors='replace').strip()}"}
    j = json.loads(p.stdout)
    keep = lambda ps: [{"name": x["name"], "type": x["type"], "shape": x["shape"]} for x in ps]
    return {"ir_version": j["ir_version"], "opsets": j["opsets"], "inputs": keep(j["inputs"]), "outputs": keep(j["outputs"])}


def corpus(tmp):
    data = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
    files = sorted(glob.glob(os.path.join(data, "**", "model.onnx"), recursive=True))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        for case in collect_testcases(None):
            if case.model is None:
                continue
            path = os.path.join(tmp, f"{case.name}.onnx")
            with open(path, "wb") as f:
                f.write(case.model.SerializeToString())
            files.append(path)
    return files


def main():
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        files = corpus(tmp)
        diffs = []

        def one(path):
            try:
                exp = expected(path)
            except Exception as e:  # the reference itself cannot read it: not a comparison
                return path, None, f"python onnx cannot load: {e}"
            got = actual(binary, path)
            return path, exp == got, (exp, got)

        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
            results = list(ex.map(one, files))
        compared = [r for r in results if r[1] is not None]
        skipped = [r for r in results if r[1] is None]
        diffs = [r for r in compared if not r[1]]
        for path, _, (exp, got) in diffs[:20]:
            print(f"DIFF {path}\n  onnx:          {json.dumps(exp)}\n  onnx-contract: {json.dumps(got)}")
        for path, _, why in skipped:
            print(f"NOT COMPARED {path}: {why}")
        n_ports = sum(len(e[0]["inputs"]) + len(e[0]["outputs"]) for _, ok, e in compared if ok)
        print(
            f"conformance: {len(compared)} models compared ({n_ports} inputs/outputs), "
            f"{len(compared) - len(diffs)} identical, {len(diffs)} differ, {len(skipped)} not loadable by onnx"
        )
        sys.exit(1 if diffs or skipped else 0)


if __name__ == "__main__":
    main()
