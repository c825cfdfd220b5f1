import os, sys, json, subprocess, collections, traceback
sys.path.insert(0, "" + os.path.join(os.path.dirname(os.path.abspath(__file__)), "..") + "")
import clients as C
from clients import causal, seq2seq, ids, recording, quiet, MODELS
import torch
torch.set_num_threads(1)
quiet()
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "traces", "stress")
BIN = "onnx-contract"
LL, G2, QW, MA, BA = (MODELS / n for n in ("llama-tiny", "gpt2-tiny", "qwen2-tiny", "marian-tiny", "bart-tiny"))
P = [3, 14, 15, 92]

def one(prompt): return dict(input_ids=ids([prompt]), attention_mask=ids([[1]*len(prompt)]))

def pad_batch(prompts, pad, side="left"):
    w = max(map(len, prompts))
    if side == "left":
        r = [[pad]*(w-len(p)) + p for p in prompts]; m = [[0]*(w-len(p)) + [1]*len(p) for p in prompts]
    else:
        r = [p + [pad]*(w-len(p)) for p in prompts]; m = [[1]*len(p) + [0]*(w-len(p)) for p in prompts]
    return dict(input_ids=ids(r), attention_mask=ids(m))

def probe_eos(folder, prompt, pad, n=10, beams=4):
    m = causal(folder)
    out = m.generate(**one(prompt), max_new_tokens=n, num_beams=beams, num_return_sequences=beams, do_sample=False,
                     pad_token_id=pad, eos_token_id=None)
    seqs = out[:, len(prompt):].tolist()
    cnt = collections.Counter(t for s in seqs for t in s[2:6])
    return cnt.most_common(1)[0][0], seqs

results = []
def case(name, folder, loader, kwargs, seed=None):
    path = f"{OUT}/{name}.jsonl"
    try:
        m = loader(folder)
        log = []
        C.track_reorder(m, log)
        if seed is not None: torch.manual_seed(seed)
        with recording(path):
            out = m.generate(**kwargs)
        toks = out.tolist()
    except Exception as e:
        traceback.print_exc(); results.append((name, "GEN-ERROR", str(e)[:200], "", "")); return
    cmd = [BIN, "replay", path, "--model", str(folder), "--format", "json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    try:
        d = json.loads(p.stdout)
    except Exception:
        results.append((name, "REPLAY-ERROR", p.stderr[:300], "", "")); return
    errs = [f for f in d.get("findings", []) if f.get("severity") in ("error", None) or True]
    first = errs[0] if errs else None
    ftxt = "" if not first else f"{first.get('code')} [{first.get('severity')}]: {first.get('message', first)}"[:600]
    results.append((name, d.get("at_fault"), d.get("decoding"), ftxt, f"{len(d.get('findings', []))} findings; beam_idx log {log[:10]}; out {toks}"))
    json.dump(d, open(f"{OUT}/{name}.replay.json", "w"), indent=1)

which = sys.argv[1:] 
def want(n): return not which or any(w in n for w in which)

LP, GP = 2, 0
if want("llama-beam4-ret2"):
    case("llama-beam4-ret2", LL, causal, dict(**one(P), max_new_tokens=8, num_beams=4, num_return_sequences=2, do_sample=False, pad_token_id=LP))
if want("eos"):
    eos, seqs = probe_eos(LL, P, LP)
    print("probe eos", eos, seqs)
    for es in (True, False):
        case(f"llama-beam4-eos{eos}-early{es}", LL, causal, dict(**one(P), max_new_tokens=10, min_new_tokens=2, num_beams=4, num_return_sequences=2,
             do_sample=False, pad_token_id=LP, eos_token_id=eos, early_stopping=es))
    case(f"llama-beam4-eos{eos}-never", LL, causal, dict(**one(P), max_new_tokens=10, num_beams=4, do_sample=False, pad_token_id=LP, eos_token_id=eos, early_stopping="never"))
    eosg, seqsg = probe_eos(G2, P, GP)
    print("probe eos gpt2", eosg, seqsg)
    case(f"gpt2-beam4-eos{eosg}-batch", G2, causal, dict(**pad_batch([P, [7, 21, 5, 9, 10, 11]], GP), max_new_tokens=10, num_beams=4, do_sample=False, pad_token_id=GP, eos_token_id=eosg, early_stopping=True))
if want("s2s"):
    src = [[12, 400, 77, 0], [5, 6, 7, 8, 9, 10, 0]]
    case("marian-beam3-batch2", MA, seq2seq, dict(**pad_batch(src, 999, "right"), max_new_tokens=8, num_beams=3, do_sample=False))
    case("marian-beam3-batch2-ret3", MA, seq2seq, dict(**pad_batch(src, 999, "right"), max_new_tokens=8, num_beams=3, num_return_sequences=3, do_sample=False))
    srcb = [[0, 12, 400, 77, 2], [0, 5, 6, 7, 8, 9, 10, 2]]
    case("bart-beam3-batch2", BA, seq2seq, dict(**pad_batch(srcb, 1, "right"), max_new_tokens=8, num_beams=3, do_sample=False))
    case("bart-greedy-batch2", BA, seq2seq, dict(**pad_batch(srcb, 1, "right"), max_new_tokens=8, do_sample=False))
    case("marian-sample", MA, seq2seq, dict(**one([12, 400, 77, 0]), max_new_tokens=8, do_sample=True, top_p=0.9, temperature=0.7), seed=7)
if want("proc"):
    case("llama-beam4-penalties", LL, causal, dict(**one(P), max_new_tokens=10, num_beams=4, length_penalty=2.0, no_repeat_ngram_size=2, repetition_penalty=1.3, do_sample=False, pad_token_id=LP))
    case("llama-greedy-reppen", LL, causal, dict(**one(P), max_new_tokens=10, repetition_penalty=1.3, do_sample=False, pad_token_id=LP))
    case("gpt2-greedy-reppen", G2, causal, dict(**one(P), max_new_tokens=10, repetition_penalty=1.3, do_sample=False, pad_token_id=GP))
    case("llama-sample-topp", LL, causal, dict(**one(P), max_new_tokens=10, do_sample=True, top_p=0.9, temperature=0.7, pad_token_id=LP), seed=11)
    case("llama-beam-sample", LL, causal, dict(**one(P), max_new_tokens=8, do_sample=True, num_beams=3, top_p=0.9, temperature=0.7, pad_token_id=LP), seed=11)
    case("llama-greedy-bad-words", LL, causal, dict(**one(P), max_new_tokens=8, do_sample=False, pad_token_id=LP, bad_words_ids=[[C_t] for C_t in range(0, 1000, 3)]))
if want("models"):
    case("gpt2-beam4", G2, causal, dict(**one(P), max_new_tokens=8, num_beams=4, do_sample=False, pad_token_id=GP))
    case("qwen2-beam4", QW, causal, dict(**one(P), max_new_tokens=8, num_beams=4, do_sample=False, pad_token_id=0, eos_token_id=None))
    case("qwen2-beam3-batch", QW, causal, dict(**pad_batch([P, [7, 21, 5, 9, 10, 11]], 0), max_new_tokens=8, num_beams=3, do_sample=False, pad_token_id=0, eos_token_id=None))
    case("gpt2-beam3-ret3", G2, causal, dict(**one(P), max_new_tokens=8, num_beams=3, num_return_sequences=3, do_sample=False, pad_token_id=GP))

with open(f"{OUT}/results-{'_'.join(which) or 'all'}.txt", "w") as f:
    for r in results:
        line = " | ".join(map(str, r)); print(line); f.write(line + "\n")
