//! The JavaScript program (onnxruntime-node; no other dependency), rendered
//! from the recipe.

use super::spec::{Cache, Rule, Spec};
use std::fmt::Write;

/// `[past, present, dtype, [dims after batch], fixed]` rows.
fn cache(list: &[Cache]) -> String {
    let mut s = String::from("[\n");
    for c in list {
        let dims: Vec<String> = c.dims.iter().map(|d| d.to_string()).collect();
        let _ = writeln!(s, "  [{:?}, {:?}, {:?}, [{}], {}],", c.past, c.present, c.dtype, dims.join(", "), c.fixed);
    }
    s.push(']');
    s
}

/// The expression (an `ort.Tensor`) feeding one input at a call.
fn value(rule: Rule, t: &str) -> String {
    let range = "Array.from({ length: n }, (_, i) => pastLen + i)";
    match rule {
        Rule::Ids => format!("ints({t:?}, part.flat(), [part.length, n])"),
        Rule::Embeds => "await embeds(part)".into(),
        Rule::Flag => "new ort.Tensor('bool', [step > 0], [1])".into(),
        Rule::States => "states".into(),
        Rule::EncoderMask => format!("ints({t:?}, new Array(b * encLen).fill(1), [b, encLen])"),
        Rule::Mask => format!("ints({t:?}, new Array(b * (pastLen + n)).fill(1), [b, pastLen + n])"),
        Rule::MaskOverBuffer(len, false) => format!(
            "ints({t:?}, Array.from({{ length: b * {len} }}, (_, i) => (i % {len} < pastLen + n ? 1 : 0)), [b, {len}])"
        ),
        Rule::MaskOverBuffer(len, true) => format!(
            "ints({t:?}, Array.from({{ length: b * {len} }}, (_, i) => (i % {len} >= {len} - (pastLen + n) ? 1 : 0)), [b, {len}])"
        ),
        Rule::CachePosition => format!("ints({t:?}, {range}, [n])"),
        Rule::LogitsToKeep => format!("ints({t:?}, [1], [])"),
        Rule::Positions => format!("ints({t:?}, Array.from({{ length: b }}, () => {range}).flat(), [b, n])"),
        Rule::Positions3(k) => {
            format!("ints({t:?}, Array.from({{ length: {k} * b }}, () => {range}).flat(), [{k}, b, n])")
        }
    }
}

pub(crate) fn js(s: &Spec<'_>) -> String {
    let (l, p) = (s.l, s.plan);
    let mut o = String::new();
    let input = if s.audio() { "--features input.npy" } else { "--ids 5,17,42" };
    let _ = write!(
        o,
        r#"#!/usr/bin/env node
// Decoding with the KV cache ({form}), written by `onnx-contract protocol --emit js`
// from the plan its runtime check drives the model with: greedy, or beam search with
// --num-beams N (default {beams}: generation_config.json's num_beams, else 1). Needs onnxruntime-node:
//   npm install onnxruntime-node && node gen.mjs --model-dir DIR {input} --max-new-tokens 16
// prints {{"ids": [new token ids], "score": their summed log-probability,
// "top5": [[[id, logit], ... 5 per new token]] (greedy only)}}.
//
// Beam search: {rule}
import * as ort from 'onnxruntime-node';
import fs from 'node:fs';
import path from 'node:path';

"#,
        form = l.form,
        beams = s.beams,
        rule = super::spec::BEAM_RULE,
    );
    if let Some(e) = &l.encoder {
        let _ = writeln!(o, "const ENCODER = {e:?}; // run once, before step 0");
    }
    if let Some(e) = &l.embed {
        let _ = writeln!(o, "const EMBED = {e:?}; // token ids to the decoder's embeddings, before every call");
    }
    let _ = writeln!(o, "const STEP0 = {:?}; // the file run at step 0", l.step0_file);
    let _ = writeln!(o, "const DECODER = {:?}; // the file run at every later step", l.later_file);
    let _ = writeln!(o, "const DECODER_START = {};", l.decoder_start.unwrap_or(0));
    let _ = writeln!(o, "const EOS = {};", l.eos.map_or("null".into(), |v| v.to_string()));
    let _ = writeln!(o, "const NUM_BEAMS = {};\nconst LENGTH_PENALTY = {:?};", s.beams, l.beams.1);
    let _ = writeln!(o, "const LOGITS = {:?};", p.logits);
    let _ = writeln!(o, "const STEP0_WITHOUT_CACHE = {}; // a split pair's no-past decoder takes no cache", s.pair);
    let _ = writeln!(
        o,
        "const TOKENS_PER_CALL = {}; // the tokens of a call: all of them, or as many as the graph takes",
        p.tokens_per_call.map_or("null".into(), |k| k.to_string())
    );
    let _ = writeln!(o, "// [past input, present output, dtype, shape after the batch axis, fixed]");
    let _ = writeln!(o, "const SELF_PAST = {}; // refreshed from the present every call", cache(&s.self_caches()));
    let cross_src = if s.cross_from_encoder() { "the encoder's outputs" } else { "step 0's presents" };
    let _ = writeln!(o, "const CROSS_PAST = {}; // {cross_src}, then kept", cache(&s.cross_caches()));
    let _ = writeln!(o, "const SEQ_AXIS = {};\n", p.seq_axis);
    o.push_str(HELPERS);
    // This export's presents hold only the new rows: the caller keeps each buffer.
    if let Some(keep) = s.keep() {
        let _ = writeln!(
            o,
            "const KEEP = {keep:?}; // write the new rows at the tokens' slots, or roll: drop the oldest, append"
        );
        o.push_str(KEPT);
    }
    if s.audio() {
        o.push_str(NPY_HELPER);
    }
    let _ = writeln!(o, "async function main() {{");
    let _ = writeln!(o, "  const a = args();\n  const b = a.numBeams;");
    if let Some(why) = s.single_row() {
        let _ = writeln!(o, "  if (b !== 1) throw new Error({why:?});");
    }
    let _ = writeln!(o, "  const open = (file) => ort.InferenceSession.create(path.join(a.modelDir, file));");
    if l.encoder.is_some() {
        let _ = writeln!(o, "\n  // The encoder, once.");
        let _ = writeln!(o, "  const encoder = await open(ENCODER);");
        let _ = writeln!(o, "  const encFeeds = {{}};");
        if s.audio() {
            let rank = s.encoder_inputs.iter().find(|(_, t, _)| t.starts_with("float")).map_or(3, |(_, _, d)| d.len());
            let _ = writeln!(o, "  const feat = npy(a.features, {rank});");
        }
        for (n, t, _) in s.encoder_inputs {
            let v = if t.starts_with("float") {
                "feat".to_string()
            } else if n.contains("mask") && s.audio() {
                format!("ints({t:?}, new Array(feat.dims[1]).fill(1), [1, feat.dims[1]])")
            } else if n.contains("mask") {
                format!("ints({t:?}, a.ids.map(() => 1), [1, a.ids.length])")
            } else {
                format!("ints({t:?}, a.ids, [1, a.ids.length])")
            };
            let _ = writeln!(o, "  encFeeds[{n:?}] = {v};");
        }
        let _ = writeln!(o, "  const enc = await encoder.run(encFeeds);");
        let _ = writeln!(
            o,
            "  const states = rows(enc[encoder.outputNames[0]], new Array(b).fill(0)); // one row per beam"
        );
        let _ = writeln!(o, "  const encLen = states.dims[1];");
    }
    if l.embed.is_some() {
        let _ = write!(
            o,
            r#"  const embed = await open(EMBED);
  // The embedding model's output for the tokens of a call.
  const embeds = async (part) => {{
    const t = embed.inputMetadata?.[0]?.type === 'int32' ? 'int32' : 'int64';
    const out = await embed.run({{ [embed.inputNames[0]]: ints(t, part.flat(), [part.length, part[0].length]) }});
    return out[embed.outputNames[0]];
  }};
"#
        );
    }
    let _ = writeln!(o, "\n  const step0 = await open(STEP0);");
    let _ = writeln!(o, "  const decoder = DECODER === STEP0 ? step0 : await open(DECODER);");
    let _ = writeln!(o, "  let past = SELF_PAST.map((c) => cache(c, b));");
    if s.cross_from_encoder() {
        let _ = writeln!(o, "  let cross = CROSS_PAST.map(([, q]) => rows(enc[q], new Array(b).fill(0)));");
    } else {
        let _ = writeln!(o, "  let cross = CROSS_PAST.map(([p, q, t, d]) => cache([p, q, t, d, false], b));");
    }
    match (s.seq2seq, p.codebooks) {
        (true, Some(k)) => {
            let _ = writeln!(o, "  let fed = Array.from({{ length: {k} }}, () => [DECODER_START]); // step 0: the start token in each codebook row");
        }
        (true, None) => {
            let _ = writeln!(
                o,
                "  let fed = Array.from({{ length: b }}, () => [DECODER_START]); // step 0: the decoder start token"
            );
        }
        _ => {
            let _ = writeln!(
                o,
                "  let fed = Array.from({{ length: b }}, () => a.ids.slice()); // step 0: the whole prompt"
            );
        }
    }
    let _ = write!(
        o,
        r#"  let seqs = Array.from({{ length: b }}, () => []); // each beam's new tokens
  let scores = Array.from({{ length: b }}, (_, r) => (r === 0 ? 0 : -1e9)); // the beams start as one
  const finished = [], top5 = [];
  let pastLen = 0;
  for (let step = 0; step < a.maxNewTokens; step++) {{
    const width = fed[0].length, per = TOKENS_PER_CALL ?? width;
    let logits = [];
    for (let from = 0; from < width; ) {{
      const part = fed.map((r) => r.slice(from, Math.min(from + per, width)));
      const n = part[0].length;
      const feeds = {{}};
"#
    );
    for f in s.feeds() {
        let _ = writeln!(o, "      feeds[{:?}] = {};", f.name, value(f.rule, &f.dtype));
    }
    let carry = match s.keep() {
        Some(_) => "past = SELF_PAST.map(([, present], i) => keepRows(past[i], out[present], pastLen)); // the new rows into the kept buffer",
        None => "past = SELF_PAST.map(([, present]) => out[present]); // the present becomes the past",
    };
    let _ = write!(
        o,
        r#"      if (!(STEP0_WITHOUT_CACHE && step === 0)) {{
        SELF_PAST.forEach(([name], i) => (feeds[name] = past[i]));
        CROSS_PAST.forEach(([name], i) => (feeds[name] = cross[i]));
      }}
      const session = step === 0 ? step0 : decoder;
      // Each file gets the inputs it declares.
      for (const k of Object.keys(feeds)) if (!session.inputNames.includes(k)) delete feeds[k];
      const out = await session.run(feeds);
      logits = lastRows(out[LOGITS]);
      {carry}
      if (step === 0 && CROSS_PAST.length && CROSS_PAST.every(([, q]) => q in out)) {{
        cross = CROSS_PAST.map(([, present]) => out[present]); // step 0's, kept (later ones are dummies)
      }}
"#
    );
    if p.is_cacheless() {
        let _ = writeln!(o, "      // No cache: the next call feeds the whole prefix again, from position 0.");
    } else {
        let _ = writeln!(o, "      pastLen += n;");
    }
    let _ = write!(
        o,
        r#"      from += n;
    }}
    if (b === 1) top5.push(order(logits[0]).slice(0, 5).map((i) => [i, logits[0][i]]));
    const cand = [];
    logits.slice(0, b).forEach((row, r) => logSoftmax(row).forEach((lp, t) => cand.push([scores[r] + lp, r, t])));
    // Highest first; ties by lower beam, then lower id.
    cand.sort((x, y) => y[0] - x[0] || x[1] - y[1] || x[2] - y[2]);
    const origin = [], tokens = [], kept = [];
    for (let rank = 0; rank < Math.min(2 * b, cand.length); rank++) {{
      const [score, r, t] = cand[rank];
      if (t === EOS && !a.ignoreEos) {{
        if (rank < b) finished.push([score / (seqs[r].length + 1) ** LENGTH_PENALTY, [...seqs[r], t], score]);
        continue;
      }}
      origin.push(r);
      tokens.push(t);
      kept.push(score);
      if (origin.length === b) break;
    }}
    seqs = origin.map((r, i) => [...seqs[r], tokens[i]]);
    scores = kept;
    if (b > 1) past = past.map((v) => rows(v, origin)); // every beam's cache rows follow its origin
"#
    );
    if p.is_cacheless() {
        let _ = writeln!(o, "    fed = origin.map((r, i) => [...fed[r], tokens[i]]); // the whole prefix, every call");
    } else if p.codebooks.is_some() {
        let _ = writeln!(o, "    // Every other codebook row takes its own greedy token.");
        let _ = writeln!(o, "    fed = fed.map((_, r) => [r === 0 ? tokens[0] : order(logits[r])[0]]);");
    } else {
        let _ = writeln!(o, "    fed = tokens.map((t) => [t]);");
    }
    let _ = write!(
        o,
        r#"    if (finished.length >= b) break;
  }}
  const running = seqs.map((s, r) => [scores[r] / Math.max(s.length, 1) ** LENGTH_PENALTY, s, scores[r]]);
  const best = [...finished, ...running].reduce((x, h) => (x === null || h[0] > x[0] ? h : x), null);
  console.log(JSON.stringify({{ ids: best[1], score: best[2], top5: b === 1 ? top5 : [] }}));
}}

main().catch((e) => {{
  console.error(e.message);
  process.exit(1);
}});
"#
    );
    o
}

/// The buffer after a call whose presents are only the new rows (flat, row-major).
const KEPT: &str = r#"function keepRows(buf, rows, at) {
  const len = buf.dims[SEQ_AXIS], n = rows.dims[SEQ_AXIS];
  const inner = buf.dims.slice(SEQ_AXIS + 1).reduce((x, y) => x * y, 1);
  const outer = buf.dims.slice(0, SEQ_AXIS).reduce((x, y) => x * y, 1);
  const data = buf.data.slice();
  const slot = KEEP === 'roll' ? len - n : at;
  for (let o = 0; o < outer; o++) {
    const base = o * len * inner;
    if (KEEP === 'roll') data.copyWithin(base, base + n * inner, base + len * inner);
    data.set(rows.data.subarray(o * n * inner, (o + 1) * n * inner), base + slot * inner);
  }
  return new ort.Tensor(buf.type, data, buf.dims);
}

"#;

const HELPERS: &str = r#"function args() {
  const a = { modelDir: null, ids: [], features: null, maxNewTokens: 16, numBeams: NUM_BEAMS, ignoreEos: false };
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    if (flag === '--model-dir') a.modelDir = argv[++i];
    else if (flag === '--ids') a.ids = argv[++i].split(',').map((t) => parseInt(t, 10));
    else if (flag === '--features') a.features = argv[++i];
    else if (flag === '--max-new-tokens') a.maxNewTokens = parseInt(argv[++i], 10);
    else if (flag === '--num-beams') a.numBeams = parseInt(argv[++i], 10);
    else if (flag === '--ignore-eos') a.ignoreEos = true;
    else throw new Error(`unknown argument ${flag}`);
  }
  if (!(a.numBeams >= 1)) throw new Error('bad --num-beams');
  return a;
}

// An integer (or mask) tensor of the input's declared element type.
function ints(type, values, dims) {
  if (type === 'int64') return new ort.Tensor('int64', BigInt64Array.from(values, (v) => BigInt(v)), dims);
  if (type === 'int32') return new ort.Tensor('int32', Int32Array.from(values), dims);
  if (type === 'bool') return new ort.Tensor('bool', Uint8Array.from(values), dims);
  return new ort.Tensor('float32', Float32Array.from(values), dims);
}

// Fixed states and buffers: zeros of their whole shape. A growing past:
// length 0 on the past axis (not 1: a zero slot would be attended to).
function cache([, , type, dims, fixed], rows) {
  const shape = [rows, ...dims];
  if (!fixed) shape[SEQ_AXIS] = 0;
  const size = shape.reduce((x, y) => x * y, 1);
  return new ort.Tensor(type, type === 'float16' ? new Uint16Array(size) : new Float32Array(size), shape);
}

// The rows of a tensor at `origin` (a beam's cache follows its origin).
function rows(t, origin) {
  const per = t.dims.slice(1).reduce((x, y) => x * y, 1);
  const data = new t.data.constructor(origin.length * per);
  origin.forEach((o, i) => data.set(t.data.subarray(o * per, (o + 1) * per), i * per));
  return new ort.Tensor(t.type, data, [origin.length, ...t.dims.slice(1)]);
}

// float16 values may arrive as raw 16-bit words.
function halfToFloat(h) {
  const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 0x1f, f = h & 0x3ff;
  if (e === 0) return s * 2 ** -14 * (f / 1024);
  if (e === 31) return f ? NaN : s * Infinity;
  return s * 2 ** (e - 15) * (1 + f / 1024);
}

// The logits of every row at the last position.
function lastRows(t) {
  const [rowsN, seq, vocab] = t.dims;
  const convert = t.type === 'float16' && t.data instanceof Uint16Array ? halfToFloat : (v) => Number(v);
  return Array.from({ length: rowsN }, (_, r) => {
    const at = (r * seq + seq - 1) * vocab;
    return Array.from(t.data.subarray(at, at + vocab), convert);
  });
}

// Candidates in order: highest first, equal values by lower index.
const order = (row) => row.map((_, i) => i).sort((x, y) => row[y] - row[x] || x - y);

function logSoftmax(row) {
  const m = row.reduce((x, y) => (y > x ? y : x), -Infinity);
  const l = Math.log(row.reduce((acc, v) => acc + Math.exp(v - m), 0));
  return row.map((v) => v - m - l);
}

"#;

const NPY_HELPER: &str = r#"// A float32 C-order .npy file (as np.save writes it), a batch axis added when it has none.
function npy(file, rank) {
  const b = fs.readFileSync(file);
  const hlen = b.readUInt16LE(8);
  const header = b.subarray(10, 10 + hlen).toString('latin1');
  const shape = header.match(/'shape': \(([^)]*)\)/)[1].split(',').filter((x) => x.trim()).map((x) => parseInt(x, 10));
  const data = new Float32Array(b.buffer.slice(b.byteOffset + 10 + hlen, b.byteOffset + b.length));
  return new ort.Tensor('float32', data, shape.length + 1 === rank ? [1, ...shape] : shape);
}

"#;
