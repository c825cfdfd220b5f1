// Records every ONNX Runtime inference call of a JavaScript application
// (onnxruntime-node, onnxruntime-web, transformers.js) as a JSONL trace for
// `onnx-contract replay TRACE.jsonl --model PATH`. No dependencies: Node's
// crypto and fs only. A tensor's digest is the same in both recorders:
// "sha1:" + SHA-1 of the numpy dtype name, the shape as Python prints a list
// ("[1, 8, 0, 4]"), a newline, then the little-endian bytes.
//
// Trace format version 2 (the default): a new trace (or an append to a missing
// or empty file) starts with the header line {"onnx_contract_trace": 2}; every
// tensor of rank >= 2 also has "rows", the digest of each index along axis 0
// (a beam's row keeps its digest when the caller reorders the batch; [] when
// axis 0 is empty); integer and bool tensors of at most SMALL_V2 = 4096 elements
// keep their flat "value" (a real prompt's ids, mask and positions). The lines are
// byte for byte those python/onnx_contract_trace.py writes for the same calls
// (Python's json.dumps spacing and \u escapes, int64 values beyond 2^53 exact).
// Version 1 (`{ version: 1 }`: no header, no rows, values up to SMALL = 16 elements,
// compact JSON.stringify lines, as the committed js-*.jsonl traces) is still a valid trace.
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
import { appendFileSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { basename } from 'node:path';

/** Version 1: integer and bool tensors up to this many elements also keep their values. */
export const SMALL = 16;
/** Version 2: the same, up to this many elements (a real prompt's ids, masks and positions). */
export const SMALL_V2 = 4096;
/** The trace format this recorder writes by default, and its header line's key. */
export const VERSION = 2;
export const HEADER = 'onnx_contract_trace';

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
    h.update(pythonJson(Array.from(tensor.data, String))); // Python's json.dumps of the values
  } else {
    h.update(bytesOf(tensor.data));
  }
  return `sha1:${h.digest('hex')}`;
}

/** The digest of each index along axis 0 (Python's `[digest(a[i]) for i in ...]`). */
export function rowDigests(tensor) {
  const dims = Array.from(tensor.dims, Number);
  const rowDims = dims.slice(1);
  const size = rowDims.reduce((a, b) => a * b, 1);
  const cut = (s, e) => (tensor.data.subarray ? tensor.data.subarray(s, e) : tensor.data.slice(s, e));
  return Array.from({ length: dims[0] }, (_, i) => digest({ type: tensor.type, dims: rowDims, data: cut(i * size, (i + 1) * size) }));
}

/**
 * {dtype, shape, digest, rows?, value?} of one tensor. `{ rows: true }` (default) is format version 2:
 * `rows` for rank >= 2 and `value` for integer/bool tensors of at most SMALL_V2 elements (an int64
 * beyond 2^53 stays a BigInt, written exactly as Python writes it); `{ rows: false }` is version 1:
 * no rows, `value` up to SMALL elements, as Numbers.
 */
export function describe(tensor, { rows = true } = {}) {
  const out = { dtype: NUMPY[tensor.type] ?? tensor.type, shape: Array.from(tensor.dims, Number), digest: digest(tensor) };
  if (rows && out.shape.length >= 2) out.rows = rowDigests(tensor);
  if (INTEGER.has(tensor.type) && tensor.data.length <= (rows ? SMALL_V2 : SMALL)) {
    const exact = (v) => (typeof v === 'bigint' && !Number.isSafeInteger(Number(v)) ? v : Number(v));
    out.value = Array.from(tensor.data, rows ? exact : (v) => Number(v));
  }
  return out;
}

function describeAll(tensors, options) {
  const out = {};
  for (const [name, t] of Object.entries(tensors)) out[name] = describe(t, options);
  return out;
}

function escape(text) {
  // Python's json.dumps (ensure_ascii): \" \\ \b \f \n \r \t, every other code unit outside ' '..'~' as \uxxxx
  const short = { '"': '\\"', '\\': '\\\\', '\b': '\\b', '\f': '\\f', '\n': '\\n', '\r': '\\r', '\t': '\\t' };
  return `"${String(text).replace(/["\\\u0000-\u001f\u007f-\uffff]/g, (c) => short[c] ?? `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)}"`;
}

/** A JSON text exactly as Python's `json.dumps(value, separators=(", ", ": "))` writes it. */
export function pythonJson(value, key) {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'boolean') return value ? 'true' : 'false';
  if (typeof value === 'bigint') return value.toString();
  if (typeof value === 'number') {
    // Python writes a float with a fraction: time_ms is a float even when whole
    return key === 'time_ms' && Number.isInteger(value) ? `${value}.0` : String(value);
  }
  if (typeof value === 'string') return escape(value);
  if (Array.isArray(value)) return `[${value.map((v) => pythonJson(v)).join(', ')}]`;
  return `{${Object.entries(value).map(([k, v]) => `${escape(k)}: ${pythonJson(v, k)}`).join(', ')}}`;
}

function isHeader(line) {
  try {
    const obj = JSON.parse(line);
    return obj !== null && typeof obj === 'object' && HEADER in obj && !('call' in obj);
  } catch {
    return false;
  }
}

/**
 * One JSON line per call, written whole per call (a crash leaves whole lines).
 * `append: true` keeps the file's lines and numbers calls after them; `timing: false`
 * leaves out time_ms (byte-reproducible traces); `version: 1` writes the format before the
 * header (no header, no rows, values up to 16 elements, JSON.stringify's compact lines).
 */
export class TraceRecorder {
  constructor(path, { timing = true, append = false, version = VERSION } = {}) {
    if (version !== 1 && version !== 2) throw new Error(`trace format version ${version}: this recorder writes 1 or 2`);
    this.path = path;
    this.timing = timing;
    this.version = version;
    this.next = 0;
    let empty = true;
    if (append && existsSync(path)) {
      const lines = readFileSync(path, 'utf8').split('\n').filter((l) => l.trim());
      empty = lines.length === 0;
      this.next = lines.filter((l) => !isHeader(l)).length;
    }
    if (!append) writeFileSync(path, '');
    if (version >= 2 && empty) appendFileSync(path, `${pythonJson({ [HEADER]: version })}\n`);
  }

  /** Wraps `session.run` in place, recording each call under `name`; returns the session. */
  wrap(session, name) {
    if (!name) throw new Error('TraceRecorder.wrap(session, name): name the model file the session was made from');
    const original = session.run.bind(session);
    session.run = async (feeds, fetches, options) => {
      const rows = { rows: this.version >= 2 };
      const entry = { call: this.next++, model: name, feeds: describeAll(feeds, rows) };
      const start = performance.now();
      try {
        const out = await original(feeds, fetches, options);
        entry.outputs = describeAll(out, rows);
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
    if (this.timing) entry.time_ms = this.version >= 2 ? Math.round((performance.now() - start) * 1000) / 1000 : performance.now() - start;
    appendFileSync(this.path, `${this.version >= 2 ? pythonJson(entry) : JSON.stringify(entry)}\n`);
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
