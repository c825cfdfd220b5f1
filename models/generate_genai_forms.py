"""Generate the onnxruntime-genai model-builder fixtures in models/ and measure
them in onnxruntime (and in onnxruntime-genai itself).

Every folder is the output of the onnxruntime-genai 0.18.0 model builder
(`python -m onnxruntime_genai.models.builder -i HF_DIR -o OUT -p fp32 -e cpu`)
run on a tiny model built here from a config with seeded random weights and
saved with save_pretrained (transformers 4.57.6). Nothing in the builder's
output is edited. config.json and generation_config.json (which the builder
does not write) are copied from that save_pretrained folder.

Versions: /work/genvenv (torch 2.9.1, transformers 4.57.6, onnx 1.23.2,
onnxruntime 1.31.1, onnxruntime-genai 0.18.0, onnx-ir 1.1.0). The builder
itself does not import with transformers 4.57.6 (ImportError: cannot import
name 'Qwen3_5ForConditionalGeneration'), so it runs as a subprocess in a
second venv that adds transformers 5.23.0 on top of /work/genvenv's packages
(the .pth file makes /work/genvenv's site-packages visible after its own):

    /root/.pyenv/versions/3.11.7/bin/python3 -m venv /work/genvenv-tf5
    echo /work/genvenv/lib/python3.11/site-packages \\
        > /work/genvenv-tf5/lib/python3.11/site-packages/zz-genvenv.pth
    /work/genvenv-tf5/bin/pip install transformers==5.23.0
    # (adds transformers 5.23.0, huggingface_hub 2.4.0, tokenizers 0.23.3 and
    #  typer/httpx2/pydantic... to genvenv-tf5 only; /work/genvenv is unchanged)

    HF_HUB_OFFLINE=1 /work/genvenv/bin/python models/generate_genai_forms.py [--out DIR] [name ...]
    /work/genvenv/bin/python models/generate_genai_forms.py --verify-only [name ...]

$GENAI_BUILDER_PYTHON overrides the builder's python. Everything else (the
torch references, onnxruntime, onnxruntime-genai) runs in /work/genvenv on one
thread. Generating ends with the measurements (see GENAI-FORMS-NOTES.md).
The extra name llama-genai-share-buffer writes nothing: it drives the committed
models/llama-genai (made by generate_numeric.py) the way onnxruntime-genai does
(past_present_share_buffer: true) and compares that with the growing-buffer loop.

  lfm2-genai/           builder export of a tiny random LFM2 hybrid (4 layers:
                        conv, full_attention, conv, full_attention; hidden 64,
                        vocab 500). KV inputs only for the attention layers
                        (past_key_values.1.*, past_key_values.3.*: non-contiguous),
                        short-conv states past.0.conv / past.2.conv of fixed
                        shape [batch_size, 64, 2] (conv_L_cache - 1), zero-filled
                        at step 0 and replaced by present.N.conv every step
                        (never growing); genai_config has past_conv_names /
                        present_conv_names, layer_types, conv_cache_size and
                        past_present_share_buffer true. Correct: ORT == PyTorch
                        == onnxruntime-genai.
  whisper-genai/        builder export of a tiny random Whisper (d_model 64, 4
                        heads, 2+2 layers, vocab 1000) with transformers' default
                        init, whose attention biases are all zero. The builder
                        drops an all-zero bias, so encoder.onnx's
                        com.microsoft.Attention nodes get an empty optional bias
                        input, and that segfaults onnxruntime 1.31.1 on CPU at
                        the first run (exit 139; onnxruntime-genai dies the same
                        way). encoder.onnx produces the cross KV
                        (present_key_cross_N); decoder.onnx takes int32
                        input_ids, keys-first self pasts and the cross KV every
                        step, no mask, no positions. The decoder is fine; with a
                        zero bias added to the encoder everything matches PyTorch.
  whisper-genai-nonzero-bias/  the same builder export of the same model with
                        seeded random non-zero biases (as a trained checkpoint
                        has): the builder keeps the packed qkv bias, the encoder
                        runs, and ORT == PyTorch == onnxruntime-genai.
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
from fixture_common import d, run, session

fc.start(__name__)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402

HERE = Path(__file__).resolve().parent
OUT = HERE  # where the folders are written (--out DIR)
SEED = 0
BUILDER_FILES_KEPT = "everything the builder writes"

PROMPT = [1, 3, 14, 15, 92, 65]  # decoder-only prompt (6 tokens)
STEPS = 8  # model calls: the prompt, then 7 single tokens -> 8 greedy tokens
MAX_LEN = 32  # share-buffer length used in plain ORT


_torch = fc.one_thread_torch
signature = fc.signature


# ---------------------------------------------------------------- builder

def genai_build(model, out: Path):
    """onnxruntime-genai builder (-p fp32 -e cpu, BUILDER_PYTHON) on `model`'s
    save_hf folder; every file it writes is kept, plus config.json and
    generation_config.json from the save_pretrained folder."""
    fc.genai_builder(model, out)


# ---------------------------------------------------------------- LFM2

LFM2 = dict(
    vocab_size=500, hidden_size=64, intermediate_size=192, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=128, conv_L_cache=3, block_multiple_of=32,
    layer_types=["conv", "full_attention", "conv", "full_attention"], initializer_range=0.2,
)
# head size 16: ORT's CPU GroupQueryAttention refuses head sizes that are not a
# multiple of 16. intermediate 192 with block_auto_adjust_ff_dim (LFM2's
# default) gives an MLP width of int(2*192/3) = 128 (rounded to 32).
# initializer_range 0.2 (default 0.02): with the default, the tied-embedding
# model repeats the last prompt token forever (65, 65, ...), which makes greedy
# agreement meaningless; with 0.2 the 8 greedy tokens are all different.


def lfm2_model():
    torch = _torch()
    import transformers

    torch.manual_seed(SEED)
    return transformers.Lfm2ForCausalLM(transformers.Lfm2Config(**LFM2)).eval()


def gen_lfm2_genai():
    """Builder export (fp32, cpu) of a tiny random LFM2 hybrid: GroupQueryAttention
    on layers 1 and 3 only, CausalConvWithState short-conv states on layers 0
    and 2 (past.N.conv [batch_size, 64, 2], fixed size), genai_config with
    past_conv_names / present_conv_names."""
    genai_build(lfm2_model(), OUT / "lfm2-genai")


# ---------------------------------------------------------------- Whisper

WHISPER = dict(
    vocab_size=1000, num_mel_bins=80, encoder_layers=2, encoder_attention_heads=4, decoder_layers=2,
    decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, d_model=64, max_source_positions=1500,
    max_target_positions=64, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
    begin_suppress_tokens=None, suppress_tokens=None, init_std=0.2,
)
# max_source_positions must stay 1500: the builder hard-codes 3000 input frames.
# init_std 0.2 (default 0.02) for the same reason as LFM2's initializer_range:
# with 0.02 greedy decoding repeats one token. Whisper's _init_weights sets every
# bias to zero; the nonzero-bias variant overwrites them afterwards.
DEC_PROMPT = [1, 3, 14, 15]  # decoder prompt (start token + 3), like a SOT sequence
BIAS_SEED = 1


def whisper_model(nonzero_bias=False):
    torch = _torch()
    import transformers

    torch.manual_seed(SEED)
    m = transformers.WhisperForConditionalGeneration(transformers.WhisperConfig(**WHISPER)).eval()
    return nonzero_biases(m) if nonzero_bias else m


def nonzero_biases(m, seed=BIAS_SEED):
    """Every `.bias` parameter of `m` drawn from N(0, 0.1^2) with a generator of
    its own (the builder drops biases that are all zero)."""
    torch = _torch()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return m


def audio_features():
    return np.random.default_rng(SEED).standard_normal((1, WHISPER["num_mel_bins"], 3000)).astype(np.float32)


def gen_whisper_genai():
    """Builder export (fp32, cpu) of a tiny random Whisper with all-zero biases
    (transformers' default init). The builder leaves an all-zero bias out
    (count_nonzero check in base.py), so both encoder self-attention
    com.microsoft.Attention nodes have an empty bias input: the encoder
    segfaults onnxruntime 1.31.1 CPU. Kept exactly as the builder wrote it."""
    genai_build(whisper_model(), OUT / "whisper-genai")


def gen_whisper_genai_nonzero_bias():
    """The same builder export of the same model with seeded random non-zero
    biases: the encoder's Attention nodes get the packed qkv bias and run."""
    genai_build(whisper_model(nonzero_bias=True), OUT / "whisper-genai-nonzero-bias")


GENERATORS = {
    "lfm2-genai": gen_lfm2_genai,
    "whisper-genai": gen_whisper_genai,
    "whisper-genai-nonzero-bias": gen_whisper_genai_nonzero_bias,
}


# ---------------------------------------------------------------- driving genai decoders

def genai_loop(sess, dec, prompt, steps, max_len=None, mask="real", iobinding=False, carry_conv=True,
               conv_len=None, forced=None):
    """Drive a genai decoder-only model (genai_config 'decoder' section `dec`).

    max_len None: growing buffers (KV past of length 0 at step 0, then the
    presents). max_len N: share-buffer protocol, KV pasts [1, kv, N, head]
    zero-filled at step 0 and the presents (also length N) fed back.
    mask: 'real' ones over past+new tokens; 'max_ones' ones over N;
    'max_padded' ones over the real tokens then zeros up to N.
    iobinding: past and present bound to one OrtValue (in place, as genai does).
    Conv states (if any): zeros [1, hidden, conv_cache_size] at step 0 (or
    conv_len columns), then present.N.conv (or zeros again if not carry_conv).
    Returns tokens, per-step last-position logits, shapes seen, conv presents, KV presents."""
    import onnxruntime as ort

    inp, outp = dec["inputs"], dec["outputs"]
    L = dec["num_hidden_layers"]
    types = dec.get("layer_types") or ["full_attention"] * L
    kv_layers = [i for i in range(L) if types[i] == "full_attention"]
    conv_layers = [i for i in range(L) if types[i] == "conv"] if "past_conv_names" in inp else []
    kvh, hs, H = dec["num_key_value_heads"], dec["head_size"], dec["hidden_size"]
    csz = dec.get("conv_cache_size", 0)
    kv_names = [(inp["past_key_names"] % i, outp["present_key_names"] % i) for i in kv_layers] + \
               [(inp["past_value_names"] % i, outp["present_value_names"] % i) for i in kv_layers]
    conv_names = [(inp["past_conv_names"] % i, outp["present_conv_names"] % i) for i in conv_layers]
    past = {p: np.zeros((1, kvh, max_len or 0, hs), np.float32) for p, _ in kv_names}
    conv = {p: np.zeros((1, H, csz if conv_len is None else conv_len), np.float32) for p, _ in conv_names}
    ort_vals = {p: ort.OrtValue.ortvalue_from_numpy(v) for p, v in past.items()} if iobinding else None
    ids, total = list(prompt), 0
    toks, logits, shapes, conv_hist, kv_hist = [], [], [], [], []
    for step in range(steps):
        n = len(ids)
        if mask == "real":
            m = np.ones((1, total + n), np.int64)
        elif mask == "max_ones":
            m = np.ones((1, max_len), np.int64)
        else:
            m = np.zeros((1, max_len), np.int64)
            m[0, :total + n] = 1
        feeds = {inp["input_ids"]: np.array([ids], np.int64), inp["attention_mask"]: m, **conv}
        if iobinding:
            io = sess.io_binding()
            for k, v in feeds.items():
                io.bind_cpu_input(k, v)
            order = []
            for p, q in kv_names:
                io.bind_ortvalue_input(p, ort_vals[p])
                io.bind_ortvalue_output(q, ort_vals[p])
                order.append(q)
            for q in [outp["logits"]] + [q for _, q in conv_names]:
                io.bind_output(q)
                order.append(q)
            sess.run_with_iobinding(io)
            got = dict(zip(order, io.copy_outputs_to_cpu()))
            fed = {k: v.shape for k, v in feeds.items()} | {p: tuple(ort_vals[p].shape()) for p, _ in kv_names}
        else:
            feeds |= past
            got = run(sess, feeds)
            fed = {k: v.shape for k, v in feeds.items()}
        shapes.append((fed, {k: v.shape for k, v in got.items()}))
        lg = got[outp["logits"]][0, -1].astype(np.float64)
        logits.append(lg)
        tok = int(lg.argmax()) if forced is None else forced[step]
        toks.append(int(lg.argmax()))
        conv_hist.append({p: got[q] for p, q in conv_names})
        kv_hist.append({q: got[q] for _, q in kv_names})
        if not iobinding:
            past = {p: got[q] for p, q in kv_names}
        conv = {p: (got[q] if carry_conv else np.zeros_like(conv[p])) for p, q in conv_names}
        total += n
        ids = [tok]
    return toks, logits, shapes, conv_hist, kv_hist


def genai_uncached(sess, dec, seq):
    """Last-position logits of `seq` in one call with empty/zero state."""
    toks, logits, *_ = genai_loop(sess, dec, seq, 1)
    return logits[0]


def torch_greedy(fn, prompt, steps):
    """Uncached greedy: fn(ids) -> last-position logits; one full forward per step."""
    ids, logits = list(prompt), []
    for _ in range(steps):
        lg = fn(ids)
        logits.append(lg)
        ids.append(int(lg.argmax()))
    return ids[len(prompt):], logits


def og_greedy(folder, prompt, steps, watch=(), audio=None, max_length=None):
    """onnxruntime-genai greedy: append_tokens(prompt), then generate_next_token
    steps-1... times. Returns tokens, per-call last-position logits (get_logits
    after append_tokens and after each new token) and, per model call, the
    `watch` inputs as get_input reports them (copies, read after the call ran)."""
    import onnxruntime_genai as og

    model = og.Model(str(folder))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=max_length or len(prompt) + steps, do_sample=False)
    g = og.Generator(model, params)
    if audio is not None:
        nt = og.NamedTensors()
        nt["audio_features"] = audio
        g.set_inputs(nt)
    g.append_tokens(np.array([prompt], np.int32))
    logits, fed, outs, toks = [], [], [], []
    for k in range(steps):
        logits.append(np.asarray(g.get_logits())[0, -1].astype(np.float64))
        fed.append({n: np.array(g.get_input(n)) for n in watch})  # copies, as fed at this call
        g.generate_next_token()
        toks.append(int(np.asarray(g.get_next_tokens())[0]))
    return toks, logits, fed, g


def per_step(label, a, b):
    print(f"  {label}: " + " ".join(f"{d(x, y):.2g}" for x, y in zip(a, b)))


# ---------------------------------------------------------------- LFM2 measurements

def verify_lfm2_genai(folder):
    torch = _torch()
    cfg = json.loads((folder / "genai_config.json").read_text())
    dec = cfg["model"]["decoder"]
    signature(folder / "model.onnx")
    print(f"  genai_config: layer_types {dec['layer_types']}, conv_cache_size {dec['conv_cache_size']}, "
          f"past_conv_names {dec['inputs']['past_conv_names']!r}, present_conv_names {dec['outputs']['present_conv_names']!r}, "
          f"past_present_share_buffer {cfg['search']['past_present_share_buffer']}, max_length {cfg['search']['max_length']}")
    sess = session(folder / "model.onnx")
    model = lfm2_model()
    with torch.no_grad():
        ref_toks, ref_logits = torch_greedy(
            lambda ids: model(torch.tensor([ids])).logits[0, -1].double().numpy(), PROMPT, STEPS)
    print(f"  prompt {PROMPT}; {STEPS} model calls (prompt, then 7 single tokens)")
    print(f"  PyTorch greedy (uncached): {ref_toks}")

    toks, logits, shapes, conv_hist, kv_hist = genai_loop(sess, dec, PROMPT, STEPS)
    print(f"  ORT greedy, growing KV: {toks}  {'= PyTorch' if toks == ref_toks else '!= PyTorch'}")
    for s in (0, 1, STEPS - 1):
        fed, got = shapes[s]
        print(f"    call {s} feeds: " + ", ".join(f"{k} {list(v)}" for k, v in fed.items()))
        print(f"    call {s} returns: " + ", ".join(f"{k} {list(v)}" for k, v in got.items()))
    per_step("max|logits - PyTorch| per call", logits, ref_logits)
    seq = PROMPT + toks
    unc = [genai_uncached(sess, dec, seq[:len(PROMPT) + k]) for k in range(STEPS)]
    per_step("cached vs ORT uncached recompute", logits, unc)

    # conv states against PyTorch's Lfm2HybridConvCache (which keeps L_cache=3 columns)
    with torch.no_grad():
        out = model(torch.tensor([PROMPT]), use_cache=True)
        cache = out.past_key_values
        tconv, tlog = [], [out.logits[0, -1].double().numpy()]
        tconv.append([cache.conv_cache[i][..., 1:].numpy().copy() for i in (0, 2)])
        for t in toks[:-1]:
            out = model(torch.tensor([[t]]), past_key_values=cache, use_cache=True)
            tlog.append(out.logits[0, -1].double().numpy())
            tconv.append([cache.conv_cache[i][..., 1:].numpy().copy() for i in (0, 2)])
    print(f"  PyTorch conv_cache[i] shape {list(cache.conv_cache[0].shape)}; ORT keeps its last "
          f"{dec['conv_cache_size']} columns")
    per_step("max|present.{0,2}.conv - PyTorch conv_cache[..., 1:]| per call",
             [np.concatenate([c['past.0.conv'].ravel(), c['past.2.conv'].ravel()]) for c in conv_hist],
             [np.concatenate([a.ravel(), b.ravel()]) for a, b in tconv])
    per_step("max|logits - PyTorch cached loop| per call", logits, tlog)
    print(f"  present.0.conv max|value| per call: " + " ".join(f"{np.abs(c['past.0.conv']).max():.3g}" for c in conv_hist))

    # share-buffer protocol (what genai does: past_present_share_buffer true)
    for iob in (False, True):
        st, sl, ssh, *_ = genai_loop(sess, dec, PROMPT, STEPS, max_len=MAX_LEN, iobinding=iob)
        lab = "share buffer, IOBinding past==present" if iob else "share buffer, presents fed back"
        print(f"  ORT {lab} (KV [1,2,{MAX_LEN},16] zeros, mask over real length): {st}  "
              f"{'= growing' if st == toks else '!= growing'}")
        if not iob:
            for s in (0, STEPS - 1):
                fed, got = ssh[s]
                print(f"    call {s}: attention_mask {list(fed['attention_mask'])}, past_key_values.1.key "
                      f"{list(fed['past_key_values.1.key'])}, present.1.key {list(got['present.1.key'])}, "
                      f"past.0.conv {list(fed['past.0.conv'])}, present.0.conv {list(got['present.0.conv'])}")
        per_step(f"{lab}: max|logits - growing| per call", sl, logits)

    # wrong callers
    bt, bl, *_ = genai_loop(sess, dec, PROMPT, STEPS, carry_conv=False, forced=toks[:STEPS])
    per_step("BROKEN caller, conv state re-zeroed every call (KV carried, teacher-forced): max|logits - correct|",
             bl, logits)
    bt2, *_ = genai_loop(sess, dec, PROMPT, STEPS, carry_conv=False)
    first = next((k for k in range(STEPS) if bt2[k] != toks[k]), None)
    print(f"    its own greedy tokens: {bt2} (first differs at call {first})")
    try:
        genai_loop(sess, dec, PROMPT, 1, conv_len=0)
        print("  conv state fed 0 columns at step 0: runs")
    except Exception as e:
        print(f"  conv state fed as [1,64,0] at step 0 (as a growing cache would be): {' '.join(str(e).split())[:300]}")

    # onnxruntime-genai itself
    try:
        otoks, ologits, ofed, g = og_greedy(folder, PROMPT, STEPS,
                                            watch=["input_ids", "attention_mask", "past_key_values.1.key", "past.0.conv"],
                                            max_length=MAX_LEN)
        print(f"  onnxruntime-genai greedy (set_search_options max_length {MAX_LEN}): {otoks}  "
              f"{'= ORT' if otoks == toks else '!= ORT'}")
        for s in (0, 1, STEPS - 1):
            print(f"    og call {s} fed: " + ", ".join(f"{k} {list(v.shape)}" for k, v in ofed[s].items()))
        print(f"    og get_output('present.1.key') {list(np.asarray(g.get_output('present.1.key')).shape)}, "
              f"get_output('present.0.conv') {list(np.asarray(g.get_output('present.0.conv')).shape)}")
        print(f"    og past.0.conv: call 0 max|value| {np.abs(ofed[0]['past.0.conv']).max():.2g}; call k (k>=1) vs ORT "
              f"present.0.conv of call k-1: max " + " ".join(
                  f"{d(ofed[k]['past.0.conv'], conv_hist[k - 1]['past.0.conv']):.2g}" for k in range(1, STEPS)))
        rows = [int(np.nonzero(np.abs(f['past_key_values.1.key']).sum(axis=(0, 1, 3)))[0].max()) + 1 for f in ofed]
        print(f"    og past_key_values.1.key (one buffer with the present, read after each call): rows filled "
              f"{rows} of {ofed[0]['past_key_values.1.key'].shape[2]}")
        per_step("og logits vs ORT growing loop, per call", ologits, logits)
    except Exception as e:
        print(f"  onnxruntime-genai: FAILS: {e}")


# ---------------------------------------------------------------- llama-genai share buffer

def verify_llama_share_buffer(_folder=None):
    """Measure-only: models/llama-genai driven as genai drives it."""
    folder = HERE / "llama-genai"
    torch = _torch()
    sys.path.insert(0, str(HERE))
    from generate_numeric import llama_model  # the model llama-genai was built from (seed 0)

    cfg = json.loads((folder / "genai_config.json").read_text())
    dec = cfg["model"]["decoder"]
    print(f"  {folder.name}: past_present_share_buffer {cfg['search']['past_present_share_buffer']}, "
          f"search.max_length {cfg['search']['max_length']}, context_length {cfg['model']['context_length']}")
    sess = session(folder / "model.onnx")
    model = llama_model()
    with torch.no_grad():
        ref_toks, ref_logits = torch_greedy(
            lambda ids: model(torch.tensor([ids])).logits[0, -1].double().numpy(), PROMPT, STEPS)
    print(f"  prompt {PROMPT}; PyTorch greedy (uncached): {ref_toks}")
    toks, logits, gsh, _, gkv = genai_loop(sess, dec, PROMPT, STEPS)
    print(f"  growing (past length 0 at call 0): {toks}  {'= PyTorch' if toks == ref_toks else '!= PyTorch'}")
    per_step("growing: max|logits - PyTorch| per call", logits, ref_logits)
    seq = PROMPT + toks
    unc = [genai_uncached(sess, dec, seq[:len(PROMPT) + k]) for k in range(STEPS)]
    per_step("growing: cached vs uncached", logits, unc)
    for s in (0, 1, STEPS - 1):
        fed, got = gsh[s]
        print(f"    growing call {s}: mask {list(fed['attention_mask'])}, past.0.key "
              f"{list(fed['past_key_values.0.key'])}, present.0.key {list(got['present.0.key'])}")

    variants = [("share buffer, presents fed back, mask over real length", dict(mask="real")),
                ("share buffer, IOBinding past==present (in place), mask over real length",
                 dict(mask="real", iobinding=True)),
                (f"share buffer, mask ones over all {MAX_LEN}", dict(mask="max_ones")),
                (f"share buffer, mask [1]*real + [0]*({MAX_LEN}-real) (CUDA-graph layout)", dict(mask="max_padded"))]
    for lab, kw in variants:
        try:
            st, *_ = genai_loop(sess, dec, PROMPT, STEPS, max_len=MAX_LEN, **kw)
            _, sl, ssh, _, skv = genai_loop(sess, dec, PROMPT, STEPS, max_len=MAX_LEN, forced=toks, **kw)
        except Exception as e:
            print(f"  {lab}: FAILS: {' '.join(str(e).split())[:300]}")
            continue
        print(f"  {lab}: own greedy {st}  {'= growing' if st == toks else '!= growing'}")
        for s in (0, 1, STEPS - 1):
            fed, got = ssh[s]
            print(f"    call {s}: input_ids {list(fed['input_ids'])}, mask {list(fed['attention_mask'])}, past.0.key "
                  f"{list(fed['past_key_values.0.key'])}, present.0.key {list(got['present.0.key'])}")
        per_step("    max|logits - growing| per call (fed the growing loop's tokens)", sl, logits)
        rows = [np.nonzero(np.abs(kv["present.0.key"]).sum(axis=(0, 1, 3)))[0].tolist() for kv in skv[:2]]
        print(f"    present.0.key rows holding data after call 0: {rows[0]}; after call 1: {rows[1]}")
        if kw == dict(mask="real"):
            # rows below the real length equal the growing presents; rows above are left as fed (zeros)
            inside = [d(kv["present.0.key"][:, :, :len(PROMPT) + k], g["present.0.key"]) for k, (kv, g) in
                      enumerate(zip(skv, gkv))]
            above = [float(np.abs(kv["present.0.key"][:, :, len(PROMPT) + k:]).max()) for k, kv in enumerate(skv)]
            print(f"    present.0.key[:, :, :real] vs growing present: max {max(inside):.2g}; "
                  f"present.0.key[:, :, real:] max|value| {max(above):.2g}")

    try:
        otoks, ologits, ofed, g = og_greedy(folder, PROMPT, STEPS,
                                            watch=["input_ids", "attention_mask", "past_key_values.0.key"],
                                            max_length=MAX_LEN)
        print(f"  onnxruntime-genai greedy (set_search_options max_length {MAX_LEN}): {otoks}  "
              f"{'= growing' if otoks == toks else '!= growing'}")
        for s in (0, 1, STEPS - 1):
            print(f"    og call {s} fed: " + ", ".join(f"{k} {list(v.shape)}" for k, v in ofed[s].items()))
        print(f"    og get_output('present.0.key') {list(np.asarray(g.get_output('present.0.key')).shape)}")
        rows = [int(np.nonzero(np.abs(f['past_key_values.0.key']).sum(axis=(0, 1, 3)))[0].max()) + 1 for f in ofed]
        print(f"    og past_key_values.0.key (one buffer with the present, read after each call): rows filled "
              f"{rows} of {ofed[0]['past_key_values.0.key'].shape[2]}")
        per_step("og logits vs growing loop, per call", ologits, logits)
    except Exception as e:
        print(f"  onnxruntime-genai: FAILS: {e}")


# ---------------------------------------------------------------- Whisper measurements

CHILD_ENCODER = r"""
import sys, numpy as np, onnxruntime as ort
so = ort.SessionOptions(); so.intra_op_num_threads = 1; so.inter_op_num_threads = 1; so.log_severity_level = 3
so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, sys.argv[2])
s = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
print("session created", flush=True)
x = np.random.default_rng(0).standard_normal((1, 80, 3000)).astype(np.float32)
s.run(None, {"audio_features": x})
print("run ok", flush=True)
"""

CHILD_NODE = r"""
import sys, numpy as np, onnx, onnxruntime as ort
from onnx import helper as h, numpy_helper
src = onnx.load(sys.argv[1])
node = next(n for n in src.graph.node if n.name == sys.argv[2])
w = next(i for i in src.graph.initializer if i.name == node.input[1])
n = onnx.NodeProto(); n.CopyFrom(node); n.input[0] = "X"; n.output[0] = "Y"
inits = [i for i in src.graph.initializer if i.name in list(node.input)[1:]]
if sys.argv[3] == "zero_bias" and n.input[2] == "":
    inits.append(numpy_helper.from_array(np.zeros(w.dims[1], np.float32), "zero_bias")); n.input[2] = "zero_bias"
d = int(w.dims[0])
g = h.make_graph([n], "one_node", [h.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [1, 1500, d])],
                 [h.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [1, 1500, d])], inits)
m = h.make_model(g, opset_imports=[h.make_opsetid("", 22), h.make_opsetid("com.microsoft", 1)], ir_version=10)
so = ort.SessionOptions(); so.intra_op_num_threads = 1; so.inter_op_num_threads = 1; so.log_severity_level = 3
s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
print("session created", list(n.input), flush=True)
s.run(None, {"X": np.random.default_rng(0).standard_normal((1, 1500, d)).astype(np.float32)})
print("run ok", flush=True)
"""

CHILD_OG = r"""
import sys, json, numpy as np
sys.path.insert(0, sys.argv[2])
from generate_genai_forms import og_greedy, audio_features, DEC_PROMPT, STEPS
toks, logits, fed, g = og_greedy(sys.argv[1], DEC_PROMPT, STEPS,
                                 watch=["input_ids", "past_key_self_0", "past_key_cross_0"], audio=audio_features())
print(json.dumps({"toks": toks, "logits": [l.tolist() for l in logits], "fed": [{k: list(v.shape) for k, v in f.items()} for f in fed]}))
"""


def child(code, *args):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env, capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


def rc_text(rc):
    return f"returncode {rc} (signal {-rc}, shell exit {128 - rc})" if rc < 0 else f"returncode {rc}"


def whisper_loop(sess, dec, cross, prompt, steps, forced=None):
    """genai Whisper decoder protocol: int32 input_ids; self KV past of length 0
    at call 0, then the presents; the encoder's cross KV fed unchanged every call."""
    inp, outp = dec["inputs"], dec["outputs"]
    L, H, hs = dec["num_hidden_layers"], dec["num_attention_heads"], dec["head_size"]
    self_names = [(inp["past_key_names"] % i, outp["present_key_names"] % i) for i in range(L)] + \
                 [(inp["past_value_names"] % i, outp["present_value_names"] % i) for i in range(L)]
    past = {p: np.zeros((1, H, 0, hs), np.float32) for p, _ in self_names}
    ids, toks, logits, shapes = list(prompt), [], [], []
    for step in range(steps):
        feeds = {inp["input_ids"]: np.array([ids], np.int32), **past, **cross}
        got = run(sess, feeds)
        shapes.append(({k: v.shape for k, v in feeds.items()}, {k: v.shape for k, v in got.items()}))
        lg = got[outp["logits"]][0, -1].astype(np.float64)
        logits.append(lg)
        toks.append(int(lg.argmax()))
        past = {p: got[q] for p, q in self_names}
        ids = [toks[-1] if forced is None else forced[step]]
    return toks, logits, shapes


def add_zero_bias(src: Path, dst: Path):
    """The fix: a zero bias initializer for every Attention with an empty bias."""
    m = onnx.load(str(src))
    fixed = []
    for n in m.graph.node:
        if n.op_type == "Attention" and n.domain == "com.microsoft" and n.input[2] == "":
            w = next(i for i in m.graph.initializer if i.name == n.input[1])
            name = n.input[1].replace(".weight", ".bias")
            m.graph.initializer.append(numpy_helper.from_array(np.zeros(w.dims[1], np.float32), name))
            n.input[2] = name
            fixed.append(n.name)
    onnx.save(m, str(dst), save_as_external_data=True, location=dst.name + ".data")
    return fixed


def verify_whisper(folder, nonzero_bias):
    import onnxruntime as ort

    torch = _torch()
    cfg = json.loads((folder / "genai_config.json").read_text())
    dec, enc = cfg["model"]["decoder"], cfg["model"]["encoder"]
    signature(folder / "encoder.onnx")
    signature(folder / "decoder.onnx")
    print(f"  genai_config: encoder.outputs {enc['outputs']}, decoder.inputs {dec['inputs']}, "
          f"past_present_share_buffer {cfg['search']['past_present_share_buffer']}")
    em = onnx.load(str(folder / "encoder.onnx"), load_external_data=False)
    attn = [n for n in em.graph.node if n.op_type == "Attention"]
    for n in attn:
        print(f"  encoder node {n.name} ({n.domain}.{n.op_type}) inputs {list(n.input)}")

    for level in ("ORT_ENABLE_ALL", "ORT_DISABLE_ALL"):
        rc, out, err = child(CHILD_ENCODER, folder / "encoder.onnx", level)
        print(f"  encoder.onnx as written, {level}: {rc_text(rc)}; stdout {out.split()!r}")
    for variant in ("as_is", "zero_bias"):
        rc, out, err = child(CHILD_NODE, folder / "encoder.onnx", attn[0].name, variant)
        print(f"  one-node model of {attn[0].name}, bias {variant}: {rc_text(rc)}; stdout {out.strip()!r}")
    rc, out, err = child(CHILD_OG, folder, HERE)
    og_ok = rc == 0
    print(f"  onnxruntime-genai on the folder as written: {rc_text(rc)}")

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        run_dir = folder
        fixed = []
        if not nonzero_bias:
            run_dir = tmp / "fixed"
            shutil.copytree(folder, run_dir)
            (run_dir / "encoder.onnx.data").unlink()
            fixed = add_zero_bias(folder / "encoder.onnx", run_dir / "encoder.onnx")
            print(f"  FIX (temp copy): zero bias [{3 * WHISPER['d_model']}] added to {fixed}")
            for level in ("ORT_ENABLE_ALL", "ORT_DISABLE_ALL"):
                rc, out, err = child(CHILD_ENCODER, run_dir / "encoder.onnx", level)
                print(f"    fixed encoder, {level}: {rc_text(rc)}")
        model = whisper_model(nonzero_bias)
        x = audio_features()
        with torch.no_grad():
            tenc = model.model.encoder(torch.from_numpy(x)).last_hidden_state
            tcross = {}
            for i, layer in enumerate(model.model.decoder.layers):
                for kind, proj in (("key", layer.encoder_attn.k_proj), ("value", layer.encoder_attn.v_proj)):
                    tcross[f"present_{kind}_cross_{i}"] = proj(tenc).view(1, 1500, 4, 16).transpose(1, 2).numpy()
            ref_toks, ref_logits = torch_greedy(
                lambda ids: model(encoder_outputs=(tenc,), decoder_input_ids=torch.tensor([ids])).logits[0, -1]
                .double().numpy(), DEC_PROMPT, STEPS)
        es = session(run_dir / "encoder.onnx")
        eo = run(es, {"audio_features": x})
        print(f"  encoder (ORT) vs PyTorch: hidden_states max|d| {d(eo['hidden_states'], tenc.numpy()):.2g}, "
              f"present_*_cross_* max|d| {max(d(eo[k], v) for k, v in tcross.items()):.2g}")
        cross = {dec["inputs"]["cross_past_key_names"] % i: eo[enc["outputs"]["cross_present_key_names"] % i]
                 for i in range(dec["num_hidden_layers"])}
        cross |= {dec["inputs"]["cross_past_value_names"] % i: eo[enc["outputs"]["cross_present_value_names"] % i]
                  for i in range(dec["num_hidden_layers"])}
        ds = session(run_dir / "decoder.onnx")
        print(f"  decoder prompt {DEC_PROMPT}; PyTorch greedy (uncached): {ref_toks}")
        toks, logits, shapes = whisper_loop(ds, dec, cross, DEC_PROMPT, STEPS)
        print(f"  ORT greedy: {toks}  {'= PyTorch' if toks == ref_toks else '!= PyTorch'}")
        for s in (0, 1, STEPS - 1):
            fed, got = shapes[s]
            print(f"    call {s}: input_ids {list(fed['input_ids'])} int32, past_key_self_0 "
                  f"{list(fed['past_key_self_0'])}, past_key_cross_0 {list(fed['past_key_cross_0'])}, "
                  f"present_key_self_0 {list(got['present_key_self_0'])}, logits {list(got['logits'])}")
        per_step("max|logits - PyTorch| per call", logits, ref_logits)
        seq = DEC_PROMPT + toks
        unc = [whisper_loop(ds, dec, cross, seq[:len(DEC_PROMPT) + k], 1)[1][0] for k in range(STEPS)]
        per_step("cached vs uncached recompute", logits, unc)
        if nonzero_bias:
            with torch.no_grad():
                other = whisper_model(False)
                lo = other(input_features=torch.from_numpy(x), decoder_input_ids=torch.tensor([seq])).logits[0]
                lb = model(input_features=torch.from_numpy(x), decoder_input_ids=torch.tensor([seq])).logits[0]
            print(f"  (PyTorch logits of this model vs the zero-bias model on the same tokens: max|d| {d(lb, lo):.2g}; "
                  f"the greedy tokens happen to coincide)")
        # a caller that does not take the cross KV from the encoder (zeros instead):
        zt, zl, _ = whisper_loop(ds, dec, {k: np.zeros_like(v) for k, v in cross.items()}, DEC_PROMPT, STEPS,
                                 forced=toks)
        per_step("BROKEN caller, cross KV zero-filled (teacher-forced): max|logits - correct|", zl, logits)
        if not og_ok or nonzero_bias:
            rc, out, err = child(CHILD_OG, run_dir, HERE)
            if rc == 0:
                res = json.loads(out.strip().splitlines()[-1])
                print(f"  onnxruntime-genai greedy on {'the fixed copy' if fixed else 'the folder'}: {res['toks']}  "
                      f"{'= ORT' if res['toks'] == toks else '!= ORT'}")
                for s in (0, 1):
                    print(f"    og call {s} fed: " + ", ".join(f"{k} {list(v)}" for k, v in res['fed'][s].items()))
                per_step("og logits vs ORT, per call", [np.array(l) for l in res["logits"]], logits)
            else:
                print(f"  onnxruntime-genai on {run_dir.name}: {rc_text(rc)} {err.strip()[-300:]}")


def verify_whisper_genai(folder):
    verify_whisper(folder, nonzero_bias=False)


def verify_whisper_genai_nonzero_bias(folder):
    verify_whisper(folder, nonzero_bias=True)


VERIFIERS = {
    "lfm2-genai": verify_lfm2_genai,
    "llama-genai-share-buffer": verify_llama_share_buffer,
    "whisper-genai": verify_whisper_genai,
    "whisper-genai-nonzero-bias": verify_whisper_genai_nonzero_bias,
}


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    args = fc.parse_args(VERIFIERS)
    OUT = args.out or OUT
    fc.run_all(args, OUT, GENERATORS, VERIFIERS)
