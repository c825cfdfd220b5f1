# The checkpoint an export came from, run by transformers on the tokens the
# export generated (teacher forcing, no cache, float32, eager attention):
# the logits of the asked tokens at every step, and its own argmax. Run by
# `onnx-contract check DIR --source CHECKPOINT` in a child. Prints one JSON line.
#   python3 -c "$(cat source.py)" CHECKPOINT SPEC_JSON
# SPEC_JSON: {"ids": [...], "start": int|null, "sequences": [{"tokens": [...], "ask": [[...], ...]}, ...]}
import json
import sys

out = {"installed": True, "ok": False, "error": None, "stage": "import", "sequences": []}
try:
    import torch
    import transformers
except Exception as e:  # not installed: said, never a silent pass
    out.update(installed=False, error=f"{type(e).__name__}: {e}")
    print(json.dumps(out))
    sys.exit(0)
checkpoint, spec = sys.argv[1], json.loads(sys.argv[2])
try:
    out["stage"] = "from_pretrained"
    config = transformers.AutoConfig.from_pretrained(checkpoint)
    seq2seq = bool(getattr(config, "is_encoder_decoder", False))
    cls = transformers.AutoModelForSeq2SeqLM if seq2seq else transformers.AutoModelForCausalLM
    model = cls.from_pretrained(checkpoint, torch_dtype=torch.float32, attn_implementation="eager").eval()
    out["stage"] = "forward"
    ids = torch.tensor([spec["ids"]], dtype=torch.long)
    for s in spec["sequences"]:
        tokens = s["tokens"]
        with torch.no_grad():
            if seq2seq:
                start = spec.get("start")
                if start is None:
                    start = config.decoder_start_token_id
                dec = torch.tensor([[start] + tokens], dtype=torch.long)
                logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), decoder_input_ids=dec).logits[0]
                rows = [logits[k] for k in range(len(tokens))]
            else:
                full = torch.tensor([spec["ids"] + tokens], dtype=torch.long)
                logits = model(input_ids=full, attention_mask=torch.ones_like(full)).logits[0]
                rows = [logits[len(spec["ids"]) - 1 + k] for k in range(len(tokens))]
        out["sequences"].append({
            "logits": [[float(r[t]) for t in ask] for r, ask in zip(rows, s["ask"])],
            "argmax": [int(r.argmax()) for r in rows],
            "scale": [float(r.abs().max()) for r in rows],
        })
    out.update(ok=True, stage=None)
except Exception as e:
    out["error"] = str(e).strip()
print(json.dumps(out))
