#!/usr/bin/env python3
"""Load a local ONNX export folder with optimum's ORTModelFor* and run greedy generate.

usage: run_optimum.py {causal|seq2seq|speech|vision} DIR [--ids 3,14,15,92] [--new 4] [--kw '{"use_cache": false}']
No network: HF_HUB_OFFLINE=1 is set before importing anything, and local_files_only=True is passed.
No tokenizer: the input ids are given on the command line.
"""
import argparse, json, os, sys
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
import torch
from optimum.onnxruntime import (ORTModelForCausalLM, ORTModelForSeq2SeqLM,
                                 ORTModelForSpeechSeq2Seq, ORTModelForVision2Seq)

CLASSES = {"causal": ORTModelForCausalLM, "seq2seq": ORTModelForSeq2SeqLM,
           "speech": ORTModelForSpeechSeq2Seq, "vision": ORTModelForVision2Seq}

ap = argparse.ArgumentParser()
ap.add_argument("kind", choices=CLASSES)
ap.add_argument("dir")
ap.add_argument("--ids", default="3,14,15,92")
ap.add_argument("--new", type=int, default=4)
ap.add_argument("--kw", default="{}", help="extra from_pretrained kwargs as JSON")
ap.add_argument("--load-only", action="store_true")
ap.add_argument("--trace", action="store_true", help="print every session.run feed (names, shapes, small values)")
a = ap.parse_args()

cls = CLASSES[a.kind]
model = cls.from_pretrained(a.dir, local_files_only=True, **json.loads(a.kw))

def part_files(m):
    if hasattr(m, "parts"):
        return [p.path.name for p in m.parts]
    return [m.path.relative_to(a.dir).as_posix() if str(m.path).startswith(a.dir) else str(m.path)]
print("LOADED", type(model).__name__, "files:", sorted(part_files(model)),
      "config.use_cache:", model.config.use_cache, "can_use_cache:", model.can_use_cache,
      "is_merged:", getattr(model, "is_merged", getattr(getattr(model, "decoder", None), "is_merged", None)))

if a.load_only:
    sys.exit(0)
if a.trace:
    sessions = [(p.path.name, p) for p in model.parts] if hasattr(model, "parts") else [(model.path.name, model)]
    for name, part in sessions:
        orig = part.session.run
        def traced(out_names, feed, *r, _orig=orig, _name=name, **k):
            desc = []
            kv = [(kk, v) for kk, v in feed.items() if ".key" in kk or ".value" in kk]
            if kv:
                desc.append(f"<{len(kv)} kv feeds, first {kv[0][0]}{list(kv[0][1].shape)}, last {kv[-1][0]}{list(kv[-1][1].shape)}>")
            for kk, v in feed.items():
                if ".key" in kk or ".value" in kk:
                    continue
                d = f"{kk}{list(v.shape)}"
                if v.size <= 8 and v.dtype.kind in "iub":
                    d += "=" + str(v.tolist())
                desc.append(d)
            print("RUN", _name, "; ".join(desc))
            return _orig(out_names, feed, *r, **k)
        part.session.run = traced

ids = torch.tensor([[int(x) for x in a.ids.split(",")]], dtype=torch.long)
out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=a.new,
                     min_new_tokens=a.new, do_sample=False, num_beams=1,
                     output_scores=True, output_logits=True, return_dict_in_generate=True)
seq = out.sequences[0].tolist()
print("SEQUENCE", seq)
first = out.logits[0][0]
top = torch.topk(first, 3)
print("STEP0_LOGITS argmax=%d top3=%s vals=%s" % (int(first.argmax()), top.indices.tolist(),
      [round(v, 5) for v in top.values.tolist()]))
