# The checkpoint an export came from, run by transformers on the tokens the
# export generated (teacher forcing, no cache, float32, eager attention):
# the logits of the asked tokens at every step, and its own argmax. Run by
# `onnx-contract check DIR --source CHECKPOINT` in a child. Prints one JSON line.
#   python3 -c "$(cat source.py)" CHECKPOINT SPEC_JSON
# SPEC_JSON: {"ids": [...], "start": int|null, "sequences": [{"tokens": [...], "ask": [[...], ...]}, ...],
#             "hidden_to": path.npy|null}
import json
import sys

out = {"installed": True, "ok": False, "error": None, "stage": "import", "sequences": [], "hidden": None}
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
    # The decoder's layer stack (its module path is what the export's node
    # scopes are named after): the ModuleList of the decoder with one entry
    # per layer, by name first (an MoE block's experts are a longer list).
    def layer_stack():
        decoder = model.get_decoder() if seq2seq else model
        inside = {id(m) for m in decoder.modules()}
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        want = (getattr(text, "decoder_layers", None) if seq2seq else None) or getattr(text, "num_hidden_layers", None)
        lists = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.ModuleList) and len(m) and id(m) in inside]
        named = [(n, m) for n, m in lists if n.rsplit(".", 1)[-1] in ("layers", "h", "layer", "blocks", "block")]
        for group in (named, lists):
            fit = [(n, m) for n, m in group if len(m) == want]
            if fit:
                return fit[0]
        return None, []

    seen = {"in": None, "out": []}

    def first(x):
        x = x[0] if isinstance(x, (tuple, list)) else x
        return x if isinstance(x, torch.Tensor) and x.dim() == 3 else None

    # The hidden states are extra: a stack not found or a hook that fails
    # leaves them out, never the comparison itself.
    try:
        path, stack = layer_stack()
        seen["out"] = [None] * len(stack)

        def keep_in(module, args, kwargs):
            seen["in"] = first(args[0] if args else kwargs.get("hidden_states"))

        def keep_out(i):
            def hook(module, args, output):
                seen["out"][i] = first(output)
            return hook

        if len(stack):
            stack[0].register_forward_pre_hook(keep_in, with_kwargs=True)
            for i, m in enumerate(stack):
                m.register_forward_hook(keep_out(i))
    except Exception:
        path = None
    for n, s in enumerate(spec["sequences"]):
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
        # The first sequence's hidden states at each asked step's position,
        # [steps, 1 + layers, hidden] float32 in the .npy the tool named:
        # the layer a departure starts in is found from these.
        if n == 0 and path and spec.get("hidden_to") and seen["in"] is not None and all(o is not None for o in seen["out"]):
            try:
                import numpy as np
                at = [k if seq2seq else len(spec["ids"]) - 1 + k for k in range(len(tokens))]
                rows_at = [torch.stack([seen["in"][0, p]] + [o[0, p] for o in seen["out"]]) for p in at]
                np.save(spec["hidden_to"], torch.stack(rows_at).float().numpy())
                out["hidden"] = {"path": path, "file": spec["hidden_to"]}
            except Exception:
                pass
        out["sequences"].append({
            "logits": [[float(r[t]) for t in ask] for r, ask in zip(rows, s["ask"])],
            "argmax": [int(r.argmax()) for r in rows],
            "scale": [float(r.abs().max()) for r in rows],
        })
    out.update(ok=True, stage=None)
except Exception as e:
    out["error"] = str(e).strip()
print(json.dumps(out))
