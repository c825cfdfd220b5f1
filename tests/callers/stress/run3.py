import os
import sys
sys.argv = [sys.argv[0], "__none__"]
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "run.py")).read())
results.clear()
for s in (1, 2):
    case(f"llama-sample-ret3-seed{s}", LL, causal, dict(**one(P), max_new_tokens=8, do_sample=True, top_p=0.9, temperature=0.7, num_return_sequences=3, pad_token_id=2), seed=s)
case("gpt2-sample-ret2", G2, causal, dict(**one(P), max_new_tokens=8, do_sample=True, top_k=5, num_return_sequences=2, pad_token_id=0), seed=5)
case("marian-sample-ret2", MA, seq2seq, dict(**one([12, 400, 77, 0]), max_new_tokens=8, do_sample=True, top_k=5, num_return_sequences=2), seed=5)
case("llama-greedy-batch2-same-prompt", LL, causal, dict(input_ids=ids([P, P]), attention_mask=ids([[1]*4]*2), max_new_tokens=6, do_sample=False, pad_token_id=2))
for r in results: print(" | ".join(map(str, r)))
