"""Parts shared by the generators that run the onnxruntime-genai model builder
and record what onnxruntime-genai itself does on a folder.

Used by generate_genai_builder.py. The builder run itself (fixture_common's
genai_builder: save_hf's HF folder with a WordLevel tokenizer of exactly
vocab_size entries, BUILDER_PYTHON's transformers-5 venv the 0.18.0 builder
needs) is shared with generate_genai_forms.py and generate_numeric.py.

- builder_export: run the builder with any precision, keep the config files
  asked for (or none: real builder output has only genai_config.json).
- twin: a copy of a builder folder whose graph files are relative symlinks to
  the original's and whose genai_config.json is edited.
- og_greedy_record: onnxruntime-genai greedy decoding that records the tokens,
  or the exact exception text and where it happened.
"""
import contextlib
import json
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import fixture_common as fc  # noqa: E402

HF_CONFIG_FILES = fc.CONFIG_FILES


def builder_export(model, out: Path, precision="fp32", config_files=HF_CONFIG_FILES, extra_options=(), prepare=None):
    """fc.genai_builder with any precision: every file the builder writes is
    kept unchanged; `config_files` (from the save_pretrained folder, which
    the builder does not write; possibly none) are copied in beside them.
    `prepare(hf_dir)` may touch the HF folder before the builder reads it."""
    fc.genai_builder(model, out, precision=precision, extra_options=extra_options, config_files=config_files,
                     prepare=prepare)


GRAPH_FILES = ("model.onnx", "model.onnx.data")


def write_genai_config(path: Path, cfg):
    """The builder's own layout: json.dumps(indent=4), no trailing newline."""
    path.write_text(json.dumps(cfg, indent=4))


def twin(src: Path, out: Path, edit, links=GRAPH_FILES):
    """A copy of builder folder `src` in `out`: the `links` files become relative
    symlinks to src's (the graph is unchanged), the others are copied, and
    genai_config.json is rewritten after edit(cfg)."""
    if out.exists() or out.is_symlink():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for f in sorted(src.iterdir()):
        if f.name in links:
            os.symlink(os.path.join("..", src.name, f.name), out / f.name)
        else:
            shutil.copy(f, out / f.name)
    cfg = json.loads((src / "genai_config.json").read_text())
    edit(cfg)
    write_genai_config(out / "genai_config.json", cfg)


@contextlib.contextmanager
def cwd(path: Path):
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def og_greedy_record(folder: Path, prompts, new_tokens=None, pad_token_id=0, side="right", watch=()):
    """onnxruntime-genai greedy (do_sample False) on `folder`, driven as its
    Python API is: og.Model(dir), GeneratorParams with set_search_options
    (max_length = longest prompt + new_tokens; None keeps genai_config's
    search.max_length), og.Generator, append_tokens(prompts), then
    generate_next_token until is_done().

    Several prompts are one batch (batch_size = len(prompts)), padded with
    pad_token_id on `side`. genai builds the attention mask from the pad
    tokens at the END of each row only (right padding).

    The folder is opened by its name from its parent directory, so error texts
    name it relative ("genai-x/decoder.onnx"), whatever --out is.

    Returns {"genai": "ok" | "load-error" | "run-error", "stage", "error",
    "tokens" (one list per prompt, the tokens made before any error),
    "at_token" (run-error: the index of the first token genai could not make;
    0 = the prompt's forward pass), "stop" ("max_length" or "eos"),
    "feeds" (get_input shapes of `watch` at the prompt call)}."""
    import numpy as np
    import onnxruntime_genai as og

    rec = {"genai": "ok", "stage": None, "error": None, "tokens": [[] for _ in prompts], "at_token": None}
    stage = "og.Model"
    with cwd(folder.parent):
        try:
            model = og.Model(folder.name)
            stage = "og.GeneratorParams"
            params = og.GeneratorParams(model)
            opts = dict(do_sample=False, batch_size=len(prompts))
            if new_tokens is not None:
                opts["max_length"] = max(map(len, prompts)) + new_tokens
            params.set_search_options(**opts)
            stage = "og.Generator"
            g = og.Generator(model, params)
            stage = "append_tokens"
            L = max(map(len, prompts))
            pad = lambda q: (q + [pad_token_id] * (L - len(q))) if side == "right" else ([pad_token_id] * (L - len(q)) + q)
            g.append_tokens(np.array([pad(list(q)) for q in prompts], np.int32))
            if watch:
                rec["feeds"] = {n: list(np.asarray(g.get_input(n)).shape) for n in watch}
                rec["attention_mask"] = np.asarray(g.get_input("attention_mask")).tolist()
            while not g.is_done():
                stage = "generate_next_token"
                g.generate_next_token()
                for row, t in zip(rec["tokens"], np.asarray(g.get_next_tokens()).tolist()):
                    row.append(int(t))
            n = len(rec["tokens"][0])
            ml = params.get_search_options().get("max_length")
            rec["stop"] = "max_length" if L + n >= ml else "eos"
        except Exception as e:  # genai raises RuntimeError with the C++ message
            rec["genai"] = "load-error" if stage.startswith("og.") else "run-error"
            rec["stage"] = stage
            rec["error"] = f"{type(e).__name__}: {e}"
            if rec["genai"] == "run-error":
                # generate_next_token call k first selects token k-1 from the
                # logits it has, then runs the model on it: a failure there means
                # token (number made so far) could not be made.
                rec["at_token"] = len(rec["tokens"][0])
    return rec
