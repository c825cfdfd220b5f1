// transformers.js (@huggingface/transformers 3.8.1) as a REAL client of the committed
// fixtures, its own onnxruntime-node sessions recorded with js/onnx-contract-trace.mjs
// (format version 2) into tests/traces/<name>.jsonl (the input of `onnx-contract replay`).
//
//   npm ci --ignore-scripts --no-audit --no-fund --prefix tests/callers/tjs   (recording only: ~670 MB)
//   node tests/callers/tjs/clients.mjs [--out DIR] [NAME ...]      (default: every trace, into tests/traces)
//
// No network and no tokenizer: env.allowRemoteModels = false, env.localModelPath = models/,
// generate() on id tensors. Greedy (transformers.js 3 has no beam search), one thread per
// session, timing off: two runs give byte-identical files.
//
// - tjs-greedy: AutoModelForCausalLM on models/tjs-variants (dtype fp32: onnx/model.onnx, the
//   llama-tiny export), prompt [3, 14, 15, 92], 6 new tokens.
// - tjs-translation: AutoModelForSeq2SeqLM on models/bart-tjs (onnx/encoder_model.onnx +
//   onnx/decoder_model_merged.onnx), source [0, 17, 42, 7, 9, 2], 6 new tokens
//   (min_new_tokens 6: the random tiny BART says its eos first otherwise).
// - tjs-greedy-no-past-update, tjs-translation-no-past-update: the same clients with their own
//   cache step disabled: the model's getPastKeyValues (which turns the previous outputs'
//   present.* into the next past_key_values) returns the past it was given once it has one,
//   so every call after the first cached one is fed the first call's presents again.
//
// transformers.js 3.8.1 pins its own onnxruntime-node (1.21.0, installed nested under
// node_modules/@huggingface/transformers/node_modules; tests/callers' own is 1.30.0, and
// loading both native bindings in one process fails with ERR_DLOPEN_FAILED). So this script
// never loads the 1.30.0 package: it takes transformers.js' own instance and records it
// with recordSessions(path, ort), which wraps every session InferenceSession.create makes;
// transformers.js passes it the model file's path, so the trace names the file.
import { createRequire } from 'node:module';
import { mkdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { env, AutoModelForCausalLM, AutoModelForSeq2SeqLM, Tensor } from '@huggingface/transformers';
import { recordSessions } from '../../../js/onnx-contract-trace.mjs';

const require = createRequire(import.meta.url);
const ort = createRequire(require.resolve('@huggingface/transformers'))('onnxruntime-node'); // transformers.js' own
const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
env.allowRemoteModels = false;
env.localModelPath = join(ROOT, 'models') + '/';
const OPTIONS = { dtype: 'fp32', session_options: { intraOpNumThreads: 1, interOpNumThreads: 1, logSeverityLevel: 4 } };
const PROMPT = [3, 14, 15, 92];
const SOURCE = [0, 17, 42, 7, 9, 2];

const int64 = (rows) => new Tensor('int64', BigInt64Array.from(rows.flat().map(BigInt)), [rows.length, rows[0].length]);
const read = (path) => readFileSync(path, 'utf8').trim().split('\n').map((l) => JSON.parse(l)).filter((c) => 'call' in c);

/** Disable the client's cache step: after the first past, getPastKeyValues hands back the past it got. */
function noPastUpdate(model) {
  const original = model.getPastKeyValues.bind(model);
  model.getPastKeyValues = (results, past, dispose) => past ?? original(results, past, dispose);
}

/** Where each cached call's pasts come from: the call whose present.* output has the fed digest. */
function pastSources(calls, decoder) {
  const out = [];
  const mine = calls.filter((c) => c.model === decoder);
  for (const c of mine.slice(1)) {
    const from = new Set();
    for (const [name, t] of Object.entries(c.feeds)) {
      if (!name.startsWith('past_key_values.') || name.includes('.encoder.')) continue;
      const present = `present.${name.slice('past_key_values.'.length)}`;
      const src = mine.find((p) => p.outputs?.[present]?.digest === t.digest);
      from.add(src ? src.call : '?');
    }
    out.push({ call: c.call, past: c.feeds['past_key_values.0.key'] ?? c.feeds['past_key_values.0.decoder.key'], from: [...from], error: c.error });
  }
  return out;
}

async function greedy(broken) {
  const model = await AutoModelForCausalLM.from_pretrained('tjs-variants', OPTIONS);
  if (broken) noPastUpdate(model);
  const out = await model.generate({ input_ids: int64([PROMPT]), attention_mask: int64([PROMPT.map(() => 1)]), max_new_tokens: 6, do_sample: false });
  return out.tolist()[0].slice(PROMPT.length).map(Number);
}

async function translation(broken) {
  const model = await AutoModelForSeq2SeqLM.from_pretrained('bart-tjs', OPTIONS);
  if (broken) noPastUpdate(model);
  const out = await model.generate({ inputs: int64([SOURCE]), attention_mask: int64([SOURCE.map(() => 1)]), max_new_tokens: 6, min_new_tokens: 6, do_sample: false });
  return out.tolist()[0].map(Number);
}

export const CLIENTS = {
  'tjs-greedy': [() => greedy(false), 'model.onnx'],
  'tjs-greedy-no-past-update': [() => greedy(true), 'model.onnx'],
  'tjs-translation': [() => translation(false), 'decoder_model_merged.onnx'],
  'tjs-translation-no-past-update': [() => translation(true), 'decoder_model_merged.onnx'],
};

export async function record(name, outDir) {
  mkdirSync(outDir, { recursive: true });
  const path = join(outDir, `${name}.jsonl`);
  const [client, decoder] = CLIENTS[name];
  const create = ort.InferenceSession.create;
  recordSessions(path, ort, { timing: false });
  let tokens;
  let error;
  try {
    tokens = await client();
  } catch (e) {
    error = String(e?.message ?? e).split('\n')[0];
  } finally {
    ort.InferenceSession.create = create;
  }
  const calls = read(path);
  console.log(`${name}: ${calls.length} calls, files ${JSON.stringify([...new Set(calls.map((c) => c.model))].sort())}`);
  console.log(`    tokens ${JSON.stringify(tokens)}${error ? `; generate threw: ${error.slice(0, 200)}` : ''}`);
  for (const c of calls) {
    const ids = c.feeds.input_ids?.value;
    const extra = c.feeds.position_ids ? `, position_ids ${JSON.stringify(c.feeds.position_ids.value)}` : '';
    const mask = c.feeds.attention_mask ? `, mask ${JSON.stringify(c.feeds.attention_mask.shape)}` : '';
    console.log(`    call ${c.call} ${c.model}: input_ids ${JSON.stringify(ids)}${extra}${mask}${c.error ? `; ERROR ${c.error.split('\n')[0].slice(0, 160)}` : ''}`);
  }
  for (const s of pastSources(calls, decoder)) {
    console.log(`    call ${s.call}: past ${JSON.stringify(s.past.shape)} = present of call ${s.from.join('/')}`);
  }
  return { tokens, calls };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const at = args.indexOf('--out');
  const out = at >= 0 ? args.splice(at, 2)[1] : join(ROOT, 'tests', 'traces');
  for (const name of args.length ? args : Object.keys(CLIENTS)) await record(name, out);
}
