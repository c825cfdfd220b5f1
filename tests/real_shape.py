"""Real SHAPES at small width: the audits on exports with real head dims (64
and 128), dozens of layers and every weight in external data, in well under a
minute (bench/real_size.py is the full-size version: minutes and gigabytes).

    python3 tests/real_shape.py OUT_DIR

OUT_DIR must lie outside the repository (nothing here is committed). Written:

  qwen2-hd64/           Qwen2ForCausalLM, bench/real_size.py's qwen2 config
                        narrowed: hidden 128 = 2 heads x head_dim 64, 1 KV head,
                        24 layers, intermediate 256, vocab 2000, rope_theta 1e6,
                        max_position_embeddings 32768, tied embeddings (no
                        head_dim in config.json: derived, as in Qwen2-0.5B's);
  qwen2-hd64-theta/     its twin: config.json with rope_theta 10000 (the graph
                        rotates with 1e6): the rotary audit must name rope_theta;
  llama-hd128/          LlamaForCausalLM: hidden 256 = 2 heads x head_dim 128
                        (head_dim written, as Llama 3's configs do), 2 KV heads,
                        22 layers (TinyLlama's), intermediate 256, vocab 2000,
                        rope_theta 1e4, untied;
  llama-hd128-theta/    config.json rope_theta 5e5;
  granite-hd128/        GraniteForCausalLM: hidden 384 = 3 heads x head_dim 128,
                        1 KV head, 24 layers, intermediate 256, vocab 2000,
                        embedding_multiplier 12, logits_scaling 8,
                        residual_multiplier 0.22, attention_multiplier 1/128,
                        tied;
  granite-hd128-logits/ config.json logits_scaling 1.0 (the graph divides by
                        8): the config-scale audit must name logits_scaling.

Each good folder: a random model built from its config (HF_HUB_OFFLINE=1, no
hub), every generator seeded with real_size.SEED, initializer_range
INIT_STD (greedy tokens vary at these widths), save_pretrained then optimum's
main_export(task="text-generation-with-past") in fp32, exactly as
real_size.GEN does (in this process: torch is imported once, not per model);
then model.onnx is re-saved with EVERY initializer in one external file,
model.onnx_data (size_threshold=0), and no other data file is left. The
folder must then load in onnxruntime from a working directory that is not the
folder, with model.onnx alone small; a greedy run there (8-token prompt, 7
cached steps) must give torch's greedy tokens, at least 4 of them distinct.

A twin holds HARD links to its folder's model.onnx and model.onnx_data (a
copy if the filesystem refuses links; never a symlink: ONNX Runtime 1.31
resolves a symlinked data file and refuses it outside the real model's folder,
"External data path escapes model directory"), generation_config.json
copied, config.json with the family's `twin` overrides from bench/real_size.py.

The last line of stdout is one JSON document:
{"folders": {name: {"layers", "head_dim", "onnx_bytes", "data_bytes"}}, "seconds": total}.
torch and onnxruntime run on one thread (the same numbers on every machine).
"""
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    # optimum's merge step names things by iterating sets: a fixed hash seed
    # gives the same bytes on every run.
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable, *sys.argv])
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(ROOT / "bench"))
import real_size  # noqa: E402  (a script whose main() is guarded: only constants and functions)

VOCAB = 2000
# initializer_range. real_size.INIT_STD (0.05) is for hidden 896+: at these
# widths greedy repeats (Qwen2 2 distinct tokens of 8, Llama 2, Granite 1, its
# logits divided by 8). Measured, 8 greedy tokens after the bench prompt in
# torch: 0.2 gives 8, 8 and 7 distinct, logits of std 2.3, 3.2 and 0.4 and a
# top-1/top-2 margin of at least 0.033, 0.082 and 0.022 at every position.
INIT_STD = 0.2
MAX_ONNX_BYTES = 2_000_000  # model.onnx without its weights: the graph alone

# name: (real_size family, overrides of that family's full-size config)
MODELS = {
    "qwen2-hd64": ("qwen2", dict(
        vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=24,
        num_attention_heads=2, num_key_value_heads=1, max_window_layers=24,
        bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1)),
    "llama-hd128": ("llama", dict(
        vocab_size=VOCAB, hidden_size=256, intermediate_size=256, num_hidden_layers=22,
        num_attention_heads=2, num_key_value_heads=2, head_dim=128)),
    "granite-hd128": ("granite", dict(
        # hidden 384: the projections' weights (384 x 384) are beyond the 65,536 elements
        # of a constant the config audit decodes, as every real model's are.
        vocab_size=VOCAB, hidden_size=384, intermediate_size=256, num_hidden_layers=24,
        num_attention_heads=3, num_key_value_heads=1)),
}
TWIN_SUFFIX = {"qwen2": "-theta", "llama": "-theta", "granite": "-logits"}


def seed_all():
    import random

    import numpy as np
    import torch

    random.seed(real_size.SEED)
    np.random.seed(real_size.SEED)
    torch.manual_seed(real_size.SEED)


def export(family: str, config: dict, folder: Path, work: Path) -> list:
    """real_size.GEN's model and export, then every weight moved to
    model.onnx_data. Returns torch's greedy tokens after the bench prompt."""
    import numpy as np
    import onnx
    import torch
    import transformers
    from optimum.exporters.onnx import main_export

    cls = real_size.FAMILIES[family]["cls"]
    seed_all()
    cfg = getattr(transformers, cls + "Config")(initializer_range=INIT_STD, **config)
    model = getattr(transformers, cls + "ForCausalLM")(cfg).eval()
    ids = torch.from_numpy(np.random.default_rng(0).integers(0, cfg.vocab_size, (1, 8)))
    with torch.no_grad():
        greedy = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False,
                                pad_token_id=cfg.eos_token_id)[0, 8:].tolist()
    src, dst = work / folder.name / "src", work / folder.name / "onnx"
    model.save_pretrained(src)
    del model
    seed_all()
    with warnings.catch_warnings():  # the tracer's warnings on every export, the same each time
        warnings.simplefilter("ignore")
        main_export(str(src), str(dst), task="text-generation-with-past", do_validation=False)
    folder.mkdir(parents=True)
    m = onnx.load(str(dst / "model.onnx"))  # with whatever external data optimum wrote
    onnx.save_model(m, str(folder / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx_data", size_threshold=0)
    for n in ("config.json", "generation_config.json"):
        shutil.copy(dst / n, folder / n)
    shutil.rmtree(work / folder.name)
    written = sorted(p.name for p in folder.iterdir())
    assert written == ["config.json", "generation_config.json", "model.onnx", "model.onnx_data"], written
    return greedy


def external_only(path: Path):
    """Every initializer of model.onnx lives in model.onnx_data."""
    import onnx
    from onnx.external_data_helper import uses_external_data

    m = onnx.load(str(path), load_external_data=False)
    inline = [t.name for t in m.graph.initializer if not uses_external_data(t)]
    places = {e.value for t in m.graph.initializer if uses_external_data(t)
              for e in t.external_data if e.key == "location"}
    assert not inline and places == {"model.onnx_data"}, (path, inline[:5], places)
    return len(m.graph.initializer)


def ort_greedy(folder: Path, cfg: dict) -> list:
    """Load from a working directory that is not the folder, then an 8-token
    prompt and 7 cached one-token steps, greedy (real_size.PY_DRIVER's feeds)."""
    import numpy as np
    import onnxruntime as ort

    here = os.getcwd()
    os.chdir(tempfile.gettempdir())
    try:
        so = ort.SessionOptions()
        so.intra_op_num_threads = so.inter_op_num_threads = 1
        s = ort.InferenceSession(str(folder / "model.onnx"), so, providers=["CPUExecutionProvider"])
    finally:
        os.chdir(here)
    L, H = cfg["num_hidden_layers"], cfg["num_attention_heads"]
    KV, D = cfg.get("num_key_value_heads", H), cfg.get("head_dim") or cfg["hidden_size"] // H
    names = [o.name for o in s.get_outputs()]
    has_pos = any(i.name == "position_ids" for i in s.get_inputs())
    z = np.zeros((1, KV, 0, D), np.float32)
    past = [(z, z)] * L
    tokens = [int(t) for t in np.random.default_rng(0).integers(0, cfg["vocab_size"], 8)]
    new, start = tokens, 0
    for _ in range(8):
        f = {"input_ids": np.array([new], np.int64), "attention_mask": np.ones((1, start + len(new)), np.int64)}
        if has_pos:
            f["position_ids"] = np.arange(start, start + len(new), dtype=np.int64)[None]
        for layer in range(L):
            f[f"past_key_values.{layer}.key"], f[f"past_key_values.{layer}.value"] = past[layer]
        out = dict(zip(names, s.run(None, f)))
        past = [(out[f"present.{layer}.key"], out[f"present.{layer}.value"]) for layer in range(L)]
        start += len(new)
        new = [int(out["logits"][0, -1].argmax())]
        tokens += new
    return tokens[8:]


def twin(folder: Path, family: str) -> Path:
    """Hard links to the folder's graph and data (a copy where links fail),
    generation_config.json copied, config.json with the family's twin overrides."""
    fam = real_size.FAMILIES[family]
    t = folder.parent / (folder.name + TWIN_SUFFIX[family])
    t.mkdir()
    for n in ("model.onnx", "model.onnx_data"):
        try:
            os.link(folder / n, t / n)
        except OSError:
            shutil.copy(folder / n, t / n)
    shutil.copy(folder / "generation_config.json", t)
    cfg = json.loads((folder / "config.json").read_text())
    assert all(k in cfg and cfg[k] != v for k, v in fam["twin"].items()), (cfg, fam["twin"])
    cfg.update(fam["twin"])
    (t / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return t


def main():
    t0 = time.perf_counter()
    if len(sys.argv) != 2:
        sys.exit(__doc__.split("\n\n")[1])
    out = Path(sys.argv[1]).resolve()
    if out == ROOT or ROOT in out.parents:
        sys.exit(f"{out}: inside the repository; give a folder outside it (e.g. under /tmp)")
    import torch
    import transformers

    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    out.mkdir(parents=True, exist_ok=True)
    folders = {}
    with tempfile.TemporaryDirectory(dir=out) as work:
        for name, (family, narrow) in MODELS.items():
            t1 = time.perf_counter()
            folder = out / name
            for old in (folder, out / (name + TWIN_SUFFIX[family])):
                shutil.rmtree(old, ignore_errors=True)
            config = dict(real_size.FAMILIES[family]["config"], **narrow)
            greedy = export(family, config, folder, Path(work))
            n_init = external_only(folder / "model.onnx")
            cfg = json.loads((folder / "config.json").read_text())
            ort_tokens = ort_greedy(folder, cfg)
            assert len(set(ort_tokens)) >= 4, f"{name}: greedy tokens do not vary: {ort_tokens}"
            assert ort_tokens == greedy, f"{name}: onnxruntime's greedy {ort_tokens}, torch's {greedy}"
            onnx_bytes = (folder / "model.onnx").stat().st_size
            data_bytes = (folder / "model.onnx_data").stat().st_size
            assert onnx_bytes < MAX_ONNX_BYTES < data_bytes, (name, onnx_bytes, data_bytes)
            H = cfg["num_attention_heads"]
            row = dict(layers=cfg["num_hidden_layers"], head_dim=cfg.get("head_dim") or cfg["hidden_size"] // H,
                       onnx_bytes=onnx_bytes, data_bytes=data_bytes)
            t = twin(folder, family)
            folders[name] = row
            folders[t.name] = dict(row)
            print(f"{name}: {row['layers']} layers, head_dim {row['head_dim']}, model.onnx {onnx_bytes} B + "
                  f"model.onnx_data {data_bytes} B ({n_init} initializers, all external); greedy torch "
                  f"{greedy}, onnxruntime {ort_tokens}; twin {t.name} "
                  f"({', '.join(f'{k} {v:g}' for k, v in real_size.FAMILIES[family]['twin'].items())}); "
                  f"{time.perf_counter() - t1:.1f} s", flush=True)
    print(json.dumps({"folders": folders, "seconds": round(time.perf_counter() - t0, 1)}))


if __name__ == "__main__":
    main()
