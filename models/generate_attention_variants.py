"""Generate the attention-variant fixtures in models/ and measure them in
onnxruntime against PyTorch.

Every folder is a real optimum export: optimum-onnx 0.1.0's
`optimum.exporters.onnx.main_export(model_dir, out, task="text-generation-with-past")`
on a tiny model built from a config with seeded random weights (seed 0) and
saved with save_pretrained to a temporary folder. The folder holds exactly
what main_export wrote: model.onnx, config.json, generation_config.json.
Nothing is edited after the export. Versions: /work/genvenv (torch 2.9.1,
transformers 4.57.6, optimum 2.1.0, optimum-onnx 0.1.0, onnx 1.23.2,
onnxruntime 1.31.1), except for the one export named below.

    HF_HUB_OFFLINE=1 python models/generate_attention_variants.py [--out DIR] [name ...]
    python models/generate_attention_variants.py --verify-only [name ...]   # only the measurements

  deepseek-mla-tiny/  DeepseekV3ForCausalLM (multi-head latent attention), 2
                      dense layers (first_k_dense_replace 2), hidden 64, 4 heads,
                      q_lora_rank 16, kv_lora_rank 16, qk_nope_head_dim 16,
                      qk_rope_head_dim 8, v_head_dim 16, vocab 500. The cache is
                      per-head and decompressed, not the latent: keys
                      [batch, 4, past, 24] (nope 16 + rope 8), values
                      [batch, 4, past, 16]. config.json says head_dim 8 (transformers
                      sets it to qk_rope_head_dim) and qk_head_dim 24. Takes
                      position_ids.
  gpt-bigcode-tiny/   GPTBigCodeForCausalLM, multi_query, hidden 64, 4 heads
                      (head_dim 16), vocab 500, with the fused cache
                      past_key_values.N.key_value [batch_size,
                      past_sequence_length, 32] (last axis: key 0-15, value
                      16-31). optimum-onnx 0.1.0 writes this layout only when the
                      installed transformers is older than 4.54 (with 4.57.6 it
                      writes split .key/.value [batch, 1, past, 16]), so this
                      export runs main_export in a subprocess whose
                      transformers is 4.53.3 (+ tokenizers 0.21.4, which 4.53.3
                      requires), a combination optimum-onnx 0.1.0 declares
                      (transformers>=4.36,<4.58). Those two wheels live in a
                      folder of their own, prepended to that subprocess's
                      PYTHONPATH only:
                          pip install --no-deps --target /tmp/tf453-site \\
                              transformers==4.53.3 tokenizers==0.21.4   # or $TF453_SITE
                      The subprocess builds, saves and exports the model; its
                      seeded weights are checked equal to transformers 4.57.6's
                      (against which it is verified). Takes position_ids.
  bloom-tiny/         BloomForCausalLM (ALiBi), hidden 64, 4 heads, vocab 500
                      (initializer_range 0.5: at 0.2 greedy repeats one token). No
                      position_ids input: positions come from attention_mask
                      (ALiBi is built from cumsum(attention_mask)). With
                      transformers 4.57.6 optimum-onnx 0.1.0 writes the
                      standard 4-D cache [batch_size, 4, past_sequence_length,
                      16] for both key and value (by optimum-onnx's
                      BloomOnnxConfig code, the old [batch*heads, head_dim,
                      past] key layout is written only with transformers <
                      4.44; not tried here).
  gemma3-tiny/        Gemma3ForCausalLM (gemma3_text), hidden 64, 4 heads, 2 kv
                      heads, head_dim 16, vocab 500, layer_types
                      [sliding_attention, full_attention], sliding_window 4,
                      tie_word_embeddings false (tied, this tiny random model
                      greedily repeats the last prompt token). No
                      position_ids input: the graph computes positions as
                      Range(Shape(past_key_values.0.key)[2], that + seq), i.e.
                      from the sliding layer's past. Both layers' caches grow with the whole
                      sequence; the window is applied inside the graph by the
                      mask of layer 0.

Measurements (see ATTENTION-VARIANTS-NOTES.md): a fixed prompt, then greedy
decoding for STEPS steps driven the way optimum's ORTModelForCausalLM drives
the file (step 0: the whole prompt, attention_mask of ones, position_ids
0..P-1 where the graph has them, empty pasts of length 0; step k: the one new
token, attention_mask of ones over past+1, position_ids [[P+k-1]], the
previous presents as pasts), compared per step with PyTorch (eager attention,
a full recompute over the whole sequence), with the same file run uncached
(the whole sequence, empty pasts), and ORTModelForCausalLM.generate's tokens.
Everything runs on one thread (torch.set_num_threads(1), ORT intra/inter-op 1).
The script re-executes itself with PYTHONHASHSEED=0.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import fixture_common as fc
from fixture_common import maxdiff, session

fc.start(__name__)

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
OUT = HERE  # where the folders are written (--out DIR)
SEED = 0
TF453_SITE = Path(os.environ.get("TF453_SITE", "/tmp/tf453-site"))
TF453_PINS = ["transformers==4.53.3", "tokenizers==0.21.4"]
PROMPT = [3, 14, 15]
STEPS = 10  # greedy steps after the prompt: positions 3..12, well past the window of 4
WINDOW = 4


_torch = fc.one_thread_torch


# ---------------------------------------------------------------- models

def deepseek_config():
    import transformers

    return transformers.DeepseekV3Config(
        vocab_size=500, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
        num_hidden_layers=2, first_k_dense_replace=2,  # both layers dense: no expert routing
        n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
        num_attention_heads=4, num_key_value_heads=4, q_lora_rank=16, kv_lora_rank=16,
        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
        max_position_embeddings=128, initializer_range=0.2,
    )


def bigcode_config():
    import transformers

    return transformers.GPTBigCodeConfig(
        vocab_size=500, n_embd=64, n_layer=2, n_head=4, n_positions=128, multi_query=True,
        bos_token_id=0, eos_token_id=0, initializer_range=0.2,
    )


def bloom_config():
    import transformers

    return transformers.BloomConfig(vocab_size=500, hidden_size=64, n_layer=2, n_head=4, initializer_range=0.5)


def gemma3_config(window=WINDOW):
    import transformers

    return transformers.Gemma3TextConfig(
        vocab_size=500, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
        sliding_window=window, sliding_window_pattern=2,
        layer_types=["sliding_attention", "full_attention"], initializer_range=0.2,
        tie_word_embeddings=False,  # tied, this tiny random model greedily repeats the last prompt token
    )


FAMILIES = {  # folder -> (config builder, model class name)
    "deepseek-mla-tiny": (deepseek_config, "DeepseekV3ForCausalLM"),
    "gpt-bigcode-tiny": (bigcode_config, "GPTBigCodeForCausalLM"),
    "bloom-tiny": (bloom_config, "BloomForCausalLM"),
    "gemma3-tiny": (gemma3_config, "Gemma3ForCausalLM"),
}


def build(name, attn="eager", config=None):
    """The seeded tiny model of a folder (transformers 4.57.6)."""
    import transformers

    torch = _torch()
    cfg = config if config is not None else FAMILIES[name][0]()
    if attn is not None:
        cfg._attn_implementation = attn
    torch.manual_seed(SEED)
    return getattr(transformers, FAMILIES[name][1])(cfg).eval()


def save_model_dir(name, dst: Path):
    """save_pretrained the seeded model (weights, config.json and
    generation_config.json) as a hub checkpoint folder would hold it."""
    model = build(name, attn=None)  # the family's default
    model.save_pretrained(dst)


def run_main_export(src: Path, dst: Path):
    from optimum.exporters.onnx import main_export

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        main_export(str(src), str(dst), task="text-generation-with-past", do_validation=False)


def check_tf453_site():
    if not (TF453_SITE / "transformers").is_dir():
        sys.exit(f"missing {TF453_SITE}: pip install --no-deps --target {TF453_SITE} {' '.join(TF453_PINS)}")


def same_weights(name, checkpoint: Path):
    """Whether a saved checkpoint holds exactly this process's seeded weights."""
    import torch
    from safetensors.torch import load_file

    saved = load_file(str(checkpoint / "model.safetensors"))
    mine = build(name).state_dict()
    # tied weights are saved once
    return all(torch.equal(saved[k], mine[k]) for k in saved) and set(saved) <= set(mine)


def export_folder(name):
    out = OUT / name
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "checkpoint", Path(tmp) / "export"
        if name == "gpt-bigcode-tiny":
            # Built, saved and exported by transformers 4.53.3 in a subprocess.
            check_tf453_site()
            env = dict(os.environ, PYTHONPATH=str(TF453_SITE))
            subprocess.run([sys.executable, __file__, "--export-subprocess", name, str(src), str(dst)],
                           env=env, check=True)
            ok = same_weights(name, src)
            print(f"  checkpoint saved by transformers 4.53.3 == this process's (4.57.6) seeded weights: {ok}")
            assert ok
        else:
            save_model_dir(name, src)
            run_main_export(src, dst)
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(dst, out)


GENERATORS = {name: (lambda n=name: export_folder(n)) for name in FAMILIES}


# ---------------------------------------------------------------- measurements

def signature(sess):
    ins, outs = fc.io_signature(sess)
    print("  inputs:\n" + "\n".join("    " + x for x in ins))
    print("  outputs:\n" + "\n".join("    " + x for x in outs))


class Caller:
    """Drives a decoder-only optimum export the way ORTModelForCausalLM.forward does."""

    def __init__(self, path):
        self.s = session(path)
        self.inputs = {i.name: i for i in self.s.get_inputs()}
        self.outputs = [o.name for o in self.s.get_outputs()]
        self.past_names = [n for n in self.inputs if n.startswith("past_key_values.")]
        self.present_of = {n: "present." + n[len("past_key_values."):] for n in self.past_names}
        assert all(p in self.outputs for p in self.present_of.values())
        self.has_pos = "position_ids" in self.inputs

    def empty_past(self, batch):
        """Length-0 pasts: the symbolic past axis 0, the batch axis `batch`,
        every fixed axis as declared."""
        past = {}
        for n in self.past_names:
            shape = [d if isinstance(d, int) else 0 for d in self.inputs[n].shape]
            shape[0] = batch
            past[n] = np.zeros(shape, np.float32)
        return past

    def run(self, ids, mask, past):
        ids = np.asarray(ids, np.int64)
        mask = np.asarray(mask, np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if self.has_pos:  # ORTModelForCausalLM / generate: cumsum(mask) - 1, padding -> 1, last seq entries
            pos = np.cumsum(mask, axis=1) - 1
            pos[mask == 0] = 1
            feeds["position_ids"] = pos[:, -ids.shape[1]:]
        feeds.update(past if past is not None else self.empty_past(ids.shape[0]))
        out = dict(zip(self.outputs, self.s.run(None, feeds)))
        return out["logits"], {n: out[self.present_of[n]] for n in self.past_names}, feeds, out

    def greedy_cached(self, prompt, steps):
        """Returns per step (last logits, feed shapes, output shapes), and the tokens."""
        seq, past, cur, rows = list(prompt), None, list(prompt), []
        for _ in range(steps):
            logits, past, feeds, out = self.run([cur], np.ones((1, len(seq))), past)
            rows.append((logits[0, -1], {k: v.shape for k, v in feeds.items()}, {k: v.shape for k, v in out.items()}))
            tok = int(logits[0, -1].argmax())
            seq.append(tok)
            cur = [tok]
        return rows, seq[len(prompt):]

    def uncached(self, seq):
        return self.run([seq], np.ones((1, len(seq))), None)[0][0]


def torch_reference(model, prompt, steps):
    """Greedy by full recompute (no cache): last-position logits per step, tokens."""
    torch = _torch()
    seq, rows = list(prompt), []
    with torch.no_grad():
        for _ in range(steps):
            lg = model(torch.tensor([seq]), use_cache=False).logits[0, -1].numpy()
            rows.append(lg)
            seq.append(int(lg.argmax()))
    return rows, seq[len(prompt):]


def torch_generate(model, prompt, steps):
    torch = _torch()
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=steps, do_sample=False,
                             num_beams=1, pad_token_id=model.config.pad_token_id or 0,
                             eos_token_id=None)  # no early stop: compare every step
    return out[0, len(prompt):].tolist()


def ort_generate(folder, steps):
    """ORTModelForCausalLM.from_pretrained(folder).generate, greedy, one thread."""
    import onnxruntime as ort
    import torch
    from optimum.onnxruntime import ORTModelForCausalLM

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = ORTModelForCausalLM.from_pretrained(folder, session_options=so, provider="CPUExecutionProvider")
        out = m.generate(torch.tensor([PROMPT]), attention_mask=torch.ones(1, len(PROMPT), dtype=torch.long),
                         max_new_tokens=steps, do_sample=False, num_beams=1, eos_token_id=None,
                         pad_token_id=m.config.pad_token_id or 0)
    return out[0, len(PROMPT):].tolist(), m


def verify(folder, steps=STEPS):
    name = folder.name
    cfg = json.loads((folder / "config.json").read_text())
    for f in sorted(folder.iterdir()):
        print(f"  {f.name}  {f.stat().st_size} bytes")
    caller = Caller(folder / "model.onnx")
    signature(caller.s)
    model = build(name, "eager")
    ref_logits, ref_tokens = torch_reference(model, PROMPT, steps)
    rows, ort_tokens = caller.greedy_cached(PROMPT, steps)
    gen_tokens = torch_generate(model, PROMPT, steps)
    print(f"  prompt {PROMPT}, {steps} greedy steps")
    for k, (lg, fshapes, oshapes) in enumerate(rows[:2]):
        print(f"  step {k} feeds: " + ", ".join(f"{n} {list(s)}" for n, s in fshapes.items()))
        print(f"  step {k} outputs: " + ", ".join(f"{n} {list(s)}" for n, s in oshapes.items()))
    seq = PROMPT + ort_tokens
    d_ref = [maxdiff(r[0], t) for r, t in zip(rows, ref_logits)]
    d_unc = [maxdiff(r[0], caller.uncached(seq[: len(PROMPT) + k])[-1]) for k, r in enumerate(rows)]
    print("  max|logit| torch per step: " + " ".join(f"{np.abs(t).max():.3g}" for t in ref_logits))
    print("  ORT cached vs torch (full recompute), max|d| per step: " + " ".join(f"{d:.2g}" for d in d_ref))
    print("  ORT cached vs ORT uncached (same file, whole sequence, empty pasts), max|d| per step: "
          + " ".join(f"{d:.2g}" for d in d_unc))
    print(f"  greedy tokens: torch recompute {ref_tokens}")
    print(f"                 torch generate  {gen_tokens}")
    print(f"                 ORT cached loop {ort_tokens}")
    try:
        ortm_tokens, ortm = ort_generate(folder, steps)
        print(f"                 ORTModelForCausalLM.generate {ortm_tokens}")
        extra = ""
        if getattr(ortm, "old_gpt_bigcode_modeling", False):
            extra = " (old_gpt_bigcode_modeling=True: fused key_value path)"
        if getattr(ortm, "old_bloom_modeling", False):
            extra = " (old_bloom_modeling=True)"
        print(f"  ORTModelForCausalLM loads the folder{extra}")
    except Exception as e:  # reported, not hidden
        ortm_tokens = None
        print(f"  ORTModelForCausalLM.generate FAILED: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
    ok = ref_tokens == ort_tokens == gen_tokens and (ortm_tokens is None or ortm_tokens == ref_tokens)
    print(f"  tokens all agree: {ok}; max over steps: vs torch {max(d_ref):.2g}, cached vs uncached {max(d_unc):.2g}")
    EXTRA.get(name, lambda *a: None)(folder, caller, model, cfg, seq)


def extra_bigcode(folder, caller, model, cfg, seq):
    """The fused key_value layout against transformers 4.57.6's split cache."""
    torch = _torch()
    with torch.no_grad():
        out = model(torch.tensor([seq]), use_cache=True)
    _, past, _, _ = caller.run([seq], np.ones((1, len(seq))), None)
    hd = cfg["n_embd"] // cfg["n_head"]
    for i in range(cfg["n_layer"]):
        kv = past[f"past_key_values.{i}.key_value"]
        cache = out.past_key_values
        layer = getattr(cache, "self_attention_cache", cache).layers[i]  # 4.57.6 wraps it in an EncoderDecoderCache
        k, v = layer.keys[:, 0].numpy(), layer.values[:, 0].numpy()  # [b, 1, s, hd] -> [b, s, hd]
        print(f"  present.{i}.key_value {list(kv.shape)}: [..., :{hd}] vs torch key max|d| {maxdiff(kv[..., :hd], k):.2g},"
              f" [..., {hd}:] vs torch value max|d| {maxdiff(kv[..., hd:], v):.2g}")


def extra_deepseek(folder, caller, model, cfg, seq):
    torch = _torch()
    with torch.no_grad():
        out = model(torch.tensor([seq]), use_cache=True)
    _, past, _, _ = caller.run([seq], np.ones((1, len(seq))), None)
    for i in range(cfg["num_hidden_layers"]):
        layer = out.past_key_values.layers[i]
        print(f"  layer {i}: present key {list(past[f'past_key_values.{i}.key'].shape)} vs torch cache key "
              f"{list(layer.keys.shape)} max|d| {maxdiff(past[f'past_key_values.{i}.key'], layer.keys):.2g}; "
              f"value {list(past[f'past_key_values.{i}.value'].shape)} vs {list(layer.values.shape)} "
              f"max|d| {maxdiff(past[f'past_key_values.{i}.value'], layer.values):.2g}")


def extra_gemma3(folder, caller, model, cfg, seq):
    """Is the window in the graph? torch with and without the window, per position."""
    torch = _torch()
    print(f"  config.json: sliding_window {cfg['sliding_window']}, layer_types {cfg['layer_types']},"
          f" _sliding_window_pattern {cfg.get('_sliding_window_pattern')}")
    # Same layer types (so the same local/global rotary bases), window wider than the sequence.
    nowin_cfg = gemma3_config(window=cfg["max_position_embeddings"])
    nowin = build("gemma3-tiny", "eager", config=nowin_cfg)
    ids = torch.tensor([seq])
    with torch.no_grad():
        win_all, full_all = model(ids).logits[0].numpy(), nowin(ids).logits[0].numpy()
    onnx_all = caller.uncached(seq)
    n = len(seq)
    print(f"  per position 0-{n - 1} (one uncached run over the final sequence):")
    print("    ONNX vs torch window 4   " + " ".join(f"{maxdiff(onnx_all[p], win_all[p]):.2g}" for p in range(n)))
    print("    ONNX vs torch no window  " + " ".join(f"{maxdiff(onnx_all[p], full_all[p]):.2g}" for p in range(n)))
    print("    torch window vs no window " + " ".join(f"{maxdiff(win_all[p], full_all[p]):.2g}" for p in range(n)))
    # What a caller that keeps only the last window-1 positions for the sliding layer gets:
    # not possible, both layers share one past_sequence_length and one attention_mask.
    ins = caller.inputs
    print("  past axis names: " + ", ".join(f"{k}: {ins[k].shape[2]}" for k in caller.past_names))


EXTRA = {"gpt-bigcode-tiny": extra_bigcode, "deepseek-mla-tiny": extra_deepseek, "gemma3-tiny": extra_gemma3}
VERIFIERS = {name: verify for name in FAMILIES}


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--export-subprocess"]:  # runs under transformers 4.53.3 (gpt-bigcode-tiny only)
        import transformers

        print(f"  (subprocess: transformers {transformers.__version__} from {Path(transformers.__file__).parent})")
        assert transformers.__version__ == "4.53.3", transformers.__version__
        _torch()
        save_model_dir(args[1], Path(args[2]))
        run_main_export(Path(args[2]), Path(args[3]))
        sys.exit(0)
    _torch()
    args = fc.parse_args(GENERATORS)
    OUT = args.out or OUT
    fc.run_all(args, OUT, GENERATORS, VERIFIERS)
