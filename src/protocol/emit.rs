//! Complete, minimal greedy-decoding programs for a protocol: Python
//! (onnxruntime + numpy), Rust (ort 2 + ndarray) and JavaScript
//! (onnxruntime-node). Every name, dtype and shape in them comes from the
//! plan the runtime check drives the model with. Interface of every program:
//! `--model-dir DIR`, `--ids 5,17,42` (the prompt of a decoder-only model,
//! the source ids of a text seq2seq model), `--features file.npy` (an audio
//! encoder's input, float32), `--max-new-tokens N`, `--ignore-eos`; prints
//! one JSON object: `{"ids": [new ids], "top5": [[[id, logit], …] per new token]}`.

use super::spec::Spec;
use super::table::Protocol;
use crate::plan::{CacheTensor, Family};
use std::fmt::Write;

/// The language of an emitted program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Lang {
    /// onnxruntime + numpy.
    Python,
    /// ort 2 + ndarray.
    Rust,
    /// onnxruntime-node.
    Js,
}

/// The program for the protocol's first decoder form (a merged decoder when
/// the folder has one, else the pair, else the decoder-only model).
pub fn program(p: &Protocol, lang: Lang) -> Result<String, String> {
    let l = p
        .loops
        .iter()
        .min_by_key(|l| match l.form.as_str() {
            "merged-decoder" | "decoder-only" | "no-cache" => 0,
            "split-pair" => 1,
            _ => 2,
        })
        .ok_or("no decoder with a KV cache to write a loop for")?;
    if l.form == "with-past-alone" {
        return Err(
            "a with-past decoder alone cannot start a generation: it needs the no-past decoder or the merged one"
                .into(),
        );
    }
    let plan = l.plan.as_ref().ok_or("no plan")?;
    if l.form == "encoder-alone" {
        return match lang {
            Lang::Python => Ok(super::emit_encoder::encoder_python(l, plan)),
            _ => Err("an encoder alone is written in Python only: use --emit python".into()),
        };
    }
    for c in plan.self_past.iter().chain(&plan.cross_past) {
        if !matches!(c.dtype.to_string().as_str(), "float32" | "float16") {
            return Err(format!("`{}` is {}: the emitted programs feed float32 or float16", c.past, c.dtype));
        }
    }
    // The compiled languages' programs drive growing caches only (genai's
    // shared buffers grow as well: GroupQueryAttention takes either).
    let static_cache = plan.buffer.as_ref().is_some_and(|b| b.form == crate::plan::roles::CacheForm::StaticBuffer);
    let states = plan.self_past.iter().any(|c| c.fixed && !c.buffer);
    let new_form =
        static_cache || states || plan.inputs_embeds.is_some() || l.form == "cross-from-encoder" || plan.is_cacheless();
    if new_form && lang != Lang::Python {
        return Err(
            "this form (fixed buffers, states, embeddings or cross caches from the encoder) is written in Python only: use --emit python".into()
        );
    }
    // Those grow genai's shared buffers from empty pasts instead.
    let mut growing = plan.clone();
    if lang != Lang::Python && growing.buffer.take().is_some() {
        for c in growing.self_past.iter_mut().filter(|c| c.buffer) {
            if let Some(d) = c.shape.get_mut(growing.seq_axis) {
                *d = 0;
            }
            (c.fixed, c.buffer) = (false, false);
        }
    }
    let plan = &growing;
    let spec = Spec {
        l,
        plan,
        seq2seq: plan.family == Family::Seq2Seq,
        pair: l.form == "split-pair",
        encoder_inputs: &l.encoder_inputs,
        step0_inputs: &l.step0_inputs,
    };
    Ok(match lang {
        Lang::Python => python(&spec),
        Lang::Rust => super::emit_rust::rust(&spec),
        Lang::Js => super::emit_js::js(&spec),
    })
}

fn np_dtype(t: &str) -> &'static str {
    match t {
        "float16" => "np.float16",
        "float64" => "np.float64",
        "int64" => "np.int64",
        "int32" => "np.int32",
        "bool" => "np.bool_",
        _ => "np.float32",
    }
}

/// `(past, present, numpy dtype, [dims with the past axis at 0])` rows.
fn py_cache(list: &[CacheTensor]) -> String {
    let mut s = String::from("[\n");
    for c in list {
        let dims: Vec<String> = c.shape.iter().skip(1).map(|d| d.to_string()).collect();
        let _ = writeln!(
            s,
            "    ({:?}, {:?}, {}, ({})),",
            c.past,
            c.present,
            np_dtype(&c.dtype.to_string()),
            dims.join(", ")
        );
    }
    s.push(']');
    s
}

fn python(s: &Spec<'_>) -> String {
    let (l, p) = (s.l, s.plan);
    let mut o = String::new();
    let _ = writeln!(o, "#!/usr/bin/env python3");
    let _ = writeln!(
        o,
        "\"\"\"Greedy decoding with the KV cache ({}), written by `onnx-contract protocol --emit python`",
        l.form
    );
    let _ = writeln!(o, "from the plan its runtime check drives the model with.\n");
    let input = if s.audio() { "--features input.npy" } else { "--ids 5,17,42" };
    let _ = writeln!(o, "    python3 gen.py --model-dir DIR {input} --max-new-tokens 16\n");
    let _ = writeln!(o, "prints {{\"ids\": [new token ids], \"top5\": [[[id, logit], ... 5 per new token]]}}.\n\"\"\"");
    let _ = writeln!(o, "import argparse\nimport json\nimport os\n\nimport numpy as np\nimport onnxruntime as ort\n");
    if let Some(e) = &l.encoder {
        let _ = writeln!(o, "ENCODER = {e:?}");
    }
    let _ = writeln!(o, "STEP0 = {:?}  # the file run at step 0", l.step0_file);
    let _ = writeln!(o, "DECODER = {:?}  # the file run at every later step", l.later_file);
    let _ = writeln!(o, "DECODER_START = {}", l.decoder_start.map_or("None".into(), |v| v.to_string()));
    let _ = writeln!(o, "EOS = {}", l.eos.map_or("None".into(), |v| v.to_string()));
    let _ = writeln!(o, "# (past input, present output, dtype, shape after batch; the past axis is empty)");
    let _ = writeln!(o, "SELF_PAST = {}  # refreshed from the present every step", py_cache(&p.self_past));
    let _ = writeln!(o, "CROSS_PAST = {}  # taken from step 0's present, then kept\n", py_cache(&p.cross_past));
    let fixed: Vec<&str> = p.self_past.iter().filter(|c| c.fixed).map(|c| c.past.as_str()).collect();
    if !fixed.is_empty() {
        let _ = writeln!(
            o,
            "# Fixed-size states and cache buffers: zeros of their whole shape at the start, carried, never grown."
        );
        let _ = writeln!(o, "FIXED = {fixed:?}");
    }
    if let Some(b) = &p.buffer {
        let _ = writeln!(o, "BUFFER = {}  # slots of the cache buffers; tokens are written at the past length", b.len);
    }
    if let Some(e) = &l.embed {
        let _ = writeln!(o, "EMBED = {e:?}  # turns token ids into the decoder's embeddings, before every call");
    }
    let axis = p.seq_axis;
    let _ = writeln!(
        o,
        "def empty(shape, dtype):\n    \"\"\"A past of length 0 on axis {axis} (not 1: a zero slot would be attended to).\"\"\"\n    s = [1, *shape]\n    s[{axis}] = 0\n    return np.zeros(s, dtype=dtype)\n"
    );
    let _ = writeln!(o, "\ndef main():");
    let _ = writeln!(o, "    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])");
    let _ = writeln!(o, "    ap.add_argument(\"--model-dir\", required=True)");
    if s.audio() {
        let _ = writeln!(
            o,
            "    ap.add_argument(\"--features\", required=True, help=\"the encoder's input features (.npy)\")"
        );
    } else {
        let what = if s.seq2seq { "the source token ids" } else { "the prompt's token ids" };
        let _ = writeln!(o, "    ap.add_argument(\"--ids\", required=True, help=\"{what}, e.g. 5,17,42\")");
    }
    let _ = writeln!(o, "    ap.add_argument(\"--max-new-tokens\", type=int, default=16)");
    let _ = writeln!(o, "    ap.add_argument(\"--ignore-eos\", action=\"store_true\")");
    let _ = writeln!(o, "    a = ap.parse_args()");
    let _ = writeln!(o, "    opts = dict(providers=[\"CPUExecutionProvider\"])");
    let _ = writeln!(o, "    path = lambda f: os.path.join(a.model_dir, f)");
    let ids_dtype = np_dtype(&p.input_ids_dtype.to_string());
    if !s.audio() {
        let _ = writeln!(o, "    ids = np.array([[int(t) for t in a.ids.split(\",\")]], dtype=np.int64)");
    }
    if l.encoder.is_some() {
        let _ = writeln!(o, "\n    # The encoder, once.");
        let _ = writeln!(o, "    encoder = ort.InferenceSession(path(ENCODER), **opts)");
        let mut feeds = Vec::new();
        if let Some((_, t, d)) = s.encoder_inputs.iter().find(|(_, t, _)| t.starts_with("float")) {
            // Features (log-mel frames) or raw samples, without the batch axis in the file.
            let _ = writeln!(o, "    feat = np.load(a.features).astype({})", np_dtype(t));
            let _ = writeln!(o, "    feat = feat[None] if feat.ndim == {} else feat", d.len().saturating_sub(1));
        }
        for (n, t, _) in s.encoder_inputs {
            let v = if t.starts_with("float") {
                "feat".to_string()
            } else if n.contains("mask") && s.audio() {
                format!("np.ones(feat.shape[:2], dtype={})", np_dtype(t))
            } else if n.contains("mask") {
                format!("np.ones_like(ids, dtype={})", np_dtype(t))
            } else {
                format!("ids.astype({})", np_dtype(t))
            };
            feeds.push(format!("{n:?}: {v}"));
        }
        let _ = writeln!(o, "    enc_out = encoder.run(None, {{{}}})", feeds.join(", "));
        let _ = writeln!(o, "    enc = dict(zip([o.name for o in encoder.get_outputs()], enc_out))");
        let _ = writeln!(o, "    states = enc_out[0]");
    }
    let states_name = s.states_name();
    let _ = writeln!(o, "\n    step0 = ort.InferenceSession(path(STEP0), **opts)");
    let _ = writeln!(o, "    decoder = step0 if DECODER == STEP0 else ort.InferenceSession(path(DECODER), **opts)");
    if l.embed.is_some() {
        let _ = writeln!(o, "    embed = ort.InferenceSession(path(EMBED), **opts)");
        let _ = writeln!(o, "    embed_in = embed.get_inputs()[0]");
    }
    if p.self_past.iter().any(|c| c.fixed) {
        let _ = writeln!(
            o,
            "    past = {{p: np.zeros([1, *shape], dtype=t) if p in FIXED else empty(shape, t) for p, _, t, shape in SELF_PAST}}"
        );
    } else {
        let _ = writeln!(o, "    past = {{p: empty(shape, t) for p, _, t, shape in SELF_PAST}}");
    }
    if l.form == "cross-from-encoder" {
        let _ = writeln!(o, "    cross = {{p: enc[q] for p, q, _, _ in CROSS_PAST}}  # the encoder computes them");
    } else {
        let _ = writeln!(o, "    cross = {{p: empty(shape, t) for p, _, t, shape in CROSS_PAST}}");
    }
    if let (true, Some(k)) = (s.seq2seq, p.codebooks) {
        let _ = writeln!(
            o,
            "    fed = np.full(({k}, 1), DECODER_START, dtype={ids_dtype})  # step 0: the start token in each of the {k} codebook rows"
        );
    } else if s.seq2seq {
        let _ =
            writeln!(o, "    fed = np.array([[DECODER_START]], dtype={ids_dtype})  # step 0: the decoder start token");
    } else {
        let _ = writeln!(o, "    fed = ids.astype({ids_dtype})  # step 0: the whole prompt");
    }
    let _ = writeln!(o, "    past_len, new, top5 = 0, [], []");
    let _ = writeln!(o, "    for step in range(a.max_new_tokens):");
    // One call per step, or (a static export that fixes its tokens per call)
    // as many calls as the tokens fed take: written into `call`, indented to fit.
    let outer = o;
    let mut o = String::new();
    let _ = writeln!(o, "        n = fed.shape[1]");
    match &p.inputs_embeds {
        Some(x) => {
            let _ = writeln!(o, "        ids_in = fed.astype(np.int32 if \"int32\" in embed_in.type else np.int64)");
            let _ = writeln!(
                o,
                "        feeds = {{{x:?}: embed.run(None, {{embed_in.name: ids_in}})[0]}}  # embeddings, every call"
            );
        }
        None => {
            let _ = writeln!(o, "        feeds = {{{:?}: fed}}", p.input_ids);
        }
    }
    if let Some(f) = &p.branch_flag {
        let _ = writeln!(o, "        feeds[{f:?}] = np.array([step > 0])  # no-cache branch at step 0, cached after");
    }
    if let Some(name) = &states_name {
        let t = np_dtype(&s.states_dtype());
        // Every call: a pair's with-past decoder may take the states too (Moonshine's does);
        // the feeds are filtered to what each file declares.
        let _ = writeln!(o, "        feeds[{name:?}] = states.astype({t})");
    }
    if let Some(m) = &p.encoder_attention_mask {
        let _ = writeln!(
            o,
            "        feeds[{m:?}] = np.ones((1, states.shape[1]), dtype={})",
            np_dtype(&p.dtype_of(m).to_string())
        );
    }
    match (&p.attention_mask, p.buffer.as_ref().filter(|b| b.mask_over_buffer)) {
        (Some(m), Some(_)) => {
            let t = np_dtype(&p.dtype_of(m).to_string());
            let _ = writeln!(o, "        mask = np.zeros((1, BUFFER), dtype={t})  # over the whole buffer:");
            let _ = writeln!(o, "        mask[0, :past_len + n] = 1  # ones up to the last token fed, zeros after");
            let _ = writeln!(o, "        feeds[{m:?}] = mask");
        }
        (Some(m), None) => {
            let _ = writeln!(
                o,
                "        feeds[{m:?}] = np.ones((1, past_len + n), dtype={})  # past AND new tokens",
                np_dtype(&p.dtype_of(m).to_string())
            );
        }
        _ => {}
    }
    if let Some(c) = &p.cache_position {
        let _ = writeln!(
            o,
            "        feeds[{c:?}] = np.arange(past_len, past_len + n, dtype={})  # the buffer slots written",
            np_dtype(&p.dtype_of(c).to_string())
        );
    }
    if let Some(k) = &p.logits_to_keep {
        let _ = writeln!(
            o,
            "        feeds[{k:?}] = np.array(1, dtype={})  # logits for the last position only",
            np_dtype(&p.dtype_of(k).to_string())
        );
    }
    match (&p.position_ids, p.position_rows) {
        (Some(m), Some(k)) => {
            let _ = writeln!(
                o,
                "        feeds[{m:?}] = np.tile(np.arange(past_len, past_len + n, dtype={})[None, None], ({k}, 1, 1))  # text: every rotary section's row continues the past",
                np_dtype(&p.dtype_of(m).to_string())
            );
        }
        (Some(m), None) => {
            let _ = writeln!(
                o,
                "        feeds[{m:?}] = np.arange(past_len, past_len + n, dtype={})[None]  # continue the past",
                np_dtype(&p.dtype_of(m).to_string())
            );
        }
        (None, _) => {}
    }
    if s.pair {
        let _ = writeln!(o, "        if step > 0:  # the with-past decoder takes the cache; step 0's decoder has none");
        let _ = writeln!(o, "            feeds.update(past)\n            feeds.update(cross)");
        let _ = writeln!(o, "        session = step0 if step == 0 else decoder");
        let _ = writeln!(o, "        declared = {{i.name for i in session.get_inputs()}}");
        let _ = writeln!(o, "        feeds = {{k: v for k, v in feeds.items() if k in declared}}");
    } else {
        let _ = writeln!(o, "        feeds.update(past)\n        feeds.update(cross)");
        let _ = writeln!(o, "        session = decoder");
    }
    let _ = writeln!(o, "        out = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))");
    let _ = writeln!(o, "        past = {{p: out[q] for p, q, _, _ in SELF_PAST}}  # the present becomes the past");
    let _ = writeln!(o, "        if step == 0 and all(q in out for _, q, _, _ in CROSS_PAST):");
    let _ = writeln!(
        o,
        "            cross = {{p: out[q] for p, q, _, _ in CROSS_PAST}}  # step 0's, kept (later ones are dummies)"
    );
    if p.is_cacheless() {
        let _ = writeln!(o, "        # no cache: the next call re-feeds the whole prefix from position 0");
    } else {
        let _ = writeln!(o, "        past_len += n");
    }
    let call = o;
    let mut o = outer;
    match p.tokens_per_call {
        Some(k) => {
            let _ = writeln!(
                o,
                "        for fed in [fed[:, i:i + {k}] for i in range(0, fed.shape[1], {k})]:  # {k} token(s) per call, the prompt too"
            );
            for line in call.lines() {
                let _ = writeln!(o, "    {line}");
            }
        }
        None => o.push_str(&call),
    }
    if p.codebooks.is_some() {
        // Every codebook row takes its own greedy token; the printed ids and top-5 are row 0's.
        let _ = writeln!(
            o,
            "        rows = [int(np.argsort(-out[{:?}][r, -1].astype(np.float64), kind=\"stable\")[0]) for r in range(fed.shape[0])]",
            p.logits
        );
    }
    let _ = writeln!(o, "        logits = out[{:?}][0, -1].astype(np.float64)", p.logits);
    let _ = writeln!(o, "        best = np.argsort(-logits, kind=\"stable\")[:5]");
    let _ = writeln!(o, "        token = int(best[0])");
    let _ = writeln!(o, "        new.append(token)");
    let _ = writeln!(o, "        top5.append([[int(i), float(logits[i])] for i in best])");
    if p.is_cacheless() {
        let _ = writeln!(
            o,
            "        fed = np.concatenate([fed, np.array([[token]], dtype={ids_dtype})], axis=1)  # the whole prefix, every call"
        );
    } else if p.codebooks.is_some() {
        let _ = writeln!(
            o,
            "        fed = np.array([[t] for t in rows], dtype={ids_dtype})  # one new token per codebook row"
        );
    } else {
        let _ = writeln!(o, "        fed = np.array([[token]], dtype={ids_dtype})");
    }
    let _ = writeln!(o, "        if token == EOS and not a.ignore_eos:\n            break");
    let _ = writeln!(o, "    print(json.dumps({{\"ids\": new, \"top5\": top5}}))\n\n");
    let _ = writeln!(o, "if __name__ == \"__main__\":\n    main()");
    o
}
