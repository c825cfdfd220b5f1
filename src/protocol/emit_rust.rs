//! The Rust program (ort 2 + ndarray; `half` too for float16 models),
//! rendered from the recipe.

use super::emit_rust_helpers::{EMBED_HELPER, FLOAT_HELPERS, HALF_HELPERS, KEPT, NPY_HELPER};
use super::spec::{Cache, Rule, Spec};
use std::fmt::Write;

/// `(past, present, dtype, &[dims after batch], fixed)` rows.
fn cache(list: &[Cache]) -> String {
    let mut s = String::from("&[\n");
    for c in list {
        let dims: Vec<String> = c.dims.iter().map(|d| d.to_string()).collect();
        let _ = writeln!(s, "    ({:?}, {:?}, {:?}, &[{}], {}),", c.past, c.present, c.dtype, dims.join(", "), c.fixed);
    }
    s.push(']');
    s
}

/// The expression (a `DynValue`) feeding one input at a call.
fn value(rule: Rule, t: &str) -> String {
    let range = "(past_len..past_len + n).map(|v| v as i64)";
    match rule {
        Rule::Ids => format!("ints({t:?}, &[part.len(), n], part.concat())?"),
        Rule::Embeds => "embeds(&mut embed, &part)?".into(),
        Rule::Flag => "Tensor::from_array(ArrayD::from_shape_vec(IxDyn(&[1]), vec![step > 0])?)?.into_dyn()".into(),
        Rule::States => "(&states)".into(),
        Rule::EncoderMask => format!("ints({t:?}, &[b, enc_len], vec![1; b * enc_len])?"),
        Rule::Mask => format!("ints({t:?}, &[b, past_len + n], vec![1; b * (past_len + n)])?"),
        Rule::MaskOverBuffer(len, false) => {
            format!("ints({t:?}, &[b, {len}], (0..b * {len}).map(|i| i64::from(i % {len} < past_len + n)).collect())?")
        }
        Rule::MaskOverBuffer(len, true) => format!(
            "ints({t:?}, &[b, {len}], (0..b * {len}).map(|i| i64::from(i % {len} + past_len + n >= {len})).collect())?"
        ),
        Rule::CachePosition => format!("ints({t:?}, &[n], {range}.collect())?"),
        Rule::LogitsToKeep => format!("ints({t:?}, &[], vec![1])?"),
        Rule::Positions => format!("ints({t:?}, &[b, n], (0..b).flat_map(|_| {range}).collect())?"),
        Rule::Positions3(k) => format!("ints({t:?}, &[{k}, b, n], (0..{k} * b).flat_map(|_| {range}).collect())?"),
    }
}

/// The comment above one input's feed.
fn why(rule: Rule) -> &'static str {
    match rule {
        Rule::Ids => "the tokens of this call",
        Rule::Embeds => "the embedding model's output for the tokens, every call",
        Rule::Flag => "the no-cache branch at step 0, the cached one after",
        Rule::States => "the encoder's states, one row per beam",
        Rule::EncoderMask => "ones over the encoder's positions",
        Rule::Mask => "the past AND the new tokens",
        Rule::MaskOverBuffer(_, false) => "the whole buffer: ones up to the last token fed, zeros after",
        Rule::MaskOverBuffer(_, true) => "the whole buffer, right-aligned: ones over the last past + new slots",
        Rule::CachePosition => "the buffer slots written",
        Rule::LogitsToKeep => "logits for the last position only",
        Rule::Positions => "continuing the past",
        Rule::Positions3(_) => "text: every rotary section's row continues the past",
    }
}

pub(crate) fn rust(s: &Spec<'_>) -> String {
    let (l, p) = (s.l, s.plan);
    let f16 = s.uses_float16();
    let mut o = String::new();
    let input = if s.audio() { "--features input.npy" } else { "--ids 5,17,42" };
    let _ = write!(
        o,
        r#"//! Decoding with the KV cache ({form}), written by `onnx-contract protocol --emit rust`
//! from the plan its runtime check drives the model with: greedy, or beam search with
//! --num-beams N (default {beams}: generation_config.json's num_beams, else 1).
//!
//! Cargo.toml:
//!   [dependencies]
//!   ort = {{ version = "=2.0.0-rc.15", default-features = false, features = ["std", "ndarray", "load-dynamic", "api-17"{half_feature}] }}
//!   ndarray = "0.17"
{half_dep}//! Run (ONNX Runtime is loaded from ORT_DYLIB_PATH, e.g. Python's onnxruntime/capi/libonnxruntime.so.*):
//!   ORT_DYLIB_PATH=... cargo run --release -- --model-dir DIR {input} --max-new-tokens 16
//! prints {{"ids": [new token ids], "score": their summed log-probability,
//! "top5": [[[id, logit], ... 5 per new token]] (greedy only)}}.
//!
//! Beam search: {rule}

use ndarray::{{ArrayD, Axis, IxDyn}};
use ort::session::{{Session, SessionInputValue}};
use ort::value::{{DynTensor, DynValue, Tensor, TensorElementType}};
use std::error::Error;
use std::path::PathBuf;

"#,
        form = l.form,
        beams = s.beams,
        half_feature = if f16 { ", \"half\"" } else { "" },
        half_dep = if f16 { "//!   half = \"2\"  # this model's caches are float16\n" } else { "" },
        rule = super::spec::BEAM_RULE,
    );
    let tracks = s.tracks_past_len();
    if let Some(e) = &l.encoder {
        let _ = writeln!(o, "const ENCODER: &str = {e:?}; // run once, before step 0");
    }
    if let Some(e) = &l.embed {
        let _ = writeln!(o, "const EMBED: &str = {e:?}; // token ids to the decoder's embeddings, before every call");
    }
    let _ = writeln!(o, "const STEP0: &str = {:?}; // the file run at step 0", l.step0_file);
    let _ = writeln!(o, "const DECODER: &str = {:?}; // the file run at every later step", l.later_file);
    let _ = writeln!(o, "const DECODER_START: i64 = {};", l.decoder_start.unwrap_or(0));
    let _ = writeln!(o, "const EOS: Option<i64> = {};", l.eos.map_or("None".into(), |v| format!("Some({v})")));
    let _ = writeln!(o, "const NUM_BEAMS: usize = {};\nconst LENGTH_PENALTY: f64 = {:?};", s.beams, l.beams.1);
    let _ = writeln!(o, "const LOGITS: &str = {:?};", p.logits);
    let _ = writeln!(o, "/// The step-0 file takes no cache (a split pair's no-past decoder).");
    let _ = writeln!(o, "const STEP0_WITHOUT_CACHE: bool = {};", s.pair);
    let _ = writeln!(o, "/// The tokens of a call: all of them, or as many as the graph takes.");
    let _ = writeln!(o, "const TOKENS_PER_CALL: Option<usize> = {:?};", p.tokens_per_call);
    let _ = writeln!(o, "/// (past input, present output, dtype, shape after the batch axis, fixed)");
    let _ = writeln!(o, "type CacheRow = (&'static str, &'static str, &'static str, &'static [i64], bool);");
    let _ = writeln!(
        o,
        "const SELF_PAST: &[CacheRow] = {}; // refreshed from the present every call",
        cache(&s.self_caches())
    );
    let cross_src = if s.cross_from_encoder() { "the encoder's outputs" } else { "step 0's presents" };
    let _ = writeln!(o, "const CROSS_PAST: &[CacheRow] = {}; // {cross_src}, then kept\n", cache(&s.cross_caches()));
    let _ = write!(o, "{}", HELPERS.replace("SEQ_AXIS", &p.seq_axis.to_string()));
    // This export's presents hold only the new rows: the caller keeps each buffer.
    if let Some(keep) = s.keep() {
        let _ = writeln!(o, "const KEEP: &str = {keep:?}; // write the new rows at the tokens' slots, or roll: drop the oldest, append\n");
        let _ = write!(o, "{}", KEPT.replace("SEQ_AXIS", &p.seq_axis.to_string()));
    }
    if f16 {
        o.push_str(HALF_HELPERS);
    } else {
        o.push_str(FLOAT_HELPERS);
    }
    if l.embed.is_some() {
        o.push_str(EMBED_HELPER);
    }
    if s.audio() {
        o.push_str(NPY_HELPER);
    }
    let _ = writeln!(o, "fn main() -> Result<(), Box<dyn Error>> {{");
    let _ = writeln!(o, "    let a = args()?;\n    let b = a.num_beams;");
    if let Some(why) = s.single_row() {
        let _ = writeln!(o, "    if b != 1 {{\n        return Err({why:?}.into());\n    }}");
    }
    let _ = writeln!(o, "    let lib = std::env::var(\"ORT_DYLIB_PATH\").map_err(|_| \"set ORT_DYLIB_PATH to an ONNX Runtime library\")?;");
    let _ = writeln!(o, "    let env = ort::init_from(lib)?.build()?;");
    let _ = writeln!(o, "    let open = |file: &str| Session::builder(&env).and_then(|mut s| s.commit_from_file(a.model_dir.join(file)));");
    if l.encoder.is_some() {
        rust_encoder(s, &mut o);
    }
    if l.embed.is_some() {
        let _ = writeln!(o, "    let mut embed = open(EMBED)?;");
    }
    let _ = writeln!(o, "\n    let mut sessions = vec![open(STEP0)?];");
    let _ = writeln!(o, "    if DECODER != STEP0 {{\n        sessions.push(open(DECODER)?);\n    }}");
    let _ = writeln!(o, "    let mut past: Vec<DynValue> = SELF_PAST.iter().map(|c| cache(&sessions[0], c, b)).collect::<Result<_, _>>()?;");
    if s.cross_from_encoder() {
        let _ = writeln!(o, "    let mut cross: Vec<DynValue> = CROSS_PAST.iter().map(|(_, q, ..)| rows(enc.get(*q).ok_or(format!(\"no {{q}}\"))?, &vec![0; b])).collect::<Result<_, _>>()?;");
    } else {
        let _ = writeln!(o, "    let mut cross: Vec<DynValue> = CROSS_PAST.iter().map(|&(p, q, t, d, _)| cache(&sessions[0], &(p, q, t, d, false), b)).collect::<Result<_, _>>()?;");
    }
    match (s.seq2seq, p.codebooks) {
        (true, Some(k)) => {
            let _ = writeln!(o, "    let mut fed: Vec<Vec<i64>> = vec![vec![DECODER_START]; {k}]; // step 0: the start token in each codebook row");
        }
        (true, None) => {
            let _ = writeln!(
                o,
                "    let mut fed: Vec<Vec<i64>> = vec![vec![DECODER_START]; b]; // step 0: the decoder start token"
            );
        }
        _ => {
            let _ = writeln!(o, "    let mut fed: Vec<Vec<i64>> = vec![a.ids.clone(); b]; // step 0: the whole prompt");
        }
    }
    let past_len_decl = if tracks { "    let mut past_len = 0usize;\n" } else { "" };
    let _ = write!(
        o,
        r#"    let mut seqs: Vec<Vec<i64>> = vec![Vec::new(); b]; // each beam's new tokens
    // The beams start as one: only row 0 counts at step 0.
    let mut scores: Vec<f64> = (0..b).map(|r| if r == 0 {{ 0.0 }} else {{ -1e9 }}).collect();
    let mut finished: Vec<(f64, Vec<i64>, f64)> = Vec::new();
    let mut top5: Vec<Vec<(usize, f64)>> = Vec::new();
{past_len_decl}    for step in 0..a.max_new_tokens {{
        let width = fed[0].len();
        let per = TOKENS_PER_CALL.unwrap_or(width);
        let mut logits: Vec<Vec<f64>> = Vec::new();
        let mut from = 0;
        while from < width {{
            let part: Vec<Vec<i64>> = fed.iter().map(|r| r[from..(from + per).min(width)].to_vec()).collect();
            let n = part[0].len();
            let mut feeds: Vec<(String, SessionInputValue)> = Vec::new();
"#
    );
    for f in s.feeds() {
        let _ = writeln!(o, "            // {}", why(f.rule));
        let _ = writeln!(o, "            feeds.push(({:?}.to_string(), {}.into()));", f.name, value(f.rule, &f.dtype));
    }
    let carry = match s.keep() {
        Some(_) => "past = SELF_PAST.iter().zip(&past).map(|(c, old)| keep_rows(old, &out.remove(c.1).ok_or(format!(\"no {}\", c.1))?, past_len)).collect::<Result<_, Box<dyn Error>>>()?; // the new rows into the kept buffer",
        None => "past = SELF_PAST.iter().map(|c| out.remove(c.1).ok_or(format!(\"no {}\", c.1))).collect::<Result<_, _>>()?;",
    };
    let _ = write!(
        o,
        r#"            if !(STEP0_WITHOUT_CACHE && step == 0) {{
                for (c, v) in SELF_PAST.iter().zip(&past).chain(CROSS_PAST.iter().zip(&cross)) {{
                    feeds.push((c.0.to_string(), v.into()));
                }}
            }}
            let later = sessions.len() - 1;
            let session = &mut sessions[if step == 0 {{ 0 }} else {{ later }}];
            // Each file gets the inputs it declares.
            let declared: Vec<String> = session.inputs().iter().map(|i| i.name().to_string()).collect();
            feeds.retain(|(k, _)| declared.contains(k));
            let mut out = session.run(feeds)?;
            logits = last_rows(&out[LOGITS])?;
            // The present becomes the past; the cross-attention past is step 0's (later ones are dummies).
            {carry}
            if step == 0 && !CROSS_PAST.is_empty() && CROSS_PAST.iter().all(|c| out.contains_key(c.1)) {{
                cross = CROSS_PAST.iter().map(|c| out.remove(c.1).ok_or(format!("no {{}}", c.1))).collect::<Result<_, _>>()?;
            }}
"#
    );
    if p.is_cacheless() {
        let _ = writeln!(o, "            // No cache: the next call feeds the whole prefix again, from position 0.");
    } else if tracks {
        let _ = writeln!(o, "            past_len += n;");
    }
    let _ = write!(
        o,
        r#"            from += n;
        }}
        if b == 1 {{
            top5.push(order(&logits[0]).into_iter().take(5).map(|i| (i, logits[0][i])).collect());
        }}
        let vocab = logits[0].len();
        let mut cand: Vec<(f64, usize, usize)> = Vec::with_capacity(b * vocab);
        for (r, row) in logits.iter().take(b).enumerate() {{
            for (t, lp) in log_softmax(row).into_iter().enumerate() {{
                cand.push((scores[r] + lp, r, t));
            }}
        }}
        // Highest first; ties by lower beam, then lower id.
        cand.sort_by(|x, y| y.0.partial_cmp(&x.0).unwrap_or(std::cmp::Ordering::Equal).then((x.1, x.2).cmp(&(y.1, y.2))));
        let (mut origin, mut tokens, mut kept) = (Vec::new(), Vec::new(), Vec::new());
        for (rank, &(score, r, t)) in cand.iter().take(2 * b).enumerate() {{
            if EOS == Some(t as i64) && !a.ignore_eos {{
                if rank < b {{
                    // A finished hypothesis.
                    let mut s = seqs[r].clone();
                    s.push(t as i64);
                    finished.push((score / (s.len() as f64).powf(LENGTH_PENALTY), s, score));
                }}
                continue;
            }}
            origin.push(r);
            tokens.push(t as i64);
            kept.push(score);
            if origin.len() == b {{
                break;
            }}
        }}
        seqs = origin.iter().zip(&tokens).map(|(&r, &t)| [seqs[r].clone(), vec![t]].concat()).collect();
        scores = kept;
        if b > 1 {{
            // Every beam's cache rows follow its origin.
            past = past.iter().map(|v| rows(v, &origin)).collect::<Result<_, _>>()?;
        }}
"#
    );
    if p.is_cacheless() {
        let _ = writeln!(o, "        // The whole prefix, every call.");
        let _ = writeln!(
            o,
            "        fed = origin.iter().zip(&tokens).map(|(&r, &t)| [fed[r].clone(), vec![t]].concat()).collect();"
        );
    } else if p.codebooks.is_some() {
        let _ = writeln!(o, "        // Every other codebook row takes its own greedy token.");
        let _ = writeln!(o, "        fed = (0..fed.len()).map(|r| vec![if r == 0 {{ tokens[0] }} else {{ order(&logits[r])[0] as i64 }}]).collect();");
    } else {
        let _ = writeln!(o, "        fed = tokens.iter().map(|&t| vec![t]).collect();");
    }
    let _ = write!(
        o,
        r#"        if finished.len() >= b {{
            break;
        }}
    }}
    let running = (0..b).map(|r| (scores[r] / (seqs[r].len().max(1) as f64).powf(LENGTH_PENALTY), seqs[r].clone(), scores[r]));
    let best = finished.into_iter().chain(running).fold(None::<(f64, Vec<i64>, f64)>, |acc, h| match acc {{
        Some(x) if x.0 >= h.0 => Some(x),
        _ => Some(h),
    }});
    let (_, ids, score) = best.ok_or("no hypothesis")?;
    let tops: Vec<String> = if b == 1 {{ top5.iter().map(|t| format!("[{{}}]", t.iter().map(|(i, v)| format!("[{{i}}, {{v}}]")).collect::<Vec<_>>().join(", "))).collect() }} else {{ Vec::new() }};
    let ids: Vec<String> = ids.iter().map(|t| t.to_string()).collect();
    println!("{{{{\"ids\": [{{}}], \"score\": {{score}}, \"top5\": [{{}}]}}}}", ids.join(", "), tops.join(", "));
    Ok(())
}}
"#
    );
    o
}

/// The encoder, once: its states (and cross caches) repeated per beam.
fn rust_encoder(s: &Spec<'_>, o: &mut String) {
    let _ = writeln!(o, "\n    // The encoder, once.");
    let _ = writeln!(o, "    let mut encoder = open(ENCODER)?;");
    let _ = writeln!(o, "    let mut enc_feeds: Vec<(String, SessionInputValue)> = Vec::new();");
    if s.audio() {
        let rank = s.encoder_inputs.iter().find(|(_, t, _)| t.starts_with("float")).map_or(3, |(_, _, d)| d.len());
        let _ = writeln!(o, "    let feat = npy(a.features.as_ref().ok_or(\"--features is required\")?, {rank})?;");
        let _ = writeln!(o, "    let frames = feat.shape()[1] as usize;");
    }
    for (n, t, _) in s.encoder_inputs {
        let v = if t.starts_with("float") {
            "(&feat)".to_string()
        } else if n.contains("mask") && s.audio() {
            format!("ints({t:?}, &[1, frames], vec![1; frames])?")
        } else if n.contains("mask") {
            format!("ints({t:?}, &[1, a.ids.len()], vec![1; a.ids.len()])?")
        } else {
            format!("ints({t:?}, &[1, a.ids.len()], a.ids.clone())?")
        };
        let _ = writeln!(o, "    enc_feeds.push(({n:?}.to_string(), {v}.into()));");
    }
    let _ = writeln!(o, "    let states_name = encoder.outputs()[0].name().to_string();");
    let _ = writeln!(o, "    let mut enc: std::collections::HashMap<String, DynValue> = encoder.run(enc_feeds)?.into_iter().map(|(k, v)| (k.to_string(), v)).collect();");
    let _ = writeln!(o, "    // One row per beam.");
    let _ = writeln!(
        o,
        "    let states = rows(&enc.remove(&states_name).ok_or(\"no encoder output\")?, &vec![0; a.num_beams])?;"
    );
    let _ = writeln!(o, "    let enc_len = states.shape()[1] as usize;");
}

const HELPERS: &str = r#"struct Args {
    model_dir: PathBuf,
    ids: Vec<i64>,
    features: Option<PathBuf>,
    max_new_tokens: usize,
    num_beams: usize,
    ignore_eos: bool,
}

fn args() -> Result<Args, String> {
    let mut a = Args { model_dir: PathBuf::new(), ids: Vec::new(), features: None, max_new_tokens: 16, num_beams: NUM_BEAMS, ignore_eos: false };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--model-dir" => a.model_dir = PathBuf::from(value()?),
            "--ids" => a.ids = value()?.split(',').map(|t| t.trim().parse().map_err(|_| format!("bad id `{t}`"))).collect::<Result<_, _>>()?,
            "--features" => a.features = Some(PathBuf::from(value()?)),
            "--max-new-tokens" => a.max_new_tokens = value()?.parse().map_err(|_| "bad --max-new-tokens")?,
            "--num-beams" => a.num_beams = value()?.parse().ok().filter(|&n| n > 0).ok_or("bad --num-beams")?,
            "--ignore-eos" => a.ignore_eos = true,
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(a)
}

/// An integer (or mask) tensor of the input's declared element type.
fn ints(dtype: &str, shape: &[usize], v: Vec<i64>) -> Result<DynValue, Box<dyn Error>> {
    let shape = IxDyn(shape);
    Ok(match dtype {
        "int32" => Tensor::from_array(ArrayD::from_shape_vec(shape, v.iter().map(|&x| x as i32).collect::<Vec<_>>())?)?.into_dyn(),
        "bool" => Tensor::from_array(ArrayD::from_shape_vec(shape, v.iter().map(|&x| x != 0).collect::<Vec<_>>())?)?.into_dyn(),
        "float32" => Tensor::from_array(ArrayD::from_shape_vec(shape, v.iter().map(|&x| x as f32).collect::<Vec<_>>())?)?.into_dyn(),
        _ => Tensor::from_array(ArrayD::from_shape_vec(shape, v)?)?.into_dyn(),
    })
}

/// Fixed states and buffers: zeros of their whole shape. A growing past:
/// length 0 on the past axis (not 1: a zero slot would be attended to).
fn cache(session: &Session, c: &CacheRow, rows: usize) -> Result<DynValue, Box<dyn Error>> {
    let mut shape = vec![rows];
    shape.extend(c.3.iter().map(|&d| d.max(0) as usize));
    if !c.4 {
        shape[SEQ_AXIS] = 0;
        let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        return Ok(DynTensor::new(session.allocator(), element(c.2), dims)?.into_dyn());
    }
    zeros(c.2, &shape)
}

/// Candidates in order: highest first, equal values by lower index.
fn order(row: &[f64]) -> Vec<usize> {
    let mut o: Vec<usize> = (0..row.len()).collect();
    o.sort_by(|&x, &y| row[y].partial_cmp(&row[x]).unwrap_or(std::cmp::Ordering::Equal).then(x.cmp(&y)));
    o
}

fn log_softmax(row: &[f64]) -> Vec<f64> {
    let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let l = row.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
    row.iter().map(|v| v - m - l).collect()
}

"#;
