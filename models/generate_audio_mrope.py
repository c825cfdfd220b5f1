"""Generate the MusicGen and Qwen2-VL (M-RoPE) fixtures in models/ and measure
them in onnxruntime against PyTorch.

All three are fresh exports of tiny models with seeded random weights
(torch.manual_seed(0); nothing is downloaded, HF_HUB_OFFLINE=1). Versions:
torch 2.9.1, transformers 4.57.6, optimum 2.1.0 + optimum-onnx 0.1.0,
onnx 1.23.2, onnxruntime 1.31.1 (accelerate and pillow are not installed):

    python3 models/generate_audio_mrope.py [--out DIR] [name ...]
    python3 models/generate_audio_mrope.py --verify-only [name ...]   # only the measurements

Generating ends with the measurements (see AUDIO-MROPE-NOTES.md). Every
logits/feature comparison with PyTorch is asserted to be below 1e-4 (max |d|,
computed in float64) and printed. Everything runs on one thread
(torch.set_num_threads(1), ORT intra/inter-op 1, OMP_NUM_THREADS=1 for the
optimum-cli child). The script re-executes itself with PYTHONHASHSEED=0.

  musicgen-tiny/           `optimum-cli export onnx --task text-to-audio` of a
                           tiny MusicgenForConditionalGeneration (T5 text
                           encoder d_model 48, decoder hidden 32 with 2
                           codebooks of 64 codes, EnCodec with 2 quantizers),
                           saved locally first. Every file is the CLI's:
                           text_encoder, decoder_model, decoder_with_past_model,
                           encodec_decode, build_delay_pattern_mask (.onnx),
                           config.json, generation_config.json. optimum-onnx
                           0.1.0 writes no decoder_model_merged.onnx for this
                           task. Decoder rows are batch x codebooks
                           (input_ids and logits), the presents' batch is the
                           batch. build_delay_pattern_mask.onnx has its input_ids
                           sequence axis frozen at 16 (the dummy length), so
                           the [batch*codebooks, 1] start column that generate()
                           builds the pattern from is refused.
  qwen2vl-tiny/            transformers.js image-text-to-text layout of a tiny
                           Qwen2VLForConditionalGeneration: config.json and
                           generation_config.json (save_pretrained) at the
                           root, and in onnx/
                             embed_tokens.onnx     input_ids -> inputs_embeds
                             vision_encoder.onnx   pixel_values [num_patches, 24]
                                                   + grid_thw [1, 3] ->
                                                   image_features (one image per
                                                   call, any grid)
                             decoder_model_merged.onnx  the language model +
                                                   lm_head as ONE graph (no If):
                                                   inputs_embeds, attention_mask,
                                                   position_ids [3, batch, seq]
                                                   (multimodal rotary), an
                                                   always-present past (0-length
                                                   at step 0) -> logits, presents.
                           Exported with torch.onnx.export(dynamo=False), opset 18.
  qwen2vl-collapsed-rows/  (broken) qwen2vl-tiny with one node added to the
                           decoder: position_ids is replaced by
                           Gather(position_ids, [0, 0, 0], axis 0), so row 0
                           (temporal) feeds all three rotary sections. Equal to
                           qwen2vl-tiny (|d| 0) whenever the three rows are
                           equal (every text-only call); wrong for an image
                           call. embed_tokens/vision_encoder and the configs
                           are byte copies of qwen2vl-tiny's.

Weights use initializer_range 0.2 (Qwen2-VL, as in generate_multimodal.py) and
initializer_factor 0.5 (MusicGen decoder; at 0.2 the second prompt's codebook
rows repeat one code almost every step), both written in config.json.
"""
import json
import shutil
import tempfile
import warnings
from pathlib import Path

import fixture_common as fc
from fixture_common import margin, run, session, signature, try_run

fc.start(__name__)

import numpy as np  # noqa: E402

warnings.filterwarnings("ignore")
HERE = Path(__file__).resolve().parent
OUT = HERE  # where the folders are written (--out DIR)
SEED = 0
INIT_RANGE = 0.2
TOL = 1e-4  # asserted bound on every comparison with PyTorch


_torch = fc.one_thread_torch
_quiet_transformers = fc.quiet_transformers


def maxdiff(a, b):
    return fc.maxdiff(a, b, same_shape=True)


# ================================================================ shared measurement helpers

def close(label, a, b):
    """max|a - b|, printed and asserted below TOL."""
    d = maxdiff(a, b)
    print(f"  {label}: max|d| {d:.3g}")
    assert d < TOL, f"{label}: {d} >= {TOL}"
    return d


def steps_close(label, got, ref):
    """Per-step max|d| (printed, each asserted below TOL)."""
    ds = [maxdiff(a, b) for a, b in zip(got, ref)]
    assert len(got) == len(ref)
    print(f"  {label}: per-step max|d| " + " ".join(f"{d:.2g}" for d in ds))
    assert max(ds) < TOL, f"{label}: {max(ds)} >= {TOL}"
    return ds


# ================================================================ musicgen-tiny

MG_CODES = 64  # codebook size = decoder vocab; the pad / start token is 64
MG_K = 2  # codebooks
MG_TEXT = [[37, 52, 81, 9, 123, 1], [64, 13, 77, 1, 0, 0]]  # T5 ids (eos 1, pad 0), row 1 padded
MG_MASK = [[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]]
MG_STEPS = 5  # step 0 + 4 cached steps
MG_GUIDANCE = 3.0
MG_INIT = 0.5  # decoder initializer_factor: at 0.2 the second prompt's rows repeat one code almost every step


def musicgen_model():
    torch = _torch()
    from transformers import (
        EncodecConfig,
        GenerationConfig,
        MusicgenConfig,
        MusicgenDecoderConfig,
        MusicgenForConditionalGeneration,
        T5Config,
    )

    torch.manual_seed(SEED)
    text = T5Config(vocab_size=1000, d_model=48, d_kv=12, d_ff=96, num_layers=2, num_heads=4)
    # 800 Hz, hop 2*2 = 4 samples -> 200 frames/s; 2.4 kbps / (200 * log2(64)) -> 2 quantizers
    audio = EncodecConfig(sampling_rate=800, audio_channels=1, hidden_size=16, num_filters=4, num_residual_layers=1,
                          upsampling_ratios=[2, 2], target_bandwidths=[2.4], codebook_size=MG_CODES,
                          num_lstm_layers=1, kernel_size=3, last_kernel_size=3, residual_kernel_size=3, compress=2)
    dec = MusicgenDecoderConfig(vocab_size=MG_CODES, max_position_embeddings=256, num_hidden_layers=2, ffn_dim=64,
                                num_attention_heads=4, hidden_size=32, num_codebooks=MG_K, pad_token_id=MG_CODES,
                                bos_token_id=MG_CODES, initializer_factor=MG_INIT)
    cfg = MusicgenConfig(text_encoder=text.to_dict(), audio_encoder=audio.to_dict(), decoder=dec.to_dict())
    model = MusicgenForConditionalGeneration(cfg).eval()
    assert audio.num_quantizers == MG_K
    # the fields facebook/musicgen-small's generation_config.json has (max_length scaled down)
    model.generation_config = GenerationConfig(bos_token_id=MG_CODES, decoder_start_token_id=MG_CODES,
                                               pad_token_id=MG_CODES, max_length=100, do_sample=True,
                                               guidance_scale=MG_GUIDANCE)
    return model


def gen_musicgen_tiny():
    """The model saved locally, then optimum-cli (the files are all the CLI's)."""
    _quiet_transformers()
    out = OUT / "musicgen-tiny"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "musicgen")
        musicgen_model().save_pretrained(src)
        shutil.rmtree(out, ignore_errors=True)
        text = fc.optimum_cli(src, out, "text-to-audio", TRANSFORMERS_VERBOSITY="info")
        ok = text.count("all values close (atol: 1e-05)")
        bad = [l.strip() for l in text.splitlines() if "[x]" in l or "succeeded with the warning" in l]
        models = [l.split("model ")[-1].rstrip(".").split("/")[-1] for l in text.splitlines()
                  if l.startswith("Validating ONNX model")]
        print(f"  | optimum validation: {len(models)} models ({', '.join(models)}), {ok} outputs within atol 1e-05,"
              f" {len(bad)} failures")
        for line in bad:
            print("  | " + line)
        for line in text.splitlines():
            if "succeeded" in line or "accelerate" in line:
                print("  | " + line.strip().replace(str(out), "musicgen-tiny"))


class MusicgenOrt:
    """Drives the exported files the way MusicgenForConditionalGeneration.generate
    does (greedy), with numpy."""

    def __init__(self, folder):
        cfg = json.loads((folder / "config.json").read_text())
        gen = json.loads((folder / "generation_config.json").read_text())
        dec = cfg["decoder"]
        self.K, self.pad = dec["num_codebooks"], dec["pad_token_id"]
        self.layers, self.heads = dec["num_hidden_layers"], dec["num_attention_heads"]
        self.head_dim = dec["hidden_size"] // dec["num_attention_heads"]
        self.start = gen["decoder_start_token_id"]
        self.enc = session(folder / "text_encoder.onnx")
        self.first = session(folder / "decoder_model.onnx")
        self.with_past = session(folder / "decoder_with_past_model.onnx")
        self.codec = session(folder / "encodec_decode.onnx")
        self.bdpm = session(folder / "build_delay_pattern_mask.onnx", severity=4)
        self.shapes = {}

    def encode(self, ids, mask):
        return self.enc.run(["last_hidden_state"], {"input_ids": np.asarray(ids, np.int64),
                                                    "attention_mask": np.asarray(mask, np.int64)})[0]

    def delay_mask(self, batch, max_length):
        """transformers' build_delay_pattern_mask for the start column [batch*K, 1]
        (mono): -1 where the model's token is kept, the pad id where it is forced.
        Row b*K + k: pad at columns <= k (the BOS part) and at columns
        >= max_length - K + 1 + k (the EOS part)."""
        k = np.arange(self.K)[:, None]
        col = np.arange(max_length)[None, :]
        forced = (col <= k) | (col >= max_length - self.K + 1 + k)
        one = np.where(forced, self.pad, -1).astype(np.int64)
        return np.tile(one, (batch, 1))

    @staticmethod
    def apply(seq, dmask):
        """apply_delay_pattern_mask: keep seq where the mask is -1, else the mask."""
        m = dmask[:, : seq.shape[1]]
        return np.where(m == -1, seq, m)

    def generate(self, ids, mask, steps, guidance=None):
        """Greedy. Returns per-step raw logits [rows, V], the final ids
        [B*K, 1+steps] (delay mask applied), the codes [1, B, K, frames] and audio."""
        hidden, mask = self.encode(ids, mask), np.asarray(mask, np.int64)
        B = hidden.shape[0]
        if guidance:  # classifier-free guidance: a zeroed 'null' text appended on the batch axis
            hidden = np.concatenate([hidden, np.zeros_like(hidden)])
            mask = np.concatenate([mask, np.zeros_like(mask)])
        dmask = self.delay_mask(B, 1 + steps)
        seq = self.apply(np.full((B * self.K, 1), self.start, np.int64), dmask)
        raw, past, cross = [], {}, {}
        for t in range(steps):
            col = seq[:, -1:]
            feeds = {"input_ids": np.concatenate([col, col]) if guidance else col,
                     "encoder_hidden_states": hidden, "encoder_attention_mask": mask}
            if t == 0:
                out = run(self.first, feeds)
                cross = {f"past_key_values.{i}.encoder.{kv}": out[f"present.{i}.encoder.{kv}"]
                         for i in range(self.layers) for kv in ("key", "value")}
            else:  # no encoder_hidden_states input: cross-attention reads the encoder pasts from step 0
                feeds.pop("encoder_hidden_states")
                out = run(self.with_past, {**feeds, **past, **cross})
            self.shapes[t] = {k: list(v.shape) for k, v in out.items()}
            past = {f"past_key_values.{i}.decoder.{kv}": out[f"present.{i}.decoder.{kv}"]
                    for i in range(self.layers) for kv in ("key", "value")}
            logits = out["logits"][:, -1]
            raw.append(logits)
            if guidance:
                cond, uncond = logits[: B * self.K], logits[B * self.K:]
                logits = uncond + (cond - uncond) * guidance
            seq = self.apply(np.concatenate([seq, logits.argmax(-1)[:, None]], axis=1), dmask)
        codes = seq[seq != self.pad].reshape(B, self.K, -1)[None]  # generate(): filter the pad, [1, B, K, frames]
        audio = self.codec.run(["audio_values"], {"audio_codes": codes})[0]
        return raw, seq, codes, audio

    def uncached(self, ids, mask, seq):
        """decoder_model over all but the last column of seq in one run."""
        hidden = self.encode(ids, mask)
        out = run(self.first, {"input_ids": seq[:, :-1], "encoder_hidden_states": hidden,
                               "encoder_attention_mask": np.asarray(mask, np.int64)})
        return [out["logits"][:, t] for t in range(seq.shape[1] - 1)]


def musicgen_reference():
    """The seeded model, saved and reloaded (the weights the exporter loaded)."""
    from transformers import MusicgenForConditionalGeneration

    with tempfile.TemporaryDirectory() as tmp:
        musicgen_model().save_pretrained(tmp)
        return MusicgenForConditionalGeneration.from_pretrained(tmp).eval()


def verify_musicgen_tiny(folder):
    torch = _torch()
    _quiet_transformers()
    print("  signatures:")
    for name in ("text_encoder.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx", "encodec_decode.onnx",
                 "build_delay_pattern_mask.onnx"):
        signature(folder / name)
    print(f"  files: {sorted(p.name for p in folder.iterdir())}")
    ref = musicgen_reference()
    mg = MusicgenOrt(folder)
    ids, mask = torch.tensor(MG_TEXT), torch.tensor(MG_MASK)
    B = ids.shape[0]

    # ---- text encoder
    with torch.no_grad():
        enc_ref = ref.text_encoder(input_ids=ids, attention_mask=mask).last_hidden_state.numpy()
    hidden = mg.encode(MG_TEXT, MG_MASK)
    print(f"  text prompt {MG_TEXT}, mask {MG_MASK}")
    close(f"text_encoder last_hidden_state {list(hidden.shape)} vs torch text_encoder", hidden, enc_ref)

    # ---- decoder, no guidance (rows = B x K)
    with torch.no_grad():
        g = ref.generate(input_ids=ids, attention_mask=mask, max_new_tokens=MG_STEPS, do_sample=False,
                         guidance_scale=1.0, output_logits=True, return_dict_in_generate=True)
    pt_logits = [l.numpy() for l in g.logits]
    raw, seq, codes, audio = mg.generate(MG_TEXT, MG_MASK, MG_STEPS)
    print(f"  greedy, no guidance, {MG_STEPS} decoder calls (decoder_model, then {MG_STEPS - 1} x"
          f" decoder_with_past_model); max_length = 1 + {MG_STEPS}")
    for t in (0, 1):
        print(f"    step {t} output shapes: " + ", ".join(f"{k} {v}" for k, v in mg.shapes[t].items()
                                                          if k == "logits" or ".0." in k))
    steps_close("logits [B*K, V] vs torch generate(output_logits) (its cached decoder)", raw, pt_logits)
    pt_tokens = [l.argmax(-1).tolist() for l in pt_logits]
    ort_tokens = [l.argmax(-1).tolist() for l in raw]
    print(f"  per-step argmax rows (b*K + k), ORT   {ort_tokens}\n"
          f"                               torch {pt_tokens} -> {'same' if ort_tokens == pt_tokens else 'DIFFERENT'}")
    assert ort_tokens == pt_tokens
    print(f"  smallest top-1/top-2 gap in torch's logits {margin(np.stack(pt_logits)):.3g};"
          f" max|logit| {max(float(np.abs(l).max()) for l in pt_logits):.3g}")
    print(f"  final ids (delay mask applied; pad {mg.pad}):\n    " + str(seq.tolist()))
    print(f"  audio_codes after dropping the pad: {list(codes.shape)} {codes[0].tolist()}")
    close(f"audio_values {list(audio.shape)} (encodec_decode of those codes) vs torch generate's audio",
          audio, g.sequences.numpy())
    close("cached vs uncached (decoder_model over the whole prefix in one run)", np.stack(raw),
          np.stack(mg.uncached(MG_TEXT, MG_MASK, seq)))

    # ---- classifier-free guidance (what generation_config.json asks for): rows = 2B x K
    with torch.no_grad():
        g = ref.generate(input_ids=ids, attention_mask=mask, max_new_tokens=MG_STEPS, do_sample=False,
                         guidance_scale=MG_GUIDANCE, output_logits=True, return_dict_in_generate=True)
    pt_logits = [l.numpy() for l in g.logits]
    raw, seq, codes, audio = mg.generate(MG_TEXT, MG_MASK, MG_STEPS, guidance=MG_GUIDANCE)
    print(f"  greedy with guidance_scale {MG_GUIDANCE}: encoder_hidden_states / encoder_attention_mask get a zeroed"
          f" copy appended (batch {2 * B}), input_ids rows repeated (2*B*K = {2 * B * mg.K})")
    print("    step 1 output shapes: " + ", ".join(f"{k} {v}" for k, v in mg.shapes[1].items()
                                                   if k == "logits" or ".0." in k))
    steps_close("raw logits [2*B*K, V] vs torch generate(guidance_scale=3)", raw, pt_logits)
    scores = [uc + (c - uc) * MG_GUIDANCE for c, uc in (np.split(l, 2) for l in pt_logits)]
    ort_tokens = seq[:, 1:].tolist()
    print(f"  guided final ids {seq.tolist()}; smallest gap in the guided scores {margin(np.stack(scores)):.3g}")
    close(f"audio_values {list(audio.shape)} vs torch generate(guidance_scale=3)'s audio", audio, g.sequences.numpy())

    # ---- encodec_decode on its own
    rng = np.random.RandomState(1)
    for frames in (3, 10):
        c = rng.randint(0, MG_CODES, size=(1, B, mg.K, frames)).astype(np.int64)
        with torch.no_grad():
            a_ref = ref.audio_encoder.decode(torch.from_numpy(c), [None] * B).audio_values.numpy()
        a = mg.codec.run(["audio_values"], {"audio_codes": c})[0]
        close(f"encodec_decode audio_codes {list(c.shape)} -> audio_values {list(a.shape)} vs torch"
              f" audio_encoder.decode", a, a_ref)

    # ---- build_delay_pattern_mask.onnx
    start = np.full((B * mg.K, 1), mg.start, np.int64)
    got = try_run(lambda: run(mg.bdpm, {"input_ids": start, "pad_token_id": np.array([mg.pad], np.int64),
                                        "max_length": np.array([1 + MG_STEPS], np.int64)}))
    print(f"  build_delay_pattern_mask on the start column {list(start.shape)} (what generate() passes): {got}")
    ids16 = rng.randint(0, MG_CODES, size=(B * mg.K, 16)).astype(np.int64)
    out = run(mg.bdpm, {"input_ids": ids16, "pad_token_id": np.array([mg.pad], np.int64),
                        "max_length": np.array([20], np.int64)})
    with torch.no_grad():
        e_ref, m_ref = ref.decoder.build_delay_pattern_mask(torch.from_numpy(ids16), mg.pad, max_length=20)
    print(f"  build_delay_pattern_mask on [{B * mg.K}, 16] ids, pad_token_id [{mg.pad}], max_length [20]:"
          f" input_ids_edited {list(out['input_ids_edited'].shape)}, delay_pattern_mask"
          f" {list(out['delay_pattern_mask'].shape)}; vs torch decoder.build_delay_pattern_mask: equal"
          f" {np.array_equal(out['input_ids_edited'], e_ref.numpy()) and np.array_equal(out['delay_pattern_mask'], m_ref.numpy())}")
    assert np.array_equal(out["delay_pattern_mask"], m_ref.numpy())
    with torch.no_grad():
        _, m_ref = ref.decoder.build_delay_pattern_mask(torch.from_numpy(start), mg.pad, max_length=1 + MG_STEPS)
    same = np.array_equal(mg.delay_mask(B, 1 + MG_STEPS), m_ref.numpy())
    print(f"  this script's numpy delay mask for the start column, max_length {1 + MG_STEPS}, vs torch: equal {same}:"
          f" {m_ref.numpy()[: mg.K].tolist()} (rows 0..K-1)")
    assert same


# ================================================================ qwen2vl-tiny

QV_IMAGE, QV_VIDEO, QV_VSTART, QV_VEND = 997, 998, 995, 996
QV_PATCH, QV_TPATCH, QV_MERGE = 2, 2, 2
QV_PATCH_DIM = 3 * QV_TPATCH * QV_PATCH * QV_PATCH  # 24 values per patch
QV_TEXT_PROMPT = [1, 5, 17, 42, 100]
QV_GRID = [1, 8, 8]  # t, h, w in patches -> 64 patches -> 16 image tokens (a 4 x 4 llm grid)
QV_IMAGE_PROMPT = [1, 5, QV_VSTART] + [QV_IMAGE] * (QV_GRID[1] * QV_GRID[2] // QV_MERGE ** 2) + [QV_VEND, 17, 42]
QV_STEPS = 5  # step 0 + 4 cached steps


def qwen2vl_model():
    torch = _torch()
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    torch.manual_seed(SEED)
    text = dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=256, rope_theta=10000.0,
                rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]},  # head_dim 16 -> 8 frequencies
                initializer_range=INIT_RANGE, bos_token_id=1, eos_token_id=2)
    vision = dict(depth=2, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2, patch_size=QV_PATCH,
                  temporal_patch_size=QV_TPATCH, spatial_merge_size=QV_MERGE, in_channels=3,
                  initializer_range=INIT_RANGE)
    cfg = Qwen2VLConfig(text_config=text, vision_config=vision, image_token_id=QV_IMAGE, video_token_id=QV_VIDEO,
                        vision_start_token_id=QV_VSTART, vision_end_token_id=QV_VEND, bos_token_id=1, eos_token_id=2)
    return Qwen2VLForConditionalGeneration(cfg).eval()


def qwen2vl_reference(attn=None):
    from transformers import Qwen2VLForConditionalGeneration

    with tempfile.TemporaryDirectory() as tmp:
        qwen2vl_model().save_pretrained(tmp)
        kw = {"attn_implementation": attn} if attn else {}
        return Qwen2VLForConditionalGeneration.from_pretrained(tmp, **kw).eval()


def _qwen2vl_wrappers():
    torch = _torch()
    from transformers.models.qwen2_vl.modeling_qwen2_vl import apply_rotary_pos_emb_vision

    class EmbedTokens(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.embed_tokens = model.get_input_embeddings()

        def forward(self, input_ids):
            return self.embed_tokens(input_ids)

    class VisionEncoder(torch.nn.Module):
        """Qwen2-VL's vision tower for ONE image, with the grid read from grid_thw
        at run time. The module's own forward builds the rotary positions with a
        Python loop over grid_thw and splits attention with cu_seqlens.tolist();
        traced, both would freeze the grid. Here the positions are arithmetic on
        arange(t*h*w) (same merge-window order as rot_pos_emb) and attention is
        one full block (what the split gives for a single image). Same weights,
        same modules otherwise (patch_embed, blocks' layers, merger)."""

        def __init__(self, model):
            super().__init__()
            self.visual = model.model.visual

        def forward(self, pixel_values, grid_thw):
            v = self.visual
            m = v.spatial_merge_size
            hs = v.patch_embed(pixel_values)
            t, h, w = grid_thw[0, 0], grid_thw[0, 1], grid_thw[0, 2]
            idx = torch.arange(t * h * w, device=hs.device) % (h * w)
            per_row = (w // m) * m * m
            bh, rem = idx // per_row, idx % per_row
            bw, rem = rem // (m * m), rem % (m * m)
            hpos, wpos = bh * m + rem // m, bw * m + rem % m
            inv = v.rotary_pos_emb.inv_freq
            rot = torch.cat([hpos[:, None].float() * inv[None, :], wpos[:, None].float() * inv[None, :]], dim=-1)
            emb = torch.cat([rot, rot], dim=-1)
            cos, sin = emb.cos(), emb.sin()
            n = hs.shape[0]
            for blk in v.blocks:
                a = blk.attn
                q, k, val = a.qkv(blk.norm1(hs)).reshape(n, 3, a.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
                q, k = apply_rotary_pos_emb_vision(q, k, cos, sin)
                q, k, val = q.transpose(0, 1), k.transpose(0, 1), val.transpose(0, 1)  # [heads, n, head_dim]
                probs = torch.softmax(torch.matmul(q, k.transpose(1, 2)) * a.scaling, dim=-1, dtype=torch.float32)
                o = torch.matmul(probs, val).transpose(0, 1).reshape(n, -1)
                hs = hs + a.proj(o)
                hs = hs + blk.mlp(blk.norm2(hs))
            return v.merger(hs)

    class LanguageModel(torch.nn.Module):
        """model.language_model + lm_head fed inputs_embeds, 3-row position_ids and a
        past that is always given (0-length at step 0); logits for every position."""

        def __init__(self, model):
            super().__init__()
            self.language_model = model.model.language_model
            self.lm_head = model.lm_head
            self.layers = model.config.text_config.num_hidden_layers

        def forward(self, inputs_embeds, attention_mask, position_ids, *past):
            from transformers import DynamicCache

            cache = DynamicCache()
            for i in range(self.layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.language_model(inputs_embeds=inputs_embeds, attention_mask=attention_mask,
                                      position_ids=position_ids, past_key_values=cache, use_cache=True)
            presents = []
            for layer in cache.layers:
                presents += [layer.keys, layer.values]
            return (self.lm_head(out.last_hidden_state), *presents)

    return EmbedTokens, VisionEncoder, LanguageModel


class _TracePatches:
    """The patches optimum-onnx's ModelPatcher applies for transformers 4.57 and the
    TorchScript tracer: masks built without vmap, no packed-sequence detection, and
    DynamicLayer.update that concatenates without a lazily created empty tensor."""

    def __enter__(self):
        import transformers.masking_utils as mu
        from optimum.exporters.onnx import model_patcher as mp
        from transformers.cache_utils import DynamicLayer

        self.saved = (mu.ALL_MASK_ATTENTION_FUNCTIONS["sdpa"], mu.ALL_MASK_ATTENTION_FUNCTIONS["eager"],
                      mu.find_packed_sequence_indices, DynamicLayer.update)
        mu.ALL_MASK_ATTENTION_FUNCTIONS.register("sdpa", mp.sdpa_mask_without_vmap)
        mu.ALL_MASK_ATTENTION_FUNCTIONS.register("eager", mp.eager_mask_without_vmap)
        mu.find_packed_sequence_indices = mp.find_packed_sequence_indices_patched
        DynamicLayer.update = mp.patched_dynamic_layer_update
        return self

    def __exit__(self, *exc):
        import transformers.masking_utils as mu
        from transformers.cache_utils import DynamicLayer

        mu.ALL_MASK_ATTENTION_FUNCTIONS.register("sdpa", self.saved[0])
        mu.ALL_MASK_ATTENTION_FUNCTIONS.register("eager", self.saved[1])
        mu.find_packed_sequence_indices = self.saved[2]
        DynamicLayer.update = self.saved[3]


def _export(module, args, path, input_names, output_names, dynamic_axes):
    torch = _torch()
    with torch.no_grad():
        torch.onnx.export(module, args, str(path), input_names=input_names, output_names=output_names,
                          dynamic_axes=dynamic_axes, opset_version=18, do_constant_folding=True, dynamo=False)


# The text model's sizes, copied to config.json's top level as the Hub's Qwen2-VL
# configs have them: transformers.js reads qwen2_vl's cache sizes there
# (src/configs.js: getNormalizedConfig), and transformers 4.57's save_pretrained
# writes them under text_config only (qwen2vl-nested-config keeps that form, and
# transformers.js 4.3.1 fails on it: "Missing the following inputs: past_key_values…").
TOP_LEVEL_TEXT = ("hidden_size", "intermediate_size", "max_position_embeddings", "num_attention_heads",
                  "num_hidden_layers", "num_key_value_heads", "rms_norm_eps", "rope_theta", "vocab_size")


def write_config(path, cfg):
    """As save_pretrained writes it: sorted keys, 2-space indent, a final newline."""
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def flatten_text_config(path):
    cfg = json.loads(path.read_text())
    cfg.update({k: cfg["text_config"][k] for k in TOP_LEVEL_TEXT if k in cfg["text_config"]})
    write_config(path, cfg)


def gen_qwen2vl_tiny():
    """torch.onnx.export (TorchScript) of the three wrappers; configs from
    save_pretrained, the text sizes copied to the top level (TOP_LEVEL_TEXT)."""
    torch = _torch()
    _quiet_transformers()
    from transformers import Qwen2VLForConditionalGeneration

    out = OUT / "qwen2vl-tiny"
    shutil.rmtree(out, ignore_errors=True)
    (out / "onnx").mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        qwen2vl_model().save_pretrained(tmp)
        for name in ("config.json", "generation_config.json"):
            shutil.copy(Path(tmp, name), out / name)
        flatten_text_config(out / "config.json")
        model = Qwen2VLForConditionalGeneration.from_pretrained(tmp, attn_implementation="eager").eval()
    EmbedTokens, VisionEncoder, LanguageModel = _qwen2vl_wrappers()
    tc = model.config.text_config
    layers, kv, hd = tc.num_hidden_layers, tc.num_key_value_heads, tc.hidden_size // tc.num_attention_heads

    _export(EmbedTokens(model).eval(), (torch.tensor([[1, 5, 17], [42, 100, 250]]),), out / "onnx" / "embed_tokens.onnx",
            ["input_ids"], ["inputs_embeds"],
            {"input_ids": {0: "batch_size", 1: "sequence_length"},
             "inputs_embeds": {0: "batch_size", 1: "sequence_length"}})

    g = torch.Generator().manual_seed(SEED)
    grid = torch.tensor([[1, 4, 6]])  # traced at a grid different from the measured one
    pv = torch.randn(int(grid.prod()), QV_PATCH_DIM, generator=g)
    _export(VisionEncoder(model).eval(), (pv, grid), out / "onnx" / "vision_encoder.onnx",
            ["pixel_values", "grid_thw"], ["image_features"],
            {"pixel_values": {0: "num_patches"}, "image_features": {0: "num_image_tokens"}})

    B, S, P = 2, 3, 4  # dummy batch, new tokens, past
    embeds = torch.randn(B, S, tc.hidden_size, generator=g)
    mask = torch.ones(B, P + S, dtype=torch.long)
    base = torch.arange(P, P + S).expand(B, S)
    pos = torch.stack([base, base + 1, base + 3])  # three different rows
    past = [torch.randn(B, kv, P, hd, generator=g) for _ in range(2 * layers)]
    past_names = [f"past_key_values.{i}.{k}" for i in range(layers) for k in ("key", "value")]
    present_names = [f"present.{i}.{k}" for i in range(layers) for k in ("key", "value")]
    axes = {"inputs_embeds": {0: "batch_size", 1: "sequence_length"},
            "attention_mask": {0: "batch_size", 1: "past_sequence_length + sequence_length"},
            "position_ids": {1: "batch_size", 2: "sequence_length"},
            "logits": {0: "batch_size", 1: "sequence_length"}}
    axes.update({n: {0: "batch_size", 2: "past_sequence_length"} for n in past_names})
    axes.update({n: {0: "batch_size", 2: "past_sequence_length + sequence_length"} for n in present_names})
    with _TracePatches():
        _export(LanguageModel(model).eval(), (embeds, mask, pos, *past), out / "onnx" / "decoder_model_merged.onnx",
                ["inputs_embeds", "attention_mask", "position_ids", *past_names], ["logits", *present_names], axes)


def collapse_rows(src, dst, rows=(0, 0, 0)):
    """Insert Gather(position_ids, rows, axis=0) in front of every consumer of
    position_ids. rows (0, 0, 0) = row 0 feeds all three rotary sections."""
    import onnx
    from onnx import helper, numpy_helper

    m = onnx.load(str(src))
    gname = "position_ids_rows"
    for node in m.graph.node:
        for i, name in enumerate(node.input):
            if name == "position_ids":
                node.input[i] = gname
    m.graph.initializer.append(numpy_helper.from_array(np.array(rows, np.int64), "position_ids_row_index"))
    m.graph.node.insert(0, helper.make_node("Gather", ["position_ids", "position_ids_row_index"], [gname],
                                            name="/collapse/Gather_rows", axis=0))
    onnx.checker.check_model(m)
    if dst is None:
        return m.SerializeToString()
    onnx.save(m, str(dst))


def gen_qwen2vl_collapsed_rows():
    src = OUT / "qwen2vl-tiny"
    if not (src / "onnx" / "decoder_model_merged.onnx").exists():
        gen_qwen2vl_tiny()
    out = OUT / "qwen2vl-collapsed-rows"
    shutil.rmtree(out, ignore_errors=True)
    (out / "onnx").mkdir(parents=True)
    for name in ("config.json", "generation_config.json", "onnx/embed_tokens.onnx", "onnx/vision_encoder.onnx"):
        shutil.copy(src / name, out / name)
    collapse_rows(src / "onnx" / "decoder_model_merged.onnx", out / "onnx" / "decoder_model_merged.onnx")


def gen_qwen2vl_nested_config():
    """qwen2vl-tiny with config.json as transformers 4.57's save_pretrained
    writes it: the text sizes under text_config only (broken for transformers.js)."""
    src = OUT / "qwen2vl-tiny"
    if not (src / "onnx" / "decoder_model_merged.onnx").exists():
        gen_qwen2vl_tiny()
    out = OUT / "qwen2vl-nested-config"
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(src, out)
    cfg = json.loads((src / "config.json").read_text())
    write_config(out / "config.json", {k: v for k, v in cfg.items() if k not in TOP_LEVEL_TEXT})


def rope_index(ids, grids, merge=QV_MERGE, image_token=QV_IMAGE):
    """Qwen2-VL get_rope_index for one unpadded sequence with images (numpy):
    text runs get t = h = w = next position; an image of llm grid (t, h/m, w/m)
    gets base + (t, h, w) indices; the next run starts at the image's max + 1.
    Returns position_ids [3, 1, S] and rope_delta (max + 1 - S)."""
    ids = list(ids)
    pos = np.zeros((3, len(ids)), np.int64)
    st, base, gi = 0, 0, 0
    while image_token in ids[st:]:
        ed = ids.index(image_token, st)
        t, h, w = grids[gi][0], grids[gi][1] // merge, grids[gi][2] // merge
        gi += 1
        pos[:, st:ed] = base + np.arange(ed - st)
        base += ed - st
        tt, hh, ww = np.meshgrid(np.arange(t), np.arange(h), np.arange(w), indexing="ij")
        n = t * h * w
        pos[:, ed:ed + n] = base + np.stack([tt.ravel(), hh.ravel(), ww.ravel()])
        base = int(pos[:, ed:ed + n].max()) + 1
        st = ed + n
    pos[:, st:] = base + np.arange(len(ids) - st)
    return pos[:, None, :], int(pos.max()) + 1 - len(ids)


class TjsQwen2VL:
    """Drives the three sessions the way transformers.js' Qwen2VLForConditionalGeneration
    does at batch 1 without padding: embed_tokens every step, vision_encoder at step
    0 with the features written over the image-token rows, position_ids [3, 1, S]
    from get_rope_index at step 0 and past_len + rope_delta (all 3 rows) after."""

    def __init__(self, folder, decoder=None):
        cfg = json.loads((folder / "config.json").read_text())
        tc = cfg["text_config"]
        self.layers, self.kv = tc["num_hidden_layers"], tc["num_key_value_heads"]
        self.head_dim = tc["hidden_size"] // tc["num_attention_heads"]
        self.image_token = cfg["image_token_id"]
        self.embed = session(folder / "onnx" / "embed_tokens.onnx")
        self.vision = session(folder / "onnx" / "vision_encoder.onnx", severity=4)
        self.dec = session(decoder or folder / "onnx" / "decoder_model_merged.onnx", severity=4)

    def embeds(self, ids):
        return self.embed.run(["inputs_embeds"], {"input_ids": np.asarray(ids, np.int64)})[0]

    def image_features(self, pv, grid):
        return self.vision.run(["image_features"], {"pixel_values": pv, "grid_thw": np.asarray(grid, np.int64)})[0]

    def decode(self, embeds, mask, pos, past=None):
        if past is None:
            past = {f"past_key_values.{i}.{k}": np.zeros((embeds.shape[0], self.kv, 0, self.head_dim), np.float32)
                    for i in range(self.layers) for k in ("key", "value")}
        out = run(self.dec, {"inputs_embeds": embeds, "attention_mask": mask, "position_ids": pos, **past})
        present = {f"past_key_values.{i}.{k}": out[f"present.{i}.{k}"]
                   for i in range(self.layers) for k in ("key", "value")}
        return out["logits"], present

    def prompt(self, ids, pv=None, grid=None):
        """inputs_embeds (merged with the image), position_ids, rope_delta."""
        embeds = self.embeds([ids])
        if pv is None:
            pos = np.tile(np.arange(len(ids), dtype=np.int64), (3, 1, 1))
            return embeds, pos, 0
        feats = self.image_features(pv, [grid])
        rows = [i for i, t in enumerate(ids) if t == self.image_token]
        assert len(rows) == feats.shape[0], (len(rows), feats.shape)
        embeds[0, rows] = feats
        pos, delta = rope_index(ids, [grid])
        return embeds, pos, delta

    def generate(self, ids, steps, pv=None, grid=None, delta_override=None):
        embeds, pos, delta = self.prompt(ids, pv, grid)
        if delta_override is not None:
            delta = delta_override
        mask = np.ones((1, len(ids)), np.int64)
        logits, past = self.decode(embeds, mask, pos)
        first, tokens, last = logits, [], []
        for step in range(steps):
            last.append(logits[0, -1])
            tokens.append(int(logits[0, -1].argmax()))
            if step == steps - 1:
                break
            past_len = past["past_key_values.0.key"].shape[2]
            mask = np.ones((1, past_len + 1), np.int64)
            pos = np.full((3, 1, 1), past_len + delta, np.int64)
            logits, past = self.decode(self.embeds([[tokens[-1]]]), mask, pos, past)
        return tokens, last, first

    def uncached(self, ids, tokens, pv=None, grid=None):
        """One run over prompt + tokens[:-1] (positions continue the prompt's)."""
        embeds, pos, delta = self.prompt(ids, pv, grid)
        extra = np.asarray(tokens[:-1], np.int64)
        tail = len(ids) + delta + np.arange(len(extra))
        embeds = np.concatenate([embeds, self.embeds([extra])], axis=1)
        pos = np.concatenate([pos, np.tile(tail, (3, 1, 1))], axis=2)
        logits, _ = self.decode(embeds, np.ones((1, embeds.shape[1]), np.int64), pos)
        return logits[0, len(ids) - 1:]


def image_inputs(grid=QV_GRID, seed=1):
    n = int(np.prod(grid))
    return np.random.RandomState(seed).randn(n, QV_PATCH_DIM).astype(np.float32)


def qwen2vl_torch_runs(ref):
    """torch generate (text-only and image) and the pieces to compare against."""
    torch = _torch()
    res = {}
    ids = torch.tensor([QV_TEXT_PROMPT])
    with torch.no_grad():
        g = ref.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=QV_STEPS, do_sample=False,
                         output_logits=True, return_dict_in_generate=True)
        res["text"] = (g.sequences[0, len(QV_TEXT_PROMPT):].tolist(), [l[0].numpy() for l in g.logits],
                       ref(input_ids=ids).logits[0].numpy())
        res["embed"] = ref.get_input_embeddings()(ids).numpy()
        pv, grid = torch.from_numpy(image_inputs()), torch.tensor([QV_GRID])
        ids = torch.tensor([QV_IMAGE_PROMPT])
        g = ref.generate(ids, attention_mask=torch.ones_like(ids), pixel_values=pv, image_grid_thw=grid,
                         max_new_tokens=QV_STEPS, do_sample=False, output_logits=True, return_dict_in_generate=True)
        full = ref(input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=pv, image_grid_thw=grid)
        res["image"] = (g.sequences[0, len(QV_IMAGE_PROMPT):].tolist(), [l[0].numpy() for l in g.logits],
                        full.logits[0].numpy())
        res["feats"] = torch.cat(list(ref.model.get_image_features(pv, grid))).numpy()
        pos, delta = ref.model.get_rope_index(ids, grid, None, torch.ones_like(ids))
        res["rope"] = (pos.numpy(), int(delta[0, 0]))
        grid2 = [1, 6, 4]
        pv2 = torch.from_numpy(image_inputs(grid2, seed=2))
        res["feats2"] = (grid2, pv2.numpy(), torch.cat(list(ref.model.get_image_features(pv2, torch.tensor([grid2])))).numpy())
    return res


def verify_qwen2vl_tiny(folder):
    _quiet_transformers()
    print("  signatures:")
    for name in ("embed_tokens.onnx", "vision_encoder.onnx", "decoder_model_merged.onnx"):
        signature(folder / "onnx" / name)
    ref = qwen2vl_reference()
    t = qwen2vl_torch_runs(ref)
    q = TjsQwen2VL(folder)

    # ---- text only
    pt_tokens, pt_logits, pt_full = t["text"]
    print(f"  text-only prompt {QV_TEXT_PROMPT}: position_ids = 3 equal rows 0..4, then past_len (+ rope_delta 0)")
    close("embed_tokens vs torch embedding", q.embeds([QV_TEXT_PROMPT]), t["embed"])
    toks, last, first = q.generate(QV_TEXT_PROMPT, QV_STEPS)
    close(f"step 0 logits {list(first.shape)} vs torch forward over the prompt", first[0], pt_full)
    steps_close("step 0 + 4 cached steps, last-row logits vs torch generate", last, pt_logits)
    print(f"  greedy tokens ORT   {toks}\n  greedy tokens torch {pt_tokens}  -> {'same' if toks == pt_tokens else 'DIFFERENT'}")
    assert toks == pt_tokens
    print(f"  smallest top-1/top-2 gap in torch's logits {min(margin(l) for l in pt_logits):.3g};"
          f" max|logit| {max(float(np.abs(l).max()) for l in pt_logits):.3g}")
    close("cached vs uncached (one run over prompt + 4 tokens)", np.stack(last), q.uncached(QV_TEXT_PROMPT, toks))
    S = len(QV_TEXT_PROMPT)
    bad_toks, bad_last, _ = q.generate(QV_TEXT_PROMPT, QV_STEPS, delta_override=2 * S)
    print("  cached positions past_len + 2*S (rope_delta max+1+S, as transformers.js @f917095's text-only"
          " _get_text_only_rope_index writes it; transformers has max+1-S = 0):"
          " per-step max|d| vs torch " + " ".join(f"{maxdiff(a, b):.2g}" for a, b in zip(bad_last, pt_logits))
          + f"; tokens {bad_toks} ({'same' if bad_toks == pt_tokens else 'different'})")
    two = [QV_TEXT_PROMPT, [7, 300, 12, 999, 64]]
    with _torch().no_grad():
        pt_two = ref(input_ids=_torch().tensor(two)).logits.numpy()
    lg, _ = q.decode(q.embeds(two), np.ones((2, S), np.int64), np.tile(np.arange(S, dtype=np.int64), (3, 2, 1)))
    close(f"batch 2 ({two}), one call, logits {list(lg.shape)} vs torch forward", lg, pt_two)
    pos2d = np.arange(S, dtype=np.int64)[None]
    print(f"  position_ids fed as [1, {S}] (2-D, the Llama shape): "
          + str(try_run(lambda: q.decode(q.embeds([QV_TEXT_PROMPT]), np.ones((1, S), np.int64), pos2d))))

    # ---- image
    pt_tokens, pt_logits, pt_full = t["image"]
    pv = image_inputs()
    feats = q.image_features(pv, [QV_GRID])
    print(f"  image prompt {QV_IMAGE_PROMPT} (vision_start {QV_VSTART}, {QV_IMAGE_PROMPT.count(QV_IMAGE)} x image"
          f" {QV_IMAGE}, vision_end {QV_VEND});"
          f" pixel_values randn(seed 1) {list(pv.shape)}, grid_thw [{QV_GRID}]")
    close(f"image_features {list(feats.shape)} vs torch get_image_features", feats, t["feats"])
    grid2, pv2, feats2_ref = t["feats2"]
    feats2 = q.image_features(pv2, [grid2])
    close(f"image_features for grid_thw [{grid2}] ({list(pv2.shape)} patches) {list(feats2.shape)} vs torch", feats2,
          feats2_ref)
    two = try_run(lambda: q.image_features(np.concatenate([pv, pv]), [QV_GRID, QV_GRID]))
    print(f"  two images in one call (grid_thw [2, 3]): {two}")
    pos, delta = rope_index(QV_IMAGE_PROMPT, [QV_GRID])
    print(f"  position_ids (numpy get_rope_index) rows t/h/w:\n    {pos[0, 0].tolist()}\n    {pos[1, 0].tolist()}\n"
          f"    {pos[2, 0].tolist()}\n  rope_delta {delta}; equal to torch get_rope_index:"
          f" {np.array_equal(pos, t['rope'][0]) and delta == t['rope'][1]}")
    assert np.array_equal(pos, t["rope"][0]) and delta == t["rope"][1]
    toks, last, first = q.generate(QV_IMAGE_PROMPT, QV_STEPS, pv, QV_GRID)
    close(f"image step 0 logits {list(first.shape)} vs torch forward(pixel_values, image_grid_thw), all rows",
          first[0], pt_full)
    steps_close("image: step 0 + 4 cached steps (positions past_len + rope_delta) vs torch generate", last, pt_logits)
    print(f"  greedy tokens ORT   {toks}\n  greedy tokens torch {pt_tokens}  -> {'same' if toks == pt_tokens else 'DIFFERENT'}")
    assert toks == pt_tokens
    print(f"  smallest top-1/top-2 gap in torch's logits {min(margin(l) for l in pt_logits):.3g};"
          f" max|logit| {max(float(np.abs(l).max()) for l in pt_logits):.3g}")
    close("image: cached vs uncached (one run over prompt + 4 tokens)", np.stack(last),
          q.uncached(QV_IMAGE_PROMPT, toks, pv, QV_GRID))
    # callers that get the positions wrong
    embeds, _, _ = q.prompt(QV_IMAGE_PROMPT, pv, QV_GRID)
    text_pos = np.tile(np.arange(len(QV_IMAGE_PROMPT), dtype=np.int64), (3, 1, 1))
    lg, _ = q.decode(embeds, np.ones((1, len(QV_IMAGE_PROMPT)), np.int64), text_pos)
    print(f"  image prompt with text positions 0..{len(QV_IMAGE_PROMPT) - 1} on all rows (M-RoPE ignored):"
          f" max|d| vs torch {maxdiff(lg[0], pt_full):.3g}")
    w_toks, w_last, _ = q.generate(QV_IMAGE_PROMPT, QV_STEPS, pv, QV_GRID, delta_override=0)
    print(f"  image prompt, cached positions past_len without rope_delta ({delta}): per-step max|d| vs torch "
          + " ".join(f"{maxdiff(a, b):.2g}" for a, b in zip(w_last, pt_logits)) + f"; tokens {w_toks}")
    return t


def verify_qwen2vl_collapsed_rows(folder, t=None):
    _quiet_transformers()
    print("  signature (equal to qwen2vl-tiny's decoder):")
    signature(folder / "onnx" / "decoder_model_merged.onnx")
    good_folder = folder.parent / "qwen2vl-tiny"
    for name in ("config.json", "generation_config.json", "onnx/embed_tokens.onnx", "onnx/vision_encoder.onnx"):
        same = (folder / name).read_bytes() == (good_folder / name).read_bytes()
        print(f"  {name}: {'byte-identical to' if same else 'DIFFERENT from'} qwen2vl-tiny's")
    if t is None:
        t = qwen2vl_torch_runs(qwen2vl_reference())
    bad, good = TjsQwen2VL(folder), TjsQwen2VL(good_folder)

    pt_tokens, pt_logits, _ = t["text"]
    toks, last, _ = bad.generate(QV_TEXT_PROMPT, QV_STEPS)
    g_toks, g_last, _ = good.generate(QV_TEXT_PROMPT, QV_STEPS)
    steps_close("text-only (3 equal rows): vs torch generate", last, pt_logits)
    print(f"  text-only: tokens {toks} ({'same as' if toks == pt_tokens else 'DIFFERENT from'} torch); max|d| vs"
          f" qwen2vl-tiny's logits {max(maxdiff(a, b) for a, b in zip(last, g_last)):.3g} -> not detectable text-only")

    pt_tokens, pt_logits, pt_full = t["image"]
    pv = image_inputs()
    toks, last, first = bad.generate(QV_IMAGE_PROMPT, QV_STEPS, pv, QV_GRID)
    print(f"  image call: step 0 logits vs torch, all rows: max|d| {maxdiff(first[0], pt_full):.3g}"
          f" (rows before the image: {maxdiff(first[0, :3], pt_full[:3]):.3g})")
    print("  image call: per-step max|d| vs torch generate " + " ".join(f"{maxdiff(a, b):.2g}"
                                                                        for a, b in zip(last, pt_logits)))
    print(f"  image call: tokens {toks} vs torch {pt_tokens} -> {'same' if toks == pt_tokens else 'DIFFERENT'}")
    # reference-free: does the graph read rows 1 and 2 at all?
    embeds = good.embeds([QV_TEXT_PROMPT])
    mask = np.ones((1, len(QV_TEXT_PROMPT)), np.int64)
    eq = np.tile(np.arange(len(QV_TEXT_PROMPT), dtype=np.int64), (3, 1, 1))
    moved = eq.copy()
    moved[1] *= 2  # a constant shift of a row would cancel in q.k (rotary is relative): change the spacing
    moved[2] = 0
    for label, s in (("qwen2vl-tiny", good), ("qwen2vl-collapsed-rows", bad)):
        a, _ = s.decode(embeds, mask, eq)
        b, _ = s.decode(embeds, mask, moved)
        print(f"  no reference needed: {label}, rows (p, p, p) vs (p, 2p, 0), p = 0..{len(QV_TEXT_PROMPT) - 1}:"
              f" max|d| {maxdiff(a, b):.3g}")
    # the same edit with the rows swapped instead of collapsed, measured in memory only
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    swapped = TjsQwen2VL(good_folder)
    swapped.dec = ort.InferenceSession(collapse_rows(good_folder / "onnx" / "decoder_model_merged.onnx", None,
                                                     rows=(0, 2, 1)), so, providers=["CPUExecutionProvider"])
    s_toks, s_last, _ = swapped.generate(QV_TEXT_PROMPT, QV_STEPS)
    i_toks, i_last, i_first = swapped.generate(QV_IMAGE_PROMPT, QV_STEPS, pv, QV_GRID)
    print(f"  (not saved) rows h/w swapped, Gather [0, 2, 1]: text-only max|d| vs qwen2vl-tiny"
          f" {max(maxdiff(a, b) for a, b in zip(s_last, g_last)):.3g}; image step 0 vs torch"
          f" {maxdiff(i_first[0], pt_full):.3g}, per-step " + " ".join(f"{maxdiff(a, b):.2g}"
                                                                      for a, b in zip(i_last, pt_logits))
          + f", tokens {i_toks}")


GENERATORS = {
    "musicgen-tiny": gen_musicgen_tiny,
    "qwen2vl-tiny": gen_qwen2vl_tiny,
    "qwen2vl-collapsed-rows": gen_qwen2vl_collapsed_rows,
    "qwen2vl-nested-config": gen_qwen2vl_nested_config,
}


if __name__ == "__main__":
    args = fc.parse_args(GENERATORS)
    OUT = args.out or OUT
    torch_runs = None

    def verify(name):
        global torch_runs
        if name == "musicgen-tiny":
            verify_musicgen_tiny(OUT / name)
        elif name == "qwen2vl-tiny":
            torch_runs = verify_qwen2vl_tiny(OUT / name)
        elif name == "qwen2vl-collapsed-rows":
            verify_qwen2vl_collapsed_rows(OUT / name, torch_runs)
        else:  # qwen2vl-nested-config: qwen2vl-tiny's graphs, only config.json differs
            same = all((OUT / name / f).read_bytes() == (OUT / "qwen2vl-tiny" / f).read_bytes()
                       for f in ("generation_config.json", "onnx/embed_tokens.onnx", "onnx/vision_encoder.onnx",
                                 "onnx/decoder_model_merged.onnx"))
            print(f"  {name}: graphs identical to qwen2vl-tiny's: {same}")

    fc.run_all(args, OUT, GENERATORS, verify)
