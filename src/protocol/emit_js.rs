//! The JavaScript program (onnxruntime-node; no other dependency).

use super::spec::Spec;
use crate::plan::CacheTensor;
use std::fmt::Write;

fn cache(list: &[CacheTensor]) -> String {
    let mut s = String::from("[\n");
    for c in list {
        let dims: Vec<String> = c.shape.iter().skip(1).map(|d| d.to_string()).collect();
        let _ = writeln!(s, "  [{:?}, {:?}, [{}]],", c.past, c.present, dims.join(", "));
    }
    s.push(']');
    s
}

/// `new ort.Tensor(...)` for integer values of `dtype` (BigInt64Array or Int32Array).
fn ints(dtype: &str, values: &str, dims: &str) -> String {
    if dtype == "int32" {
        format!("new ort.Tensor('int32', Int32Array.from({values}), {dims})")
    } else {
        format!("new ort.Tensor('int64', BigInt64Array.from({values}, (v) => BigInt(v)), {dims})")
    }
}

pub(crate) fn js(s: &Spec<'_>) -> String {
    let (l, p) = (s.l, s.plan);
    let cache_type = p.self_past.first().map_or("float32".to_string(), |c| c.dtype.to_string());
    let f16 = cache_type == "float16";
    let mut o = String::new();
    let _ = writeln!(o, "#!/usr/bin/env node");
    let _ =
        writeln!(o, "// Greedy decoding with the KV cache ({}), written by `onnx-contract protocol --emit js`", l.form);
    let _ = writeln!(o, "// from the plan its runtime check drives the model with. Needs onnxruntime-node:");
    let input = if s.audio() { "--features input.npy" } else { "--ids 5,17,42" };
    let _ =
        writeln!(o, "//   npm install onnxruntime-node && node gen.mjs --model-dir DIR {input} --max-new-tokens 16");
    let _ = writeln!(o, "// prints {{\"ids\": [new token ids], \"top5\": [[[id, logit], ... 5 per new token]]}}.");
    let _ = writeln!(
        o,
        "import * as ort from 'onnxruntime-node';\nimport fs from 'node:fs';\nimport path from 'node:path';\n"
    );
    if let Some(e) = &l.encoder {
        let _ = writeln!(o, "const ENCODER = {e:?};");
    }
    let _ = writeln!(o, "const STEP0 = {:?}; // the file run at step 0", l.step0_file);
    let _ = writeln!(o, "const DECODER = {:?}; // the file run at every later step", l.later_file);
    if s.seq2seq {
        let _ = writeln!(o, "const DECODER_START = {};", l.decoder_start.unwrap_or(0));
    }
    let _ = writeln!(o, "const EOS = {};", l.eos.map_or("null".into(), |v| v.to_string()));
    let _ = writeln!(o, "// [past input, present output, shape after batch; the past axis is empty]");
    let _ = writeln!(o, "const SELF_PAST = {}; // refreshed from the present every step", cache(&p.self_past));
    let _ = writeln!(o, "const CROSS_PAST = {}; // taken from step 0's present, then kept", cache(&p.cross_past));
    let _ = writeln!(o, "const CACHE_TYPE = {cache_type:?};\n");
    let _ = writeln!(
        o,
        r#"function args() {{
  const a = {{ modelDir: null, ids: [], features: null, maxNewTokens: 16, ignoreEos: false }};
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i++) {{
    const flag = argv[i];
    if (flag === '--model-dir') a.modelDir = argv[++i];
    else if (flag === '--ids') a.ids = argv[++i].split(',').map((t) => parseInt(t, 10));
    else if (flag === '--features') a.features = argv[++i];
    else if (flag === '--max-new-tokens') a.maxNewTokens = parseInt(argv[++i], 10);
    else if (flag === '--ignore-eos') a.ignoreEos = true;
    else throw new Error(`unknown argument ${{flag}}`);
  }}
  return a;
}}

// A past of length 0 on the past axis (not 1: a zero slot would be attended to).
const empty = (dims) => new ort.Tensor(CACHE_TYPE, CACHE_TYPE === 'float16' ? new Uint16Array(0) : new Float32Array(0), [1, ...dims]);
"#
    );
    if f16 {
        let _ = writeln!(
            o,
            r#"// float16 logits arrive as raw 16-bit words.
function halfToFloat(h) {{
  const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 0x1f, f = h & 0x3ff;
  if (e === 0) return s * 2 ** -14 * (f / 1024);
  if (e === 31) return f ? NaN : s * Infinity;
  return s * 2 ** (e - 15) * (1 + f / 1024);
}}
"#
        );
    }
    if s.audio() {
        let _ = writeln!(
            o,
            r#"// A float32 C-order .npy file (as np.save writes it), with a batch axis added.
function npy(file) {{
  const b = fs.readFileSync(file);
  const hlen = b.readUInt16LE(8);
  const header = b.subarray(10, 10 + hlen).toString('latin1');
  const shape = header.match(/'shape': \(([^)]*)\)/)[1].split(',').filter((x) => x.trim()).map((x) => parseInt(x, 10));
  const data = new Float32Array(b.buffer.slice(b.byteOffset + 10 + hlen, b.byteOffset + b.length));
  return new ort.Tensor('float32', data, shape.length === 2 ? [1, ...shape] : shape);
}}
"#
        );
    }
    let _ = writeln!(o, "async function main() {{");
    let _ = writeln!(o, "  const a = args();");
    let _ = writeln!(o, "  const open = (file) => ort.InferenceSession.create(path.join(a.modelDir, file));");
    let ids_t = p.input_ids_dtype.to_string();
    if l.encoder.is_some() {
        let _ = writeln!(o, "\n  // The encoder, once.");
        let _ = writeln!(o, "  const encoder = await open(ENCODER);");
        let _ = writeln!(o, "  const encFeeds = {{}};");
        for (n, t, _) in s.encoder_inputs {
            let v = if t.starts_with("float") {
                "npy(a.features)".to_string()
            } else if n.contains("mask") {
                ints(t, "a.ids.map(() => 1)", "[1, a.ids.length]")
            } else {
                ints(t, "a.ids", "[1, a.ids.length]")
            };
            let _ = writeln!(o, "  encFeeds[{n:?}] = {v};");
        }
        let _ = writeln!(o, "  const states = (await encoder.run(encFeeds))[encoder.outputNames[0]];");
    }
    let _ = writeln!(o, "\n  const step0 = await open(STEP0);");
    let _ = writeln!(o, "  const decoder = DECODER === STEP0 ? step0 : await open(DECODER);");
    let _ = writeln!(o, "  let past = SELF_PAST.map(([, , dims]) => empty(dims));");
    let _ = writeln!(o, "  let cross = CROSS_PAST.map(([, , dims]) => empty(dims));");
    if s.seq2seq {
        let _ = writeln!(o, "  let fed = [DECODER_START]; // step 0: the decoder start token");
    } else {
        let _ = writeln!(o, "  let fed = a.ids.slice(); // step 0: the whole prompt");
    }
    let _ = writeln!(o, "  let pastLen = 0;\n  const newIds = [], top5 = [];");
    let _ = writeln!(o, "  for (let step = 0; step < a.maxNewTokens; step++) {{");
    let _ = writeln!(o, "    const n = fed.length;");
    let _ = writeln!(o, "    const feeds = {{}};");
    let _ = writeln!(o, "    feeds[{:?}] = {};", p.input_ids, ints(&ids_t, "fed", "[1, n]"));
    if let Some(f) = &p.branch_flag {
        let _ = writeln!(
            o,
            "    feeds[{f:?}] = new ort.Tensor('bool', [step > 0], [1]); // no-cache branch at step 0, cached after"
        );
    }
    if let Some(name) = s.states_name() {
        let _ = writeln!(o, "    feeds[{name:?}] = states;");
    }
    if let Some(m) = &p.encoder_attention_mask {
        let len = "states.dims[1]";
        let _ = writeln!(
            o,
            "    feeds[{m:?}] = {};",
            ints(&p.dtype_of(m).to_string(), &format!("new Array({len}).fill(1)"), &format!("[1, {len}]"))
        );
    }
    if let Some(m) = &p.attention_mask {
        let _ = writeln!(o, "    // The mask covers the past AND the new tokens.");
        let _ = writeln!(
            o,
            "    feeds[{m:?}] = {};",
            ints(&p.dtype_of(m).to_string(), "new Array(pastLen + n).fill(1)", "[1, pastLen + n]")
        );
    }
    if let Some(m) = &p.position_ids {
        let _ = writeln!(o, "    // Positions continue the past.");
        let _ = writeln!(
            o,
            "    feeds[{m:?}] = {};",
            ints(&p.dtype_of(m).to_string(), "Array.from({ length: n }, (_, i) => pastLen + i)", "[1, n]")
        );
    }
    let _ = writeln!(o, "    SELF_PAST.forEach(([name], i) => (feeds[name] = past[i]));");
    let _ = writeln!(o, "    CROSS_PAST.forEach(([name], i) => (feeds[name] = cross[i]));");
    let _ = writeln!(o, "    const session = step === 0 ? step0 : decoder;");
    let _ = writeln!(o, "    // Each file gets the inputs it declares (a split pair's step 0 takes no past).");
    let _ =
        writeln!(o, "    for (const k of Object.keys(feeds)) if (!session.inputNames.includes(k)) delete feeds[k];");
    let _ = writeln!(o, "    const out = await session.run(feeds);");
    let _ = writeln!(o, "    const logits = out[{:?}];", p.logits);
    let _ = writeln!(o, "    const vocab = logits.dims[2];");
    let convert = if f16 || s.states_dtype() == "float16" {
        "(v) => (logits.type === 'float16' ? halfToFloat(v) : v)"
    } else {
        "(v) => v"
    };
    let _ = writeln!(o, "    const last = Array.from(logits.data.slice((n - 1) * vocab, n * vocab), {convert});");
    let _ = writeln!(o, "    const order = last.map((_, i) => i).sort((x, y) => (last[y] - last[x]) || (x - y));");
    let _ = writeln!(o, "    const token = order[0];");
    let _ = writeln!(o, "    newIds.push(token);");
    let _ = writeln!(o, "    top5.push(order.slice(0, 5).map((i) => [i, last[i]]));");
    let _ = writeln!(
        o,
        "    // The present becomes the past; the cross-attention past is step 0's (later ones are dummies)."
    );
    let _ = writeln!(o, "    past = SELF_PAST.map(([, present]) => out[present]);");
    let _ = writeln!(o, "    if (step === 0) cross = CROSS_PAST.map(([, present]) => out[present]);");
    let _ = writeln!(o, "    pastLen += n;\n    fed = [token];");
    let _ = writeln!(o, "    if (token === EOS && !a.ignoreEos) break;\n  }}");
    let _ = writeln!(o, "  console.log(JSON.stringify({{ ids: newIds, top5 }}));\n}}\n");
    let _ = writeln!(o, "main().catch((e) => {{\n  console.error(e.message);\n  process.exit(1);\n}});");
    o
}
