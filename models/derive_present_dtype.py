"""Derive models/gpt2-fp16-presents/ from models/gpt2-tiny/ with onnx alone.

A broken export of a kind users meet after a partial float16 conversion:
the presents come out as float16 (a Cast after each one) while the pasts
still take float32, so the loop every runtime runs (feed each present back as
the next past) is refused at the first cached step:

    INVALID_ARGUMENT : Unexpected input data type. Actual: (tensor(float16)) ,
    expected: (tensor(float))

Step 0 runs and its logits are the fp32 model's (the cast only touches the
presents). `python models/derive_present_dtype.py [--out DIR] [--verify-only]`
rewrites the folder (under DIR instead of models/) and prints what step 1
does in onnxruntime.
"""
import shutil
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

import fixture_common as fc

HERE = Path(__file__).resolve().parent
SRC, OUT = HERE / "gpt2-tiny", HERE / "gpt2-fp16-presents"


def derive():
    OUT.mkdir(parents=True, exist_ok=True)
    for f in SRC.iterdir():
        if f.suffix == ".json" or f.name.endswith(".txt"):
            shutil.copy(f, OUT / f.name)
    m = onnx.load(SRC / "model.onnx")
    g = m.graph
    for out in g.output:
        if not out.name.startswith("present"):
            continue
        inner = out.name + "_fp32"
        for n in g.node:
            n.output[:] = [inner if o == out.name else o for o in n.output]
            n.input[:] = [inner if i == out.name else i for i in n.input]
        g.node.append(helper.make_node("Cast", [inner], [out.name], to=TensorProto.FLOAT16, name=f"/cast_{out.name}"))
        out.type.tensor_type.elem_type = TensorProto.FLOAT16
    onnx.checker.check_model(m)
    onnx.save(m, OUT / "model.onnx")


def verify():
    s = fc.session(OUT / "model.onnx")
    names = [i.name for i in s.get_inputs()]
    shape = {i.name: i.shape for i in s.get_inputs()}
    feeds = {"input_ids": np.array([[3, 14, 15, 92]], dtype=np.int64)}
    if "attention_mask" in names:
        feeds["attention_mask"] = np.ones((1, 4), dtype=np.int64)
    if "position_ids" in names:
        feeds["position_ids"] = np.arange(4, dtype=np.int64)[None]
    for n in names:
        if n.startswith("past"):
            d = shape[n]
            feeds[n] = np.zeros((1, d[1], 0, d[3]), dtype=np.float32)
    out = dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))
    print("step 0 ok; present dtypes:", sorted({str(v.dtype) for k, v in out.items() if k.startswith("present")}))
    step1 = {"input_ids": np.array([[7]], dtype=np.int64)}
    if "attention_mask" in names:
        step1["attention_mask"] = np.ones((1, 5), dtype=np.int64)
    if "position_ids" in names:
        step1["position_ids"] = np.array([[4]], dtype=np.int64)
    for n in names:
        if n.startswith("past"):
            step1[n] = out[n.replace("past_key_values", "present")]
    try:
        s.run(None, step1)
        print("step 1 ran (unexpected)")
    except Exception as e:  # the point of the fixture
        print("step 1:", str(e).splitlines()[0][:200])


if __name__ == "__main__":
    args = fc.parse_args({})
    if args.out:
        OUT = args.out / OUT.name
    if not args.verify_only:
        derive()
    verify()
