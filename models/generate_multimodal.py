"""Generate the multimodal fixtures in models/ (a transformers.js image-text
layout and a speech model on raw samples) and measure them in onnxruntime.

Both are fresh exports of tiny models with seeded random weights (nothing is
downloaded). Versions: the /work/genvenv venv, i.e. torch 2.9.1,
transformers 4.57.6, optimum 2.1.0 + optimum-onnx 0.1.0, onnx 1.23.2,
onnxruntime 1.31.1 (accelerate and pillow are not installed; see
MULTIMODAL-NOTES.md for what that changes):

    HF_HUB_OFFLINE=1 /work/genvenv/bin/python models/generate_multimodal.py [--out DIR] [name ...]
    /work/genvenv/bin/python models/generate_multimodal.py --verify-only [name ...]   # only the measurements

Generating ends with the measurements (see MULTIMODAL-NOTES.md). Everything
runs on one thread (torch.set_num_threads(1), ORT intra/inter-op 1; the
optimum-cli child gets OMP_NUM_THREADS=1).

  tjs-vlm/         transformers.js image-text-to-text layout of a tiny
                   LlavaForConditionalGeneration (CLIP vision tower, Llama text
                   model): config.json (text_config + vision_config) and
                   generation_config.json at the root, and in onnx/
                     vision_encoder.onnx   pixel_values -> image_features
                                           (vision tower, layer -2, CLS dropped,
                                           multi_modal_projector: already in the
                                           text hidden size, as transformers.js'
                                           Llava merge expects),
                     embed_tokens.onnx     input_ids -> inputs_embeds,
                     decoder_model_merged.onnx  the language model + lm_head as
                                           ONE graph (no If, no use_cache_branch):
                                           inputs_embeds, attention_mask,
                                           position_ids, a scalar int64
                                           num_logits_to_keep (0 = every position,
                                           k = the last k) and an always-present
                                           past (0-length at step 0).
                   Exported with optimum-onnx's custom-export path
                   (onnx_export_from_model with custom_onnx_configs and
                   fn_get_submodels, optimum's dynamic-axis names, its TorchScript
                   exporter and its own output validation), then the .onnx files
                   were moved into onnx/ and the configs left at the root, which is
                   step 3 of transformers.js' scripts/convert.py. Correct.
  moonshine-tiny/  `optimum-cli export onnx --task automatic-speech-recognition-with-past`
                   of a tiny MoonshineForConditionalGeneration saved locally with
                   a Wav2Vec2FeatureExtractor (raw 16 kHz samples): encoder_model,
                   decoder_model, decoder_with_past_model, decoder_model_merged,
                   config.json, generation_config.json, preprocessor_config.json,
                   all written by the CLI itself. Correct. The encoder takes raw
                   samples; its output length is the dim expression
                   ( ( ( encoder_sequence_length - 127 ) // 64 + 1 - 7 ) // 3 + 1 - 3 ) // 2 + 1
                   (16000 samples -> 40 frames, >= 895 samples for one frame), and in
                   the decoders `encoder_sequence_length` is samples on
                   encoder_attention_mask but frames on encoder_hidden_states and
                   the encoder pasts.

Weights use initializer_range 0.2 (written in config.json): with the 0.02
default the random models repeat one token (Moonshine, with its tied
embeddings, repeats the start token forever), which would hide cache bugs.
The script re-executes itself with PYTHONHASHSEED=0 like generate.py.
"""
import shutil
import tempfile
import warnings
from pathlib import Path

import fixture_common as fc
from fixture_common import errmsg, maxdiff, session, signature

fc.start(__name__)

import numpy as np  # noqa: E402

warnings.filterwarnings("ignore")
HERE = Path(__file__).resolve().parent
OUT = HERE  # where the folders are written (--out DIR)
SEED = 0
INIT_RANGE = 0.2


_torch = fc.one_thread_torch
_quiet_transformers = fc.quiet_transformers


# ================================================================ tjs-vlm

VLM_IMAGE_TOKEN = 999
VLM_IMAGE_SIZE, VLM_PATCH = 30, 6  # 5 x 5 = 25 patches (+ CLS, dropped)
VLM_IMAGE_SEQ = (VLM_IMAGE_SIZE // VLM_PATCH) ** 2


def llava_model():
    """The tiny LlavaForConditionalGeneration, seeded."""
    torch = _torch()
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    torch.manual_seed(SEED)
    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                              image_size=VLM_IMAGE_SIZE, patch_size=VLM_PATCH, projection_dim=32,
                              initializer_range=INIT_RANGE)
    text = LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                       initializer_range=INIT_RANGE)
    cfg = LlavaConfig(vision_config=vision, text_config=text, image_token_index=VLM_IMAGE_TOKEN,
                      image_seq_length=VLM_IMAGE_SEQ)  # vision_feature_layer -2, strategy "default"
    return LlavaForConditionalGeneration(cfg).eval()


def _vlm_export_parts():
    """Wrappers (the submodels handed to optimum) and their OnnxConfigs."""
    torch = _torch()
    from optimum.exporters.onnx.base import OnnxConfig
    from optimum.exporters.onnx.config import VisionOnnxConfig
    from optimum.exporters.onnx.model_configs import LlamaOnnxConfig
    from optimum.utils import (
        DEFAULT_DUMMY_SHAPES,
        DummyInputGenerator,
        DummyTextInputGenerator,
        NormalizedTextConfig,
        NormalizedVisionConfig,
    )

    class VisionEncoder(torch.nn.Module):
        """pixel_values -> image_features: LlavaModel.get_image_features without
        its final list(...) (which would export only the first image)."""

        def __init__(self, model):
            super().__init__()
            self.llava = model.model
            self.config = model.config.vision_config

        def forward(self, pixel_values):
            cfg = self.llava.config
            out = self.llava.vision_tower(pixel_values, output_hidden_states=True)
            feats = out.hidden_states[cfg.vision_feature_layer]
            if cfg.vision_feature_select_strategy == "default":
                feats = feats[:, 1:]
            return self.llava.multi_modal_projector(feats)

    class EmbedTokens(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.embed_tokens = model.get_input_embeddings()
            self.config = model.config.text_config

        def forward(self, input_ids):
            return self.embed_tokens(input_ids)

    class LanguageModel(torch.nn.Module):
        """The language model and lm_head, fed inputs_embeds. num_logits_to_keep is
        a runtime scalar: 0 keeps every position, k > 0 the last k (what
        transformers' logits_to_keep does with a Python int)."""

        def __init__(self, model):
            super().__init__()
            self.language_model = model.model.language_model
            self.lm_head = model.lm_head
            self.config = model.config.text_config

        def forward(self, inputs_embeds, attention_mask, position_ids, num_logits_to_keep, past_key_values=None):
            out = self.language_model(inputs_embeds=inputs_embeds, attention_mask=attention_mask,
                                      position_ids=position_ids, past_key_values=past_key_values, use_cache=True)
            hidden = out.last_hidden_state
            seq = hidden.shape[1]
            start = torch.where(num_logits_to_keep > 0, seq - num_logits_to_keep, torch.zeros_like(num_logits_to_keep))
            keep = torch.arange(start, seq, device=hidden.device)
            logits = self.lm_head(hidden.index_select(1, keep))
            return {"logits": logits, "past_key_values": out.past_key_values}

    class DummyEmbedsGenerator(DummyInputGenerator):
        SUPPORTED_INPUT_NAMES = ("inputs_embeds", "num_logits_to_keep")

        def __init__(self, task, normalized_config, batch_size=DEFAULT_DUMMY_SHAPES["batch_size"],
                     sequence_length=DEFAULT_DUMMY_SHAPES["sequence_length"], **kwargs):
            self.batch_size, self.sequence_length = batch_size, sequence_length
            self.hidden_size = normalized_config.hidden_size

        def generate(self, input_name, framework="pt", int_dtype="int64", float_dtype="fp32"):
            if input_name == "inputs_embeds":
                shape = [self.batch_size, self.sequence_length, self.hidden_size]
                return self.random_float_tensor(shape, framework=framework, dtype=float_dtype)
            return torch.tensor(1, dtype=torch.int64)  # a 0-d tensor: the ONNX input gets dims []

    class VisionEncoderOnnxConfig(VisionOnnxConfig):
        NORMALIZED_CONFIG_CLASS = NormalizedVisionConfig

        @property
        def inputs(self):
            return {"pixel_values": {0: "batch_size", 1: "num_channels", 2: "height", 3: "width"}}

        @property
        def outputs(self):
            return {"image_features": {0: "batch_size"}}

    class EmbedTokensOnnxConfig(OnnxConfig):
        NORMALIZED_CONFIG_CLASS = NormalizedTextConfig
        DUMMY_INPUT_GENERATOR_CLASSES = (DummyTextInputGenerator,)

        @property
        def inputs(self):
            return {"input_ids": {0: "batch_size", 1: "sequence_length"}}

        @property
        def outputs(self):
            return {"inputs_embeds": {0: "batch_size", 1: "sequence_length"}}

    class DecoderOnnxConfig(LlamaOnnxConfig):
        """optimum's Llama decoder config (with past in the inputs, one graph), with
        inputs_embeds in place of input_ids and num_logits_to_keep added."""

        PAD_ATTENTION_MASK_TO_PAST = False  # done below: optimum's version reads input_ids
        DUMMY_INPUT_GENERATOR_CLASSES = (DummyEmbedsGenerator,) + LlamaOnnxConfig.DUMMY_INPUT_GENERATOR_CLASSES

        @property
        def inputs(self):
            base = super().inputs
            inputs = {"inputs_embeds": {0: "batch_size", 1: "sequence_length"}}
            inputs.update({k: v for k, v in base.items() if k != "input_ids"})
            inputs["num_logits_to_keep"] = {}
            return inputs

        @property
        def outputs(self):
            outputs = super().outputs
            outputs["logits"] = {0: "batch_size", 1: "num_logits"}
            return outputs

        def generate_dummy_inputs(self, framework="pt", **kwargs):
            dummy = super().generate_dummy_inputs(framework, **kwargs)
            seq, past = dummy["inputs_embeds"].shape[1], dummy["past_key_values"][0][0].shape[-2]
            dummy["attention_mask"] = DummyInputGenerator.pad_input_on_dim(
                dummy["attention_mask"], desired_length=past + seq, dim=1)
            return dummy

    def configs(cfg):
        return {
            "vision_encoder": VisionEncoderOnnxConfig(cfg.vision_config, task="feature-extraction"),
            "embed_tokens": EmbedTokensOnnxConfig(cfg.text_config, task="feature-extraction"),
            "decoder_model_merged": DecoderOnnxConfig(cfg.text_config, task="text-generation", use_past=True,
                                                      use_past_in_inputs=True),
        }

    def submodels(model):
        return {"vision_encoder": VisionEncoder(model), "embed_tokens": EmbedTokens(model),
                "decoder_model_merged": LanguageModel(model)}

    return configs, submodels


def gen_tjs_vlm():
    """optimum-onnx custom export of the three submodels, then transformers.js'
    layout: configs at the root, the .onnx files moved into onnx/."""
    _quiet_transformers()
    from optimum.exporters.onnx import onnx_export_from_model
    from transformers import LlavaForConditionalGeneration

    out = OUT / "tjs-vlm"
    configs, submodels = _vlm_export_parts()
    with tempfile.TemporaryDirectory() as tmp:
        src, exp = Path(tmp, "llava"), Path(tmp, "export")
        llava_model().save_pretrained(src)
        model = LlavaForConditionalGeneration.from_pretrained(src).eval()
        onnx_export_from_model(model, output=exp, task="image-text-to-text",
                               custom_onnx_configs=configs(model.config), fn_get_submodels=submodels)
        shutil.rmtree(out, ignore_errors=True)
        (out / "onnx").mkdir(parents=True)
        for f in sorted(exp.iterdir()):
            dst = out / "onnx" / f.name if f.name.endswith((".onnx", ".onnx_data")) else out / f.name
            shutil.move(str(f), dst)


# ================================================================ moonshine-tiny

def moonshine_model():
    torch = _torch()
    from transformers import MoonshineConfig, MoonshineForConditionalGeneration

    torch.manual_seed(SEED)
    cfg = MoonshineConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, encoder_num_hidden_layers=2,
                          decoder_num_hidden_layers=2, encoder_num_attention_heads=4, decoder_num_attention_heads=4,
                          max_position_embeddings=256, initializer_range=INIT_RANGE)
    return MoonshineForConditionalGeneration(cfg).eval()


def gen_moonshine_tiny():
    """The model and its feature extractor saved locally, then optimum-cli."""
    _quiet_transformers()
    from transformers import Wav2Vec2FeatureExtractor

    out = OUT / "moonshine-tiny"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "moonshine")
        moonshine_model().save_pretrained(src)
        # Moonshine's processor: a Wav2Vec2FeatureExtractor on raw 16 kHz samples, no normalisation.
        Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=False,
                                 return_attention_mask=True).save_pretrained(src)
        shutil.rmtree(out, ignore_errors=True)
        text = fc.optimum_cli(src, out, "automatic-speech-recognition-with-past")
        tail = [l for l in text.splitlines() if "Validating" in l or "succeeded" in l
                or "accelerate" in l or "Error" in l]
        for line in tail:
            print("  | " + line.strip())


GENERATORS = {
    "tjs-vlm": gen_tjs_vlm,
    "moonshine-tiny": gen_moonshine_tiny,
}


# ================================================================ measurements

def margin(logits):
    top = np.sort(np.asarray(logits, np.float64).ravel())[-2:]
    return float(top[1] - top[0])


def f32(t):
    return t.detach().numpy().astype(np.float32)


# ---------------------------------------------------------------- tjs-vlm

VLM_TEXT_PROMPT = [1, 5, 17, 42, 100, 250]
VLM_IMAGE_PROMPT = [1] + [VLM_IMAGE_TOKEN] * VLM_IMAGE_SEQ + [5, 17, 42]
VLM_STEPS = 8


class TjsVlm:
    """Drives the three sessions the way transformers.js' image_text_to_text_forward
    and decoder_forward do (batch 1, no padding)."""

    def __init__(self, folder):
        import json

        self.cfg = json.loads((folder / "config.json").read_text())
        tc = self.cfg["text_config"]
        self.layers, self.kv_heads = tc["num_hidden_layers"], tc["num_key_value_heads"]
        self.head_dim = tc.get("head_dim") or tc["hidden_size"] // tc["num_attention_heads"]
        self.image_token = self.cfg["image_token_index"]
        self.vision = session(folder / "onnx" / "vision_encoder.onnx", severity=4)
        self.embed = session(folder / "onnx" / "embed_tokens.onnx")
        self.dec = session(folder / "onnx" / "decoder_model_merged.onnx")
        self.dec_out = [o.name for o in self.dec.get_outputs()]

    def embeds(self, ids):
        return self.embed.run(["inputs_embeds"], {"input_ids": np.asarray(ids, np.int64)})[0]

    def image_features(self, pixel_values):
        return self.vision.run(["image_features"], {"pixel_values": pixel_values})[0]

    def merge(self, ids, embeds, feats):
        """default_merge_input_ids_with_image_features: rows where input_ids ==
        image_token_index get image_features.view(-1, hidden), in order."""
        embeds = embeds.copy()
        rows = np.argwhere(np.asarray(ids) == self.image_token)
        flat = feats.reshape(-1, feats.shape[-1])
        assert len(rows) == len(flat), (len(rows), len(flat))
        for (b, s), f in zip(rows, flat):
            embeds[b, s] = f
        return embeds

    def empty_past(self):
        return {f"past_key_values.{i}.{kv}": np.zeros((1, self.kv_heads, 0, self.head_dim), np.float32)
                for i in range(self.layers) for kv in ("key", "value")}

    def decode(self, embeds, mask, past, keep):
        """position_ids = cumsum(mask) - 1, sliced to the new tokens when there is a past."""
        positions = np.cumsum(mask, axis=1) - 1
        positions = positions[:, -embeds.shape[1]:]
        feeds = {"inputs_embeds": embeds, "attention_mask": mask.astype(np.int64),
                 "position_ids": positions.astype(np.int64), "num_logits_to_keep": np.array(keep, np.int64)}
        feeds.update(past if past is not None else self.empty_past())
        out = dict(zip(self.dec_out, self.dec.run(None, feeds)))
        present = {f"past_key_values.{i}.{kv}": out[f"present.{i}.{kv}"]
                   for i in range(self.layers) for kv in ("key", "value")}
        return out["logits"], present

    def generate(self, prompt, steps, pixel_values=None, keep=1):
        """Greedy: step 0 = the prompt (merged with the image if any), then one
        token a step (embed_tokens only). Returns tokens, per-step last logits and
        the first step's full logits."""
        ids = np.array([prompt], np.int64)
        embeds = self.embeds(ids)
        if pixel_values is not None:
            embeds = self.merge(ids, embeds, self.image_features(pixel_values))
        mask = np.ones((1, ids.shape[1]), np.int64)
        logits, past = self.decode(embeds, mask, None, keep)
        first = logits
        tokens, last = [], []
        for step in range(steps):
            last.append(logits[0, -1])
            tok = int(logits[0, -1].argmax())
            tokens.append(tok)
            if step == steps - 1:
                break
            mask = np.concatenate([np.ones((1, past["past_key_values.0.key"].shape[2]), np.int64),
                                   mask[:, -1:]], axis=1)
            logits, past = self.decode(self.embeds([[tok]]), mask, past, keep)
        return tokens, last, first

    def uncached(self, prompt, generated, pixel_values=None):
        """One run over prompt + generated[:-1] from an empty past, keep 0: logits
        of every position; row -1-k (k from the end) is the logits of step n-1-k."""
        ids = np.array([prompt + generated[:-1]], np.int64)
        embeds = self.embeds(ids)
        if pixel_values is not None:
            embeds = self.merge(ids, embeds, self.image_features(pixel_values))
        logits, _ = self.decode(embeds, np.ones((1, ids.shape[1]), np.int64), None, 0)
        return logits[0, len(prompt) - 1:]


def verify_tjs_vlm(folder):
    torch = _torch()
    _quiet_transformers()
    from transformers import LlavaForConditionalGeneration

    print("  signatures:")
    for name in ("vision_encoder.onnx", "embed_tokens.onnx", "decoder_model_merged.onnx"):
        signature(folder / "onnx" / name)

    ref = llava_model()
    with tempfile.TemporaryDirectory() as tmp:  # the same weights, reloaded as the exporter saw them
        ref.save_pretrained(tmp)
        ref = LlavaForConditionalGeneration.from_pretrained(tmp).eval()
    vlm = TjsVlm(folder)

    # ---- text only: embed_tokens every step, num_logits_to_keep 1 (generate)
    ids = torch.tensor([VLM_TEXT_PROMPT])
    with torch.no_grad():
        g = ref.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=VLM_STEPS, do_sample=False,
                         output_logits=True, return_dict_in_generate=True)
        full = ref(input_ids=ids).logits[0].numpy()
        emb_ref = ref.get_input_embeddings()(ids).numpy()
    pt_tokens = g.sequences[0, len(VLM_TEXT_PROMPT):].tolist()
    pt_logits = [l[0].numpy() for l in g.logits]
    print(f"  text-only prompt {VLM_TEXT_PROMPT}, {VLM_STEPS} greedy steps")
    print(f"  embed_tokens vs torch embedding: max|d| {maxdiff(vlm.embeds(ids.numpy()), emb_ref):.3g}")
    toks, last, first = vlm.generate(VLM_TEXT_PROMPT, VLM_STEPS, keep=1)
    print(f"  num_logits_to_keep 1: logits of step 0 have shape {list(first.shape)}")
    print("  per-step max|logits - torch generate|: " + " ".join(f"{maxdiff(a, b):.2g}" for a, b in zip(last, pt_logits)))
    print(f"  greedy tokens ORT   {toks}\n  greedy tokens torch {pt_tokens}  -> {'same' if toks == pt_tokens else 'DIFFERENT'}")
    print(f"  smallest top-1/top-2 gap in torch's logits: {min(margin(l) for l in pt_logits):.3g};"
          f" max|logit| {max(float(np.abs(l).max()) for l in pt_logits):.3g}")
    toks0, last0, first0 = vlm.generate(VLM_TEXT_PROMPT, VLM_STEPS, keep=0)
    print(f"  num_logits_to_keep 0: logits of step 0 have shape {list(first0.shape)}; vs torch forward over the prompt:"
          f" max|d| {maxdiff(first0[0], full):.3g}; cached steps after it have shape [1, 1, 1000];"
          f" tokens {'same' if toks0 == pt_tokens else 'DIFFERENT'}, max|d| vs keep 1 per step"
          f" {max(maxdiff(a, b) for a, b in zip(last0, last)):.3g}")
    unc = vlm.uncached(VLM_TEXT_PROMPT, toks)
    print(f"  cached vs uncached (one keep-0 run over prompt + {VLM_STEPS - 1} tokens, row by row): max|d| "
          f"{max(maxdiff(a, b) for a, b in zip(last, unc)):.3g}")
    three, _ = vlm.decode(vlm.embeds([VLM_TEXT_PROMPT]), np.ones((1, len(VLM_TEXT_PROMPT)), np.int64), None, 3)
    print(f"  num_logits_to_keep 3: shape {list(three.shape)}, vs torch's last 3 rows max|d| {maxdiff(three[0], full[-3:]):.3g}")

    # ---- image: vision_encoder at step 0, features merged at the image-token rows
    pv = np.random.RandomState(1).randn(1, 3, VLM_IMAGE_SIZE, VLM_IMAGE_SIZE).astype(np.float32)
    ids = torch.tensor([VLM_IMAGE_PROMPT])
    with torch.no_grad():
        feats_ref = ref.model.get_image_features(pixel_values=torch.from_numpy(pv))
        feats_ref = torch.stack(list(feats_ref)).numpy()
        full = ref(input_ids=ids, pixel_values=torch.from_numpy(pv)).logits[0].numpy()
        g = ref.generate(ids, pixel_values=torch.from_numpy(pv), attention_mask=torch.ones_like(ids),
                         max_new_tokens=VLM_STEPS, do_sample=False, output_logits=True, return_dict_in_generate=True)
    pt_tokens = g.sequences[0, len(VLM_IMAGE_PROMPT):].tolist()
    pt_logits = [l[0].numpy() for l in g.logits]
    feats = vlm.image_features(pv)
    print(f"  image prompt: bos, {VLM_IMAGE_SEQ} x image token {VLM_IMAGE_TOKEN}, 5 17 42 ({len(VLM_IMAGE_PROMPT)} tokens);"
          f" pixel_values randn(seed 1) [1, 3, {VLM_IMAGE_SIZE}, {VLM_IMAGE_SIZE}]")
    print(f"  image_features shape {list(feats.shape)}, vs torch get_image_features: max|d| {maxdiff(feats, feats_ref):.3g}")
    toks, last, first = vlm.generate(VLM_IMAGE_PROMPT, VLM_STEPS, pixel_values=pv, keep=0)
    print(f"  step 0 (keep 0) vs torch LlavaForConditionalGeneration(input_ids, pixel_values), all {full.shape[0]} rows:"
          f" max|d| {maxdiff(first[0], full):.3g}")
    toks1, last1, _ = vlm.generate(VLM_IMAGE_PROMPT, VLM_STEPS, pixel_values=pv, keep=1)
    print("  keep 1, per-step max|logits - torch generate(pixel_values)|: "
          + " ".join(f"{maxdiff(a, b):.2g}" for a, b in zip(last1, pt_logits)))
    print(f"  greedy tokens ORT   {toks1}\n  greedy tokens torch {pt_tokens}  -> {'same' if toks1 == pt_tokens else 'DIFFERENT'}"
          f" (keep 0 run: {'same' if toks == pt_tokens else 'DIFFERENT'})")
    print(f"  smallest top-1/top-2 gap in torch's logits: {min(margin(l) for l in pt_logits):.3g};"
          f" max|logit| {max(float(np.abs(l).max()) for l in pt_logits):.3g}")
    unc = vlm.uncached(VLM_IMAGE_PROMPT, toks1, pixel_values=pv)
    print(f"  cached vs uncached (one keep-0 run with the image merged): max|d| "
          f"{max(maxdiff(a, b) for a, b in zip(last1, unc)):.3g}")
    for size in (24, 36):
        try:
            got = list(vlm.image_features(np.zeros((1, 3, size, size), np.float32)).shape)
        except Exception as e:  # noqa: BLE001 - the message is the measurement
            got = errmsg(e)
        print(f"  vision_encoder on a {size}x{size} image (config image_size {VLM_IMAGE_SIZE}): {got}")
    ntoks, _, _ = vlm.generate(VLM_IMAGE_PROMPT, VLM_STEPS, keep=1)
    print(f"  the same prompt without the merge (image-token embeddings left in): tokens {ntoks}")


# ---------------------------------------------------------------- moonshine-tiny

MOON_SAMPLES = 16000
MOON_STEPS = 8


def moon_audio(n=MOON_SAMPLES):
    """1 s of seeded noise at 16 kHz (float32, std 0.1)."""
    return (np.random.RandomState(SEED).randn(1, n) * 0.1).astype(np.float32)


def frames(n):
    """optimum's dim expression for the encoder output, evaluated in Python."""
    return (((n - 127) // 64 + 1 - 7) // 3 + 1 - 3) // 2 + 1


class Moonshine:
    def __init__(self, folder):
        import json

        cfg = json.loads((folder / "config.json").read_text())
        self.layers = cfg["decoder_num_hidden_layers"]
        self.heads = cfg["decoder_num_key_value_heads"]
        self.head_dim = cfg["hidden_size"] // cfg["decoder_num_attention_heads"]
        self.start = cfg["decoder_start_token_id"]
        self.enc = session(folder / "encoder_model.onnx", severity=4)
        self.merged = session(folder / "decoder_model_merged.onnx")
        self.first = session(folder / "decoder_model.onnx")
        self.with_past = session(folder / "decoder_with_past_model.onnx")

    def encode(self, audio):
        mask = np.ones(audio.shape, np.int64)
        return self.enc.run(["last_hidden_state"], {"input_values": audio, "attention_mask": mask})[0], mask

    @staticmethod
    def run(sess, feeds):
        names = [o.name for o in sess.get_outputs()]
        return dict(zip(names, sess.run(None, feeds)))

    def pasts(self, out, kind):
        return {f"past_key_values.{i}.{kind}.{kv}": out[f"present.{i}.{kind}.{kv}"]
                for i in range(self.layers) for kv in ("key", "value")}

    def greedy_merged(self, hidden, enc_mask, steps=MOON_STEPS):
        """optimum's ORTDecoderForSeq2Seq with a merged file: step 0 use_cache_branch
        False and every past 0-length; later steps use_cache_branch True, the
        decoder pasts from the last presents, the encoder pasts from step 0."""
        empty = np.zeros((1, self.heads, 0, self.head_dim), np.float32)
        past = {f"past_key_values.{i}.{k}.{kv}": empty for i in range(self.layers)
                for k in ("decoder", "encoder") for kv in ("key", "value")}
        tok, toks, logits, cross = self.start, [], [], None
        for step in range(steps):
            feeds = {"input_ids": np.array([[tok]], np.int64), "encoder_attention_mask": enc_mask,
                     "encoder_hidden_states": hidden, "use_cache_branch": np.array([step > 0])}
            feeds.update(past)
            out = self.run(self.merged, feeds)
            if step == 0:
                cross = self.pasts(out, "encoder")
            elif step == 1:  # what the cache branch returns in place of the cross presents
                self.cache_branch_cross = {k: list(v.shape) for k, v in out.items() if ".encoder." in k}
            past = {**self.pasts(out, "decoder"), **cross}
            logits.append(out["logits"][0, -1])
            tok = int(out["logits"][0, -1].argmax())
            toks.append(tok)
        return toks, logits

    def greedy_split(self, hidden, enc_mask, steps=MOON_STEPS):
        """decoder_model at step 0 (no past inputs), decoder_with_past after."""
        tok, toks, logits, past = self.start, [], [], None
        for step in range(steps):
            feeds = {"input_ids": np.array([[tok]], np.int64), "encoder_attention_mask": enc_mask,
                     "encoder_hidden_states": hidden}
            if step == 0:
                out = self.run(self.first, feeds)
                cross = self.pasts(out, "encoder")
            else:
                out = self.run(self.with_past, {**feeds, **past})
            past = {**self.pasts(out, "decoder"), **cross}
            logits.append(out["logits"][0, -1])
            tok = int(out["logits"][0, -1].argmax())
            toks.append(tok)
        return toks, logits

    def uncached(self, hidden, enc_mask, toks):
        """decoder_model over [start] + toks[:-1] in one run: every row's logits."""
        ids = np.array([[self.start] + toks[:-1]], np.int64)
        out = self.run(self.first, {"input_ids": ids, "encoder_attention_mask": enc_mask,
                                    "encoder_hidden_states": hidden})
        return out["logits"][0]


def verify_moonshine_tiny(folder):
    torch = _torch()
    _quiet_transformers()

    print("  signatures:")
    for name in ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx",
                 "decoder_model_merged.onnx"):
        signature(folder / name)
    ms = Moonshine(folder)

    # encoder output length vs the declared expression, and the minimum input
    for n in (16000, 1000, 895, 894):
        try:
            got = ms.encode(moon_audio(n))[0].shape[1]
        except Exception as e:  # noqa: BLE001 - the message is the measurement
            got = errmsg(e)
        print(f"  encoder on {n} samples -> {got}{' frames' if isinstance(got, int) else ''}"
              f" (dim expression gives {frames(n)})")

    audio = moon_audio()
    ref = moonshine_model()  # the same seeded weights the export was made from
    x = torch.from_numpy(audio)
    with torch.no_grad():
        enc_ref = ref.get_encoder()(x, attention_mask=torch.ones_like(x, dtype=torch.long)).last_hidden_state.numpy()
        g = ref.generate(x, attention_mask=torch.ones_like(x, dtype=torch.long), max_new_tokens=MOON_STEPS,
                         do_sample=False, output_logits=True, return_dict_in_generate=True)
    pt_tokens = g.sequences[0, 1:].tolist()
    pt_logits = [l[0].numpy() for l in g.logits]
    hidden, mask = ms.encode(audio)
    print(f"  1 s of seeded noise ({MOON_SAMPLES} samples): encoder last_hidden_state {list(hidden.shape)},"
          f" vs torch encoder max|d| {maxdiff(hidden, enc_ref):.3g}")
    print(f"  torch generate (start token {ms.start}, {MOON_STEPS} new tokens): {pt_tokens};"
          f" smallest top-1/top-2 gap {min(margin(l) for l in pt_logits):.3g},"
          f" max|logit| {max(float(np.abs(l).max()) for l in pt_logits):.3g}")
    for label, fn in (("merged", ms.greedy_merged), ("split pair", ms.greedy_split)):
        toks, logits = fn(hidden, mask)
        print(f"  {label}: tokens {toks} -> {'same as torch' if toks == pt_tokens else 'DIFFERENT from torch'}")
        print("    per-step max|logits - torch generate|: " + " ".join(f"{maxdiff(a, b):.2g}" for a, b in zip(logits, pt_logits)))
        unc = ms.uncached(hidden, mask, toks)
        print(f"    cached vs uncached (decoder_model over the whole prefix): max|d| "
              f"{max(maxdiff(a, b) for a, b in zip(logits, unc)):.3g}")
        if label == "merged":
            merged_logits = logits
            shapes = sorted({str(v) for v in ms.cache_branch_cross.values()})
            print(f"    at step 1 (use_cache_branch True) present.*.encoder.* come out with shape {', '.join(shapes)}"
                  f" (placeholders: the encoder pasts must be kept from step 0)")
        else:
            print(f"    split pair vs merged: max|d| {max(maxdiff(a, b) for a, b in zip(logits, merged_logits)):.3g}")
    fmask = np.ones((1, hidden.shape[1]), np.int64)
    toks, logits = ms.greedy_merged(hidden, fmask)
    print(f"  merged with encoder_attention_mask of frame length [1, {hidden.shape[1]}] (all ones): tokens "
          f"{'same' if toks == pt_tokens else 'DIFFERENT'}, max|d| vs the sample-length mask "
          f"{max(maxdiff(a, b) for a, b in zip(logits, merged_logits)):.3g}")

    # optimum's own runtime classes, as a cross-check of the protocol above
    import onnxruntime as ort
    from optimum.onnxruntime import ORTModelForSpeechSeq2Seq

    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.log_severity_level = 3
    for merged in (True, False):
        m = ORTModelForSpeechSeq2Seq.from_pretrained(folder, use_merged=merged, session_options=so)
        seq = m.generate(x, attention_mask=torch.ones_like(x, dtype=torch.long), max_new_tokens=MOON_STEPS,
                         do_sample=False)[0, 1:].tolist()
        print(f"  optimum ORTModelForSpeechSeq2Seq.generate (use_merged={merged}): {seq}"
              f" -> {'same' if seq == pt_tokens else 'DIFFERENT'}")


VERIFIERS = {
    "tjs-vlm": verify_tjs_vlm,
    "moonshine-tiny": verify_moonshine_tiny,
}


if __name__ == "__main__":
    args = fc.parse_args(GENERATORS)
    OUT = args.out or OUT
    fc.run_all(args, OUT, GENERATORS, VERIFIERS)
