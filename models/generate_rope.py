"""Generate the rotary-audit fixtures: eight text-generation-with-past exports
whose config.json rope parameters (rope_theta, partial_rotary_factor, head_dim,
rope_scaling) do or do not agree with the cos/sin the graph computes. Each is
measured in onnxruntime against PyTorch built from the folder's OWN config.json
with the same weights.

    python3 models/generate_rope.py [--out DIR] [NAME ...]
    python3 models/generate_rope.py --verify-only [--out DIR] [NAME ...]

Default: all eight. Versions: torch 2.9.1, transformers 4.57.6, optimum 2.1.0 +
optimum-onnx 0.1.0, onnx 1.23.2, onnxruntime 1.31.1 (requirements-gen.txt).
Every model is built from a config with torch.manual_seed(0) (no hub access),
initializer_range 0.1, saved with save_pretrained into a temporary folder and
exported from there with optimum's `main_export(task=
"text-generation-with-past")` (the function behind `optimum-cli export onnx`),
defaults otherwise (TorchScript exporter, opset 18, constant folding). Every
folder holds model.onnx, config.json and generation_config.json; the two config
files are the ones optimum wrote, except for the two edits named below.

The Llamas (hidden 64, 4 heads, 2 KV heads, head_dim 16, 2 layers, vocab 500,
max_position_embeddings 128) all have the SAME weights (rope has no
parameters); so do the two Phi-3s.

  rope-llama3/          GOOD. LlamaForCausalLM, rope_theta 10000, rope_scaling
                        {rope_type llama3, factor 8, low_freq_factor 1,
                        high_freq_factor 4, original_max_position_embeddings
                        32}. With head_dim 16 and theta 10000 the 8 inverse
                        frequencies fall in all three llama3 bands: index 0
                        kept (wavelength 6.3 < 8), index 1 smoothed (19.9),
                        indices 2-7 divided by 8 (> 32).
  rope-llama3-dropped/  BROKEN. The same weights exported with rope_scaling
                        None (default rope); config.json is rope-llama3's
                        config.json (byte-identical: the exporter's file for
                        the llama3 export), so the shipped config claims
                        llama3 scaling the graph does not apply. Wrong from
                        step 0 at every prompt length.
  rope-theta-changed/   BROKEN. The same weights exported with rope_theta
                        10000 and no scaling; config.json is the exporter's
                        with `"rope_theta": 10000.0` replaced by
                        `"rope_theta": 500000.0` (a text edit, nothing else).
                        Wrong from step 0.
  rope-linear/          GOOD. The same Llama with rope_scaling {rope_type
                        linear, factor 2}.
  rope-longrope-short/  BROKEN. Phi3ForCausalLM (hidden 64, 4 heads, 2 KV heads,
                        head_dim 16, 2 layers, vocab 500),
                        max_position_embeddings 128,
                        original_max_position_embeddings 32, rope_scaling
                        {type longrope, short_factor [8], long_factor [8]}
                        exported by optimum as it is. transformers chooses the
                        factors in Python (dynamic_rope_update:
                        max(position_ids) + 1 > 32 -> long), and optimum traces
                        with dummy position_ids [2, 16] drawn from [0, 16)
                        (max + 1 = 16 <= 32), so the graph holds the SHORT
                        inverse frequencies only. Exact while
                        max(position_ids) + 1 <= 32; a 40-token prompt is
                        wrong at step 0 (at every row: PyTorch uses the long
                        factors for the whole call).
  rope-longrope/        GOOD twin of rope-longrope-short: the same Phi-3 and the
                        same main_export, with Phi3RotaryEmbedding.forward
                        replaced for the export by one that computes both
                        inverse-frequency vectors and picks one with
                        Where(ReduceMax(position_ids) + 1 > 32, long, short):
                        transformers' own rule, evaluated per call in the graph.
                        Names are optimum's (it is optimum's export).
  rope-yarn/            GOOD. Qwen2ForCausalLM (same sizes as the Llamas),
                        rope_scaling {rope_type yarn, factor 4,
                        original_max_position_embeddings 32}. yarn's inverse
                        frequencies and attention factor (0.1 ln 4 + 1) are
                        static, so the trace is right.
  rope-partial/         GOOD. PhiForCausalLM (hidden 64, 4 heads, head_dim 16,
                        2 layers, vocab 500), partial_rotary_factor 0.5: rotary
                        on the first 8 of the 16 head dims (4 frequencies).

Verification, per folder: PyTorch = AutoConfig.from_pretrained(folder) ->
AutoModelForCausalLM.from_config -> load_state_dict(the seeded weights). Two
prompts, 5 tokens and 40 tokens (> original_max_position_embeddings 32), each
run as step 0 (past length 0) plus 3 greedy cached one-token steps, the tokens
fed to ORT being PyTorch's greedy ones; max |delta| of the last row of the
logits at each call. GOOD folders: every figure <= 1e-4. BROKEN folders:
> 1e-2 where the bug shows (the longrope-short 5-token prompt is exact, and is
asserted so). The two longrope folders are also run with a 31-token prompt, whose
steps cross 32 total tokens. The script also lists where the graph computes
rotary (position_ids consumers, the inverse-frequency constant, Cos/Sin and the
scale multiplied into them) and compares the inverse frequencies against
transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS for the shipped config.

The script re-executes itself with PYTHONHASHSEED=0 and HF_HUB_OFFLINE=1, runs
on one thread (torch and ORT) and seeds random, numpy and torch before every
export (optimum's dummy inputs use all three).
"""
import contextlib
import json
import warnings
from pathlib import Path

import fixture_common as fc
from fixture_common import d, i64, session

fc.start(__name__)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402

warnings.filterwarnings("ignore")

torch = fc.one_thread_torch()
import transformers  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

transformers.logging.set_verbosity_error()

HERE = Path(__file__).resolve().parent
OUT = HERE  # --out DIR
SEED = 0
TOL = 1e-4
BROKEN_MIN = 1e-2
INIT_RANGE = 0.1
ORIG_MAX = 32  # original_max_position_embeddings everywhere
MAX_POS = 128
PROMPT5 = [1, 37, 205, 411, 89]
PROMPT40 = PROMPT5 + [(37 * k * k + 11 * k + 5) % 497 + 3 for k in range(35)]
PROMPT31 = PROMPT40[:31]
STEPS = 3  # cached one-token steps after the prompt

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": ORIG_MAX}
LINEAR = {"rope_type": "linear", "factor": 2.0}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIG_MAX}
SHORT = [1.0, 1.05, 1.1, 1.2, 1.35, 1.5, 1.75, 2.0]
LONG = [1.0, 1.4, 2.0, 3.0, 4.5, 6.0, 8.0, 12.0]
LONGROPE = {"type": "longrope", "short_factor": SHORT, "long_factor": LONG}


# ---------------------------------------------------------------- models

def llama(rope_scaling=None, rope_theta=10000.0):
    torch.manual_seed(SEED)
    cfg = transformers.LlamaConfig(
        vocab_size=500, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=MAX_POS, initializer_range=INIT_RANGE,
        rope_theta=rope_theta, rope_scaling=rope_scaling,
    )
    return transformers.LlamaForCausalLM(cfg).eval()


def phi3():
    torch.manual_seed(SEED)
    cfg = transformers.Phi3Config(
        vocab_size=500, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=MAX_POS, original_max_position_embeddings=ORIG_MAX,
        rope_scaling=dict(LONGROPE, short_factor=list(SHORT), long_factor=list(LONG)), initializer_range=INIT_RANGE,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    return transformers.Phi3ForCausalLM(cfg).eval()


def qwen2_yarn():
    torch.manual_seed(SEED)
    cfg = transformers.Qwen2Config(
        vocab_size=500, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=MAX_POS, initializer_range=INIT_RANGE,
        rope_theta=10000.0, rope_scaling=dict(YARN),
    )
    return transformers.Qwen2ForCausalLM(cfg).eval()


def phi_partial():
    torch.manual_seed(SEED)
    cfg = transformers.PhiConfig(
        vocab_size=500, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=MAX_POS, initializer_range=INIT_RANGE, partial_rotary_factor=0.5,
    )
    return transformers.PhiForCausalLM(cfg).eval()


# The weights each folder's graph was exported from (the reference loads these
# into a model built from the folder's own config.json).
WEIGHTS = {
    "rope-llama3": lambda: llama(dict(LLAMA3)),
    "rope-llama3-dropped": lambda: llama(None),
    "rope-theta-changed": lambda: llama(None),
    "rope-linear": lambda: llama(dict(LINEAR)),
    "rope-longrope-short": phi3,
    "rope-longrope": phi3,
    "rope-yarn": qwen2_yarn,
    "rope-partial": phi_partial,
}
BROKEN = {"rope-llama3-dropped", "rope-theta-changed", "rope-longrope-short"}


# ---------------------------------------------------------------- export helpers

optimum_export = fc.optimum_export  # text-generation-with-past, optional patch context
write = fc.write_files


def longrope_select_forward(self, x, position_ids):
    """Phi3RotaryEmbedding.forward with transformers' longrope rule
    (dynamic_rope_update -> longrope_frequency_update: long factors when
    max(position_ids) + 1 > original_max_position_embeddings, short otherwise)
    evaluated in the graph with torch.where instead of a Python `if`. The
    attention scaling is the same for both (as in transformers, which keeps the
    init-time value)."""
    orig = self.config.original_max_position_embeddings
    short_inv = self.original_inv_freq.to(x.device)
    long_inv, _ = self.rope_init_fn(self.config, x.device, seq_len=orig + 1)
    seq_len = torch.max(position_ids) + 1
    inv_freq = torch.where(seq_len > orig, long_inv, short_inv)
    inv_freq_expanded = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1).to(x.device)
    position_ids_expanded = position_ids[:, None, :].float()
    freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.cos() * self.attention_scaling
    sin = emb.sin() * self.attention_scaling
    return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


@contextlib.contextmanager
def patched_phi3_rotary():
    from transformers.models.phi3 import modeling_phi3

    original = modeling_phi3.Phi3RotaryEmbedding.forward
    modeling_phi3.Phi3RotaryEmbedding.forward = longrope_select_forward
    try:
        yield
    finally:
        modeling_phi3.Phi3RotaryEmbedding.forward = original


# ---------------------------------------------------------------- generators

def gen_plain(name):
    write(OUT / name, optimum_export(WEIGHTS[name]()))


def gen_llama3_dropped():
    files = optimum_export(llama(None))
    good = optimum_export(llama(dict(LLAMA3)))
    a, b = json.loads(files["config.json"]), json.loads(good["config.json"])
    assert a["rope_scaling"] is None and b["rope_scaling"] == LLAMA3
    assert {k: v for k, v in a.items() if k != "rope_scaling"} == {k: v for k, v in b.items() if k != "rope_scaling"}
    print("  exported config.json differs from the llama3 export's only in rope_scaling (null there); "
          "shipping the llama3 export's config.json")
    files["config.json"] = good["config.json"]
    write(OUT / "rope-llama3-dropped", files)


def gen_theta_changed():
    files = optimum_export(llama(None))
    text = files["config.json"].decode()
    old, new = '"rope_theta": 10000.0', '"rope_theta": 500000.0'
    assert text.count(old) == 1, text
    files["config.json"] = text.replace(old, new).encode()
    print(f"  config.json edited: {old} -> {new}")
    write(OUT / "rope-theta-changed", files)


def gen_longrope():
    write(OUT / "rope-longrope", optimum_export(phi3(), patch=patched_phi3_rotary))


@contextlib.contextmanager
def spy_phi3_rotary():
    """Leave the rotary as it is; print which longrope branch transformers takes
    on the position_ids optimum traces with."""
    from transformers.models.phi3 import modeling_phi3

    original = modeling_phi3.Phi3RotaryEmbedding.forward

    def spy(self, x, position_ids):
        seq_len = int(position_ids.max()) + 1
        orig = self.config.original_max_position_embeddings
        print(f"  traced with position_ids {[int(n) for n in position_ids.shape]}, max(position_ids)+1 = {seq_len} "
              f"{'>' if seq_len > orig else '<='} {orig}: transformers takes the "
              f"{'LONG' if seq_len > orig else 'SHORT'} factors, and the trace keeps that branch")
        return original(self, x, position_ids)

    modeling_phi3.Phi3RotaryEmbedding.forward = spy
    try:
        yield
    finally:
        modeling_phi3.Phi3RotaryEmbedding.forward = original


def gen_longrope_short():
    write(OUT / "rope-longrope-short", optimum_export(phi3(), patch=spy_phi3_rotary))


GENERATORS = {
    "rope-llama3-dropped": gen_llama3_dropped,
    "rope-llama3": lambda: gen_plain("rope-llama3"),
    "rope-theta-changed": gen_theta_changed,
    "rope-longrope-short": gen_longrope_short,
    "rope-longrope": gen_longrope,
    "rope-yarn": lambda: gen_plain("rope-yarn"),
    "rope-linear": lambda: gen_plain("rope-linear"),
    "rope-partial": lambda: gen_plain("rope-partial"),
}


# ---------------------------------------------------------------- verification helpers

def fmt(v, n=8):
    return "[" + ", ".join(f"{float(x):.6g}" for x in np.ravel(v)[:n]) + (", ...]" if np.size(v) > n else "]")


def describe(folder: Path):
    fc.describe(folder, "model.onnx", limit=5)


def reference(folder: Path, name: str):
    """PyTorch from the folder's own config.json, with the exported weights."""
    cfg = transformers.AutoConfig.from_pretrained(folder)
    ref = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    missing, unexpected = ref.load_state_dict(WEIGHTS[name]().state_dict(), strict=True)
    assert not missing and not unexpected
    return cfg, ref


class Runner:
    """optimum's with-past model.onnx: step 0 with past length 0, then one
    token per call."""

    def __init__(self, path: Path):
        self.s = session(path)
        self.past = [i for i in self.s.get_inputs() if i.name.startswith("past_key_values.")]
        self.shape = {i.name: i.shape for i in self.past}

    def run(self, ids, pos, past):
        if past is None:
            past = [np.zeros((1, self.shape[i.name][1], 0, self.shape[i.name][3]), np.float32) for i in self.past]
        t = pos[-1] + 1
        feed = {"input_ids": i64([ids]), "attention_mask": i64([[1] * t]), "position_ids": i64([pos]),
                **{i.name: p for i, p in zip(self.past, past)}}
        o = self.s.run(None, feed)
        return o[0][0], o[1:]


def compare(folder: Path, ref, prompt):
    """Step 0 + STEPS greedy cached steps, PyTorch's tokens fed to both.
    Returns ([last-row |d| per call], all-rows |d| at step 0, [ORT top-1 ==
    PyTorch top-1 per call], tokens, step-0 |d| over rows 0-31 or None)."""
    r = Runner(folder / "model.onnx")
    n = len(prompt)
    pos = list(range(n))
    lg, past = r.run(prompt, pos, None)
    with torch.no_grad():
        o = ref(input_ids=torch.tensor([prompt]), position_ids=torch.tensor([pos]), use_cache=True)
    plg, ppast = o.logits[0].numpy(), o.past_key_values
    rows, agree, toks = [d(lg[-1], plg[-1])], [int(lg[-1].argmax()) == int(plg[-1].argmax())], []
    all0 = d(lg, plg)
    first = d(lg[:ORIG_MAX], plg[:ORIG_MAX]) if n > ORIG_MAX else None
    for _ in range(STEPS):
        tok = int(plg[-1].argmax())
        toks.append(tok)
        t = n + len(toks)
        lg, past = r.run([tok], [t - 1], past)
        with torch.no_grad():
            o = ref(input_ids=torch.tensor([[tok]]), attention_mask=torch.ones(1, t, dtype=torch.long),
                    position_ids=torch.tensor([[t - 1]]), past_key_values=ppast, use_cache=True)
        plg, ppast = o.logits[0].numpy(), o.past_key_values
        rows.append(d(lg[-1], plg[-1]))
        agree.append(int(lg[-1].argmax()) == int(plg[-1].argmax()))
    return rows, all0, agree, toks, first


# ---------------------------------------------------------------- graph: where rotary lives

def const_values(m: onnx.ModelProto):
    vals = {i.name: (numpy_helper.to_array(i), "initializer " + i.name) for i in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            vals[n.output[0]] = (numpy_helper.to_array(n.attribute[0].t), f"Constant node {n.name} -> {n.output[0]}")
    return vals


def rotary_in_graph(m: onnx.ModelProto):
    """Find the cos/sin computation: position_ids' consumers, the Cos/Sin nodes,
    the float vectors upstream of Cos (inverse frequencies), the Mul scale after
    Cos/Sin, and the op chain from position_ids to Cos."""
    g = m.graph
    vals = const_values(m)
    prod = {o: n for n in g.node for o in n.output}
    cons = {}
    for n in g.node:
        for i in n.input:
            cons.setdefault(i, []).append(n)
    info = {"pos_consumers": [(n.op_type, n.name) for n in cons.get("position_ids", [])]}
    cos = [n for n in g.node if n.op_type == "Cos"]
    sin = [n for n in g.node if n.op_type == "Sin"]
    info["cos"] = [(n.name, n.input[0], n.output[0]) for n in cos]
    info["sin"] = [(n.name, n.input[0], n.output[0]) for n in sin]
    # ancestors of the Cos nodes
    anc, stack = {}, [n for n in cos]
    while stack:
        n = stack.pop()
        if n.name in anc:
            continue
        anc[n.name] = n
        for i in n.input:
            if i in prod:
                stack.append(prod[i])
    # descendants of position_ids through values only (not through Shape, whose
    # output is the batch/sequence size, not the positions)
    desc, stack = set(), [n for n in cons.get("position_ids", []) if n.op_type != "Shape"]
    while stack:
        n = stack.pop()
        if n.name in desc:
            continue
        desc.add(n.name)
        for o in n.output:
            stack.extend(u for u in cons.get(o, []) if u.op_type != "Shape")
    order = [n for n in g.node if n.name in anc and n.name in desc]
    info["chain"] = [(n.op_type, n.name) for n in order]
    # float vectors (>1 element) feeding the Cos ancestry
    freqs = []
    for n in g.node:
        if n.name not in anc:
            continue
        for i in n.input:
            if i in vals and vals[i][0].dtype == np.float32 and vals[i][0].size > 1:
                freqs.append((vals[i][1], i, list(vals[i][0].shape), vals[i][0].ravel(), n.op_type, n.name))
    info["freqs"] = freqs
    # Scale multiplied into cos / sin
    scales = []
    for c in cos + sin:
        for u in cons.get(c.output[0], []):
            if u.op_type == "Mul":
                other = [i for i in u.input if i != c.output[0]][0]
                v = vals.get(other)
                scales.append((c.op_type, u.name, other, None if v is None else float(v[0].ravel()[0])))
    info["scales"] = scales
    # precomputed cos/sin tables: float constants [P, r] with r = len(inv_freq) or 2*len(inv_freq)
    r = {v[3].size for v in freqs} | {2 * v[3].size for v in freqs}
    info["tables"] = [(v[1], list(v[0].shape)) for k, v in vals.items()
                      if v[0].dtype == np.float32 and v[0].ndim == 2 and v[0].shape[1] in r and v[0].shape[0] > 1]
    # Where cos / sin are applied: follow Cos/Sin through Mul-by-constant, Cast
    # and Unsqueeze to the Muls whose other operand is a per-layer tensor.
    def applied(node):
        out, path, other_users, front, seen = [], [], [], [node.output[0]], set()
        while front:
            x = front.pop(0)
            for u in cons.get(x, []):
                if u.name in seen:
                    continue
                seen.add(u.name)
                other = [i for i in u.input if i != x]
                if u.op_type == "Mul" and other and other[0] not in vals:
                    src = prod.get(other[0])
                    desc_src = other[0]
                    if src is not None and src.op_type == "Slice":
                        se = [vals[i][0].ravel().tolist() if i in vals else i for i in src.input[1:4]]
                        desc_src = f"Slice {src.name} starts {se[0]} ends {se[1]} axes {se[2]}"
                    elif src is not None:
                        desc_src = f"{src.op_type} {src.name}"
                    out.append((u.name, desc_src))
                elif u.op_type in ("Mul", "Cast", "Unsqueeze"):
                    path.append(f"{u.op_type}({u.name})")
                    front.extend(u.output)
                else:
                    other_users.append(f"{u.op_type}({u.name})")
        return path, out, other_users
    info["cos_path"], info["cos_applied"], info["cos_other"] = applied(cos[0]) if cos else ([], [], [])
    info["sin_path"], info["sin_applied"], info["sin_other"] = applied(sin[0]) if sin else ([], [], [])
    # run-time choice between inverse-frequency vectors: a Where whose operands
    # are the float vectors, and the ReduceMax / Greater deciding it
    fnames = {f[1] for f in freqs}
    info["select"] = [(n.op_type, n.name, list(n.input)) for n in g.node if n.name in anc and (
        n.op_type in ("ReduceMax", "Greater") or (n.op_type == "Where" and fnames & set(n.input)))]
    return info


def expected_rope(cfg):
    """transformers' ROPE_INIT_FUNCTIONS for the config: (rope type, inv_freq at
    seq_len None, attention factor, inv_freq at seq_len orig+1 for longrope)."""
    rs = cfg.rope_scaling or {}
    rtype = rs.get("rope_type", rs.get("type", "default")) if rs else "default"
    inv, att = ROPE_INIT_FUNCTIONS[rtype](cfg, "cpu")
    long = None
    if rtype == "longrope":
        long, _ = ROPE_INIT_FUNCTIONS[rtype](cfg, "cpu", seq_len=cfg.original_max_position_embeddings + 1)
        long = long.numpy()
    return rtype, inv.numpy(), float(att), long


def report_rotary(folder: Path, cfg):
    m = onnx.load(folder / "model.onnx")
    info = rotary_in_graph(m)
    rtype, inv, att, long = expected_rope(cfg)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    prf = getattr(cfg, "partial_rotary_factor", 1.0)
    print(f"  config: rope_theta {cfg.rope_theta}, head_dim {head_dim}, partial_rotary_factor {prf}, "
          f"rope_scaling {json.dumps(cfg.rope_scaling)}")
    print(f"  expected (ROPE_INIT_FUNCTIONS['{rtype}'], seq_len None): inv_freq {fmt(inv)}, attention factor {att:.6g}")
    if long is not None:
        print(f"  expected long (seq_len {cfg.original_max_position_embeddings + 1}): inv_freq {fmt(long)}")
    print(f"  position_ids consumers: {info['pos_consumers']}")
    print(f"  position_ids -> Cos chain: {' -> '.join(f'{o}({n})' for o, n in info['chain'])}")
    print(f"  Cos: {info['cos']}; Sin: {info['sin']}")
    print(f"  scale after Cos/Sin: {info['scales']}")
    for k in ("cos", "sin"):
        print(f"  {k.capitalize()} -> {' -> '.join(info[k + '_path'])} -> applied in (Mul, other operand): "
              f"{info[k + '_applied']}" + (f"; also read by {info[k + '_other']}" if info[k + "_other"] else ""))
    mm = [x for x in info["chain"] if x[0] == "MatMul"]
    print(f"  positions x inv_freq: {mm}")
    if info["select"]:
        print(f"  run-time selection nodes: {info['select']}")
    print(f"  cos/sin tables (float constants [P, {sorted({len(x[3]) for x in info['freqs']})[0]} or "
          f"{2 * sorted({len(x[3]) for x in info['freqs']})[0]}]): {info['tables'] or 'none'}")
    matches = {}
    for where, tname, shape, v, op, node in info["freqs"]:
        m_short = v.size == inv.size and np.allclose(v, inv, rtol=1e-6, atol=0)
        m_long = long is not None and v.size == long.size and np.allclose(v, long, rtol=1e-6, atol=0)
        what = "== expected" if m_short else ("== expected LONG" if m_long else "!= expected")
        d_exp = d(v, inv) if v.size == inv.size else float("nan")
        print(f"  inv_freq in graph: {where} shape {shape} -> {op} {node}: {fmt(v)}  {what} "
              f"(max|d| vs expected {d_exp:.3g})")
        matches[tname] = (m_short, m_long)
    scale_ok = all(s[3] is not None and abs(s[3] - att) < 1e-6 for s in info["scales"])
    print(f"  graph scale(s) {[s[3] for s in info['scales']]} vs expected attention factor {att:.6g}: "
          f"{'match' if scale_ok else 'DIFFER'}")
    return info, matches, scale_ok


# ---------------------------------------------------------------- verify

def verify(name: str):
    folder = OUT / name
    cfg, ref = reference(folder, name)
    info, matches, scale_ok = report_rotary(folder, cfg)
    broken = name in BROKEN
    prompts = [("5-token", PROMPT5), ("40-token", PROMPT40)]
    if "longrope" in name:
        prompts.append(("31-token", PROMPT31))
    res = {}
    for label, p in prompts:
        rows, all0, agree, toks, first = compare(folder, ref, p)
        res[label] = rows
        print(f"  {label} prompt (positions 0-{len(p) - 1}), then {STEPS} cached steps "
              f"(positions {len(p)}-{len(p) + STEPS - 1}); PyTorch greedy tokens {toks}")
        print(f"    last-row max|d| per call: {', '.join(f'{x:.2e}' for x in rows)}; "
              f"step 0 all rows {all0:.2e}" + (f" (rows 0-{ORIG_MAX - 1}: {first:.2e})" if first is not None else "")
              + f"; ORT top-1 == PyTorch top-1: {agree}")
    good_shortfreq = any(v[0] for v in matches.values())
    if not broken:
        for label, rows in res.items():
            for x in rows:
                assert x <= TOL, f"{name} {label}: {x:.3e} > {TOL}"
        assert scale_ok
        if name != "rope-longrope":
            assert good_shortfreq and len(matches) == 1, matches
        else:
            assert len(matches) == 2 and sorted(matches.values()) == [(False, True), (True, False)], matches
        print("  GOOD: every call <= 1e-4; the graph's inverse frequencies == ROPE_INIT_FUNCTIONS for config.json")
    elif name == "rope-longrope-short":
        for x in res["5-token"]:
            assert x <= TOL, f"{name} 5-token: {x:.3e}"
        for x in res["40-token"]:
            assert x > BROKEN_MIN, f"{name} 40-token: {x:.3e}"
        r31 = res["31-token"]
        assert r31[0] <= TOL and r31[1] <= TOL and r31[2] > BROKEN_MIN and r31[3] > BROKEN_MIN, r31
        assert good_shortfreq  # the graph holds the short inv_freq: matches the config at seq_len <= 32 only
        print("  BROKEN as intended: exact while max(position_ids)+1 <= 32 (5-token prompt; 31-token prompt's "
              "steps at positions 31), wrong once a call's max(position_ids)+1 > 32 (40-token prompt from step 0; "
              "31-token prompt's steps at positions 32, 33)")
    else:
        for label in ("5-token", "40-token"):
            for x in res[label]:
                assert x > BROKEN_MIN, f"{name} {label}: {x:.3e}"
        assert not good_shortfreq
        print("  BROKEN as intended: every call of both prompts off by > 1e-2; "
              "the graph's inverse frequencies != ROPE_INIT_FUNCTIONS for config.json")


if __name__ == "__main__":
    args = fc.parse_args(GENERATORS)
    OUT = args.out or OUT
    fc.versions("torch", "transformers", "onnx", "onnxruntime")
    fc.run_all(args, OUT, GENERATORS, verify, describe_folder=describe)
