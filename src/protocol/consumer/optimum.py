# optimum's own greedy generation on an export folder, as an application
# runs it (ORTModelForCausalLM, or ORTModelForSeq2SeqLM for an
# encoder-decoder, ORTModelForSpeechSeq2Seq for an audio one,
# .from_pretrained on the local folder, generate with do_sample False, no
# tokenizer): written by `onnx-contract protocol`, run by `onnx-contract
# check` in a child. Prints one JSON line. Save it under another name than
# optimum.py (it would shadow the package).
#   python3 generate_optimum.py FOLDER IDS_JSON MAX_NEW_TOKENS [seq2seq|causal|audio=PATH:INPUT]
# IDS_JSON is the prompt, or an encoder-decoder's source ids, or an audio
# model's decoder start (its features are the .npy PATH, fed as INPUT); the
# tokens printed are the new ones (after the decoder start token).
import json
import os
import sys

out = {"installed": True, "ok": False, "tokens": [], "error": None, "stage": "import"}
try:
    import torch
    from optimum.onnxruntime import ORTModelForCausalLM, ORTModelForSeq2SeqLM, ORTModelForSpeechSeq2Seq
except Exception as e:  # not installed: said, never a silent pass
    out.update(installed=False, error=f"{type(e).__name__}: {e}")
    print(json.dumps(out))
    sys.exit(0)
folder, ids, new = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])


def encoder_decoder():
    try:
        with open(os.path.join(folder, "config.json")) as f:
            return json.load(f).get("is_encoder_decoder") is True
    except Exception:  # no readable config: from_pretrained says why
        return False


# MODE (seq2seq | causal), as `check` tells it from the graphs; else config.json's flag.
mode = sys.argv[4] if len(sys.argv) > 4 else None
audio = mode[len("audio="):].rsplit(":", 1) if mode and mode.startswith("audio=") else None
seq2seq = (mode == "seq2seq" or audio is not None) if mode else encoder_decoder()
# The tokens are compared with the graph's own plain greedy argmax: these
# generation-config processors (Marian and BART ship forced_eos_token_id,
# which forces the end token at the last step) change the argmax without
# being the graph's doing, so they are off. decoder_start_token_id,
# eos_token_id and pad_token_id stay the folder's own.
PLAIN = dict(
    bad_words_ids=None,
    begin_suppress_tokens=None,
    encoder_no_repeat_ngram_size=0,
    encoder_repetition_penalty=1.0,
    exponential_decay_length_penalty=None,
    forced_bos_token_id=None,
    forced_decoder_ids=None,
    forced_eos_token_id=None,
    guidance_scale=None,
    min_length=0,
    min_new_tokens=None,
    no_repeat_ngram_size=0,
    remove_invalid_values=False,
    repetition_penalty=1.0,
    sequence_bias=None,
    suppress_tokens=None,
)


def generate(**load):
    out["stage"] = "from_pretrained"
    cls = ORTModelForSpeechSeq2Seq if audio else ORTModelForSeq2SeqLM if seq2seq else ORTModelForCausalLM
    model = cls.from_pretrained(folder, provider="CPUExecutionProvider", **load)
    out["stage"] = "generate"
    input_ids = torch.tensor([ids], dtype=torch.long)
    # Only the keys this transformers knows: an unknown one is an error.
    plain = {k: v for k, v in PLAIN.items() if hasattr(model.generation_config, k)}
    if audio:
        import numpy as np
        from transformers import GenerationMixin

        # transformers' own greedy loop over optimum's forward and cache, from
        # the decoder start: Whisper's generate would add language and task
        # tokens (detecting the language first) that the reference does not pick.
        return GenerationMixin.generate(
            model,
            **{audio[1]: torch.from_numpy(np.load(audio[0]))},
            decoder_input_ids=input_ids,
            max_new_tokens=new,
            do_sample=False,
            num_beams=1,
            **plain,
        )
    return model.generate(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=new,
        do_sample=False,
        num_beams=1,
        **plain,
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
    # An encoder-decoder's output is the decoder's: its start token, then the new ones.
    out["tokens"] = [int(t) for t in seq[0, 1 if seq2seq else len(ids):]]
    out.update(ok=True, stage=None)
except Exception as e:
    out["error"] = str(e).strip()
print(json.dumps(out))
