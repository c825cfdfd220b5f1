"""Writes the committed bad-input corpus in tests/bad/ (onnx 1.23.2).

    python3 tests/bad/make_bad.py

Each file isolates one way a model file can be wrong; tests/bad_inputs.rs
holds the expected exit code and message of each. Truncations of a real model
are generated in the test itself, across the whole file.
"""
import os
import random
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent


def tiny(inputs=("x",), outputs=("y",), name="g"):
    ins = [helper.make_tensor_value_info(i, TensorProto.FLOAT, ["n"]) for i in inputs]
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, ["n"]) for o in outputs]
    nodes = [helper.make_node("Identity", [inputs[0] if inputs else "c"], [o]) for o in outputs]
    return helper.make_model(helper.make_graph(nodes, name, ins, outs), opset_imports=[helper.make_opsetid("", 17)])


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(num, payload):
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def nested_if(depth):
    """`depth` If nodes, each in the then-branch of the one above, written as
    raw protobuf (the Python protobuf refuses to build more than ~30 levels)."""
    leaf = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["o"])], "leaf", [], [helper.make_tensor_value_info("o", TensorProto.FLOAT, [1])]
    ).SerializeToString()
    graph = leaf
    for level in range(depth):
        attr = _field(1, b"then_branch") + _varint(20 << 3) + _varint(5) + _field(6, graph)
        node = _field(1, b"c") + _field(2, b"o") + _field(4, b"If") + _field(5, attr)
        graph = _field(1, node) + _field(2, f"g{level}".encode()) + _field(12, _field(1, b"o"))
    model = tiny()
    model.graph.Clear()
    body = model.SerializeToString()
    return body + _field(7, graph + _field(11, helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]).SerializeToString()))


def external(folder, location, data_len=None):
    d = HERE / folder
    d.mkdir(exist_ok=True)
    w = numpy_helper.from_array(np.zeros(256, dtype=np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", "1024")):
        e = w.external_data.add()
        e.key, e.value = k, v
    m = tiny()
    m.graph.initializer.append(w)
    (d / "model.onnx").write_bytes(m.SerializeToString())
    if data_len is not None:
        (d / "weights.bin").write_bytes(b"\0" * data_len)


def main():
    rng = random.Random(0)
    (HERE / "random.onnx").write_bytes(bytes(rng.randrange(256) for _ in range(4096)))
    (HERE / "text.onnx").write_bytes(b"hello, this is not a model at all\n")
    (HERE / "wrong-message-tensor.onnx").write_bytes(numpy_helper.from_array(np.arange(64, dtype=np.int64), "t").SerializeToString())
    (HERE / "wrong-message-graph.onnx").write_bytes(tiny().graph.SerializeToString())
    # graph (field 7, length-delimited) that claims a billion bytes
    (HERE / "overrun-length.onnx").write_bytes(bytes([0x08, 0x09, 0x3A, 0x80, 0x94, 0xEB, 0xDC, 0x03]) + b"\0" * 16)
    # ir_version (field 1, varint) whose varint never ends
    (HERE / "overrun-varint.onnx").write_bytes(bytes([0x08]) + b"\xff" * 32)
    (HERE / "nested-if-5.onnx").write_bytes(nested_if(5))
    (HERE / "nested-if-60.onnx").write_bytes(nested_if(60))
    (HERE / "duplicate-inputs.onnx").write_bytes(tiny(inputs=("x", "z", "x")).SerializeToString())
    no_in = helper.make_model(
        helper.make_graph(
            [helper.make_node("Constant", [], ["y"], value=numpy_helper.from_array(np.ones(2, np.float32)))],
            "const", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    (HERE / "no-inputs.onnx").write_bytes(no_in.SerializeToString())
    raw = tiny(inputs=("xname",)).SerializeToString()
    (HERE / "non-utf8-name.onnx").write_bytes(raw.replace(b"xname", b"x\xffame"))
    external("ext-absolute", "/etc/passwd")
    external("ext-dotdot", "../random.onnx")
    external("ext-missing", "weights.bin")
    external("ext-short", "weights.bin", data_len=100)
    external("ext-ok", "weights.bin", data_len=1024)


if __name__ == "__main__":
    main()
