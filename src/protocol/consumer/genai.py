# onnxruntime-genai's own greedy generation on an export folder, as an
# application runs it (og.Model, GeneratorParams, Generator, append_tokens,
# generate_next_token until is_done): written by `onnx-contract protocol`,
# run by `onnx-contract check` in a child. Prints one JSON line.
#   python3 genai.py FOLDER IDS_JSON MAX_NEW_TOKENS [MODE]
import json
import sys

out = {"installed": True, "ok": False, "tokens": [], "error": None, "stage": "import"}
try:
    import numpy as np
    import onnxruntime_genai as og
except Exception as e:  # not installed: said, never a silent pass
    out.update(installed=False, error=f"{type(e).__name__}: {e}")
    print(json.dumps(out))
    sys.exit(0)
folder, ids, new = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
# MODE `audio=PATH:INPUT`: an audio model, fed the features in PATH (.npy,
# the same the tool's own reference is fed), IDS the decoder's start. genai
# names them `audio_features` whatever the encoder's input is called.
mode = sys.argv[4] if len(sys.argv) > 4 else ""
audio = None
if mode.startswith("audio="):
    audio = np.load(mode[len("audio="):].rsplit(":", 1)[0])
try:
    out["stage"] = "og.Model"
    config = og.Config(folder)
    config.clear_providers()  # the CPU, whatever providers the folder names
    model = og.Model(config)
    out["stage"] = "og.Generator"
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=len(ids) + new, batch_size=1)
    generator = og.Generator(model, params)
    if audio is not None:
        out["stage"] = "set_inputs"
        inputs = og.NamedTensors()
        inputs["audio_features"] = audio
        inputs["input_ids"] = np.array([ids], dtype=np.int32)
        generator.set_inputs(inputs)
    else:
        out["stage"] = "append_tokens"
        generator.append_tokens(np.array([ids], dtype=np.int32))
    out["stage"] = "generate_next_token"
    while not generator.is_done():
        generator.generate_next_token()
        out["tokens"].append(int(generator.get_next_tokens()[0]))
    out.update(ok=True, stage=None)
except Exception as e:
    out["error"] = str(e).strip()
print(json.dumps(out))
