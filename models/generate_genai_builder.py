"""Generate the onnxruntime-genai model-builder fixtures for the consumer
loading rules, and record what onnxruntime-genai 0.18.0 itself does on each
folder (models/genai-builder-expected.json; notes in GENAI-BUILDER-NOTES.md).

Good folders are exactly what the onnxruntime-genai 0.18.0 model builder
(`python -m onnxruntime_genai.models.builder -i HF_DIR -o OUT -p fp32|int4 -e cpu`)
wrote for a tiny model built here from a config with seeded random weights and
saved with save_pretrained (transformers 4.57.6). Nothing the builder wrote is
edited. Except in genai-bare, config.json and generation_config.json (which the
builder does not write) are copied in from that save_pretrained folder.

Broken twins are a good folder's files with model.onnx and model.onnx.data as
relative symlinks to the good folder's (the graph is unchanged) and an edited
genai_config.json (written as the builder writes it: json indent 4, no final
newline).

Versions: /work/genvenv (Python 3.11.7, torch 2.9.1, transformers 4.57.6,
onnx 1.23.2, onnxruntime 1.31.1, onnxruntime-genai 0.18.0, onnx-ir 1.1.0,
numpy 2.4.6, tokenizers 0.22.2, huggingface_hub 0.36.2). The 0.18.0 builder
does not import with transformers 4.57.6, so it runs as a subprocess in
/work/genvenv-tf5, which adds transformers 5.23.0 on top of /work/genvenv's
packages. Both venvs are made from PyPI:

    /root/.pyenv/versions/3.11.7/bin/python3 -m venv /work/genvenv
    /work/genvenv/bin/pip install torch==2.9.1 transformers==4.57.6 onnx==1.23.2 \\
        onnxruntime==1.31.1 onnxruntime-genai==0.18.0 onnx-ir==1.1.0
    /root/.pyenv/versions/3.11.7/bin/python3 -m venv /work/genvenv-tf5
    echo /work/genvenv/lib/python3.11/site-packages \\
        > /work/genvenv-tf5/lib/python3.11/site-packages/zz-genvenv.pth
    /work/genvenv-tf5/bin/pip install transformers==5.23.0
    # (adds transformers 5.23.0, huggingface_hub 2.4.0, tokenizers 0.23.3 to
    #  genvenv-tf5 only; /work/genvenv keeps 4.57.6 / 0.36.2 / 0.22.2)

    HF_HUB_OFFLINE=1 /work/genvenv/bin/python models/generate_genai_builder.py [--out DIR]
    /work/genvenv/bin/python models/generate_genai_builder.py --verify-only [--out DIR]

A full run writes every folder below and genai-builder-expected.json into
models/ (or DIR), then prints the measurements. Two full runs into two
directories give byte-identical files (`diff -r`, symlinks included). The
script re-executes itself with PYTHONHASHSEED=0; torch and onnxruntime use one
thread. --verify-only measures the folders already there and compares them
with the expected JSON there. $GENAI_BUILDER_PYTHON overrides the builder's
python. Shared parts: genai_builder_common.py (builder_export, twin,
og_greedy_record) and generate_genai_forms.py (save_hf, genai_loop,
torch_greedy, session).

Every model: hidden 64, head size 16 (CPU GroupQueryAttention needs a multiple
of 16), initializer_range 0.2 (with 0.02 greedy decoding repeats one token),
bos 1, eos 2, pad 0, seed 0, a WordLevel tokenizer of exactly vocab_size words.

Good (builder output):
  genai-qwen2/           Qwen2, fp32: 2 layers, 4 heads / 2 KV heads, vocab 1000,
                         max_position_embeddings 64 (cos_cache has 64 rows),
                         q/k/v biases set to 0.1*randn (seed 1) so the builder
                         keeps them (it drops all-zero biases).
  genai-gemma2-window/   Gemma 2, fp32: 4 layers, sliding_window 8 on layers 0 and
                         2 (GroupQueryAttention local_window_size 8 with the
                         sliding_window_cache attribute; their KV dims are
                         past_sliding_length / total_sliding_length), softcaps
                         50 / 30, untied lm_head, vocab 1024, max_pos 64.
  genai-llama-int4/      Llama, -p int4 -e cpu: every projection and lm_head is
                         com.microsoft.MatMulNBits (block 32, accuracy level 4).
  genai-qwen3/           Qwen3, fp32: q/k RMSNorm before attention, vocab 1056.
  genai-bare/            Llama, fp32, 3 layers, 4 heads / 1 KV head, vocab 1100:
                         builder output only (no config.json, no
                         generation_config.json).
Broken twins of genai-qwen2 (only genai_config.json differs):
  genai-missing-file     model.decoder.filename "decoder.onnx" (not there)
  genai-eos-out-of-vocab model.eos_token_id [2, 151645] (vocab 1000)
  genai-context-past-rope  model.context_length and search.max_length 256, 4x the
                         64 rows of the graph's cos_cache
  genai-bad-template     model.decoder.inputs.past_key_names "past.%d.k"
  genai-head-size-wrong  model.decoder.head_size 32 (the graph's is 16)
  genai-vocab-wrong      model.vocab_size 976 (the graph's logits have 1000)

Recorded per folder (onnxruntime-genai, in this process, one thread): greedy
over PROMPT with NEW_TOKENS new tokens (max_length = 6 + 24), the tokens or the
exception text and where (og.Model / og.Generator = load-error; append_tokens
= token 0; generate_next_token = token k). genai-context-past-rope runs to its
own search.max_length (256), past the table's 64 rows. Good folders also: a
batch of PROMPT and PROMPT_B (batch_size 2) padded with pad_token_id on the
right (genai's convention) and on the left; plain onnxruntime greedy fed as
genai feeds it (KV buffers of max_length rows shared with the presents, the
mask over the real length; generate_genai_forms.genai_loop) and the same with
growing KV buffers (past length 0 at the prompt); and transformers 4.57.6
(PyTorch, uncached) greedy on the source checkpoint.
"""
import json
import os
import warnings
from pathlib import Path

import fixture_common as fc

fc.start(__name__)

HERE = Path(__file__).resolve().parent

import numpy as np  # noqa: E402

import generate_genai_forms as forms  # noqa: E402
from genai_builder_common import builder_export, og_greedy_record, twin  # noqa: E402

OUT = HERE
SEED = 0
BIAS_SEED = 1
PROMPT = [1, 3, 14, 15, 92, 65]
PROMPT_B = [1, 7, 33, 500]
NEW_TOKENS = 24
EXPECTED = "genai-builder-expected.json"

COMMON = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, bos_token_id=1, eos_token_id=2,
              pad_token_id=0, initializer_range=0.2)
QWEN2 = dict(COMMON, vocab_size=1000, intermediate_size=128, num_hidden_layers=2, max_position_embeddings=64,
             tie_word_embeddings=False)
GEMMA2 = dict(COMMON, vocab_size=1024, intermediate_size=64, num_hidden_layers=4, head_dim=16,
              query_pre_attn_scalar=16, sliding_window=8, max_position_embeddings=64, tie_word_embeddings=False)
# Gemma 2 ties its embeddings; tied, this random model repeats the last prompt
# token (65, 65, ...) for all 24 steps (the x8 embedding scale dominates), so the
# lm_head is untied. layer_types is transformers' default: sliding on even layers.
LLAMA_INT4 = dict(COMMON, vocab_size=1024, intermediate_size=128, num_hidden_layers=2, max_position_embeddings=128)
QWEN3 = dict(COMMON, vocab_size=1056, intermediate_size=128, num_hidden_layers=2, head_dim=16,
             max_position_embeddings=128, tie_word_embeddings=False)
BARE = dict(COMMON, vocab_size=1100, intermediate_size=96, num_hidden_layers=3, num_key_value_heads=1,
            max_position_embeddings=128)


def _model(cls_name, cfg_name, cfg):
    torch = forms._torch()
    import transformers

    torch.manual_seed(SEED)
    return getattr(transformers, cls_name)(getattr(transformers, cfg_name)(**cfg)).eval()


def qwen2_model():
    return forms.nonzero_biases(_model("Qwen2ForCausalLM", "Qwen2Config", QWEN2), BIAS_SEED)


def gemma2_model():
    m = _model("Gemma2ForCausalLM", "Gemma2Config", GEMMA2)
    m.set_attn_implementation("eager")  # the reference honours the attention softcap
    return m


SOURCES = {
    "genai-qwen2": (qwen2_model, "fp32", True),
    "genai-gemma2-window": (gemma2_model, "fp32", True),
    "genai-llama-int4": (lambda: _model("LlamaForCausalLM", "LlamaConfig", LLAMA_INT4), "int4", True),
    "genai-qwen3": (lambda: _model("Qwen3ForCausalLM", "Qwen3Config", QWEN3), "fp32", True),
    "genai-bare": (lambda: _model("LlamaForCausalLM", "LlamaConfig", BARE), "fp32", False),
}


def _set(*path_and_value):
    *path, key, value = path_and_value

    def edit(cfg):
        d = cfg
        for k in path:
            d = d[k]
        d[key] = value(d[key]) if callable(value) else value
    return edit


def _rope(cfg):
    cfg["model"]["context_length"] *= 4
    cfg["search"]["max_length"] *= 4


TWIN_BASE = "genai-qwen2"
TWINS = {
    "genai-missing-file": _set("model", "decoder", "filename", "decoder.onnx"),
    "genai-eos-out-of-vocab": _set("model", "eos_token_id", [2, 151645]),
    "genai-context-past-rope": _rope,
    "genai-bad-template": _set("model", "decoder", "inputs", "past_key_names", "past.%d.k"),
    "genai-head-size-wrong": _set("model", "decoder", "head_size", lambda v: v * 2),
    "genai-vocab-wrong": _set("model", "vocab_size", lambda v: v - 24),
}
FOLDERS = list(SOURCES) + list(TWINS)


def generate():
    for name, (make, precision, keep_configs) in SOURCES.items():
        print(f"== generate {name}", flush=True)
        builder_export(make(), OUT / name, precision=precision, config_files=() if not keep_configs else
                       ("config.json", "generation_config.json"))
    for name, edit in TWINS.items():
        print(f"== generate {name}", flush=True)
        twin(OUT / TWIN_BASE, OUT / name, edit)


# ---------------------------------------------------------------- measuring

def first_diff(a, b):
    return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))


def same_row(row, single, pad):
    """A batch row equals a single run: the same tokens, then (once the single
    run stopped at eos) only pad_token_id, which genai emits for a finished row."""
    return row[:len(single)] == single and all(t == pad for t in row[len(single):])


def err_text(e):
    return " ".join(str(e).split())


def cos_rows(folder):
    import onnx

    m = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    return {t.name: list(t.dims) for t in m.graph.initializer if t.name.endswith("_cache")}


def measure(name):
    folder = OUT / name
    cfg = json.loads((folder / "genai_config.json").read_text())
    pad = cfg["model"]["pad_token_id"]
    if name == "genai-context-past-rope":
        rec = og_greedy_record(folder, [PROMPT], new_tokens=None, pad_token_id=pad)
    else:
        rec = og_greedy_record(folder, [PROMPT], new_tokens=NEW_TOKENS, pad_token_id=pad,
                               watch=["past_key_values.0.key", "past_key_values.1.key"] if name in SOURCES else ())
    rec["tokens"] = rec["tokens"][0]
    if name not in SOURCES:
        rec.pop("feeds", None)
        rec.pop("attention_mask", None)
        return rec

    # a padded batch of two prompts of different lengths
    single_b = og_greedy_record(folder, [PROMPT_B], new_tokens=NEW_TOKENS, pad_token_id=pad)["tokens"][0]
    rec["batch"] = {}
    for side in ("right", "left"):
        b = og_greedy_record(folder, [PROMPT, PROMPT_B], new_tokens=NEW_TOKENS, pad_token_id=pad, side=side,
                             watch=["attention_mask"])
        entry = {"genai": b["genai"], "attention_mask": b.get("attention_mask")}
        if b["genai"] == "ok":
            entry["tokens"] = b["tokens"]
            entry["rows_equal_single_runs"] = [same_row(b["tokens"][0], rec["tokens"], pad),
                                               same_row(b["tokens"][1], single_b, pad)]
        else:
            entry |= {"stage": b["stage"], "error": b["error"], "at_token": b["at_token"]}
        rec["batch"][side] = entry
    rec["single_prompt_b_tokens"] = single_b

    # plain onnxruntime, fed as genai feeds it, and with growing buffers
    dec = cfg["model"]["decoder"]
    sess = forms.session(folder / "model.onnx")
    cmp = {}
    for label, max_len in (("ort_shared_buffer", len(PROMPT) + NEW_TOKENS), ("ort_growing", None)):
        try:
            toks = forms.genai_loop(sess, dec, PROMPT, NEW_TOKENS, max_len=max_len)[0]
            cmp[label] = {"tokens": toks, "equal_genai": toks == rec["tokens"],
                          "first_diff": first_diff(toks, rec["tokens"])}
        except Exception as e:
            cmp[label] = {"error": err_text(e)}
    # transformers (PyTorch, uncached) on the source checkpoint
    torch = forms._torch()
    model = SOURCES[name][0]()
    with torch.no_grad():
        toks, _ = forms.torch_greedy(lambda ids: model(torch.tensor([ids])).logits[0, -1].double().numpy(),
                                     PROMPT, NEW_TOKENS)
    cmp["transformers"] = {"tokens": toks, "equal_genai": toks == rec["tokens"],
                           "first_diff": first_diff(toks, rec["tokens"])}
    rec["compare"] = cmp
    rec["rope_tables"] = cos_rows(folder)
    if name == TWIN_BASE:
        # what genai does when asked for more than context_length
        probe = og_greedy_record(folder, [PROMPT], new_tokens=cfg["model"]["context_length"], pad_token_id=pad)
        rec["probe_max_length_over_context"] = {k: probe[k] for k in ("genai", "stage", "error")}
    return rec


def measure_all():
    out = {}
    for name in FOLDERS:
        print(f"== measure {name}", flush=True)
        rec = measure(name)
        out[name] = rec
        line = {k: rec[k] for k in ("genai", "stage", "error", "at_token")}
        print(f"  genai: {line}")
        print(f"  tokens ({len(rec['tokens'])}): {rec['tokens']}")
        if "feeds" in rec:
            print(f"  genai feeds at the prompt call: {rec['feeds']}; rope tables {rec['rope_tables']}")
        for side, b in rec.get("batch", {}).items():
            print(f"  batch, {side} padding: {b}")
        for k, v in rec.get("compare", {}).items():
            print(f"  {k}: {v}")
        if "probe_max_length_over_context" in rec:
            print(f"  max_length > context_length: {rec['probe_max_length_over_context']}")
    return out


def files_report():
    for name in FOLDERS:
        for f in sorted((OUT / name).iterdir()):
            kind = f"-> {os.readlink(f)}" if f.is_symlink() else f"{f.stat().st_size} bytes"
            print(f"{name}/{f.name}  {kind}")


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    args = fc.parse_args({})  # [--out DIR] [--verify-only]: all eleven folders, always
    OUT = args.out or OUT
    OUT.mkdir(parents=True, exist_ok=True)
    if not args.verify_only:
        generate()
    files_report()
    results = measure_all()
    text = json.dumps(results, indent=1, sort_keys=True) + "\n"
    if args.verify_only:
        old = (OUT / EXPECTED).read_text() if (OUT / EXPECTED).exists() else None
        print(f"== {EXPECTED}: {'unchanged' if old == text else 'DIFFERS from what was measured now'}")
    else:
        (OUT / EXPECTED).write_text(text)
        print(f"== wrote {OUT / EXPECTED}")
