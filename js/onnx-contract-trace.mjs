// Records every ONNX Runtime inference call of a JavaScript application
// (onnxruntime-node, onnxruntime-web, transformers.js) as a JSONL trace for
// `onnx-contract replay TRACE.jsonl --model PATH`. No dependencies: Node's
// crypto and fs only. The lines are those python/onnx_contract_trace.py
// writes, and a tensor's digest is the same in both recorders:
// "sha1:" + SHA-1 of the numpy dtype name, the shape as Python prints a list
// ("[1, 8, 0, 4]"), a newline, then the little-endian bytes.
//
//   import * as ort from 'onnxruntime-node';
//   import { TraceRecorder } from './onnx-contract-trace.mjs';
//   const rec = new TraceRecorder('trace.jsonl');
//   const decoder = await rec.create(ort, 'decoder_model_merged.onnx');  // or rec.wrap(session, name)
//   const out = await decoder.run(feeds);  // recorded, returned as usual
//
// For an application you cannot edit: `recordSessions('trace.jsonl', ort)`
// wraps every session `ort.InferenceSession.create(path)` makes from then on.
import { createHash } from 'node:crypto';
import { appendFileSync, writeFileSync } from 'node:fs';
import { basename } from 'node:path';

/** Integer and bool tensors up to this many elements also keep their values. */
export const SMALL = 16;

const NUMPY = { string: 'str' };
const INTEGER = new Set(['int8', 'int16', 'int32', 'int64', 'uint8', 'uint16', 'uint32', 'uint64', 'bool']);

function bytesOf(data) {
  return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
}

/** "sha1:<hex>" of a tensor ({type, dims, data}), equal to the Python recorder's. */
export function digest(tensor) {
  const dtype = NUMPY[tensor.type] ?? tensor.type;
  const h = createHash('sha1');
  h.update(`${dtype}[${Array.from(tensor.dims).join(', ')}]\n`);
  if (tensor.type === 'string') {
    h.update(JSON.stringify(Array.from(tensor.data, String)).replaceAll('","', '", "'));
  } else {
    h.update(bytesOf(tensor.data));
  }
  return `sha1:${h.digest('hex')}`;
}

/** {dtype, shape, digest, value?} of one tensor. */
export function describe(tensor) {
  const out = { dtype: NUMPY[tensor.type] ?? tensor.type, shape: Array.from(tensor.dims, Number), digest: digest(tensor) };
  if (INTEGER.has(tensor.type) && tensor.data.length <= SMALL) {
    out.value = Array.from(tensor.data, (v) => Number(v));
  }
  return out;
}

function describeAll(tensors) {
  const out = {};
  for (const [name, t] of Object.entries(tensors)) out[name] = describe(t);
  return out;
}

/** One JSON line per call, written whole per call (a crash leaves whole lines). */
export class TraceRecorder {
  constructor(path, { timing = true, append = false } = {}) {
    this.path = path;
    this.timing = timing;
    this.next = 0;
    if (!append) writeFileSync(path, '');
  }

  /** Wraps `session.run` in place, recording each call under `name`; returns the session. */
  wrap(session, name) {
    if (!name) throw new Error('TraceRecorder.wrap(session, name): name the model file the session was made from');
    const original = session.run.bind(session);
    session.run = async (feeds, fetches, options) => {
      const entry = { call: this.next++, model: name, feeds: describeAll(feeds) };
      const start = performance.now();
      try {
        const out = await original(feeds, fetches, options);
        entry.outputs = describeAll(out);
        this.#write(entry, start);
        return out;
      } catch (e) {
        entry.error = String(e?.message ?? e);
        this.#write(entry, start);
        throw e;
      }
    };
    return session;
  }

  /** `ort.InferenceSession.create(path, options)`, wrapped under the file's name. */
  async create(ort, path, options) {
    return this.wrap(await ort.InferenceSession.create(path, options), basename(String(path)));
  }

  #write(entry, start) {
    if (this.timing) entry.time_ms = performance.now() - start;
    appendFileSync(this.path, `${JSON.stringify(entry)}\n`);
  }

  close() {}
}

/** Records every session `ort.InferenceSession.create(path, …)` makes from now on; returns the recorder. */
export function recordSessions(path, ort, options) {
  const rec = new TraceRecorder(path, options);
  const create = ort.InferenceSession.create.bind(ort.InferenceSession);
  ort.InferenceSession.create = async (what, ...rest) => {
    const session = await create(what, ...rest);
    return typeof what === 'string' ? rec.wrap(session, basename(what)) : rec.wrap(session, '<in-memory>');
  };
  return rec;
}
