"""Regenerate every fixture folder of models/ with its 20 generators (generate.py,
derive_present_dtype.py and the 18 generate_*.py), in the order they depend on
each other, each in the python it needs; then say which written files are
byte-identical to the committed ones.

    python3 models/regenerate_all.py --out DIR [--only NAME ...] [--no-compare]
    python3 models/regenerate_all.py --in-place [--only NAME ...]

--out DIR: each generator writes under DIR/<generator>/ (models/ is only
read: the derived fixtures are built from the committed ones there), then
every file is compared with models/ (bytes; symlinks by target). --in-place
writes into models/ itself: generate.py then rewrites the five merged
decoders FIXTURES-NOTES.md says are not reproduced byte for byte, so check
`git status` afterwards. --only runs the named generators (e.g. `softcap`,
`generate`) in the same order. Every generator also runs its own
measurements after writing (see each script's docstring and notes).

What each needs (all CPU, one thread; a full run takes about 7 minutes on 2 cores):
- python3 with models/requirements-gen.txt (torch 2.9.1, transformers 4.57.6,
  optimum 2.1.0, optimum-onnx 0.1.0, onnx 1.23.2, onnxruntime 1.31.1) and
  onnxruntime-genai 0.18.0 (numeric's builder runs in $GENAI_SITE, default
  /tmp/genai-site; see generate_numeric.py);
- onnxconverter-common 1.16.0 for generation, numeric, remedies and
  seq2seq_variants: installed, or in $OCC_SITE (default /tmp/occ-site:
  `pip install --no-deps --target /tmp/occ-site onnxconverter-common==1.16.0`);
- onnx-ir 1.1.0 in $ONNX_IR_SITE for generation's 4-bit quantizer, and
  transformers 4.53.3 in $TF453_SITE for attention_variants' gpt-bigcode export
  (see those scripts' docstrings);
- /work/genvenv ($GENVENV_PYTHON) for custom_exports, static_cache, genai_forms
  and genai_builder, with onnxscript 0.7.2 for the first two (installed, or in
  $ONNXSCRIPT_SITE, default /tmp/onnxscript-site: `pip install --no-deps
  --target /tmp/onnxscript-site onnxscript==0.7.2`), and /work/genvenv-tf5
  ($GENAI_BUILDER_PYTHON) for the onnxruntime-genai builder
  (GENAI-BUILDER-NOTES.md says how both venvs are made).
custom_exports and static_cache record this script's folder in their dynamo
graphs (stack traces): run from /work/main/models to reproduce the committed
bytes of dynamo-llama/ and static-cache-with-mask/.
"""
import argparse
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
GENVENV = os.environ.get("GENVENV_PYTHON", "/work/genvenv/bin/python")
OCC = ("onnxconverter_common", os.environ.get("OCC_SITE", "/tmp/occ-site"))
ONNXSCRIPT = ("onnxscript", os.environ.get("ONNXSCRIPT_SITE", "/tmp/onnxscript-site"))

# (name, script, python, extra packages) in dependency order: generate.py's
# folders are the sources of most others; folder_kinds (gpt2-merged-decoders),
# generation (tjs-variants), multimodal (tjs-vlm) and seq2seq_variants
# (bart-tjs-variants) come before tjs_layouts, which links to them; numeric
# before remedies, which imports it; the slow genai and audio ones last.
GENERATORS = [
    ("generate", "generate.py", sys.executable, ()),
    ("derive_present_dtype", "derive_present_dtype.py", sys.executable, ()),
    ("softcap", "generate_softcap.py", sys.executable, ()),
    ("rope", "generate_rope.py", sys.executable, ()),
    ("semantics", "generate_semantics.py", sys.executable, ()),
    ("folder_kinds", "generate_folder_kinds.py", sys.executable, ()),
    ("mechanisms", "generate_mechanisms.py", sys.executable, ()),
    ("generation", "generate_generation.py", sys.executable, (OCC,)),
    ("batch_seq2seq", "generate_batch_seq2seq.py", sys.executable, ()),
    ("seq2seq_variants", "generate_seq2seq_variants.py", sys.executable, (OCC,)),
    ("multimodal", "generate_multimodal.py", sys.executable, ()),
    ("tjs_layouts", "generate_tjs_layouts.py", sys.executable, ()),
    ("numeric", "generate_numeric.py", sys.executable, (OCC,)),
    ("remedies", "generate_remedies.py", sys.executable, (OCC,)),
    ("attention_variants", "generate_attention_variants.py", sys.executable, ()),
    ("static_cache", "generate_static_cache.py", GENVENV, (ONNXSCRIPT,)),
    ("custom_exports", "generate_custom_exports.py", GENVENV, (ONNXSCRIPT,)),
    ("audio_mrope", "generate_audio_mrope.py", sys.executable, ()),
    ("genai_forms", "generate_genai_forms.py", GENVENV, ()),
    ("genai_builder", "generate_genai_builder.py", GENVENV, ()),
]


def importable(python, module):
    r = subprocess.run([python, "-c", f"import {module}"], capture_output=True)
    return r.returncode == 0


def environment(python, extras):
    """One thread, offline, fixed hash seed; a package the python lacks comes
    from its site folder, put on PYTHONPATH for that generator only."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONHASHSEED="0")
    env.pop("PYTHONPATH", None)
    sites = []
    for module, site in extras:
        if importable(python, module):
            continue
        if not Path(site, module).is_dir():
            sys.exit(f"{python} has no {module} and {site} does not hold it: see this script's docstring")
        sites.append(site)
    if sites:
        env["PYTHONPATH"] = os.pathsep.join(sites)
    return env


def entry(p: Path):
    """sha256 of a file's bytes; for a symlink, its target as written and the
    file it leads to (a link written under --out to a committed file reads
    other dots than the committed link, yet leads to the same file)."""
    if p.is_symlink():
        return ("link", os.readlink(p), p.resolve())
    return ("file", hashlib.sha256(p.read_bytes()).hexdigest())


def same_entry(a, b):
    return a == b or (a[0] == b[0] == "link" and (a[1] == b[1] or a[2] == b[2]))


def compare(out: Path, names):
    same, differ, new = 0, [], []
    for name in names:
        for p in sorted((out / name).rglob("*")):
            if "__pycache__" in p.parts or not (p.is_symlink() or p.is_file()):
                continue
            rel = p.relative_to(out / name)
            committed = HERE / rel
            if not (committed.is_symlink() or committed.is_file()):
                new.append(f"{name}/{rel}")
            elif same_entry(entry(p), entry(committed)):
                same += 1
            else:
                differ.append(f"{name}/{rel}")
    print(f"== compared with models/: {same} files identical, {len(differ)} differ, {len(new)} not in models/")
    for f in differ:
        print(f"  differs: {f}")
    for f in new:
        print(f"  not in models/: {f}")
    return differ


def main():
    names = [g[0] for g in GENERATORS]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", type=lambda s: Path(s).resolve(), help="write under DIR/<generator>/")
    where.add_argument("--in-place", action="store_true", help="write into models/ itself")
    ap.add_argument("--only", nargs="+", choices=names, metavar="NAME", help=f"some of {names}")
    ap.add_argument("--no-compare", action="store_true")
    args = ap.parse_args()
    chosen = [g for g in GENERATORS if not args.only or g[0] in args.only]
    if args.out and HERE in [args.out, *args.out.parents]:
        sys.exit("--out must be outside models/ (use --in-place to write there)")
    failed, started = [], time.time()
    for name, script, python, extras in chosen:
        cmd = [python, str(HERE / script)]
        if args.out:
            cmd += ["--out", str(args.out / name)]
        print(f"== {name}: {' '.join(cmd)}", flush=True)
        t = time.time()
        r = subprocess.run(cmd, env=environment(python, extras), cwd=HERE.parent)
        print(f"== {name}: exit {r.returncode}, {time.time() - t:.0f} s", flush=True)
        if r.returncode != 0:
            failed.append(name)
    print(f"== all: {len(chosen) - len(failed)} of {len(chosen)} generators passed in {time.time() - started:.0f} s"
          + (f"; failed: {failed}" if failed else ""))
    if args.out and not args.no_compare:
        compare(args.out, [g[0] for g in chosen if g[0] not in failed])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
