// Tests of js/onnx-contract-trace.mjs with a real onnxruntime-node session:
//   npm ci --ignore-scripts --prefix tests/callers && node --test tests/callers/test_recorder.mjs
// Digests and row digests equal the Python recorder's for the same array (computed by
// python3 + numpy here); a version-2 trace is byte for byte the Python recorder's for the
// same calls (header, rows, spacing, escapes; a real gpt2-tiny session and a stub session
// with every dtype and a non-ASCII error); integer and bool tensors keep their values up to
// 4096 elements in version 2 (a [4, 30] prompt's 120 ids, int64 beyond 2^53 exact) and up to
// 16 in version 1; a present fed back has its output's digest; an
// error is recorded and re-thrown; appending writes no second header; the committed
// js-*.jsonl traces (version 1) re-record byte-identically.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, digest, rowDigests, SMALL, SMALL_V2, TraceRecorder } from '../../js/onnx-contract-trace.mjs';
import { CALLERS, record } from './caller.mjs';

const require = createRequire(import.meta.url);
const ort = require('onnxruntime-node');
const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const tmp = mkdtempSync(join(tmpdir(), 'js-trace-'));
const lines = (path) => readFileSync(path, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
const HEADER = '{"onnx_contract_trace": 2}';
const PY = `import sys, numpy as np; sys.path.insert(0, ${JSON.stringify(join(ROOT, 'python'))}); import onnx_contract_trace as t\n`;
const python = (script) => execFileSync('python3', ['-c', PY + script], { encoding: 'utf8' });

test('digests and row digests equal the Python recorder\'s', () => {
  const cases = [
    [new ort.Tensor('float32', Float32Array.from([1.5, -2, 0.25, 3]), [2, 2]), 'np.array([[1.5, -2], [0.25, 3]], np.float32)'],
    [new ort.Tensor('int64', BigInt64Array.from([3n, 14n, 15n, 92n]), [1, 4]), 'np.array([[3, 14, 15, 92]], np.int64)'],
    [new ort.Tensor('bool', Uint8Array.from([1, 0]), [2]), 'np.array([True, False])'],
    [new ort.Tensor('int64', BigInt64Array.from([7n]), []), 'np.array(7, np.int64)'],
    [new ort.Tensor('float32', new Float32Array(0), [1, 8, 0, 4]), 'np.zeros((1, 8, 0, 4), np.float32)'],
    [new ort.Tensor('int32', Int32Array.from([5, 6]), [1, 2]), 'np.array([[5, 6]], np.int32)'],
    [new ort.Tensor('float32', Float32Array.from({ length: 24 }, (_, i) => i / 7), [3, 2, 4]), 'np.arange(24, dtype=np.float64).astype(np.float32).reshape(3, 2, 4) / np.float32(7)'],
    [new ort.Tensor('float32', new Float32Array(0), [0, 8, 1, 4]), 'np.zeros((0, 8, 1, 4), np.float32)'],
  ];
  const printed = python(cases.map(([, py]) => `print(t.digest(${py})); print(t.describe(${py}).get('rows'))`).join('\n')).trim().split('\n');
  cases.forEach(([tensor], i) => {
    assert.equal(digest(tensor), printed[2 * i], `case ${i}`);
    const rows = tensor.dims.length >= 2 ? `[${rowDigests(tensor).map((r) => `'${r}'`).join(', ')}]` : 'None';
    assert.equal(rows, printed[2 * i + 1], `rows of case ${i}`);
  });
  assert.deepEqual(describe(cases[1][0]).value, [3, 14, 15, 92]);
  assert.deepEqual(Object.keys(describe(cases[1][0])), ['dtype', 'shape', 'digest', 'rows', 'value']);
  assert.equal(describe(cases[0][0]).value, undefined);
  assert.deepEqual(describe(cases[4][0]).rows, [digest(new ort.Tensor('float32', new Float32Array(0), [8, 0, 4]))]);
  assert.deepEqual(describe(cases[7][0]).rows, []);
  assert.equal(describe(cases[2][0]).rows, undefined);
  assert.equal(describe(cases[0][0], { rows: false }).rows, undefined);
});

// The stub session's tensors, in JavaScript and in numpy: every dtype the recorder names, ranks 0 to 4, empty axes.
const STUB = [
  ['f32', new ort.Tensor('float32', Float32Array.from([1.5, -2, 0.25, 3, 0.1, 7]), [2, 3]), 'np.array([[1.5, -2, 0.25], [3, 0.1, 7]], np.float32)'],
  ['ids', new ort.Tensor('int64', BigInt64Array.from([3n, 14n, 15n, 92n]), [2, 2]), 'np.array([[3, 14], [15, 92]], np.int64)'],
  ['flag', new ort.Tensor('bool', Uint8Array.from([1]), [1]), 'np.array([True])'],
  ['scalar', new ort.Tensor('int64', BigInt64Array.from([7n]), []), 'np.array(7, np.int64)'],
  ['placeholder', new ort.Tensor('float32', new Float32Array(0), [0, 8, 1, 4]), 'np.zeros((0, 8, 1, 4), np.float32)'],
  ['empty_past', new ort.Tensor('float32', new Float32Array(0), [1, 8, 0, 4]), 'np.zeros((1, 8, 0, 4), np.float32)'],
  ['half', new ort.Tensor('float16', Uint16Array.from([0x3c00, 0xc000, 0x7bff, 1]), [2, 2]), 'np.array([0x3c00, 0xc000, 0x7bff, 1], np.uint16).view(np.float16).reshape(2, 2)'],
  ['i32', new ort.Tensor('int32', Int32Array.from([5, -6]), [1, 2]), 'np.array([[5, -6]], np.int32)'],
  ['u8', new ort.Tensor('uint8', Uint8Array.from([1, 2, 3]), [3, 1]), 'np.array([[1], [2], [3]], np.uint8)'],
  ['big', new ort.Tensor('int64', BigInt64Array.from(Array.from({ length: 20 }, (_, i) => BigInt(i))), [4, 5]), 'np.arange(20, dtype=np.int64).reshape(4, 5)'],
  ['prompt', new ort.Tensor('int64', BigInt64Array.from(Array.from({ length: 120 }, (_, i) => (i === 119 ? 2n ** 62n + 1n : BigInt(i * 1000 - 7)))), [4, 30]),
    'np.array([i * 1000 - 7 for i in range(119)] + [2**62 + 1], np.int64).reshape(4, 30)'],
  ['mask', new ort.Tensor('bool', new Uint8Array(4097).fill(1), [4097]), 'np.ones(4097, bool)'],
  ['u64', new ort.Tensor('uint64', BigUint64Array.from([2n ** 64n - 1n, 0n, 5n]), [3]), 'np.array([2**64 - 1, 0, 5], np.uint64)'],
  ['text', new ort.Tensor('string', ['\u00e9 "q"', 'b', 'c,"d"', '\u{1F600}'], [2, 2]), 'np.array([["\\u00e9 \\"q\\"", "b"], ["c,\\"d\\"", "\\U0001F600"]], dtype=object)'],
];
const ERROR = 'bad "feed" \u2014 \u00fcn\u00efcode\n\tline \\ \u007f \u{1F600}';
const MODEL = 'd\u00e9codeur.onnx';

test('a version-2 trace is byte for byte the Python recorder\'s: stub session, every dtype, an error', async () => {
  const path = join(tmp, 'stub-js.jsonl');
  const rec = new TraceRecorder(path, { timing: false });
  let calls = 0;
  const stub = rec.wrap({
    run: async (feeds) => {
      if (calls++ === 1) throw new Error(ERROR);
      return { logits: feeds.f32, present: feeds.placeholder, text: feeds.text };
    },
  }, MODEL);
  const feeds = Object.fromEntries(STUB.map(([name, tensor]) => [name, tensor]));
  await stub.run(feeds);
  await assert.rejects(stub.run(feeds));
  const py = join(tmp, 'stub-py.jsonl');
  python(`
class Out:
    def __init__(self, name): self.name = name
class Stub:
    calls = 0
    def get_outputs(self): return [Out('logits'), Out('present'), Out('text')]
    def run(self, names, feeds, options=None):
        self.calls += 1
        if self.calls == 2: raise RuntimeError(${JSON.stringify(ERROR)})
        return [feeds['f32'], feeds['placeholder'], feeds['text']]
feeds = {${STUB.map(([name, , numpy]) => `${JSON.stringify(name)}: ${numpy}`).join(', ')}}
with t.TraceRecorder(${JSON.stringify(py)}, timing=False) as rec:
    s = rec.wrap(Stub(), ${JSON.stringify(MODEL)})
    s.run(None, feeds)
    try: s.run(None, feeds)
    except RuntimeError: pass
`);
  const js = readFileSync(path, 'utf8');
  assert.equal(js, readFileSync(py, 'utf8'));
  assert.ok(js.startsWith(`${HEADER}\n{"call": 0, "model": "d\\u00e9codeur.onnx", `), js.slice(0, 80));
  const [, ok, bad] = lines(path);
  assert.equal(bad.error, ERROR);
  assert.deepEqual(ok.feeds.placeholder.rows, []);
  assert.equal(ok.feeds.text.rows.length, 2);
  assert.deepEqual(ok.feeds.big.value, Array.from({ length: 20 }, (_, i) => i)); // version 2: up to 4096 elements
  assert.equal(ok.feeds.prompt.value.length, 120);
  assert.ok(js.includes(`, ${2n ** 62n + 1n}]`) && js.includes(`[${2n ** 64n - 1n}, 0, 5]`)); // beyond 2^53: exact
  assert.equal(ok.feeds.mask.value, undefined); // 4097 elements: none
});

test('a [4, 30] int64 tensor keeps its 120 values in version 2 and none in version 1', async () => {
  const ids = new ort.Tensor('int64', BigInt64Array.from(Array.from({ length: 120 }, (_, i) => BigInt(i))), [4, 30]);
  const want = Array.from({ length: 120 }, (_, i) => i);
  assert.equal(SMALL, 16);
  assert.equal(SMALL_V2, 4096);
  assert.deepEqual(describe(ids).value, want);
  assert.equal(describe(ids, { rows: false }).value, undefined);
  assert.deepEqual(describe(new ort.Tensor('int64', BigInt64Array.from([1n, 2n]), [1, 2]), { rows: false }).value, [1, 2]);
  const kept = {};
  for (const version of [1, 2]) {
    const path = join(tmp, `prompt-v${version}.jsonl`);
    await new TraceRecorder(path, { timing: false, version }).wrap({ run: async (feeds) => ({ y: feeds.input_ids }) }, 'm.onnx')
      .run({ input_ids: ids, flag: new ort.Tensor('bool', Uint8Array.from([1]), [1]) });
    const call = lines(path).at(-1);
    kept[version] = { input_ids: call.feeds.input_ids.value, y: call.outputs.y.value, flag: call.feeds.flag.value };
  }
  assert.deepEqual(kept[2], { input_ids: want, y: want, flag: [1] });
  assert.deepEqual(kept[1], { input_ids: undefined, y: undefined, flag: [1] });
  const py = join(tmp, 'prompt-py.jsonl'); // the Python recorder's line for the same tensor
  python(`
class Out:
    name = 'y'
class Stub:
    def get_outputs(self): return [Out()]
    def run(self, names, feeds, options=None): return [feeds['input_ids']]
with t.TraceRecorder(${JSON.stringify(py)}, timing=False) as rec:
    rec.wrap(Stub(), 'm.onnx').run(None, {'input_ids': np.arange(120, dtype=np.int64).reshape(4, 30), 'flag': np.array([True])})
`);
  assert.equal(readFileSync(join(tmp, 'prompt-v2.jsonl'), 'utf8'), readFileSync(py, 'utf8'));
});

test('a version-2 trace of a real session is byte for byte the Python recorder\'s', async () => {
  const path = join(tmp, 'gpt2-js.jsonl');
  await CALLERS['js-gpt2-correct'](new TraceRecorder(path, { timing: false }));
  const py = join(tmp, 'gpt2-py.jsonl');
  python(`import onnxruntime as ort
so = ort.SessionOptions(); so.intra_op_num_threads = so.inter_op_num_threads = 1
with t.TraceRecorder(${JSON.stringify(py)}, timing=False) as rec:
    s = rec.wrap(ort.InferenceSession(${JSON.stringify(join(ROOT, 'models', 'gpt2-tiny', 'model.onnx'))}, so, providers=['CPUExecutionProvider']))
    names, tokens = [o.name for o in s.get_outputs()], [3, 14, 15, 92]
    past = {f'past_key_values.{l}.{kv}': np.zeros((1, 4, 0, 8), np.float32) for l in (0, 1) for kv in ('key', 'value')}
    for k in range(5):
        ids, n = (tokens if k == 0 else tokens[-1:]), past['past_key_values.0.key'].shape[2]
        out = dict(zip(names, s.run(None, {'input_ids': np.array([ids], np.int64), **past,
            'attention_mask': np.ones((1, n + len(ids)), np.int64), 'position_ids': np.arange(n, n + len(ids))[None]})))
        tokens = tokens + [int(out['logits'][0, -1].argmax())]
        past = {p: out[p.replace('past_key_values', 'present')] for p in past}
`);
  const js = readFileSync(path, 'utf8');
  assert.equal(js, readFileSync(py, 'utf8'));
  const calls = lines(path);
  assert.deepEqual(calls[0], { onnx_contract_trace: 2 });
  assert.equal(calls.length, 6);
  assert.deepEqual(calls[2].feeds['past_key_values.0.key'].rows, calls[1].outputs['present.0.key'].rows);
});

test('appending: calls numbered after the file\'s, no second header; an empty file gets one', async () => {
  const y = new ort.Tensor('float32', Float32Array.from([1, 2]), [1, 2]);
  const stub = () => ({ run: async () => ({ y }) });
  const path = join(tmp, 'append.jsonl');
  writeFileSync(path, '');
  for (let i = 0; i < 2; i++) await new TraceRecorder(path, { append: true, timing: false }).wrap(stub(), 'm.onnx').run({});
  assert.equal(readFileSync(path, 'utf8').split('\n')[0], HEADER);
  assert.deepEqual(lines(path).slice(1).map((c) => c.call), [0, 1]);
  const fresh = join(tmp, 'append-missing.jsonl');
  await new TraceRecorder(fresh, { append: true, timing: false }).wrap(stub(), 'm.onnx').run({});
  assert.equal(readFileSync(fresh, 'utf8').split('\n')[0], HEADER);
  const v1 = join(tmp, 'v1.jsonl');
  await new TraceRecorder(v1, { timing: false, version: 1 }).wrap(stub(), 'm.onnx').run({});
  assert.equal(readFileSync(v1, 'utf8'), `{"call":0,"model":"m.onnx","feeds":{},"outputs":{"y":{"dtype":"float32","shape":[1,2],"digest":"${digest(y)}"}}}\n`);
  await new TraceRecorder(v1, { append: true, timing: false }).wrap(stub(), 'm.onnx').run({});
  assert.deepEqual(lines(v1).map((c) => c.call), [0, 1]); // a v1 file appended to stays without a header
});

test('a recorded session: every line has the form, a fed-back present keeps its digest', async () => {
  await record('js-gpt2-correct', tmp);
  const calls = lines(join(tmp, 'js-gpt2-correct.jsonl')); // version 1, as committed: no header
  assert.equal(calls.length, 5);
  calls.forEach((c, i) => {
    assert.equal(c.call, i);
    assert.equal(c.model, 'model.onnx');
    for (const t of [...Object.values(c.feeds), ...Object.values(c.outputs)]) {
      assert.match(t.digest, /^sha1:[0-9a-f]{40}$/);
      assert.ok(Array.isArray(t.shape));
    }
  });
  assert.equal(calls[1].feeds['past_key_values.0.key'].digest, calls[0].outputs['present.0.key'].digest);
  assert.deepEqual(calls[1].feeds.position_ids.value, [4]);
});

test('an error is recorded and re-thrown', async () => {
  const path = join(tmp, 'error.jsonl');
  const rec = new TraceRecorder(path, { timing: false });
  const s = await rec.create(ort, join(ROOT, 'models', 'gpt2-tiny', 'model.onnx'));
  await assert.rejects(s.run({ input_ids: new ort.Tensor('int64', BigInt64Array.from([1n]), [1, 1]) }));
  const [header, c] = lines(path);
  assert.deepEqual(header, { onnx_contract_trace: 2 });
  assert.equal(c.call, 0);
  assert.ok(c.error && !c.outputs, JSON.stringify(c));
});

test('the committed js-*.jsonl traces re-record byte-identically', async () => {
  for (const name of Object.keys(CALLERS)) {
    await record(name, tmp);
    assert.equal(readFileSync(join(tmp, `${name}.jsonl`), 'utf8'), readFileSync(join(ROOT, 'tests', 'traces', `${name}.jsonl`), 'utf8'), name);
  }
});
