# optimum's own greedy generation on an export folder, as an application
# runs it (ORTModelForCausalLM.from_pretrained on the local folder, generate
# with do_sample False, no tokenizer): written by `onnx-contract protocol`,
# run by `onnx-contract check` in a child. Prints one JSON line. Save it
# under another name than optimum.py (it would shadow the package).
#   python3 generate_optimum.py FOLDER IDS_JSON MAX_NEW_TOKENS
import json
import sys

out = {"installed": True, "ok": False, "tokens": [], "error": None, "stage": "import"}
try:
    import torch
    from optimum.onnxruntime import ORTModelForCausalLM
except Exception as e:  # not installed: said, never a silent pass
    out.update(installed=False, error=f"{type(e).__name__}: {e}")
    print(json.dumps(out))
    sys.exit(0)
folder, ids, new = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])

def generate(**load):
    out["stage"] = "from_pretrained"
    model = ORTModelForCausalLM.from_pretrained(folder, provider="CPUExecutionProvider", **load)
    out["stage"] = "generate"
    input_ids = torch.tensor([ids], dtype=torch.long)
    return model.generate(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=new,
        do_sample=False,
        num_beams=1,
    )


try:
    try:
        seq = generate()
    except ValueError as e:
        if "use_cache" not in str(e):
            raise
        # An export without a cache is loaded with use_cache=False, as
        # optimum documents (`check` warns that the default call fails).
        seq = generate(use_cache=False)
    out["tokens"] = [int(t) for t in seq[0, len(ids):]]
    out.update(ok=True, stage=None)
except Exception as e:
    out["error"] = str(e).strip()
print(json.dumps(out))
