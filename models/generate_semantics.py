"""Generate the config-constant fixtures: text-generation-with-past exports of
tiny decoders whose config.json holds a constant that transformers applies in
the forward pass (Granite's four multipliers, BLOOM's ALiBi slopes from n_head,
Gemma's sqrt(hidden_size) embedding normalizer, Gemma2's
query_pre_attn_scalar**-0.5 attention scale, Cohere's logit_scale), each as
a GOOD export and as a BROKEN twin whose graph applies a different constant
than its config.json implies. Each folder is measured in onnxruntime against
PyTorch built from the folder's OWN config.json with the same weights.

    python3 models/generate_semantics.py [--out DIR] [NAME ...]
    python3 models/generate_semantics.py --verify-only [--out DIR] [NAME ...]

Default: all 12 folders, then models/semantics-expected.json (written only by a
full run: all folders, generated and verified). Generating granite-tiny also
writes granite-tiny-source/: the GraniteForCausalLM it is exported from,
save_pretrained(safe_serialization=True) (config.json with logits_scaling 8,
model.safetensors, generation_config.json). The four granite "-dropped" twins
were exported from these same weights with one field changed, so this folder
(the config their config.json states) is their correct source too. Verifying
granite-tiny also checks that folder (weights, config, logits vs ORT).
Versions: torch 2.9.1, transformers 4.57.6, optimum 2.1.0 + optimum-onnx
0.1.0, onnx 1.23.2, onnxruntime 1.31.1 (requirements-gen.txt). Every model is built from a config
with torch.manual_seed(0) (no hub access), saved with save_pretrained into a
temporary folder and exported from there with optimum's
`main_export(task="text-generation-with-past", do_validation=False)` (the
function behind `optimum-cli export onnx`), defaults otherwise (TorchScript
exporter, opset 18, constant folding, transformers' default attention: sdpa
for Granite, Gemma and Cohere; BLOOM has its own), except Gemma2: optimum
loads it with attn_implementation="eager" (fc.eager_attention; sdpa drops
attn_logit_softcapping), as models/softcap-gemma2 was. Every folder holds
model.onnx, config.json and generation_config.json as optimum wrote them,
except for the one defect named below.

The models (initializer_range 0.2 unless said, so the logits are not all ~0):
  Granite  GraniteForCausalLM, vocab 500, hidden 64, intermediate 128, 2 layers,
           8 heads, 2 KV heads (head_dim 8), embedding_multiplier 12.0,
           attention_multiplier 0.0625 (1/sqrt(8) = 0.354 is the default
           scale; sqrt(0.0625) = 0.25 is neither 0.354 nor sqrt(0.354)),
           residual_multiplier 0.22, logits_scaling 8.0, untied.
  BLOOM    BloomForCausalLM, vocab 500, hidden 48, 2 layers, n_head 6 (not a
           power of two: slopes 0.25^1..4 then the extra 0.5^1, 0.5^3), tied.
  Gemma    GemmaForCausalLM with models/gemma-tiny's exact config and seed
           (generate.py's gen_gemma_tiny: vocab 1000, hidden 32, 4 heads, 1 KV
           head, head_dim 16, initializer_range 0.02), so gemma-tiny is the
           GOOD twin (its weights are these).
  Gemma2   Gemma2ForCausalLM with models/softcap-gemma2's config and seed
           (generate_softcap.py: vocab 500, hidden 64, intermediate 128, 2
           layers, 4 heads, 2 KV heads, head_dim 16, layer_types [sliding,
           full], sliding_window 4, attn_logit_softcapping 50,
           final_logit_softcapping 3.0, initializer_range 0.2, untied), except
           query_pre_attn_scalar 64 (scale 0.125; head_dim**-0.5 is 0.25);
           the same weights as softcap-gemma2 (query_pre_attn_scalar 16).
  Cohere   CohereForCausalLM, vocab 500, hidden 64, intermediate 128, 2 layers,
           4 heads, 2 KV heads, logit_scale 0.25, tied (the default), bos 1,
           eos 2, pad 0 (CohereConfig's default eos 255001 is beyond vocab 500).

  granite-tiny/                        GOOD. All four multipliers in the graph.
  granite-logits-scaling-dropped/      BROKEN. Graph exported with logits_scaling
                                       1.0; config.json is granite-tiny's (8.0).
  granite-embedding-multiplier-dropped/ BROKEN. Graph exported with
                                       embedding_multiplier 1.0; config.json is
                                       granite-tiny's (12.0).
  granite-attention-multiplier-dropped/ BROKEN. Graph exported with
                                       attention_multiplier head_dim**-0.5 =
                                       8**-0.5 (what ignoring the field gives);
                                       config.json is granite-tiny's (0.0625).
  granite-residual-multiplier-dropped/ BROKEN. Graph exported with
                                       residual_multiplier 1.0; config.json is
                                       granite-tiny's (0.22).
  bloom-alibi-6-heads/                 GOOD.
  bloom-alibi-doubled/                 BROKEN. BloomModel.build_alibi_tensor
                                       patched during the export: the slopes of
                                       a 12-head model (transformers' own
                                       build_alibi_tensor for 2*n_head), first 6
                                       kept, times the usual cumsum positions.
                                       config.json as optimum wrote it.
  gemma-embed-scale-dropped/           BROKEN. GemmaModel.forward patched during
                                       the export (its own source, with the
                                       normalizer torch.tensor(1.0) in place of
                                       hidden_size**0.5). config.json as written.
  cohere-tiny/                         GOOD.
  cohere-logit-scale-dropped/          BROKEN. Graph exported with logit_scale
                                       1.0; config.json is cohere-tiny's (0.25).
  gemma2-tiny/                         GOOD (eager). query_pre_attn_scalar 64.
  gemma2-query-scalar-dropped/         BROKEN (eager). Graph exported with
                                       query_pre_attn_scalar 16 (= head_dim, so
                                       the scale is head_dim**-0.5); config.json
                                       is gemma2-tiny's (64). Its model.onnx is
                                       byte-identical to softcap-gemma2's (the
                                       same model; printed, not asserted).

The "-dropped" folders whose defect is a config value ship the GOOD export's
config.json (the script asserts the two exporter-written config.json files
differ only in that field and that generation_config.json is identical).
Every folder's graph value (read from the graph) must equal its config value
at float32 in a GOOD folder and differ in a BROKEN one (asserted).

Verification, per folder: PyTorch = AutoConfig.from_pretrained(folder) ->
AutoModelForCausalLM.from_config (attn_implementation="eager" for Gemma2) ->
load_state_dict(the seeded weights, strict). A 5-token prompt is run as step 0
(empty pasts) plus 3 greedy cached one-token steps (PyTorch's tokens fed to
ORT); per call the max |delta| of the last row of the logits against PyTorch
cached and against a PyTorch recompute,
and ORT cached vs ORT uncached (same file). Also: max |delta| over all 5 rows at
step 0, top-1 probability (ORT vs PyTorch) at step 0, a free-running greedy
decode of 8 tokens by each side, and 20 random 5-token prompts
(random.Random(1)), one uncached call each. Every folder is also compared
with the model the graph was really exported from (the export-time config and
patch): that must match to 1e-4. GOOD: everything <= 1e-4. BROKEN: step 0 >
1e-3 off the folder's PyTorch, cached == uncached. The script prints, per
folder, the ops from lm_head's MatMul to `logits`, from the embedding Gather to
the first non-elementwise op, the scalar Mul/Div constants, and for BLOOM the
slope constant, its Mul and what the other operand derives from; per layer,
how the attention scores are scaled (the scalar Mul/Div chain on q and on kᵀ
before the q·kᵀ MatMul, the ops from that MatMul to the Softmax, the scale
they apply with any softcap Div(c)->Tanh->Mul(c) left out) and the ops from
o_proj's and down_proj's MatMul to the residual Add (also for the read-only
models/gemma-tiny, models/softcap-gemma2 and models/gemma3-tiny).

The script re-executes itself with PYTHONHASHSEED=0 and HF_HUB_OFFLINE=1, runs
on one thread (torch and ORT) and seeds random, numpy and torch before every
export (optimum's dummy inputs use all three).
"""
import contextlib
import inspect
import json
import math
import random
import textwrap
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
from transformers.models.bloom import modeling_bloom  # noqa: E402
from transformers.models.gemma import modeling_gemma  # noqa: E402

transformers.logging.set_verbosity_error()

HERE = Path(__file__).resolve().parent
OUT = HERE  # --out DIR
EXPECTED = HERE / "semantics-expected.json"
SEED = 0
TOL = 1e-4
BROKEN_MIN = 1e-3  # a broken folder's step 0 is off by more than this
PROMPT5 = [1, 37, 205, 411, 89]
STEPS = 3  # cached one-token steps after the prompt (PyTorch's tokens)
GREEDY = 8  # free-running greedy tokens per side
N_PROMPTS = 20
MAX_FILE = 3_000_000
INIT = 0.2

EMB, ATTN, RESID, LOGITS = 12.0, 0.0625, 0.22, 8.0
GRANITE_HEAD_DIM = 8  # hidden 64 / 8 heads
DEFAULT_ATTN = GRANITE_HEAD_DIM ** -0.5  # 0.354: the scale an exporter ignoring attention_multiplier applies
LOGIT_SCALE = 0.25
BLOOM_HEADS = 6
GEMMA2_HEAD_DIM = 16
QUERY_SCALAR = 64  # query_pre_attn_scalar: scale 64**-0.5 = 0.125, not head_dim**-0.5 = 0.25


# ---------------------------------------------------------------- models

def granite(emb=EMB, logits=LOGITS, attn=ATTN, resid=RESID):
    torch.manual_seed(SEED)
    cfg = transformers.GraniteConfig(
        vocab_size=500, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=8,
        num_key_value_heads=2, max_position_embeddings=128, embedding_multiplier=emb, attention_multiplier=attn,
        residual_multiplier=resid, logits_scaling=logits, initializer_range=INIT, tie_word_embeddings=False,
    )
    return transformers.GraniteForCausalLM(cfg).eval()


def bloom():
    torch.manual_seed(SEED)
    cfg = transformers.BloomConfig(vocab_size=500, hidden_size=48, n_layer=2, n_head=BLOOM_HEADS,
                                   initializer_range=INIT)
    return transformers.BloomForCausalLM(cfg).eval()


def gemma():
    """models/gemma-tiny's model (generate.py gen_gemma_tiny), same seed."""
    torch.manual_seed(SEED)
    cfg = transformers.GemmaConfig(
        vocab_size=1000, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, head_dim=16, max_position_embeddings=128,
    )
    return transformers.GemmaForCausalLM(cfg).eval()


def gemma2(scalar=QUERY_SCALAR):
    """models/softcap-gemma2's model (generate_softcap.py gemma2(), same config
    and seed, so the same weights) with query_pre_attn_scalar `scalar` in
    place of 16 (= head_dim). Both softcaps as there: attention 50, final 3.0."""
    torch.manual_seed(SEED)
    cfg = transformers.Gemma2Config(
        vocab_size=500, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=GEMMA2_HEAD_DIM, query_pre_attn_scalar=scalar, max_position_embeddings=128,
        layer_types=["sliding_attention", "full_attention"], sliding_window=4, attn_logit_softcapping=50.0,
        final_logit_softcapping=3.0, initializer_range=INIT, tie_word_embeddings=False,
    )
    return transformers.Gemma2ForCausalLM(cfg).eval()


def cohere(scale=LOGIT_SCALE):
    torch.manual_seed(SEED)
    cfg = transformers.CohereConfig(
        vocab_size=500, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, logit_scale=scale, initializer_range=INIT,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    return transformers.CohereForCausalLM(cfg).eval()


# ---------------------------------------------------------------- export-time patches

def alibi_slopes(num_heads: int) -> torch.Tensor:
    """transformers' own slopes for num_heads: build_alibi_tensor on a [1, 2]
    all-ones mask gives slope * position 1 in column 1."""
    ones = torch.ones(1, 2, dtype=torch.long)
    return modeling_bloom.build_alibi_tensor(ones, num_heads, torch.float32)[:, 0, 1]


def doubled_build_alibi_tensor(self, attention_mask, num_heads, dtype):
    """BloomModel.build_alibi_tensor with the slopes of a model with twice the
    heads, first num_heads kept; the rest as transformers does it."""
    batch_size, seq_length = attention_mask.shape
    slopes = alibi_slopes(2 * num_heads)[:num_heads]  # all constant: folded by the exporter
    arange_tensor = ((attention_mask.cumsum(dim=-1) - 1) * attention_mask)[:, None, :]
    alibi = slopes[..., None] * arange_tensor
    return alibi.reshape(batch_size * num_heads, 1, seq_length).to(dtype)


@contextlib.contextmanager
def alibi_doubled():
    original = modeling_bloom.BloomModel.__dict__["build_alibi_tensor"]
    modeling_bloom.BloomModel.build_alibi_tensor = doubled_build_alibi_tensor
    try:
        yield
    finally:
        modeling_bloom.BloomModel.build_alibi_tensor = original


NORMALIZER_LINE = "normalizer = torch.tensor(self.config.hidden_size**0.5, dtype=hidden_states.dtype)"


def _gemma_forward_without_normalizer():
    """GemmaModel.forward recompiled from its own source with the normalizer
    torch.tensor(1.0), in modeling_gemma's namespace, @check_model_inputs
    re-applied (@auto_docstring left out: it only sets the docstring)."""
    src = textwrap.dedent(inspect.getsource(modeling_gemma.GemmaModel.forward))
    assert src.count(NORMALIZER_LINE) == 1, "GemmaModel.forward changed"
    src = src.replace(NORMALIZER_LINE, "normalizer = torch.tensor(1.0, dtype=hidden_states.dtype)")
    # auto_docstring only writes the docstring, and takes a module-level function for a class
    assert src.count("@auto_docstring\n") == 1
    src = src.replace("@auto_docstring\n", "")
    ns = {}
    exec(compile(src, "<GemmaModel.forward without normalizer>", "exec"), modeling_gemma.__dict__, ns)
    return ns["forward"]


@contextlib.contextmanager
def gemma_no_normalizer():
    original = modeling_gemma.GemmaModel.__dict__["forward"]
    modeling_gemma.GemmaModel.forward = _gemma_forward_without_normalizer()
    try:
        yield
    finally:
        modeling_gemma.GemmaModel.forward = original


# ---------------------------------------------------------------- the folders

# build: the model the graph is exported from; patch: active during the export
# (and while running that model as "the graph's model"); config_from: for the
# config-value defects, the GOOD model whose exporter-written config.json ships;
# eager: optimum loads the checkpoint with attn_implementation="eager" (Gemma2:
# sdpa drops attn_logit_softcapping) and PyTorch runs eager too.
SPECS = {
    "granite-tiny": dict(kind="good", build=granite),
    "granite-logits-scaling-dropped": dict(kind="broken", build=lambda: granite(logits=1.0), config_from=granite,
                                           field="logits_scaling"),
    "granite-embedding-multiplier-dropped": dict(kind="broken", build=lambda: granite(emb=1.0),
                                                 config_from=granite, field="embedding_multiplier"),
    "granite-attention-multiplier-dropped": dict(kind="broken", build=lambda: granite(attn=DEFAULT_ATTN),
                                                 config_from=granite, field="attention_multiplier"),
    "granite-residual-multiplier-dropped": dict(kind="broken", build=lambda: granite(resid=1.0),
                                                config_from=granite, field="residual_multiplier"),
    "bloom-alibi-6-heads": dict(kind="good", build=bloom),
    "bloom-alibi-doubled": dict(kind="broken", build=bloom, patch=alibi_doubled),
    "gemma-embed-scale-dropped": dict(kind="broken", build=gemma, patch=gemma_no_normalizer),
    "cohere-tiny": dict(kind="good", build=cohere),
    "cohere-logit-scale-dropped": dict(kind="broken", build=lambda: cohere(1.0), config_from=cohere,
                                       field="logit_scale"),
    "gemma2-tiny": dict(kind="good", build=gemma2, eager=True),
    "gemma2-query-scalar-dropped": dict(kind="broken", build=lambda: gemma2(GEMMA2_HEAD_DIM), config_from=gemma2,
                                        field="query_pre_attn_scalar", eager=True),
}
GRANITE_TWINS = [n for n, s in SPECS.items() if n.startswith("granite-") and s["kind"] == "broken"]


def weights(name):
    return SPECS[name]["build"]().state_dict()


# ---------------------------------------------------------------- export helpers

# Only for the extra Granite export that shows the eager form of
# attention_multiplier (temporary, not written): optimum loads the
# checkpoint with attn_implementation="eager".
eager_loading = fc.eager_attention


def optimum_export(model, patch=None):
    """fc.optimum_export (text-generation-with-past) inside `patch`, if any."""
    return fc.optimum_export(model, patch=patch)


def export_patch(spec):
    """What is active during a folder's export: its own patch, or eager loading."""
    if spec.get("eager"):
        assert "patch" not in spec
        return lambda: fc.eager_attention(announce=True)
    return spec.get("patch")


write = fc.write_files

SOURCE = "granite-tiny-source"  # the checkpoint granite-tiny (and its -dropped twins' weights) came from
SOURCE_FILES = fc.SOURCE_FILES
SOURCE_PROMPT = [1, 3, 14, 15]


def save_source(model, out: Path):
    fc.save_source(model, out, report=True)


def verify_source():
    """granite-tiny-source: files under MAX_FILE, config says the GOOD values
    (logits_scaling 8, embedding_multiplier 12), weights == the seeded weights
    every granite folder was exported from, and eager float32 PyTorch loaded
    with from_pretrained against granite-tiny's ORT on SOURCE_PROMPT."""
    folder = OUT / SOURCE
    for f in sorted(folder.iterdir()):
        assert f.name in SOURCE_FILES and f.stat().st_size < MAX_FILE, f
    ref = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager",
                                                            dtype=torch.float32).eval()
    cfg = ref.config
    assert type(ref).__name__ == "GraniteForCausalLM"
    assert (cfg.logits_scaling, cfg.embedding_multiplier) == (LOGITS, EMB), cfg
    sd, want = ref.state_dict(), weights("granite-tiny")
    assert sd.keys() == want.keys() and all(torch.equal(sd[k], want[k]) for k in want)
    for twin in GRANITE_TWINS:
        w = weights(twin)
        assert all(torch.equal(sd[k], w[k]) for k in w), twin
    lg, _ = Runner(OUT / "granite-tiny" / "model.onnx").run(SOURCE_PROMPT, len(SOURCE_PROMPT), None)
    with torch.no_grad():
        pl = ref(input_ids=torch.tensor([SOURCE_PROMPT])).logits[0].numpy()
    delta = d(lg, pl)
    print(f"  {SOURCE}/: weights == the seeded granite weights (all {1 + len(GRANITE_TWINS)} granite folders); "
          f"logits_scaling "
          f"{cfg.logits_scaling}; prompt {SOURCE_PROMPT}, eager PyTorch vs granite-tiny ORT, all rows: "
          f"max |delta| {delta:.2e}")
    assert delta <= TOL, delta


def generate(name):
    spec = SPECS[name]
    files = optimum_export(spec["build"](), export_patch(spec))
    if "config_from" in spec:
        field = spec["field"]
        good = optimum_export(spec["config_from"](), export_patch(spec))
        a, b = json.loads(files["config.json"]), json.loads(good["config.json"])
        strip = lambda c: {k: v for k, v in c.items() if k != field}
        assert strip(a) == strip(b) and a[field] != b[field], (a, b)
        assert files["generation_config.json"] == good["generation_config.json"]
        print(f"  exported config.json differs from the good export's only in {field} ({a[field]} here, "
              f"{b[field]} there); shipping the good export's config.json")
        files["config.json"] = good["config.json"]
    write(OUT / name, files)
    if name == "granite-tiny":
        save_source(granite(), OUT / SOURCE)
        eager = optimum_export(granite(), eager_loading)
        m = onnx.load_from_string(eager["model.onnx"])
        vals = const_values(m)
        muls = [f"{n.op_type} {n.name} {c[0]:.9g} {c[1]}" for n in m.graph.node
                if n.op_type in ("Mul", "Div") and "self_attn" in n.name
                for c in scalar_operands(n, vals) if c[1].startswith("float") and abs(c[0]) not in (1.0, 2.0)]
        print(f"  for comparison, an eager export (temporary, not written): self_attn float scalar Mul/Div: {muls}")


# ---------------------------------------------------------------- graph reading

ELEMENTWISE = {"Mul", "Div", "Add", "Sub", "Cast", "Pow", "Sqrt", "Reciprocal", "Neg", "Tanh", "Identity",
               "Sigmoid", "Erf", "Where"}


const_values = fc.const_values


def scalar_operands(n, vals):
    return [(float(vals[i].ravel()[0]), str(vals[i].dtype), i) for i in n.input if i in vals and vals[i].size == 1]


def fmt_node(n, vals):
    s = f"{n.op_type} {n.name}"
    cs = scalar_operands(n, vals)
    if cs:
        s += " (" + ", ".join(f"{v:.9g} {dt} {src}" for v, dt, src in cs) + ")"
    if n.op_type == "Cast":
        s += f" (to {onnx.TensorProto.DataType.Name(n.attribute[0].i).lower()})"
    return s


class Graph:
    def __init__(self, path: Path):
        self.m = onnx.load(path)
        self.g = self.m.graph
        self.vals = const_values(self.m)
        self.prod = {o: n for n in self.g.node for o in n.output}
        self.cons = {}
        for n in self.g.node:
            for i in n.input:
                self.cons.setdefault(i, []).append(n)
        self.by_name = {n.name: n for n in self.g.node}
        self.order = {n.name: k for k, n in enumerate(self.g.node)}

    def ordered(self, names):
        return [self.by_name[x] for x in sorted(names, key=self.order.get)]

    def after(self, tensors):
        """Names of every node that reads, directly or not, one of `tensors`."""
        seen, todo = set(), list(tensors)
        while todo:
            for u in self.cons.get(todo.pop(), []):
                if u.name not in seen:
                    seen.add(u.name)
                    todo.extend(u.output)
        return seen

    def before(self, tensor):
        """Names of every node `tensor` depends on."""
        seen, todo = set(), [tensor]
        while todo:
            n = self.prod.get(todo.pop())
            if n is not None and n.name not in seen:
                seen.add(n.name)
                todo.extend(n.input)
        return seen

    def float_scalar(self, n):
        """(value, input index) of n's float scalar constant operand, or None."""
        for k, i in enumerate(n.input):
            v = self.vals.get(i)
            if v is not None and v.size == 1 and v.dtype.kind == "f":
                return float(v.ravel()[0]), k
        return None

    def scale_tail(self, tensor):
        """The Mul/Div-by-a-float-scalar nodes that produce `tensor`, walking
        back while there are such (in graph order)."""
        tail, n = [], self.prod.get(tensor)
        while n is not None and n.op_type in ("Mul", "Div") and self.float_scalar(n):
            tail.append(n)
            n = self.prod.get(n.input[1 - self.float_scalar(n)[1]])
        return tail[::-1], n

    def attention_form(self, layer):
        """How layer `layer` scales its attention scores: the q·kᵀ MatMul (the
        first MatMul reading both q_proj and k_proj and feeding the layer's
        first Softmax), the scalar Mul/Div chain on each of its operands (and
        the op before it), the ops from it to the Softmax, and the scale all
        these apply (softcap Div(c) -> Tanh -> Mul(c) left out of the product)."""
        pre = f"/model/layers.{layer}/self_attn/"
        fq = self.after(self.by_name[pre + "q_proj/MatMul"].output)
        fk = self.after(self.by_name[pre + "k_proj/MatMul"].output)
        sm = [n for n in self.ordered(fq) if n.op_type == "Softmax"][0]
        back = self.before(sm.input[0])
        scores = [n for n in self.ordered(fq & fk & back) if n.op_type == "MatMul"][0]
        q_tail, q_from = self.scale_tail(scores.input[0])
        k_tail, k_from = self.scale_tail(scores.input[1])
        post = self.ordered(self.after(scores.output) & back) + [sm]
        softcap = set()
        for a, b, c in zip(post, post[1:], post[2:]):
            if (a.op_type, b.op_type, c.op_type) == ("Div", "Tanh", "Mul") and self.float_scalar(a) \
                    and self.float_scalar(c) and self.float_scalar(a)[0] == self.float_scalar(c)[0]:
                softcap |= {a.name, b.name, c.name}
        scale = np.float32(1.0)
        for n in q_tail + k_tail + [n for n in post if n.name not in softcap]:
            c = self.float_scalar(n)
            if n.op_type == "Mul" and c:
                scale = np.float32(scale * np.float32(c[0]))
            elif n.op_type == "Div" and c and c[1] == 1:
                scale = np.float32(scale / np.float32(c[0]))
        return dict(scores=scores, q=(q_from, q_tail), k=(k_from, k_tail), post=post, softcap=softcap,
                    scale=float(scale))

    def residual_form(self, proj):
        """From the MatMul named `proj` to the residual Add: the first Add it
        feeds whose other operand neither depends on it nor is a constant;
        returns (the ops between, that Add)."""
        f = self.after(self.by_name[proj].output)
        for add in self.ordered(f):
            if add.op_type != "Add" or any(i in self.vals for i in add.input):
                continue
            own = [i for i in add.input if i in self.by_name[proj].output or (i in self.prod
                                                                               and self.prod[i].name in f)]
            if len(own) == 1:
                return self.ordered(f & self.before(own[0])), add
        return None

    def logits_chain(self):
        """From the last MatMul (lm_head) to `logits`, following input 0."""
        chain, n = [], self.prod.get("logits")
        while n is not None:
            chain.append(n)
            if n.op_type in ("MatMul", "Gemm"):
                break
            n = self.prod.get(n.input[0])
        return chain[::-1]

    def embed_chain(self):
        """The Gather reading input_ids, then single non-Shape consumers while
        they are elementwise; returns (chain, the consumers where it stops)."""
        gather = [n for n in self.g.node if n.op_type == "Gather" and "input_ids" in n.input]
        assert len(gather) == 1, gather
        chain = [gather[0]]
        while True:
            users = [u for u in self.cons.get(chain[-1].output[0], []) if u.op_type != "Shape"]
            if len(users) == 1 and users[0].op_type in ELEMENTWISE:
                chain.append(users[0])
                continue
            return chain, users

    def first_non_elementwise(self, start):
        """Breadth-first from start's output through elementwise ops: the
        first non-elementwise, non-Shape consumer reached."""
        seen, frontier = set(), [start]
        while frontier:
            nxt = []
            for n in frontier:
                for u in self.cons.get(n.output[0], []):
                    if u.name in seen or u.op_type == "Shape":
                        continue
                    seen.add(u.name)
                    if u.op_type not in ELEMENTWISE:
                        return u
                    nxt.append(u)
            frontier = nxt
        return None

    def scalar_muls(self):
        """Every Mul/Div with a float scalar constant other than +-1, 2, 0.5."""
        out = []
        for n in self.g.node:
            if n.op_type not in ("Mul", "Div"):
                continue
            cs = [c for c in scalar_operands(n, self.vals) if c[1].startswith("float")]
            if cs and abs(cs[0][0]) not in (1.0, 2.0, 0.5):
                out.append((n.op_type, n.name, cs[0][0], cs[0][1]))
        return out

    def alibi(self):
        """The float constant of shape [n_head, 1] read by a Mul, and the chain
        of the Mul's other operand back to a graph input."""
        found = []
        for name, v in self.vals.items():
            if v.dtype == np.float32 and v.ndim == 2 and v.shape[1] == 1 and v.shape[0] > 1:
                for u in self.cons.get(name, []):
                    if u.op_type == "Mul":
                        other = [i for i in u.input if i != name][0]
                        back, t = [], other
                        inputs = {i.name for i in self.g.input}
                        while t not in inputs and t in self.prod:
                            p = self.prod[t]
                            back.append(p)
                            t = p.input[0]
                        found.append((name, v, u, back[::-1], t))
        return found


def report_graph(name: str):
    G = Graph(OUT / name / "model.onnx")
    r = {}
    chain = G.logits_chain()
    print("  logits chain: " + " -> ".join(fmt_node(n, G.vals) for n in chain) + " -> logits")
    r["logits_chain"] = [(n.op_type, n.name, scalar_operands(n, G.vals)) for n in chain]
    ech, stop = G.embed_chain()
    fne = G.first_non_elementwise(ech[-1])
    print("  embedding chain: " + " -> ".join(fmt_node(n, G.vals) for n in ech)
          + " -> {" + ", ".join(fmt_node(u, G.vals) for u in stop) + "}"
          + f"; first non-elementwise op: {fne.op_type} {fne.name}")
    r["embed_chain"] = [(n.op_type, n.name, scalar_operands(n, G.vals)) for n in ech]
    r["first_non_elementwise"] = (fne.op_type, fne.name)
    muls = G.scalar_muls()
    print("  scalar Mul/Div constants (not +-1, 2, 0.5): "
          + "; ".join(f"{op} {nm} {v:.9g} {dt}" for op, nm, v, dt in muls))
    r["scalar_muls"] = muls
    r["alibi"] = []
    for cname, v, mul, back, src in G.alibi():
        print(f"  ALiBi slopes: {cname} {v.dtype} {list(v.shape)} {v.ravel().tolist()}, read by {mul.op_type} "
              f"{mul.name}; other operand: {src} -> " + " -> ".join(fmt_node(n, G.vals) for n in back))
        path, t = [], mul.output[0]
        while len(G.cons.get(t, [])) == 1:
            u = G.cons[t][0]
            path.append(u)
            t = u.output[0]
        print(f"    then " + " -> ".join(fmt_node(n, G.vals) for n in path) + ", read by:")
        for u in G.cons.get(t, []):
            nxt = G.cons.get(u.output[0], [])
            print(f"      {fmt_node(u, G.vals)} -> " + ", ".join(
                f"{x.op_type} {x.name} (other operand {[i for i in x.input if i != u.output[0]]})" for x in nxt))
        r["alibi"].append((cname, v.ravel().tolist(), mul.name, [n.op_type for n in back], src))
    r.update(report_scale_forms(G))
    r["nodes"] = len(G.g.node)
    return r


def short(n, G):
    """`Op last-name-part (its float scalar constant)`."""
    c = G.float_scalar(n)
    s = f"{n.op_type} {n.name.rsplit('/', 1)[-1]}"
    if c:
        s += f" ({c[0]:.9g})" if c[1] or n.op_type != "Div" else f" ({c[0]:.9g} ÷ x)"
    return s


def report_scale_forms(G: Graph, indent="  "):
    """Per layer: how the attention scores are scaled (the scalar Mul/Div on q
    and on kᵀ before q·kᵀ, the ops from q·kᵀ to the Softmax) and the ops from
    o_proj / down_proj to their residual Add. Models without q_proj/k_proj
    (BLOOM) print nothing."""
    r = {"attn_scale": [], "resid": {}}
    layers = sorted({int(n.name.split("/layers.")[1].split("/")[0]) for n in G.g.node
                     if n.name.endswith("/self_attn/q_proj/MatMul")})
    for L in layers:
        a = G.attention_form(L)
        side = lambda k: (f"{short(a[k][0], G)} -> " if a[k][0] is not None else "") + (
            " -> ".join(short(n, G) for n in a[k][1]) or "(nothing)")
        caps = f" (softcap {sorted(a['softcap'])})" if a["softcap"] else ""
        print(f"{indent}layer {L} attention: q: {side('q')}; kᵀ: {side('k')}; "
              f"{a['scores'].name} -> " + " -> ".join(short(n, G) for n in a["post"])
              + f"; scale applied {a['scale']:.9g}{caps}")
        r["attn_scale"].append(a["scale"])
        for proj in ("self_attn/o_proj", "mlp/down_proj"):
            name = f"/model/layers.{L}/{proj}/MatMul"
            if name not in G.by_name:
                continue
            mid, add = G.residual_form(name)
            print(f"{indent}layer {L} residual: {proj}/MatMul -> "
                  + "".join(f"{short(n, G)} -> " for n in mid) + f"{add.name}")
            # the multiplier: 1.0 if nothing sits between, the constant if one scalar Mul, else None
            one = len(mid) == 1 and mid[0].op_type == "Mul" and G.float_scalar(mid[0])
            value = 1.0 if not mid else (G.float_scalar(mid[0])[0] if one else None)
            r["resid"][(L, proj)] = (value, [n.op_type for n in mid], add.name)
    return r


# ---------------------------------------------------------------- running

def softmax(x):
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max())
    return e / e.sum()


Runner = fc.WithPastRunner


def describe(folder: Path):
    """Files and model.onnx's signature (of the pasts and presents, layer 0's keys only)."""
    fc.describe(folder, "model.onnx", max_size=MAX_FILE,
                show=lambda v: not v.name.startswith(("past_key_values.", "present.")) or v.name.endswith(".0.key"))


def reference(folder: Path, name: str):
    """PyTorch from the folder's own config.json, with the exported weights
    (eager attention where the folder was exported eager)."""
    cfg = transformers.AutoConfig.from_pretrained(folder)
    kw = {"attn_implementation": "eager"} if SPECS[name].get("eager") else {}
    ref = transformers.AutoModelForCausalLM.from_config(cfg, **kw).eval()
    missing, unexpected = ref.load_state_dict(weights(name), strict=True)
    assert not missing and not unexpected
    return cfg, ref


class Patched(torch.nn.Module):
    """The model a graph was exported from, its export-time patch active on
    every call."""

    def __init__(self, model, patch):
        super().__init__()
        self.inner, self.patch = model, patch

    def forward(self, **kw):
        with self.patch() if self.patch else contextlib.nullcontext():
            return self.inner(**kw)


def graph_model(name):
    spec = SPECS[name]
    model = spec["build"]()
    if spec.get("eager"):
        model.config._attn_implementation = "eager"
    return Patched(model, spec.get("patch")).eval()


def pt_greedy(ref, prompt, n):
    seq = list(prompt)
    with torch.no_grad():
        o = ref(input_ids=torch.tensor([seq]), use_cache=True)
        for _ in range(n):
            tok = int(o.logits[0, -1].argmax())
            seq.append(tok)
            o = ref(input_ids=torch.tensor([[tok]]), attention_mask=torch.ones(1, len(seq), dtype=torch.long),
                    past_key_values=o.past_key_values, use_cache=True)
    return seq[len(prompt):]


def ort_greedy(runner, prompt, n):
    seq = list(prompt)
    lg, past = runner.run(seq, len(seq), None)
    for _ in range(n):
        tok = int(lg[-1].argmax())
        seq.append(tok)
        lg, past = runner.run([tok], len(seq), past)
    return seq[len(prompt):]


def compare(folder: Path, ref, twin, prompt):
    """Step 0 + STEPS cached steps with PyTorch's greedy tokens fed to both.
    Per call, last row: ORT cached vs PyTorch cached, vs PyTorch recompute, vs
    ORT uncached, vs the graph's own model; top-1 agreement."""
    r = Runner(folder / "model.onnx")
    seq = list(prompt)
    lg, past = r.run(seq, len(seq), None)
    with torch.no_grad():
        o = ref(input_ids=torch.tensor([seq]), use_cache=True)
    plg, ppast = o.logits[0].numpy(), o.past_key_values
    out = {"cached": [], "recompute": [], "uncached": [], "twin": [], "top1": [], "tokens": [], "all0": d(lg, plg)}
    with torch.no_grad():
        out["twin_all0"] = d(lg, twin(input_ids=torch.tensor([seq])).logits[0].numpy())
    po, pp = softmax(lg[-1]), softmax(plg[-1])
    out["p_top1"] = (int(po.argmax()), float(po.max()), int(pp.argmax()), float(pp.max()))
    o64, p64 = lg.astype(np.float64).ravel(), plg.astype(np.float64).ravel()
    out["fit0"] = float(o64 @ p64 / (p64 @ p64))  # least-squares k in ORT = k * PyTorch
    out["fit0_resid"] = float(np.abs(o64 - out["fit0"] * p64).max())
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
            tw = twin(input_ids=torch.tensor([seq]), use_cache=False).logits[0].numpy()
        unc, _ = r.run(seq, len(seq), None)
        out["cached"].append(d(lg[-1], plg[-1]))
        out["recompute"].append(d(lg[-1], full[-1]))
        out["uncached"].append(d(lg[-1], unc[-1]))
        out["twin"].append(d(lg[-1], tw[-1]))
        out["top1"].append(int(lg[-1].argmax()) == int(plg[-1].argmax()))
    out["greedy_ort"] = ort_greedy(r, prompt, GREEDY)
    out["greedy_pt"] = pt_greedy(ref, prompt, GREEDY)
    return out


# ---------------------------------------------------------------- verify

def verify(name: str):
    spec = SPECS[name]
    folder = OUT / name
    cfg, ref = reference(folder, name)
    twin = graph_model(name)
    g = report_graph(name)
    r = compare(folder, ref, twin, PROMPT5)
    f = lambda xs: ", ".join(f"{x:.2e}" for x in xs)
    print(f"  prompt {PROMPT5}, then {STEPS} cached steps; PyTorch greedy tokens {r['tokens']}")
    print(f"    ORT cached vs PyTorch (folder's config) cached, last row: {f(r['cached'])}; step 0 all rows "
          f"{r['all0']:.3g}")
    print(f"    ORT cached vs PyTorch recompute, last row: {f(r['recompute'])}")
    print(f"    ORT cached vs ORT uncached (same file), last row: {f(r['uncached'])}")
    print(f"    ORT vs the model the graph was exported from, last row: {f(r['twin'])}; step 0 all rows "
          f"{r['twin_all0']:.2e}")
    print(f"    ORT top-1 == PyTorch top-1 per call: {r['top1']}")
    print(f"    step 0 top-1 (token, probability): ORT {r['p_top1'][:2]}, PyTorch {r['p_top1'][2:]}; "
          f"ORT = k * PyTorch fit over all step-0 logits: k {r['fit0']:.7g}, max residual {r['fit0_resid']:.2e}")
    print(f"    free-running greedy {GREEDY} tokens: ORT {r['greedy_ort']}, PyTorch {r['greedy_pt']}")
    rng = random.Random(1)
    prompts = [[1] + [rng.randrange(3, cfg.vocab_size) for _ in range(4)] for _ in range(N_PROMPTS)]
    runner = Runner(folder / "model.onnx")
    deltas, flips = [], 0
    for p in prompts:
        lg = runner.run(p, len(p), None)[0][-1]
        with torch.no_grad():
            pl = ref(input_ids=torch.tensor([p])).logits[0, -1].numpy()
        deltas.append(d(lg, pl))
        flips += int(lg.argmax()) != int(pl.argmax())
    print(f"  {N_PROMPTS} random 5-token prompts (random.Random(1)), last row vs PyTorch: max |delta| "
          f"min {min(deltas):.3g} max {max(deltas):.3g}; top-1 differs in {flips}/{N_PROMPTS}")
    assert max(r["twin"]) <= TOL and r["twin_all0"] <= TOL, r
    assert max(r["uncached"]) <= TOL, r["uncached"]
    if spec["kind"] == "good":
        for k in ("cached", "recompute"):
            assert max(r[k]) <= TOL, (k, r[k])
        assert r["all0"] <= TOL and max(deltas) <= TOL and r["greedy_ort"] == r["greedy_pt"]
        print("  GOOD: every figure <= 1e-4")
    else:
        assert r["all0"] > BROKEN_MIN and min(r["recompute"]) > BROKEN_MIN, r
        print(f"  BROKEN as intended: step 0 off the folder's PyTorch by {r['all0']:.3g}; == the export-time "
              f"model (<= 1e-4); cached == uncached")
    return cfg, g, r, deltas, flips


def expected_entry(name, cfg, g, r):
    spec = SPECS[name]
    chain = g["logits_chain"]
    ech = g["embed_chain"]
    after = lambda op, ch: [c[0][0] for o, _, c in ch if o == op and c]
    model_type = cfg.model_type
    if model_type == "granite":
        emb = after("Mul", ech[1:])
        resid = g["resid"][(0, "self_attn/o_proj")][0]
        div = after("Div", chain[1:])
        assert resid is not None and len(set(g["attn_scale"])) == 1, g
        graph = {
            "embedding_multiplier": emb[0] if emb else 1.0,
            "attention_multiplier": g["attn_scale"][0],
            "residual_multiplier": resid,
            "logits_scaling": div[0] if div else 1.0,
        }
        want = {k: getattr(cfg, k) for k in graph}
        field = spec.get("field")
        if field:
            entry = {"field": field, "config_value": want[field], "graph_value": graph[field]}
        else:
            entry = {"field": ",".join(graph), "config_value": want, "graph_value": graph}
    elif model_type == "bloom":
        want = alibi_slopes(cfg.n_head).tolist()
        entry = {"field": "n_head (ALiBi slopes)", "config_value": want, "graph_value": g["alibi"][0][1]}
    elif model_type == "gemma":
        emb = after("Mul", ech[1:])
        entry = {"field": "hidden_size (embedding normalizer sqrt(hidden_size))",
                 "config_value": float(np.float32(cfg.hidden_size ** 0.5)), "graph_value": emb[0] if emb else None}
    elif model_type == "gemma2":
        assert len(set(g["attn_scale"])) == 1, g
        entry = {"field": "query_pre_attn_scalar (attention scale query_pre_attn_scalar**-0.5)",
                 "config_value": float(np.float32(cfg.query_pre_attn_scalar ** -0.5)),
                 "graph_value": g["attn_scale"][0]}
    elif model_type == "cohere":
        mul = after("Mul", chain[1:])
        entry = {"field": "logit_scale", "config_value": cfg.logit_scale, "graph_value": mul[0] if mul else None}
    sig = lambda x: float(f"{x:.3g}")
    return {"kind": spec["kind"], **entry, "max_abs_logit_delta_step0": sig(r["all0"]),
            "greedy_tokens_change": r["greedy_ort"] != r["greedy_pt"]}


def check_gemma_twin():
    """models/gemma-tiny (generate.py; read only) is gemma-embed-scale-dropped's
    GOOD twin: how it applies the normalizer, how its bytes and config.json
    differ, and its logits against PyTorch with these weights."""
    good = HERE / "gemma-tiny"
    mine = OUT / "gemma-embed-scale-dropped"
    print("  the GOOD twin, models/gemma-tiny (made by generate.py gen_gemma_tiny; not written here):")
    G = Graph(good / "model.onnx")
    ech, stop = G.embed_chain()
    print("    embedding chain: " + " -> ".join(fmt_node(n, G.vals) for n in ech) + " -> {"
          + ", ".join(fmt_node(u, G.vals) for u in stop) + "}")
    print("    logits chain: " + " -> ".join(fmt_node(n, G.vals) for n in G.logits_chain()) + " -> logits")
    report_scale_forms(G, indent="    ")
    a, b = (good / "model.onnx").read_bytes(), (mine / "model.onnx").read_bytes()
    diff = [k for k, (x, y) in enumerate(zip(a, b)) if x != y]
    print(f"    model.onnx: {len(a)} vs {len(b)} B, {len(diff)} differing bytes at offsets {diff[:8]}: "
          f"{a[diff[0]:diff[-1] + 1].hex()} vs {b[diff[0]:diff[-1] + 1].hex()}" if diff and len(a) == len(b)
          else f"    model.onnx: {len(a)} vs {len(b)} B, {len(diff)} differing bytes")
    ca, cb = json.loads((good / "config.json").read_text()), json.loads((mine / "config.json").read_text())
    print(f"    config.json: keys that differ (gemma-tiny, here): "
          f"{ {k: (ca.get(k), cb.get(k)) for k in sorted(ca.keys() | cb.keys()) if ca.get(k) != cb.get(k)} }")
    cfg = transformers.AutoConfig.from_pretrained(good)
    ref = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    ref.load_state_dict(gemma().state_dict(), strict=True)
    r = compare(good, ref, ref, PROMPT5)
    print(f"    gemma-tiny ORT vs PyTorch (its config.json, these weights), last row per call: "
          f"{', '.join(f'{x:.2e}' for x in r['cached'])}; step 0 all rows {r['all0']:.2e}; greedy {r['greedy_ort']}")
    assert max(r["cached"]) <= TOL and r["all0"] <= TOL


def check_gemma2_twin():
    """gemma2-query-scalar-dropped was exported from softcap-gemma2's model
    (generate_softcap.py; read only here): same config but
    query_pre_attn_scalar 16, same seed and weights, eager. Compare the bytes,
    and print the scale forms of softcap-gemma2 and gemma3-tiny (read only)."""
    mine = OUT / "gemma2-query-scalar-dropped"
    for other in ("softcap-gemma2", "gemma3-tiny"):
        folder = HERE / other
        if not (folder / "model.onnx").exists():
            print(f"  models/{other}/ not there: skipped")
            continue
        print(f"  models/{other}/ (read only):")
        G = Graph(folder / "model.onnx")
        report_scale_forms(G, indent="    ")
        if other == "softcap-gemma2":
            same = (folder / "model.onnx").read_bytes() == (mine / "model.onnx").read_bytes()
            ca, cb = json.loads((folder / "config.json").read_text()), json.loads((mine / "config.json").read_text())
            diff = {k: (ca.get(k), cb.get(k)) for k in sorted(ca.keys() | cb.keys()) if ca.get(k) != cb.get(k)}
            print(f"    model.onnx byte-identical to gemma2-query-scalar-dropped's: {same}; config.json keys that "
                  f"differ (softcap-gemma2, gemma2-query-scalar-dropped): {diff}")


def same_f32(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_f32(a[k], b[k]) for k in a)
    return bool(np.all(np.float32(a) == np.float32(b)))


if __name__ == "__main__":
    args = fc.parse_args(SPECS)
    OUT = args.out or OUT
    fc.versions("torch", "transformers", "onnx", "onnxruntime")
    for x, y, what in ((granite(), granite(logits=1.0), "granite logits_scaling 8/1"),
                       (granite(), granite(emb=1.0), "granite embedding_multiplier 12/1"),
                       (granite(), granite(attn=DEFAULT_ATTN), "granite attention_multiplier 0.0625/0.354"),
                       (granite(), granite(resid=1.0), "granite residual_multiplier 0.22/1"),
                       (gemma2(), gemma2(GEMMA2_HEAD_DIM), "gemma2 query_pre_attn_scalar 64/16"),
                       (cohere(), cohere(1.0), "cohere logit_scale 0.25/1")):
        a, b = x.state_dict(), y.state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), what
    print("  the good and dropped models have identical weights", flush=True)
    print(f"  transformers' ALiBi slopes: 6 heads {alibi_slopes(6).tolist()}; 12 heads {alibi_slopes(12).tolist()}")
    expected = {}

    def verify_and_record(name):
        cfg, g, r, _, _ = verify(name)
        if name == "granite-tiny" and (OUT / SOURCE).is_dir():
            verify_source()
        if name == "gemma-embed-scale-dropped":
            check_gemma_twin()
        if name == "gemma2-query-scalar-dropped":
            check_gemma2_twin()
        expected[name] = expected_entry(name, cfg, g, r)
        e = expected[name]
        assert same_f32(e["config_value"], e["graph_value"]) == (e["kind"] == "good"), e
        print(f"  expected: {json.dumps(expected[name])}", flush=True)

    fc.run_all(args, OUT, {n: (lambda n=n: generate(n)) for n in SPECS}, verify_and_record, describe_folder=describe)
    if not args.verify_only and args.names == list(SPECS):
        path = OUT / EXPECTED.name
        path.write_text(json.dumps(expected, indent=2) + "\n")
        print(f"wrote {path}")
