"""Traces of REAL clients (optimum's ORTModelForCausalLM / ORTModelForSeq2SeqLM
`generate`) decoding with beam search, sampling, padded batches and speculative
decoding, each correct and (but sampling) with a broken twin, recorded with the
version-2 python/onnx_contract_trace.py into tests/traces/<name>.jsonl (the input
of `onnx-contract replay`; tests/traces/README.md says what each shows and the
verdict expected). The transformers.js clients are tests/callers/tjs/clients.mjs.

    python3 tests/callers/clients.py --all                # regenerate every trace
    python3 tests/callers/clients.py --trace optimum-beam3 --trace optimum-beam3-no-reorder
    python3 tests/callers/clients.py --all --out DIR      # elsewhere (determinism check: cmp DIR/*.jsonl)
    python3 tests/callers/clients.py --list

Needs models/requirements-gen.txt (torch 2.9.1, transformers 4.57.6, optimum 2.1.0,
optimum-onnx 0.1.0, onnxruntime 1.31.1); no network (HF_HUB_OFFLINE=1, the
fixtures under models/ only, generate() on id tensors: no tokenizer).

The client's own `InferenceSession.run` calls are recorded (`record_sessions`
patches the class method, so the sessions optimum creates are the recorded ones);
a broken twin is the same client with one of its own functions monkeypatched:

- optimum-greedy-padded / -no-positions: gpt2-tiny, a LEFT-padded batch of 2
  prompts, greedy; the twin drops the position_ids transformers computes from the
  mask, so optimum's forward falls back to arange(past, past + new) for every row.
- optimum-beam3 / -no-reorder: llama-tiny, num_beams=3; the twin's
  `_reorder_cache` (optimum's, called by transformers' beam search with beam_idx)
  returns the past unchanged.
- optimum-beam4-long / -no-reorder: llama-tiny, num_beams=4, max_new_tokens=8 on a
  LEFT-padded batch of two prompts of 20 and 23 tokens (batch 2 x 4 beams = 8 rows;
  call 0 feeds 8 x 23 ids, mask and positions, which format 2 keeps as values); the
  twin's `_reorder_cache` returns the past unchanged, as above.
- optimum-seq2seq-beam2 / -no-reorder: marian-tiny (optimum 2.1 loads
  encoder_model.onnx + decoder_model_merged.onnx), num_beams=2, same patch.
- optimum-seq2seq-beam2-no-expand: a hand-written onnxruntime beam search on
  marian-tiny (2 beams; with the encoder states expanded it writes optimum's
  generate(num_beams=2) trace line for line, which the script checks first) that
  feeds encoder_hidden_states and encoder_attention_mask with batch 1 while
  input_ids and the pasts have 2 rows. ORT fails at the first decoder call.
- optimum-sample-topk: llama-tiny, do_sample=True, top_k=5, torch.manual_seed(SEED).
- speculative-correct / -no-crop: optimum's assisted generation fails here
  (transformers 4.57 crops `outputs.past_key_values`, optimum returns a tuple:
  "'tuple' object has no attribute 'crop'"), so a hand-written onnxruntime loop
  on gpt2-tiny: K=3 drafts (repeat the last token), accept the longest prefix the
  model's argmax agrees with plus the model's own next token, crop every present
  to the accepted length; the twin feeds the uncropped present.
- incident2-raw-digests: tests/callers/caller.py's incident2-dummy-encoder-present
  caller recorded as a foreign, older recorder would: no header, decoder calls
  only, no `value`, digest = "md5:" + md5 of the raw bytes (no dtype, no shape), no rows.

Every scenario checks, from the trace it wrote, what the client did (tokens,
beam_idx per call and whether the fed past rows are the previous present's rows
gathered by it, crop lengths) and prints it; --all run twice gives byte-identical
files (timing=False, fixed seeds, 1 thread per session and for torch, CPU).
"""
import argparse
import contextlib
import hashlib
import json
import logging
import os
import sys
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import onnx_contract_trace as oct  # noqa: E402

MODELS = ROOT / "models"
TRACES = ROOT / "tests" / "traces"
LLAMA = MODELS / "llama-tiny"
MARIAN = MODELS / "marian-tiny"
GPT2 = MODELS / "gpt2-tiny" / "model.onnx"
PROMPT = [3, 14, 15, 92]
PADDED = ([3, 14, 15, 92, 65], [7, 21, 5])  # two prompts, the second left-padded to the first's length
LLAMA_PAD = 2  # llama-tiny has no pad token: generate pads with eos (2), as it says it does
GPT2_PAD = 0  # nor has gpt2-tiny (eos 0)
MARIAN_SRC = [12, 400, 77, 0]  # beams reorder at two decoder calls with this source (not with caller.py's)
LONG = ([303, 431, 364, 436, 742, 154, 739, 615, 386, 570, 603, 530, 683, 177, 927, 919, 995, 324, 734, 164],
        [285, 140, 899, 295, 997, 717, 179, 634, 778, 845, 921, 743, 599, 470, 862, 482, 619, 149, 592, 958, 288,
         898, 283])  # 20 and 23 tokens: batch 2 x 4 beams, the prompt's 8 x 23 ids far over v1's 16 values
LONG_NEW = 8  # new tokens of the long beam search
NEW = 6  # new tokens per generate
SEED = 1234
K = 3  # speculative drafts per call


def quiet():
    import transformers

    transformers.logging.set_verbosity_error()
    logging.getLogger("optimum").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")


def options():
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.log_severity_level = 4  # an error is recorded and printed once
    return so


@contextlib.contextmanager
def recording(path):
    """Every InferenceSession.run of the process, into `path` (version 2, no timing)."""
    rec = oct.record_sessions(path, timing=False)
    try:
        yield rec
    finally:
        oct.unpatch()
        rec.close()


def read(path):
    lines = [json.loads(line) for line in open(path, encoding="utf-8")]
    if lines and "call" not in lines[0]:
        lines = lines[1:]
    return lines


def causal(folder):
    from optimum.onnxruntime import ORTModelForCausalLM

    return ORTModelForCausalLM.from_pretrained(folder, session_options=options(), use_io_binding=False,
                                               local_files_only=True)


def seq2seq(folder):
    from optimum.onnxruntime import ORTModelForSeq2SeqLM

    return ORTModelForSeq2SeqLM.from_pretrained(folder, session_options=options(), use_io_binding=False,
                                                local_files_only=True)


def ids(rows):
    import torch

    return torch.tensor(rows, dtype=torch.long)


def track_reorder(model, log, disable=False):
    """Wrap the client's `_reorder_cache` (optimum's staticmethod, which transformers' beam search
    calls after every step with the beam_idx of the next one): log beam_idx; `disable` is the broken
    client, whose reorder returns the past unchanged."""
    original = type(model)._reorder_cache

    def reorder(past, beam_idx):
        log.append([int(i) for i in beam_idx])
        return past if disable else original(past, beam_idx)

    model._reorder_cache = reorder


def gather_check(path, beam_log, decoder, kinds=None):
    """From the trace: for each cached call of `decoder`, the beam_idx that fed it, whether every fed
    past's rows are the previous call's present rows gathered by it, and the origins the rows show
    (the first present row with the same digest; `?` when none). `kinds`: only pasts whose name has one."""
    calls = [c for c in read(path) if c["model"] == decoder]
    report = []
    for d in range(1, len(calls)):
        prev, call = calls[d - 1], calls[d]
        idx = beam_log[d - 1]
        ok, seen, moved = True, None, False
        for name, fed in call["feeds"].items():
            if not name.startswith("past_key_values.") or (kinds and not any(k in name for k in kinds)):
                continue
            present = prev.get("outputs", {}).get("present." + name[len("past_key_values."):])
            if present is None:
                continue
            want = [present["rows"][j] for j in idx]
            ok &= fed["rows"] == want
            moved |= want != present["rows"]  # the gather changes the rows: a reorder the digests can see
            if seen is None:
                seen = [present["rows"].index(r) if r in present["rows"] else "?" for r in fed["rows"]]
        report.append({"call": call["call"], "beam_idx": idx, "gathered": ok, "rows_from": seen,
                       "identity": idx == list(range(len(idx))), "visible": moved, "error": call.get("error")})
    return report


def print_beams(report):
    for r in report:
        state = "gathered by beam_idx" if r["gathered"] else "NOT the gather by beam_idx"
        print(f"    call {r['call']}: beam_idx {r['beam_idx']}, fed rows from {r['rows_from']} ({state})")
    wrong = [r["call"] for r in report if not r["gathered"]]
    print(f"    first call whose past is not the gather: {wrong[0] if wrong else None}")
    return wrong


# ---------------------------------------------------------------- optimum, decoder-only
def greedy_padded(path, positions=True):
    """gpt2-tiny (absolute positions: llama-tiny's RoPE hides a shift of every position, bit for bit),
    left-padded batch of 2, greedy. positions=False: the broken client drops transformers'
    mask-derived position_ids, and optimum's forward builds arange(past, past + new) per row."""
    import torch

    model = causal(GPT2.parent)
    if not positions:
        prepare = model.prepare_inputs_for_generation

        def without_positions(*args, **kwargs):
            inputs = prepare(*args, **kwargs)
            inputs.pop("position_ids", None)
            return inputs

        model.prepare_inputs_for_generation = without_positions
    width = max(map(len, PADDED))
    rows = [[GPT2_PAD] * (width - len(p)) + p for p in PADDED]
    mask = [[0] * (width - len(p)) + [1] * len(p) for p in PADDED]
    with recording(path):
        out = model.generate(input_ids=ids(rows), attention_mask=ids(mask), max_new_tokens=NEW, do_sample=False,
                             pad_token_id=GPT2_PAD)
    new = out[:, width:].tolist()
    alone = [causal(GPT2.parent).generate(input_ids=ids([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                                          max_new_tokens=NEW, do_sample=False, pad_token_id=GPT2_PAD)[0, len(p):].tolist()
             for p in PADDED]
    calls = read(path)
    print(f"    input_ids {rows}, attention_mask {mask}")
    print(f"    new tokens {new}; each prompt alone, unpadded: {alone} ({'same' if new == alone else 'DIFFERENT'})")
    for c in calls:
        print(f"    call {c['call']}: input_ids {c['feeds']['input_ids']['value']}, position_ids "
              f"{c['feeds']['position_ids']['value']}, mask {c['feeds']['attention_mask']['shape']}")
    if not positions:  # what the arange positions cost on call 0
        s = ort.InferenceSession(str(GPT2), options(), providers=["CPUExecutionProvider"])
        feeds = {"input_ids": np.array(rows, np.int64), "attention_mask": np.array(mask, np.int64),
                 **{i.name: np.zeros((2, 4, 0, 8), np.float32) for i in s.get_inputs() if i.name.startswith("past")}}
        masked = np.cumsum(mask, -1) - 1
        masked[np.array(mask) == 0] = 1
        right = s.run(["logits"], {**feeds, "position_ids": masked})[0]
        wrong = s.run(["logits"], {**feeds, "position_ids": np.tile(np.arange(width), (2, 1))})[0]
        real = np.array(mask, bool)
        print(f"    call 0 logits over the real tokens, mask positions vs arange: max|d| row 0 "
              f"{np.abs(right - wrong)[0][real[0]].max():.2e}, row 1 {np.abs(right - wrong)[1][real[1]].max():.2e}")
    return new


def beam3(path, reorder=True):
    model = causal(LLAMA)
    log = []
    track_reorder(model, log, disable=not reorder)
    with recording(path):
        out = model.generate(input_ids=ids([PROMPT]), attention_mask=ids([[1] * len(PROMPT)]), max_new_tokens=NEW,
                             num_beams=3, num_return_sequences=1, do_sample=False, pad_token_id=LLAMA_PAD)
    tokens = out[0, len(PROMPT):].tolist()
    print(f"    tokens {tokens}; beam_idx after each call {log} (the last one feeds no call)")
    wrong = print_beams(gather_check(path, log, "model.onnx"))
    moved = [r["call"] for r in gather_check(path, log, "model.onnx") if not r["identity"]]
    print(f"    calls fed through a non-identity beam_idx: {moved}")
    return tokens, log, wrong


def beam4_long(path, reorder=True):
    """llama-tiny, num_beams=4 on a LEFT-padded batch of two prompts of 20 and 23 tokens (pad 2 = eos, mask
    0, as a tokenizer with padding_side="left" gives them): 8 rows, and call 0's ids, mask and positions
    are 8 x 23 values (format 2 keeps them: up to 4096)."""
    model = causal(LLAMA)
    log = []
    track_reorder(model, log, disable=not reorder)
    width = max(map(len, LONG))
    rows = [[LLAMA_PAD] * (width - len(p)) + p for p in LONG]
    mask = [[0] * (width - len(p)) + [1] * len(p) for p in LONG]
    with recording(path):
        out = model.generate(input_ids=ids(rows), attention_mask=ids(mask), max_new_tokens=LONG_NEW, num_beams=4,
                             num_return_sequences=1, do_sample=False, pad_token_id=LLAMA_PAD)
    tokens = out[:, width:].tolist()
    calls = read(path)
    first = calls[0]["feeds"]
    expanded = [r for r in rows for _ in range(4)]  # generate repeats each row once per beam
    kept = first["input_ids"].get("value") == [t for r in expanded for t in r]
    print(f"    prompts of {[len(p) for p in LONG]} tokens, left-padded to {width}; call 0 input_ids "
          f"{first['input_ids']['shape']}, {len(first['input_ids'].get('value', []))} values in the trace "
          f"({'the expanded batch' if kept else 'NOT the expanded batch'}); position_ids row 0 and row 4: "
          f"{first['position_ids']['value'][:width]}, {first['position_ids']['value'][4 * width:5 * width]}")
    print(f"    tokens {tokens}; beam_idx after each call {log} (the last one feeds no call)")
    report = gather_check(path, log, "model.onnx")
    wrong = print_beams(report)
    moved = [r["call"] for r in report if r["visible"]]
    print(f"    calls whose correct past is a non-identity gather the row digests show: {moved}")
    assert kept and len(calls) == LONG_NEW and all(c["feeds"]["input_ids"]["shape"][0] == 8 for c in calls)
    return tokens, log, wrong, moved


def sample_topk(path):
    import torch

    model = causal(LLAMA)
    torch.manual_seed(SEED)
    with recording(path):
        out = model.generate(input_ids=ids([PROMPT]), attention_mask=ids([[1] * len(PROMPT)]), max_new_tokens=NEW,
                             do_sample=True, top_k=5, pad_token_id=LLAMA_PAD)
    tokens = out[0, len(PROMPT):].tolist()
    greedy = causal(LLAMA).generate(input_ids=ids([PROMPT]), attention_mask=ids([[1] * len(PROMPT)]),
                                    max_new_tokens=NEW, do_sample=False, pad_token_id=LLAMA_PAD)[0, len(PROMPT):]
    calls = read(path)
    fed = [c["feeds"]["input_ids"]["value"] for c in calls]
    print(f"    seed {SEED}: sampled tokens {tokens} (greedy would be {greedy.tolist()})")
    print(f"    input_ids per call {fed}: call k+1 feeds the token sampled at call k "
          f"({'yes' if [f[0] for f in fed[1:]] == tokens[:-1] else 'NO'})")
    return tokens


# ---------------------------------------------------------------- optimum, seq2seq
def seq2seq_beam2(path, reorder=True):
    model = seq2seq(MARIAN)
    log = []
    track_reorder(model, log, disable=not reorder)
    src = ids([MARIAN_SRC])
    with recording(path):
        out = model.generate(input_ids=src, attention_mask=ids([[1] * len(MARIAN_SRC)]), max_new_tokens=NEW,
                             num_beams=2, num_return_sequences=1, do_sample=False)
    tokens = out[0].tolist()
    files = sorted({c["model"] for c in read(path)})
    print(f"    files {files}; tokens {tokens}; beam_idx after each decoder call {log}")
    report = gather_check(path, log, "decoder_model_merged.onnx", kinds=[".decoder."])
    wrong = print_beams(report)
    print(f"    decoder calls fed through a non-identity beam_idx: {[r['call'] for r in report if not r['identity']]}")
    return tokens, log, wrong


def hand_seq2seq_beams(path, expand=True, beams=2, steps=NEW):
    """marian-tiny, a hand-written onnxruntime beam search (transformers 4.57's: 2 x beams candidates of the
    accumulated log-probabilities, the best `beams` without eos run on, eos among the best `beams` finishes
    a hypothesis scored by its length, eos forced at the last step as forced_eos_token_id does; the decoder
    pasts gathered by beam_idx, the cross pasts of call 1 kept). expand=False: the broken client feeds
    encoder_hidden_states and encoder_attention_mask as the encoder gave them (batch 1) while input_ids and
    the pasts have `beams` rows. Stops at the first ORT error (recorded, the trace ends there)."""
    import torch

    eos, start, vocab = 0, 999, 1000
    with oct.TraceRecorder(path, timing=False) as rec:
        enc, dec = (rec.wrap(ort.InferenceSession(str(MARIAN / f), options(), providers=["CPUExecutionProvider"]))
                    for f in ("encoder_model.onnx", "decoder_model_merged.onnx"))
        names = [o.name for o in dec.get_outputs()]
        pasts = [i.name for i in dec.get_inputs() if i.name.startswith("past_key_values.")]
        src = np.array([MARIAN_SRC], np.int64)
        mask = np.ones_like(src)
        hidden = enc.run(["last_hidden_state"], {"input_ids": src, "attention_mask": mask})[0]
        if expand:  # one copy of the encoder states per beam, as generate's expansion does
            hidden, mask = np.repeat(hidden, beams, 0), np.repeat(mask, beams, 0)
        running, scores = [[start] for _ in range(beams)], torch.tensor([0.0] + [-1e9] * (beams - 1))
        finished, log, error = [], [], None
        past = {p: np.zeros((beams, 8, 0, 4), np.float32) for p in pasts}
        for step in range(steps):
            feeds = {"encoder_attention_mask": mask, "input_ids": np.array([[r[-1]] for r in running], np.int64),
                     "encoder_hidden_states": hidden, **past, "use_cache_branch": np.array([step > 0])}
            try:
                out = dict(zip(names, dec.run(None, feeds)))
            except Exception as e:
                error = str(e)
                break
            logp = torch.log_softmax(torch.from_numpy(out["logits"][:, -1].astype(np.float32)), -1)
            if step == steps - 1:  # forced eos at max_length - 1
                logp = torch.full_like(logp, -float("inf"))
                logp[:, eos] = 0
            top, at = torch.topk((logp + scores[:, None]).reshape(-1), 2 * beams)
            cand = [(int(i) // vocab, int(i) % vocab) for i in at]
            finished += [(float(top[r]) / (step + 1), running[b] + [t]) for r, (b, t) in enumerate(cand[:beams])
                         if t == eos]
            masked = top + torch.tensor([-1e9 if t == eos else 0.0 for _, t in cand])
            keep = torch.topk(masked, beams)[1].tolist()
            beam_idx = [cand[r][0] for r in keep]
            running, scores = [running[cand[r][0]] + [cand[r][1]] for r in keep], masked[keep]
            log.append(beam_idx)
            presents = {p: out["present" + p[len("past_key_values"):]] for p in pasts}
            past = {p: v[beam_idx] if ".decoder." in p else (v if step == 0 else past[p]) for p, v in presents.items()}
    tokens = max(finished)[1] if finished else running[0]
    return tokens, log, error


def seq2seq_no_expand(path):
    """The hand-written beam search with the encoder states not expanded per beam; checked first: the same
    loop WITH the expansion writes optimum's ORTModelForSeq2SeqLM.generate(num_beams=2) trace line for line."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        mine, theirs = Path(tmp) / "loop.jsonl", Path(tmp) / "optimum.jsonl"
        right, right_log, right_error = hand_seq2seq_beams(mine)
        model = seq2seq(MARIAN)
        with recording(theirs):
            model.generate(input_ids=ids([MARIAN_SRC]), attention_mask=ids([[1] * len(MARIAN_SRC)]),
                           max_new_tokens=NEW, num_beams=2, num_return_sequences=1, do_sample=False)
        same = open(mine, encoding="utf-8").read() == open(theirs, encoding="utf-8").read()
    print(f"    expanded (correct) loop: tokens {right}, beam_idx after each decoder call {right_log}; its trace is "
          f"optimum's generate(num_beams=2) line for line: {'yes' if same else 'NO'}")
    assert same and right_error is None
    tokens, log, error = hand_seq2seq_beams(path, expand=False)
    calls = read(path)
    for c in calls[1:]:
        f = c["feeds"]
        print(f"    call {c['call']}: input_ids {f['input_ids']['shape']}, encoder_hidden_states "
              f"{f['encoder_hidden_states']['shape']}, encoder_attention_mask {f['encoder_attention_mask']['shape']}, "
              f"past_key_values.0.decoder.key {f['past_key_values.0.decoder.key']['shape']}"
              + (f"; ORT error: {c['error']}" if "error" in c else ""))
    print(f"    not expanded: tokens {tokens}, beam_idx {log}" + (f"; stopped at call {calls[-1]['call']}" if error else ""))
    assert calls[1]["feeds"]["encoder_hidden_states"]["shape"][0] == 1 and calls[1]["feeds"]["input_ids"]["shape"][0] == 2
    return tokens


# ---------------------------------------------------------------- speculative decoding (hand-written)
def speculative(path, crop=True, steps=4):
    """gpt2-tiny, greedy verification of K drafts per call (the drafts repeat the last token)."""
    pasts = [f"past_key_values.{l}.{kv}" for l in range(2) for kv in ("key", "value")]
    with oct.TraceRecorder(path, timing=False) as rec:
        dec = rec.wrap(ort.InferenceSession(str(GPT2), options(), providers=["CPUExecutionProvider"]))
        names = [o.name for o in dec.get_outputs()]
        tokens, accepted = list(PROMPT), 0  # accepted: the positions the caller believes are cached
        past = {p: np.zeros((1, 4, 0, 8), np.float32) for p in pasts}
        for step in range(steps):
            new = tokens if step == 0 else [tokens[-1]] + [tokens[-1]] * K
            feeds = {"input_ids": np.array([new], np.int64), **past,
                     "attention_mask": np.ones((1, accepted + len(new)), np.int64),
                     "position_ids": np.arange(accepted, accepted + len(new), dtype=np.int64)[None]}
            try:
                out = dict(zip(names, dec.run(None, feeds)))
            except Exception as e:
                print(f"    call {step}: ORT error: {str(e).splitlines()[0][:200]}")
                break
            guess = out["logits"][0].argmax(-1).tolist()  # guess[i]: the token after new[i]
            if step == 0:
                took, keep = [guess[-1]], len(new)
            else:
                drafts, n = new[1:], 0
                while n < K and drafts[n] == guess[n]:
                    n += 1
                took, keep = drafts[:n] + [guess[n]], accepted + 1 + n
            length = out["present.0.key"].shape[2]
            print(f"    call {step}: fed {new} at positions {feeds['position_ids'][0].tolist()}, past "
                  f"{past['past_key_values.0.key'].shape[2]}; model says {guess}; accepted {took}; present "
                  f"{length} -> cache {keep}" + ("" if keep == length else (" (cropped)" if crop else " (NOT cropped)")))
            tokens += took
            accepted = keep
            past = {p: out["present" + p[len("past_key_values"):]] for p in pasts}
            if crop:
                past = {p: v[:, :, :keep] for p, v in past.items()}
    greedy = plain_greedy(len(tokens) - len(PROMPT))
    print(f"    tokens {tokens[len(PROMPT):]}; plain greedy {greedy} ({'same' if tokens[len(PROMPT):] == greedy else 'DIFFERENT'})")
    return tokens[len(PROMPT):]


def plain_greedy(n):
    s = ort.InferenceSession(str(GPT2), options(), providers=["CPUExecutionProvider"])
    toks = list(PROMPT)
    for _ in range(n):
        f = {"input_ids": np.array([toks], np.int64), "attention_mask": np.ones((1, len(toks)), np.int64),
             "position_ids": np.arange(len(toks))[None],
             **{f"past_key_values.{l}.{kv}": np.zeros((1, 4, 0, 8), np.float32) for l in range(2) for kv in ("key", "value")}}
        toks.append(int(s.run(["logits"], f)[0][0, -1].argmax()))
    return toks[len(PROMPT):]


# ---------------------------------------------------------------- a foreign, older recorder
class RawDigestRecorder:
    """What an older in-house recorder wrote: no header, only the sessions it was told to wrap, no
    values, no rows, digest = "md5:" + md5 of the raw bytes (neither dtype nor shape hashed)."""

    def __init__(self, path, only):
        self.file, self.only, self.next = open(path, "w", encoding="utf-8"), only, 0

    @staticmethod
    def tensor(v):
        a = np.ascontiguousarray(np.asarray(v))
        return {"dtype": a.dtype.name, "shape": list(a.shape), "digest": "md5:" + hashlib.md5(a.tobytes()).hexdigest()}

    def wrap(self, session, name=None):
        model = os.path.basename(session._model_path)
        if model not in self.only:
            return session  # the encoder: not recorded
        run = session.run

        def recorded(output_names, feeds, run_options=None):
            entry = {"call": self.next, "model": model, "feeds": {k: self.tensor(v) for k, v in feeds.items()}}
            self.next += 1
            try:
                out = run(output_names, feeds, run_options)
            except Exception as e:
                entry["error"] = str(e)
                self.file.write(json.dumps(entry) + "\n")
                raise
            names = output_names or [o.name for o in session.get_outputs()]
            entry["outputs"] = {n: self.tensor(v) for n, v in zip(names, out)}
            self.file.write(json.dumps(entry) + "\n")
            return out

        session.run = recorded
        return session

    def close(self):
        self.file.close()


def incident2_raw(path):
    import caller

    rec = RawDigestRecorder(path, only={"decoder_model_merged.onnx"})
    try:
        tokens = caller.incident2_dummy_encoder_present(rec)
    finally:
        rec.close()
    for c in read(path):
        enc = c["feeds"]["past_key_values.0.encoder.key"]
        print(f"    call {c['call']}: encoder past {enc['shape']} {enc['digest'][:12]}…"
              + (f"; error {c['error'][:90]}…" if "error" in c else ""))
    return tokens


# ---------------------------------------------------------------- the traces
def beams_correct(path):
    tokens, log, wrong = beam3(path)
    assert not wrong and len([b for b in log[1:-1] if b != [0, 1, 2]]) >= 2, "beams must reorder at 2+ calls"
    return tokens


def beams_broken(path):
    tokens, log, wrong = beam3(path, reorder=False)
    assert wrong, "the no-reorder client must feed a past that is not the gather"
    return tokens


def long_correct(path):
    tokens, log, wrong, moved = beam4_long(path)
    assert not wrong and [m for m in moved if m >= 2], "beams must reorder visibly at a call after call 1"
    return tokens


def long_broken(path):
    tokens, log, wrong, moved = beam4_long(path, reorder=False)
    assert wrong, "the no-reorder client must feed a past that is not the gather"
    return tokens


def s2s_correct(path):
    tokens, log, wrong = seq2seq_beam2(path)
    assert not wrong
    return tokens


def s2s_broken(path):
    tokens, log, wrong = seq2seq_beam2(path, reorder=False)
    assert wrong
    return tokens


TRACES_BY_NAME = {
    "optimum-greedy-padded": greedy_padded,
    "optimum-greedy-padded-no-positions": lambda p: greedy_padded(p, positions=False),
    "optimum-beam3": beams_correct,
    "optimum-beam3-no-reorder": beams_broken,
    "optimum-beam4-long": long_correct,
    "optimum-beam4-long-no-reorder": long_broken,
    "optimum-seq2seq-beam2": s2s_correct,
    "optimum-seq2seq-beam2-no-reorder": s2s_broken,
    "optimum-seq2seq-beam2-no-expand": seq2seq_no_expand,
    "optimum-sample-topk": sample_topk,
    "speculative-correct": speculative,
    "speculative-no-crop": lambda p: speculative(p, crop=False),
    "incident2-raw-digests": incident2_raw,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", choices=sorted(TRACES_BY_NAME), action="append", default=[])
    ap.add_argument("--all", action="store_true", help="every trace")
    ap.add_argument("--list", action="store_true", help="the trace names")
    ap.add_argument("--out", type=Path, default=TRACES, help="folder for the traces (default tests/traces)")
    a = ap.parse_args()
    if a.list:
        print("\n".join(TRACES_BY_NAME))
        return
    if not (a.trace or a.all):
        ap.error("give --trace NAME, --all or --list")
    import torch

    quiet()
    torch.set_num_threads(1)
    a.out.mkdir(parents=True, exist_ok=True)
    for name in (list(TRACES_BY_NAME) if a.all else a.trace):
        print(f"{name}:")
        path = a.out / f"{name}.jsonl"
        TRACES_BY_NAME[name](path)
        calls = read(path)
        print(f"    {len(calls)} calls, files {sorted({c['model'] for c in calls})}, {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
