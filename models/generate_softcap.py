"""Generate the logit-softcap fixtures: two text-generation-with-past exports of
one tiny Gemma2 whose config.json says final_logit_softcapping 3.0. In one the
graph applies the cap (logits = 3 * tanh(raw / 3)); in the other it does not.
Each is measured in onnxruntime against PyTorch built from the folder's OWN
config.json with the same weights.

    python3 models/generate_softcap.py [--out DIR] [NAME ...]
    python3 models/generate_softcap.py --verify-only [--out DIR] [NAME ...]

Default: both. Versions: torch 2.9.1, transformers 4.57.6, optimum 2.1.0 +
optimum-onnx 0.1.0, onnx 1.23.2, onnxruntime 1.31.1 (requirements-gen.txt).
The model is built from a config with torch.manual_seed(0) (no hub access),
saved with save_pretrained into a temporary folder and exported from there with
optimum's `main_export(task="text-generation-with-past")` (the function behind
`optimum-cli export onnx`), defaults otherwise (TorchScript exporter, opset 18,
constant folding), with one change: optimum loads the checkpoint with
attn_implementation="eager" (TasksManager.get_model_from_task is wrapped for the
export to add that keyword). By default transformers 4.57 loads Gemma2 with
"sdpa", and transformers' sdpa attention ignores the `softcap` argument, so
a plain main_export leaves attn_logit_softcapping (50) out of the graph; the
script checks this with an extra plain export, written to a temporary folder only.
Every folder holds model.onnx, config.json and generation_config.json, the files
optimum wrote, except for the one swap named below.

The model: Gemma2ForCausalLM, vocab 500, hidden 64, intermediate 128, 2 layers,
4 heads, 2 KV heads, head_dim 16, query_pre_attn_scalar 16 (= head_dim),
max_position_embeddings 128, layer_types [sliding_attention, full_attention],
sliding_window 4, attn_logit_softcapping 50 (the default),
final_logit_softcapping 3.0, initializer_range 0.2, tie_word_embeddings false
(tied, the random model greedily repeats a prompt token). With
initializer_range 0.2 the raw logits (before the cap) reach 7.07 on the
5-token prompt and 6-7% of them exceed 3.0, so the cap changes them; on 20
further random 5-token prompts the last row's max |raw logit| is 4.5-8.2,
beyond 3.0 in every one. (At 0.1 it is 2.3-3.3, beyond 3.0 in 4 of 20.)
The softcap has no parameters, so both folders have the same weights.

  softcap-gemma2/   GOOD. Exported as is. The end of the graph is
                    /lm_head/MatMul -> Div /Div (/ 3.0) -> Tanh /Tanh
                    -> Mul /Mul (x 3.0) -> logits; every logit is within
                    +-3.0. Each attention layer also has its softcap
                    (Div /model/layers.L/self_attn/Div_2 by 50, Tanh, Mul_9 by
                    50), and each MLP has the Tanh of gelu_pytorch_tanh
                    (/model/layers.L/mlp/act_fn/Tanh).
  softcap-dropped/  BROKEN. The same weights exported from a model whose
                    config had final_logit_softcapping None: logits =
                    /lm_head/MatMul, no final Div/Tanh/Mul. config.json is
                    softcap-gemma2's config.json (byte-identical: the exporter's
                    file for the capped export; the two exporter-written files
                    differ only in final_logit_softcapping), so the shipped
                    config claims a cap the graph does not apply. Logits reach
                    7.07 on the 5-token prompt. The cached and uncached
                    runs of the graph agree, so a parity check between them
                    cannot see the bug. The cap is monotonic, so the argmax
                    (greedy) tokens are also unchanged.

Verification, per folder: PyTorch = AutoConfig.from_pretrained(folder) ->
AutoModelForCausalLM.from_config(attn_implementation="eager") ->
load_state_dict(the seeded weights). A 5-token prompt is run as step 0 (empty
pasts) plus 3 greedy cached one-token steps (the graph has no position_ids
input; sequence length 8 > sliding_window 4), the tokens fed to ORT being
PyTorch's greedy ones; max |delta| of the last row of the logits at each call,
against PyTorch's cached run and against a PyTorch recompute of the whole
sequence. The same file is also run uncached (the whole sequence, empty pasts)
at each call and compared with the cached run. 20 further random 5-token
prompts (random.Random(1)) are run once each, uncached. GOOD: every figure
<= 1e-4, every ONNX logit within +-3.0 and some raw (uncapped PyTorch) logit
beyond 3.0. BROKEN: ONNX logits beyond +-3.0 (on every prompt), ONNX vs the
folder's PyTorch > 1 at every call, ONNX vs PyTorch with
final_logit_softcapping None <= 1e-4, cached vs uncached <= 1e-4. Also
printed, not asserted: ONNX vs PyTorch with transformers' default attention
for the config (sdpa, which ignores attn_logit_softcapping). The script also lists the Tanh nodes of each graph with the Div before
and the Mul after and their constants, and the nodes between lm_head and the
logits output.

The script re-executes itself with PYTHONHASHSEED=0 and HF_HUB_OFFLINE=1, runs
on one thread (torch and ORT) and seeds random, numpy and torch before every
export (optimum's dummy inputs use all three).
"""
import json
import random
import warnings
from pathlib import Path

import fixture_common as fc
from fixture_common import d

fc.start(__name__)

import numpy as np  # noqa: E402
import onnx  # noqa: E402

warnings.filterwarnings("ignore")

torch = fc.one_thread_torch()
import transformers  # noqa: E402

transformers.logging.set_verbosity_error()

HERE = Path(__file__).resolve().parent
OUT = HERE  # --out DIR
SEED = 0
TOL = 1e-4
BROKEN_MIN = 1.0  # the dropped cap is off by more than this
CAP = 3.0
ATTN_CAP = 50.0  # Gemma2Config's default attn_logit_softcapping
INIT_RANGE = 0.2
WINDOW = 4
PROMPT5 = [2, 37, 205, 411, 89]  # bos 2
STEPS = 3  # cached one-token steps after the prompt
N_PROMPTS = 20  # further random prompts, checked for raw logits beyond the cap
MAX_FILE = 1_000_000


# ---------------------------------------------------------------- model

def gemma2_config(cap=CAP):
    return transformers.Gemma2Config(
        vocab_size=500, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16, max_position_embeddings=128,
        layer_types=["sliding_attention", "full_attention"], sliding_window=WINDOW,
        attn_logit_softcapping=ATTN_CAP, final_logit_softcapping=cap, initializer_range=INIT_RANGE,
        tie_word_embeddings=False,
    )


def gemma2(cap=CAP):
    torch.manual_seed(SEED)
    return transformers.Gemma2ForCausalLM(gemma2_config(cap)).eval()


# The weights each folder's graph was exported from (the reference loads these
# into a model built from the folder's own config.json).
WEIGHTS = {
    "softcap-gemma2": lambda: gemma2(CAP),
    "softcap-dropped": lambda: gemma2(None),
}
BROKEN = {"softcap-dropped"}


# ---------------------------------------------------------------- export helpers

def eager_loading():
    """optimum loads the checkpoint with attn_implementation="eager"
    (transformers' default for Gemma2 is sdpa, which drops
    attn_logit_softcapping)."""
    return fc.eager_attention(announce=True)


def optimum_export(model, patch=eager_loading):
    """fc.optimum_export (text-generation-with-past), eager by default."""
    return fc.optimum_export(model, patch=patch)


write = fc.write_files


def tanh_nodes(model_bytes: bytes):
    m = onnx.load_from_string(model_bytes)
    return [n.name for n in m.graph.node if n.op_type == "Tanh"]


# ---------------------------------------------------------------- generators

def gen_gemma2():
    files = optimum_export(gemma2(CAP))
    write(OUT / "softcap-gemma2", files)
    # What a plain main_export (transformers' default attention, sdpa) gives: not written anywhere.
    plain = optimum_export(gemma2(CAP), patch=None)
    t_plain, t_eager = tanh_nodes(plain["model.onnx"]), tanh_nodes(files["model.onnx"])
    print(f"  for comparison, a plain main_export (sdpa; temporary, not written): Tanh nodes {t_plain}")
    print(f"  the eager export written: Tanh nodes {t_eager}")
    assert not any("self_attn" in t for t in t_plain) and "/Tanh" in t_plain
    assert sum("self_attn" in t for t in t_eager) == 2 and "/Tanh" in t_eager
    assert plain["config.json"] == files["config.json"]


def gen_dropped():
    files = optimum_export(gemma2(None))
    good = optimum_export(gemma2(CAP))
    a, b = json.loads(files["config.json"]), json.loads(good["config.json"])
    assert a["final_logit_softcapping"] is None and b["final_logit_softcapping"] == CAP
    strip = lambda c: {k: v for k, v in c.items() if k != "final_logit_softcapping"}
    assert strip(a) == strip(b)
    assert files["generation_config.json"] == good["generation_config.json"]
    print("  exported config.json differs from the capped export's only in final_logit_softcapping (null there); "
          "shipping the capped export's config.json")
    files["config.json"] = good["config.json"]
    write(OUT / "softcap-dropped", files)


GENERATORS = {
    "softcap-gemma2": gen_gemma2,
    "softcap-dropped": gen_dropped,
}


# ---------------------------------------------------------------- verification helpers

def describe(folder: Path):
    fc.describe(folder, "model.onnx", max_size=MAX_FILE)


def reference(folder: Path, name: str, attn="eager"):
    """PyTorch from the folder's own config.json, with the exported weights."""
    cfg = transformers.AutoConfig.from_pretrained(folder)
    kw = {"attn_implementation": attn} if attn else {}
    ref = transformers.AutoModelForCausalLM.from_config(cfg, **kw).eval()
    missing, unexpected = ref.load_state_dict(WEIGHTS[name]().state_dict(), strict=True)
    assert not missing and not unexpected
    return cfg, ref


def raw_model(name: str):
    """The same weights with final_logit_softcapping None (eager): the logits
    before the cap."""
    m = transformers.Gemma2ForCausalLM(gemma2_config(None)).eval()
    m.config._attn_implementation = "eager"
    m.load_state_dict(WEIGHTS[name]().state_dict(), strict=True)
    return m


Runner = fc.WithPastRunner  # (no position_ids input here)


def compare(folder: Path, ref, raw, prompt):
    """Step 0 + STEPS greedy cached steps, PyTorch's tokens fed to both.
    Per call: last-row |d| vs PyTorch cached, vs PyTorch recompute, ORT cached vs
    ORT uncached (same file, whole sequence), vs raw (uncapped) PyTorch; also the
    max |logit| of ORT (all rows) and of the raw logits, the fraction of raw
    logits beyond CAP, and whether ORT's top-1 == PyTorch's."""
    r = Runner(folder / "model.onnx")
    seq = list(prompt)
    lg, past = r.run(seq, len(seq), None)
    with torch.no_grad():
        o = ref(input_ids=torch.tensor([seq]), use_cache=True)
    plg, ppast = o.logits[0].numpy(), o.past_key_values
    out = {"cached": [], "recompute": [], "uncached": [], "raw": [], "ort_max": [], "raw_max": [],
           "raw_frac": [], "top1": [], "all0": d(lg, plg), "tokens": []}
    for step in range(STEPS + 1):
        if step:
            tok = int(plg[-1].argmax())
            seq.append(tok)
            out["tokens"].append(tok)
            lg, past = r.run([tok], len(seq), past)
            with torch.no_grad():
                o = ref(input_ids=torch.tensor([[tok]]), attention_mask=torch.ones(1, len(seq), dtype=torch.long),
                        past_key_values=ppast, use_cache=True)
            plg, ppast = o.logits[0].numpy(), o.past_key_values
        with torch.no_grad():
            full = ref(input_ids=torch.tensor([seq]), use_cache=False).logits[0].numpy()
            rawl = raw(input_ids=torch.tensor([seq]), use_cache=False).logits[0].numpy()
        unc, _ = r.run(seq, len(seq), None)
        out["cached"].append(d(lg[-1], plg[-1]))
        out["recompute"].append(d(lg[-1], full[-1]))
        out["uncached"].append(d(lg[-1], unc[-1]))
        out["raw"].append(d(lg[-1], rawl[-1]))
        out["ort_max"].append(float(np.abs(lg).max()))
        out["raw_max"].append(float(np.abs(rawl[-1] if step else rawl).max()))
        out["raw_frac"].append(float((np.abs(rawl[-1] if step else rawl) > CAP).mean()))
        out["top1"].append(int(lg[-1].argmax()) == int(plg[-1].argmax()))
    return out


# ---------------------------------------------------------------- graph: where the softcaps are

const_values = fc.const_values


def softcaps_in_graph(m: onnx.ModelProto):
    """Every Tanh with the node producing its input and the nodes reading its
    output, and the constant operands of those; and the chain from the last
    MatMul (lm_head) to the logits output."""
    g = m.graph
    vals = const_values(m)
    prod = {o: n for n in g.node for o in n.output}
    cons = {}
    for n in g.node:
        for i in n.input:
            cons.setdefault(i, []).append(n)

    def const_of(n, skip):
        c = [vals[i] for i in n.input if i != skip and i in vals]
        return float(c[0].ravel()[0]) if c and c[0].size == 1 else None

    caps = []
    for k, n in enumerate(g.node):
        if n.op_type != "Tanh":
            continue
        p = prod.get(n.input[0])
        users = cons.get(n.output[0], [])
        caps.append({
            "index": k, "tanh": n.name,
            "before": (p.op_type, p.name, const_of(p, n.input[0])) if p is not None else None,
            "after": [(u.op_type, u.name, const_of(u, n.output[0])) for u in users],
            "softcap": (p is not None and p.op_type == "Div" and len(users) == 1 and users[0].op_type == "Mul"
                        and const_of(p, n.input[0]) is not None
                        and const_of(p, n.input[0]) == const_of(users[0], n.output[0])),
        })
    chain, n = [], prod.get("logits")
    while n is not None:
        chain.append((n.op_type, n.name))
        if n.op_type == "MatMul":
            break
        n = prod.get(n.input[0])
    return caps, chain[::-1]


def report_softcaps(folder: Path, cfg):
    m = onnx.load(folder / "model.onnx")
    caps, chain = softcaps_in_graph(m)
    print(f"  config.json: final_logit_softcapping {cfg.final_logit_softcapping}, "
          f"attn_logit_softcapping {cfg.attn_logit_softcapping}, hidden_activation {cfg.hidden_activation}")
    print(f"  logits chain: {' -> '.join(f'{o} {n}' for o, n in chain)} -> logits")
    for c in caps:
        print(f"  Tanh {c['tanh']} (node {c['index']}): before {c['before']}, after {c['after']}"
              + ("  [softcap: Div c, Tanh, Mul c]" if c["softcap"] else ""))
    final = [c for c in caps if c["softcap"] and c["tanh"] == "/Tanh"]
    attn = [c for c in caps if c["softcap"] and "self_attn" in c["tanh"]]
    return chain, final, attn


# ---------------------------------------------------------------- verify

def verify(name: str):
    folder = OUT / name
    cfg, ref = reference(folder, name)
    assert cfg.final_logit_softcapping == CAP  # both folders ship the capped config
    chain, final, attn = report_softcaps(folder, cfg)
    raw = raw_model(name)
    r = compare(folder, ref, raw, PROMPT5)
    _, ref_sdpa = reference(folder, name, attn=None)
    print(f"  PyTorch default attention for this config: {ref_sdpa.config._attn_implementation}")
    r_sdpa = compare(folder, ref_sdpa, raw, PROMPT5)
    f = lambda xs: ", ".join(f"{x:.2e}" for x in xs)
    g = lambda xs: ", ".join(f"{x:.4g}" for x in xs)
    print(f"  5-token prompt {PROMPT5} (positions 0-4), then {STEPS} cached steps (positions 5-{4 + STEPS}); "
          f"PyTorch greedy tokens {r['tokens']}")
    print(f"    ORT cached vs PyTorch (eager, the folder's config) cached, last row: {f(r['cached'])}; "
          f"step 0 all rows {r['all0']:.2e}")
    print(f"    ORT cached vs PyTorch recompute of the whole sequence, last row: {f(r['recompute'])}")
    print(f"    ORT cached vs ORT uncached (same file, whole sequence, empty pasts), last row: {f(r['uncached'])}")
    print(f"    ORT vs PyTorch with final_logit_softcapping None (raw logits), last row: {f(r['raw'])}")
    print(f"    ORT vs PyTorch default attention ({ref_sdpa.config._attn_implementation}, ignores "
          f"attn_logit_softcapping), last row: {f(r_sdpa['cached'])}")
    print(f"    max |ONNX logit| per call (step 0 all rows): {g(r['ort_max'])}")
    print(f"    max |raw logit| per call (step 0 all rows): {g(r['raw_max'])}; fraction of raw logits beyond "
          f"{CAP}: {g(r['raw_frac'])}")
    print(f"    ORT top-1 == PyTorch top-1: {r['top1']}")
    # 20 more prompts (seeded), one uncached call each: last-row max |logit|, ONNX and raw.
    rng = random.Random(1)
    prompts = [[2] + [rng.randrange(3, 500) for _ in range(4)] for _ in range(N_PROMPTS)]
    runner = Runner(folder / "model.onnx")
    o_max, r_max = [], []
    for p in prompts:
        o_max.append(float(np.abs(runner.run(p, len(p), None)[0][-1]).max()))
        with torch.no_grad():
            r_max.append(float(raw(input_ids=torch.tensor([p])).logits[0, -1].abs().max()))
    print(f"  {N_PROMPTS} random 5-token prompts (random.Random(1)), last row: max |raw logit| min {min(r_max):.3g} "
          f"median {sorted(r_max)[N_PROMPTS // 2]:.3g} max {max(r_max):.3g}, beyond {CAP} in "
          f"{sum(x > CAP for x in r_max)}/{N_PROMPTS}; max |ONNX logit| min {min(o_max):.3g} max {max(o_max):.3g}, "
          f"beyond {CAP} in {sum(x > CAP for x in o_max)}/{N_PROMPTS}")
    assert all(x > CAP for x in r_max)
    worst = max(r["ort_max"])
    if name not in BROKEN:
        for k in ("cached", "recompute", "uncached"):
            assert max(r[k]) <= TOL, (k, r[k])
        assert r["all0"] <= TOL
        assert worst <= CAP, worst
        assert max(r["raw_max"]) > CAP and max(o_max) <= CAP
        assert final and len(final[0]["after"]) == 1 and final[0]["before"][2] == CAP
        assert [op for op, _ in chain] == ["MatMul", "Div", "Tanh", "Mul"], chain
        assert len(attn) == cfg.num_hidden_layers and all(c["before"][2] == ATTN_CAP for c in attn)
        print(f"  GOOD: every call <= 1e-4 (cached, recompute, uncached); max |ONNX logit| {worst:.4g} <= {CAP}; "
              f"raw logits up to {max(r['raw_max']):.4g}; final softcap Div/Tanh/Mul by {CAP} present")
    else:
        assert worst > CAP and all(x > CAP for x in o_max), (worst, o_max)
        assert min(r["cached"]) > BROKEN_MIN and min(r["recompute"]) > BROKEN_MIN, r
        assert max(r["raw"]) <= TOL, r["raw"]
        assert max(r["uncached"]) <= TOL, r["uncached"]
        assert not final and [op for op, _ in chain] == ["MatMul"], chain
        assert len(attn) == cfg.num_hidden_layers
        print(f"  BROKEN as intended: max |ONNX logit| {worst:.4g} > {CAP}; off PyTorch (the folder's config) by "
              f"{min(r['cached']):.3g}-{max(r['cached']):.3g} per call; == PyTorch without the cap; "
              f"cached == uncached (max {max(r['uncached']):.2e}); no final Div/Tanh/Mul")
    return r


if __name__ == "__main__":
    args = fc.parse_args(GENERATORS)
    OUT = args.out or OUT
    fc.versions("torch", "transformers", "onnx", "onnxruntime")
    a, b = gemma2(CAP).state_dict(), gemma2(None).state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    print("  the capped and uncapped models have identical weights", flush=True)
    fc.run_all(args, OUT, GENERATORS, verify, describe_folder=describe)
