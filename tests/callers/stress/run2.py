import os
import sys
sys.argv = [sys.argv[0], "__none__"]
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "run.py")).read())
results.clear()
import torch
# find eos for gpt2/llama such that beam search ends before max_new_tokens
def ends_early(folder, pad, eos, beams=4, n=12, es=True):
    m = causal(folder)
    out = m.generate(**one(P), max_new_tokens=n, num_beams=beams, do_sample=False, pad_token_id=pad, eos_token_id=eos, early_stopping=es, min_new_tokens=2)
    return out.shape[1] - len(P)
for folder, pad, cands in ((LL, 2, [179, 889, 566, 876, 897, 841, 439, 628]), (G2, 0, [899, 288, 92])):
    for e in cands:
        L = ends_early(folder, pad, e)
        print(folder.name, "eos", e, "len", L)
        if L < 12:
            for es in (True, False):
                case(f"{folder.name}-beam4-stop-eos{e}-early{es}", folder, causal, dict(**one(P), max_new_tokens=12, min_new_tokens=2, num_beams=4, num_return_sequences=2, do_sample=False, pad_token_id=pad, eos_token_id=e, early_stopping=es))
            break
# greedy batch where one row hits eos early -> pad tokens fed afterwards
case("gpt2-greedy-batch-eos899", G2, causal, dict(**pad_batch([P, [7, 21, 5, 9, 10, 11]], 0), max_new_tokens=10, do_sample=False, pad_token_id=0, eos_token_id=899))
case("gpt2-greedy-batch-eos899-pad5", G2, causal, dict(**pad_batch([P, [7, 21, 5, 9, 10, 11]], 0), max_new_tokens=10, do_sample=False, pad_token_id=5, eos_token_id=899))
case("llama-sample-ret3", LL, causal, dict(**one(P), max_new_tokens=8, do_sample=True, top_p=0.9, temperature=0.7, num_return_sequences=3, pad_token_id=2), seed=3)
srcb = [[0, 12, 400, 77, 2], [0, 5, 6, 7, 8, 9, 10, 2]]
case("bart-greedy-min6", BA, seq2seq, dict(**pad_batch(srcb, 1, "right"), max_new_tokens=8, min_new_tokens=6, do_sample=False))
case("bart-beam3-min6", BA, seq2seq, dict(**pad_batch(srcb, 1, "right"), max_new_tokens=8, min_new_tokens=6, num_beams=3, do_sample=False))
case("marian-beam3-eos957", MA, seq2seq, dict(**pad_batch([[12, 400, 77, 0], [5, 6, 7, 8, 9, 10, 0]], 999, "right"), max_new_tokens=10, num_beams=3, do_sample=False, eos_token_id=957, early_stopping=True))
try:
    case("llama-contrastive", LL, causal, dict(**one(P), max_new_tokens=6, penalty_alpha=0.6, top_k=4, pad_token_id=2, trust_remote_code=True))
except Exception as e: print("contrastive", e)
with open(f"{OUT}/results-run2.txt", "w") as f:
    for r in results:
        line = " | ".join(map(str, r)); print(line); f.write(line + "\n")
