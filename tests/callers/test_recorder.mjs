// Tests of js/onnx-contract-trace.mjs with a real onnxruntime-node session:
//   npm ci --ignore-scripts --prefix tests/callers && node --test tests/callers/test_recorder.mjs
// Digests equal the Python recorder's for the same array (computed by python3 + numpy here);
// a present fed back has its output's digest; an error is recorded and re-thrown; the
// committed js-*.jsonl traces re-record byte-identically.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, digest, TraceRecorder } from '../../js/onnx-contract-trace.mjs';
import { CALLERS, record } from './caller.mjs';

const require = createRequire(import.meta.url);
const ort = require('onnxruntime-node');
const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const tmp = mkdtempSync(join(tmpdir(), 'js-trace-'));
const lines = (path) => readFileSync(path, 'utf8').trim().split('\n').map((l) => JSON.parse(l));

test('digests equal the Python recorder digests', () => {
  const cases = [
    [new ort.Tensor('float32', Float32Array.from([1.5, -2, 0.25, 3]), [2, 2]), 'np.array([[1.5, -2], [0.25, 3]], np.float32)'],
    [new ort.Tensor('int64', BigInt64Array.from([3n, 14n, 15n, 92n]), [1, 4]), 'np.array([[3, 14, 15, 92]], np.int64)'],
    [new ort.Tensor('bool', Uint8Array.from([1, 0]), [2]), 'np.array([True, False])'],
    [new ort.Tensor('int64', BigInt64Array.from([7n]), []), 'np.array(7, np.int64)'],
    [new ort.Tensor('float32', new Float32Array(0), [1, 8, 0, 4]), 'np.zeros((1, 8, 0, 4), np.float32)'],
    [new ort.Tensor('int32', Int32Array.from([5, 6]), [1, 2]), 'np.array([[5, 6]], np.int32)'],
  ];
  const script = `import sys, numpy as np; sys.path.insert(0, ${JSON.stringify(join(ROOT, 'python'))}); import onnx_contract_trace as t\n`
    + cases.map(([, py]) => `print(t.digest(${py}))`).join('\n');
  const python = execFileSync('python3', ['-c', script], { encoding: 'utf8' }).trim().split('\n');
  cases.forEach(([tensor], i) => assert.equal(digest(tensor), python[i], `case ${i}`));
  assert.deepEqual(describe(cases[1][0]).value, [3, 14, 15, 92]);
  assert.equal(describe(cases[0][0]).value, undefined);
});

test('a recorded session: every line has the form, a fed-back present keeps its digest', async () => {
  await record('js-gpt2-correct', tmp);
  const calls = lines(join(tmp, 'js-gpt2-correct.jsonl'));
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
  const [c] = lines(path);
  assert.equal(c.call, 0);
  assert.ok(c.error && !c.outputs, JSON.stringify(c));
});

test('the committed js-*.jsonl traces re-record byte-identically', async () => {
  for (const name of Object.keys(CALLERS)) {
    await record(name, tmp);
    assert.equal(readFileSync(join(tmp, `${name}.jsonl`), 'utf8'), readFileSync(join(ROOT, 'tests', 'traces', `${name}.jsonl`), 'utf8'), name);
  }
});
