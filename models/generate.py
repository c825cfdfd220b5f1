"""Generate the tiny, random-weight fixture models in models/.

Every model is built from a config with a fixed seed (no hub downloads) and
exported with the real exporter. Pinned versions (see requirements-gen.txt):
torch 2.9.1, transformers 4.57.6, optimum 2.1.0, optimum-onnx 0.1.0, onnx 1.23.2.

    HF_HUB_OFFLINE=1 python models/generate.py [--out DIR] [name ...]
    python models/verify_fixtures.py        # run every folder once in onnxruntime

(--out DIR writes the folders under DIR instead of models/.)

Each fixture isolates one situation from ../shared/context/field-notes.md:
  marian-tiny/          optimum text2text-generation-with-past export of a Marian
                        model with opus-mt-en-zh's structure (6+6 layers, 8 heads)
                        and tiny widths: encoder, decoder, decoder_with_past and
                        the merged decoder (28 inputs, 25 outputs).
  marian-15-inputs/     the broken reverse-pair export of incident 1: a custom
                        torch.onnx.export wrapper taking only the self-attention
                        past; no encoder past, no use_cache_branch (15 inputs,
                        25 outputs), IR 7, opset 12.
  gpt2-tiny/            optimum text-generation-with-past export of a GPT-2-style
                        decoder-only model.
  marian-baked-past/    incident 2's failure, made real: the with-past decoder
                        is traced by a wrapper that turns the past length into a
                        Python int (1 at trace time), then merged with optimum's
                        merge_decoders. Its signature is exactly right; step 1
                        (past 1) works and step 2 (past 2) fails in a Reshape
                        inside the If's cache branch.
  gpt2-position-bug/    a GPT-2 export whose wrapper restarts positions at 0 on
                        every call (no position_ids input): signature right,
                        every step runs, only the parity check catches it.
  llama-tiny/, qwen2-tiny/   decoder-only exports with grouped-query attention
                        (4 heads, 2 KV heads: the past's head axis is 2).
  bart-tiny/, t5-tiny/, whisper-tiny/   the other seq2seq families, optimum's
                        complete four-file export (encoder_model, decoder_model,
                        decoder_with_past_model, decoder_model_merged; the merged
                        file was committed first, alone). whisper's encoder
                        takes input_features [batch, num_mel_bins=80, frames]
                        and only frames = 2 * max_source_positions (= 3000, as in
                        real Whisper; max_source_positions is left at 1500 so the
                        committed merged decoder's weights stay the same): optimum
                        exports input_features as [batch_size, 80, 3000] with the
                        frame axis static, and ORT rejects any other count
                        ("Got invalid dimensions for input: input_features ...").
                        whisper's decoders have no encoder_attention_mask input.
  marian-pair-baked-past/   incident 2 in optimum's split pair layout (no merged
                        file): encoder_model.onnx and decoder_model.onnx are the
                        normal optimum exports of marian_model() (the same bytes
                        as marian-tiny's), decoder_with_past_model.onnx is the
                        BakedPastDecoder trace (past length 1 at trace time) with
                        exactly optimum's with-past signature (I/O types copied
                        from optimum's own with-past export). Driven as
                        transformers.js does: step 0 decoder_model, step 1 with
                        past 1 works, step 2 with past 2 fails in a Reshape.
  marian-config-mismatch/   a correct Marian export (encoder_model.onnx +
                        decoder_model_merged.onnx) with decoder_layers=3 whose
                        config.json is then edited to claim decoder_layers: 6
                        (everything else is true): config vs graph disagreement.
  bart-tjs/             transformers.js layout of a BART of another size than
                        bart-tiny (d_model 48, 3+3 layers, 6 heads, head_dim 8,
                        vocab 1200): config.json, generation_config.json,
                        tokenizer_config.json ({}) and README.md at the root, the
                        four ONNX files in onnx/.
  mistral-tiny/         decoder-only Mistral (sliding_window 16 in the config,
                        4 heads, 2 KV heads).
  gemma-tiny/           decoder-only Gemma whose head_dim (16) is set explicitly
                        and differs from hidden_size / num_attention_heads (32/4 =
                        8); 1 KV head, so the past is [batch, 1, seq, 16].
                        optimum's Gemma export has no position_ids input.
  marian-tiny-source/, llama-tiny-source/   the transformers checkpoints
                        marian-tiny and llama-tiny were exported from (the same
                        seeded model objects: marian_model(), llama_model()),
                        written by save_pretrained(safe_serialization=True):
                        config.json, model.safetensors, generation_config.json
                        (marian's with num_beams 4, as marian-tiny's). The
                        reference for `check DIR --source DIR`. Writing them does
                        not touch marian-tiny or llama-tiny: run them alone
                        (`generate.py marian-tiny-source llama-tiny-source`).

Every folder has config.json and generation_config.json, written by
transformers (config.save_pretrained and
GenerationConfig.from_model_config(cfg).save_pretrained) from the very config
object the folder's model was built from (gpt2-position-bug: gpt2-tiny's),
with `architectures` set as PreTrainedModel.save_pretrained sets it.

merge_decoders picks deduplicated initializer names by popping from a Python
set, so merged files depend on the string hash seed; this script re-executes
itself with PYTHONHASHSEED=0 so runs are byte-reproducible. (The merged files
committed before that, i.e. bart/t5/whisper/marian-tiny/marian-baked-past,
differ from a fresh run only in those initializer names.)
"""
import json
import shutil
import tempfile
from pathlib import Path

import fixture_common as fc

fc.start(__name__)  # merge_decoders' initializer names depend on set order: fix the hash seed

import onnx  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from optimum.exporters.onnx import onnx_export_from_model  # noqa: E402

HERE = Path(__file__).resolve().parent
OUT = HERE  # where the fixture folders are written (--out DIR)
SEED = 0
SEQ2SEQ_FILES = ["encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx", "decoder_model_merged.onnx"]

# opus-mt-en-zh structure, tiny widths: d_model 32 / 8 heads = head_dim 4.
MARIAN = dict(
    vocab_size=1000,
    d_model=32,
    encoder_layers=6,
    decoder_layers=6,
    encoder_attention_heads=8,
    decoder_attention_heads=8,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    max_position_embeddings=128,
    pad_token_id=999,
    eos_token_id=0,
    decoder_start_token_id=999,
    forced_eos_token_id=0,
)


def marian_model(attn="sdpa", **overrides):
    torch.manual_seed(SEED)
    cfg = transformers.MarianConfig(**{**MARIAN, **overrides})
    cfg._attn_implementation = attn
    return transformers.MarianMTModel(cfg).eval()


def save_configs(cfg, out: Path, architecture: str):
    """config.json + generation_config.json, written by transformers itself.
    `architectures` is set the way PreTrainedModel.save_pretrained sets it."""
    out.mkdir(parents=True, exist_ok=True)
    cfg.architectures = [architecture]
    cfg.save_pretrained(out)
    transformers.GenerationConfig.from_model_config(cfg).save_pretrained(out)


def export_optimum(model, task, out: Path, keep, onnx_dir=None):
    """Export with optimum, keep the named ONNX files (in onnx_dir, default
    out) and write the model's config files into out."""
    save_configs(model.config, out, type(model).__name__)
    fc.export_from_model(model, task, keep, onnx_dir or out)


MARIAN_NUM_BEAMS = 4  # Helsinki-NLP's opus-mt models ask for beam search


def gen_marian_tiny():
    export_optimum(marian_model(), "text2text-generation-with-past", OUT / "marian-tiny", SEQ2SEQ_FILES)
    # Helsinki-NLP's opus-mt models ask for beam search (num_beams 4): the
    # emitted programs and `protocol` follow generation_config.json.
    gen = OUT / "marian-tiny" / "generation_config.json"
    config = json.loads(gen.read_text())
    config["num_beams"] = MARIAN_NUM_BEAMS
    gen.write_text(json.dumps(config, indent=2) + "\n")


save_source = fc.save_source  # the checkpoint a fixture was exported from (safetensors)


def gen_marian_tiny_source():
    """marian-tiny's model (marian_model(), sdpa: the object gen_marian_tiny
    exports), generation_config with marian-tiny's num_beams."""
    model = marian_model()
    model.generation_config.num_beams = MARIAN_NUM_BEAMS
    save_source(model, OUT / "marian-tiny-source")


class SelfPastOnlyDecoder(torch.nn.Module):
    """Incident 1: a decoder wrapper that takes only the self-attention past.

    The cross-attention keys/values are recomputed from encoder_hidden_states on
    every call instead of being fed as past, and there is no use_cache_branch.
    """

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.layers = model.config.decoder_layers

    def forward(self, encoder_attention_mask, input_ids, encoder_hidden_states, *past):
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        self_cache = DynamicCache()
        for layer in range(self.layers):
            self_cache.update(past[2 * layer], past[2 * layer + 1], layer)
        cache = EncoderDecoderCache(self_cache, DynamicCache())
        out = self.model(
            input_ids=None,
            decoder_input_ids=input_ids,
            encoder_outputs=(encoder_hidden_states,),
            attention_mask=encoder_attention_mask,
            past_key_values=cache,
            use_cache=True,
            return_dict=True,
        )
        flat = [out.logits]
        legacy = out.past_key_values.to_legacy_cache()
        for layer in range(self.layers):
            k, v, ck, cv = legacy[layer]
            flat += [k, v, ck, cv]
        return tuple(flat)


def gen_marian_15_inputs():
    # Opset 12 predates scaled_dot_product_attention: eager attention.
    model = marian_model("eager")
    wrapper = SelfPastOnlyDecoder(model)
    L, H, D = MARIAN["decoder_layers"], MARIAN["decoder_attention_heads"], MARIAN["d_model"] // MARIAN["decoder_attention_heads"]
    enc_len, past_len = 5, 3
    mask = torch.ones(1, enc_len, dtype=torch.int64)
    ids = torch.tensor([[7]], dtype=torch.int64)
    enc = torch.randn(1, enc_len, MARIAN["d_model"])
    past = [torch.randn(1, H, past_len, D) for _ in range(2 * L)]
    in_names = ["encoder_attention_mask", "input_ids", "encoder_hidden_states"]
    out_names = ["logits"]
    axes = {
        "encoder_attention_mask": {0: "batch_size", 1: "encoder_sequence_length"},
        "input_ids": {0: "batch_size", 1: "decoder_sequence_length"},
        "encoder_hidden_states": {0: "batch_size", 1: "encoder_sequence_length"},
        "logits": {0: "batch_size", 1: "decoder_sequence_length"},
    }
    for layer in range(L):
        for kv in ("key", "value"):
            name = f"past_key_values.{layer}.decoder.{kv}"
            in_names.append(name)
            axes[name] = {0: "batch_size", 2: "past_decoder_sequence_length"}
    for layer in range(L):
        for part in ("decoder", "encoder"):
            for kv in ("key", "value"):
                name = f"present.{layer}.{part}.{kv}"
                out_names.append(name)
                seq = "past_decoder_sequence_length + 1" if part == "decoder" else "encoder_sequence_length_out"
                axes[name] = {0: "batch_size", 2: seq}
    out = OUT / "marian-15-inputs"
    save_configs(model.config, out, type(model).__name__)
    path = out / "decoder_model_merged.onnx"
    torch.onnx.export(
        wrapper,
        (mask, ids, enc, *past),
        str(path),
        input_names=in_names,
        output_names=out_names,
        dynamic_axes=axes,
        opset_version=12,
        dynamo=False,
        do_constant_folding=True,
    )
    m = onnx.load(str(path))
    m.ir_version = 7  # what the reverse-pair script of incident 1 produced
    onnx.save(m, str(path))


def gpt2_config():
    return transformers.GPT2Config(vocab_size=1000, n_positions=128, n_embd=32, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0)


def gen_gpt2_tiny():
    torch.manual_seed(SEED)
    model = transformers.GPT2LMHeadModel(gpt2_config()).eval()
    export_optimum(model, "text-generation-with-past", OUT / "gpt2-tiny", ["model.onnx"])


class BakedPastDecoder(torch.nn.Module):
    """optimum's decoder_with_past I/O, but the past length is read with int().

    Tracing turns `int(past.shape[2])` into a constant, so the Reshape below
    only accepts the trace-time length: the classic silent export bug.
    """

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.layers = model.config.decoder_layers

    def forward(self, encoder_attention_mask, input_ids, *past):
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        self_cache, cross_cache = DynamicCache(), DynamicCache()
        for layer in range(self.layers):
            k, v, ck, cv = past[4 * layer : 4 * layer + 4]
            self_cache.update(k, v, layer)
            cross_cache.update(ck, cv, layer)
        out = self.model(
            input_ids=None,
            decoder_input_ids=input_ids,
            encoder_outputs=(torch.zeros(input_ids.shape[0], past[2].shape[2], self.model.config.d_model),),
            attention_mask=encoder_attention_mask,
            past_key_values=EncoderDecoderCache(self_cache, cross_cache),
            use_cache=True,
            return_dict=True,
        )
        baked = int(past[0].shape[2]) + 1  # the bug: a Python int while tracing
        flat = [out.logits]
        legacy = out.past_key_values.to_legacy_cache()
        for layer in range(self.layers):
            k, v = legacy[layer][0], legacy[layer][1]
            flat += [k.reshape(k.shape[0], k.shape[1], baked, k.shape[3]), v]
        return tuple(flat)


def export_baked_with_past(model, with_past: Path):
    """Trace BakedPastDecoder (past length 1) to with_past, optimum's with-past
    input/output names, opset 18."""
    L, H, D = MARIAN["decoder_layers"], MARIAN["decoder_attention_heads"], MARIAN["d_model"] // MARIAN["decoder_attention_heads"]
    enc_len, past_len = 5, 1
    in_names = ["encoder_attention_mask", "input_ids"]
    axes = {
        "encoder_attention_mask": {0: "batch_size", 1: "encoder_sequence_length"},
        "input_ids": {0: "batch_size", 1: "decoder_sequence_length"},
        "logits": {0: "batch_size", 1: "decoder_sequence_length"},
    }
    past = []
    for layer in range(L):
        for part, seq, n in (("decoder", "past_decoder_sequence_length", past_len), ("encoder", "encoder_sequence_length", enc_len)):
            for kv in ("key", "value"):
                name = f"past_key_values.{layer}.{part}.{kv}"
                in_names.append(name)
                axes[name] = {0: "batch_size", 2: seq}
                past.append(torch.randn(1, H, n, D))
    out_names = ["logits"]
    for layer in range(L):
        for kv in ("key", "value"):
            name = f"present.{layer}.decoder.{kv}"
            out_names.append(name)
            axes[name] = {0: "batch_size", 2: "past_decoder_sequence_length + decoder_sequence_length"}
    torch.onnx.export(
        BakedPastDecoder(model),
        (torch.ones(1, enc_len, dtype=torch.int64), torch.tensor([[7]]), *past),
        str(with_past),
        input_names=in_names,
        output_names=out_names,
        dynamic_axes=axes,
        opset_version=18,
        dynamo=False,
    )


def gen_marian_baked_past():
    from optimum.onnx import merge_decoders

    model = marian_model("eager")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # The no-cache branch is optimum's own decoder, exported as usual.
        onnx_export_from_model(model, tmp / "ref", task="text2text-generation-with-past", do_validation=False)
        with_past = tmp / "decoder_with_past_model.onnx"
        export_baked_with_past(model, with_past)
        out = OUT / "marian-baked-past"
        save_configs(model.config, out, type(model).__name__)
        merge_decoders(
            str(tmp / "ref" / "decoder_model.onnx"),
            str(with_past),
            save_path=str(out / "decoder_model_merged.onnx"),
            strict=False,
        )


def gen_marian_pair_baked_past():
    """Incident 2 in the split pair layout transformers.js / older optimum load."""
    model = marian_model()  # sdpa, as marian-tiny: same weights as the eager one
    out = OUT / "marian-pair-baked-past"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        export_optimum(model, "text2text-generation-with-past", tmp / "ref", SEQ2SEQ_FILES)
        out.mkdir(parents=True, exist_ok=True)
        for name in ("encoder_model.onnx", "decoder_model.onnx", "config.json", "generation_config.json"):
            shutil.copy(tmp / "ref" / name, out / name)
        baked = tmp / "baked.onnx"
        export_baked_with_past(marian_model("eager"), baked)
        # Same names and order as optimum's with-past decoder; take its exact
        # types too (dim names such as logits' "1" come from optimum).
        ref = onnx.load(tmp / "ref" / "decoder_with_past_model.onnx")
        m = onnx.load(baked)
        for mine, theirs in ((m.graph.input, ref.graph.input), (m.graph.output, ref.graph.output)):
            assert [v.name for v in mine] == [v.name for v in theirs], ([v.name for v in mine], [v.name for v in theirs])
            for v, r in zip(mine, theirs):
                v.type.CopyFrom(r.type)
        onnx.checker.check_model(m)
        onnx.save(m, out / "decoder_with_past_model.onnx")


def gen_marian_config_mismatch():
    model = marian_model(decoder_layers=3)
    out = OUT / "marian-config-mismatch"
    export_optimum(model, "text2text-generation-with-past", out, ["encoder_model.onnx", "decoder_model_merged.onnx"])
    path = out / "config.json"
    cfg = json.loads(path.read_text())
    assert cfg["decoder_layers"] == 3
    cfg["decoder_layers"] = 6  # the lie: the graph has 3 decoder layers
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def _tiny_seq2seq(name, model, task="text2text-generation-with-past"):
    export_optimum(model, task, OUT / name, SEQ2SEQ_FILES)


def gen_bart_tiny():
    torch.manual_seed(SEED)
    cfg = transformers.BartConfig(
        vocab_size=1000, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128,
    )
    _tiny_seq2seq("bart-tiny", transformers.BartForConditionalGeneration(cfg).eval())


def gen_t5_tiny():
    torch.manual_seed(SEED)
    cfg = transformers.T5Config(vocab_size=1000, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4, decoder_start_token_id=0)
    _tiny_seq2seq("t5-tiny", transformers.T5ForConditionalGeneration(cfg).eval())


def gen_whisper_tiny():
    torch.manual_seed(SEED)
    cfg = transformers.WhisperConfig(
        vocab_size=1000, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=80,
        max_source_positions=1500, max_target_positions=64, pad_token_id=999, bos_token_id=998,
        eos_token_id=997, decoder_start_token_id=996,
    )
    _tiny_seq2seq("whisper-tiny", transformers.WhisperForConditionalGeneration(cfg).eval(), "automatic-speech-recognition-with-past")


def gen_bart_tjs():
    torch.manual_seed(SEED)
    cfg = transformers.BartConfig(
        vocab_size=1200, d_model=48, encoder_layers=3, decoder_layers=3, encoder_attention_heads=6,
        decoder_attention_heads=6, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
    )
    out = OUT / "bart-tjs"
    model = transformers.BartForConditionalGeneration(cfg).eval()
    export_optimum(model, "text2text-generation-with-past", out, SEQ2SEQ_FILES, onnx_dir=out / "onnx")
    # Non-ONNX files a real transformers.js folder has; discovery must skip them.
    (out / "tokenizer_config.json").write_text("{}\n")
    (out / "README.md").write_text(
        "# bart-tjs\n\nTiny random-weight BART (d_model 48, 3+3 layers, 6 heads, vocab 1200) in the\n"
        "transformers.js layout: config files at the root, ONNX files in onnx/.\n"
        "Generated by ../generate.py; not a usable model.\n"
    )


def _tiny_decoder_only(name, model):
    export_optimum(model, "text-generation-with-past", OUT / name, ["model.onnx"])


def llama_model():
    torch.manual_seed(SEED)
    cfg = transformers.LlamaConfig(vocab_size=1000, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return transformers.LlamaForCausalLM(cfg).eval()


def gen_llama_tiny():
    _tiny_decoder_only("llama-tiny", llama_model())


def gen_llama_tiny_source():
    """llama-tiny's model (llama_model(), the object gen_llama_tiny exports)."""
    save_source(llama_model(), OUT / "llama-tiny-source")


def gen_qwen2_tiny():
    torch.manual_seed(SEED)
    cfg = transformers.Qwen2Config(vocab_size=1000, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    _tiny_decoder_only("qwen2-tiny", transformers.Qwen2ForCausalLM(cfg).eval())


def gen_mistral_tiny():
    torch.manual_seed(SEED)
    cfg = transformers.MistralConfig(
        vocab_size=1000, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, sliding_window=16,
    )
    _tiny_decoder_only("mistral-tiny", transformers.MistralForCausalLM(cfg).eval())


def gen_gemma_tiny():
    torch.manual_seed(SEED)
    cfg = transformers.GemmaConfig(
        vocab_size=1000, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, head_dim=16, max_position_embeddings=128,
    )
    _tiny_decoder_only("gemma-tiny", transformers.GemmaForCausalLM(cfg).eval())


def gen_gpt2_position_bug():
    """Field notes 3: positions restart at 0 on every call instead of
    continuing from the cache length. Made from gpt2-tiny by graph surgery
    (tracing transformers' vmap-based masks outside optimum fails): the
    position_ids input is replaced by Range(0, sequence_length)."""
    from onnx import helper as h

    m = onnx.load(OUT / "gpt2-tiny" / "model.onnx")
    g = m.graph
    const = lambda name, v: h.make_node("Constant", [], [name], value=h.make_tensor(name + "_v", onnx.TensorProto.INT64, [], [v]))
    nodes = [
        const("bug/zero", 0),
        const("bug/one", 1),
        h.make_node("Shape", ["input_ids"], ["bug/shape"]),
        h.make_node("Gather", ["bug/shape", "bug/one"], ["bug/len"], axis=0),
        h.make_node("Range", ["bug/zero", "bug/len", "bug/one"], ["bug/range"]),
        h.make_node("Unsqueeze", ["bug/range", "bug/axes"], ["bug/row"]),
        h.make_node("Expand", ["bug/row", "bug/shape"], ["bug/positions"]),  # the bug: ignores the past length
    ]
    g.initializer.append(onnx.numpy_helper.from_array(__import__("numpy").array([0], dtype="int64"), "bug/axes"))
    for n in g.node:
        n.input[:] = ["bug/positions" if x == "position_ids" else x for x in n.input]
    for k, n in enumerate(nodes):
        g.node.insert(k, n)
    keep = [i for i in g.input if i.name != "position_ids"]
    del g.input[:]
    g.input.extend(keep)
    out = OUT / "gpt2-position-bug"
    save_configs(gpt2_config(), out, "GPT2LMHeadModel")  # the model it was cut from: gpt2-tiny's
    onnx.checker.check_model(m)
    onnx.save(m, out / "model.onnx")


GENERATORS = {
    "marian-tiny": gen_marian_tiny,
    "marian-tiny-source": gen_marian_tiny_source,
    "marian-15-inputs": gen_marian_15_inputs,
    "gpt2-tiny": gen_gpt2_tiny,
    "marian-baked-past": gen_marian_baked_past,
    "bart-tiny": gen_bart_tiny,
    "t5-tiny": gen_t5_tiny,
    "whisper-tiny": gen_whisper_tiny,
    "llama-tiny": gen_llama_tiny,
    "llama-tiny-source": gen_llama_tiny_source,
    "qwen2-tiny": gen_qwen2_tiny,
    "gpt2-position-bug": gen_gpt2_position_bug,
    "marian-pair-baked-past": gen_marian_pair_baked_past,
    "marian-config-mismatch": gen_marian_config_mismatch,
    "bart-tjs": gen_bart_tjs,
    "mistral-tiny": gen_mistral_tiny,
    "gemma-tiny": gen_gemma_tiny,
}

if __name__ == "__main__":
    # No measurements here: verify_fixtures.py runs every folder in onnxruntime.
    args = fc.parse_args(GENERATORS)
    OUT = args.out or OUT
    fc.run_all(args, OUT, GENERATORS, None, listing=False)
    for f in sorted(OUT.rglob("*.onnx")):
        print(f"{f.relative_to(OUT)}  {f.stat().st_size} bytes")
