// Real onnxruntime-node callers of the committed fixtures, recorded with
// js/onnx-contract-trace.mjs into tests/traces/js-<name>.jsonl (the input of
// `onnx-contract replay`), as a transformers.js-style application drives them.
//
//   npm ci --ignore-scripts --prefix tests/callers   (onnxruntime-node ships its CPU binaries in the package;
//                                                     the install script only fetches CUDA ones: not wanted)
//   node tests/callers/caller.mjs [--out DIR]
//
// - js-gpt2-correct: models/gpt2-tiny, the prompt [3, 14, 15, 92], 5 calls, the mask over past + new,
//   positions continuing, presents fed back (the protocol of caller.py's gpt2-correct);
// - js-marian-dummy-encoder-present: the incident this project began with, as a JS engine wrote it:
//   models/marian-tiny's encoder and merged decoder, the encoder past taken from the previous call's
//   present.*.encoder.* from decoder step 1 on; the third decoder call fails in ONNX Runtime.
import { createRequire } from 'node:module';
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { TraceRecorder } from '../../js/onnx-contract-trace.mjs';

const require = createRequire(import.meta.url);
const ort = require('onnxruntime-node');
const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const MODELS = join(ROOT, 'models');
const options = { intraOpNumThreads: 1, interOpNumThreads: 1, logSeverityLevel: 4 };

const int64 = (values, dims) => new ort.Tensor('int64', BigInt64Array.from(values.map(BigInt)), dims);
const zeros = (dims) => new ort.Tensor('float32', new Float32Array(dims.reduce((a, b) => a * b, 1)), dims);
const argmaxLast = (logits) => {
  const vocab = logits.dims[2];
  const row = logits.data.subarray(logits.data.length - vocab);
  let best = 0;
  for (let i = 1; i < vocab; i++) if (row[i] > row[best]) best = i;
  return best;
};

async function gpt2Correct(rec) {
  const dec = await rec.create(ort, join(MODELS, 'gpt2-tiny', 'model.onnx'), options);
  const tokens = [3, 14, 15, 92];
  let past = {};
  for (const l of [0, 1]) for (const kv of ['key', 'value']) past[`past_key_values.${l}.${kv}`] = zeros([1, 4, 0, 8]);
  for (let k = 0; k < 5; k++) {
    const ids = k === 0 ? tokens.slice() : tokens.slice(-1);
    const len = past['past_key_values.0.key'].dims[2];
    const out = await dec.run({
      input_ids: int64(ids, [1, ids.length]),
      ...past,
      attention_mask: int64(Array(len + ids.length).fill(1), [1, len + ids.length]),
      position_ids: int64(ids.map((_, i) => len + i), [1, ids.length]),
    });
    tokens.push(argmaxLast(out.logits));
    past = Object.fromEntries(Object.keys(past).map((p) => [p, out[p.replace('past_key_values', 'present')]]));
  }
  return tokens.slice(4);
}

async function marianDummyEncoderPresent(rec) {
  const src = [5, 17, 42, 7, 9, 3, 0];
  const enc = await rec.create(ort, join(MODELS, 'marian-tiny', 'encoder_model.onnx'), options);
  const dec = await rec.create(ort, join(MODELS, 'marian-tiny', 'decoder_model_merged.onnx'), options);
  const mask = int64(Array(src.length).fill(1), [1, src.length]);
  const hidden = (await enc.run({ input_ids: int64(src, [1, src.length]), attention_mask: mask })).last_hidden_state;
  const names = (kind) => [0, 1, 2, 3, 4, 5].flatMap((l) => ['key', 'value'].map((kv) => `past_key_values.${l}.${kind}.${kv}`));
  const from = (out, kind) => Object.fromEntries(names(kind).map((p) => [p, out[p.replace('past_key_values', 'present')]]));
  let decoderPast = Object.fromEntries(names('decoder').map((p) => [p, zeros([1, 8, 0, 4])]));
  let encoderPast = Object.fromEntries(names('encoder').map((p) => [p, zeros([1, 8, 0, 4])]));
  const tokens = [999];
  for (let k = 0; k < 5; k++) {
    let out;
    try {
      out = await dec.run({
        encoder_attention_mask: mask,
        input_ids: int64(tokens.slice(-1), [1, 1]),
        encoder_hidden_states: hidden,
        ...decoderPast,
        ...encoderPast,
        use_cache_branch: new ort.Tensor('bool', Uint8Array.from([k > 0 ? 1 : 0]), [1]),
      });
    } catch (e) {
      console.log(`  ORT error at decoder step ${k}: ${String(e.message ?? e).split('\n')[0]}`);
      return tokens;
    }
    tokens.push(argmaxLast(out.logits));
    decoderPast = from(out, 'decoder');
    encoderPast = from(out, 'encoder'); // the mistake: every call's encoder presents, the cached branch's dummies included
  }
  return tokens;
}

export const CALLERS = { 'js-gpt2-correct': gpt2Correct, 'js-marian-dummy-encoder-present': marianDummyEncoderPresent };

export async function record(name, outDir) {
  mkdirSync(outDir, { recursive: true });
  const rec = new TraceRecorder(join(outDir, `${name}.jsonl`), { timing: false, version: 1 }); // v1, as committed
  return CALLERS[name](rec);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const at = process.argv.indexOf('--out');
  const out = at > 0 ? process.argv[at + 1] : join(ROOT, 'tests', 'traces');
  for (const name of Object.keys(CALLERS)) console.log(`${name}: ${JSON.stringify(await record(name, out))}`);
}
