#!/usr/bin/env node
// Load a model folder the way a transformers.js application does, and greedy-generate from it.
//
//   node models/tjs_consumer_run.mjs FOLDER DTYPE [--model-file-name NAME] [--no-attention-mask]
//
// FOLDER is a transformers.js-layout folder (config.json at its root, ONNX files in onnx/).
// DTYPE is a transformers.js dtype (fp32, fp16, q8, q4, q4f16, ...) or "default" (no dtype option:
// transformers.js then takes config.json's transformers.js_config.dtype, else fp32 on cpu).
// --model-file-name NAME is passed through as from_pretrained's model_file_name (decoder-only only).
// --no-attention-mask passes input_ids alone (by default an all-ones attention_mask [1, 4] goes with
// them, as a tokenizer's output would; transformers.js 4.3.1 does not make one for an encoder, so
// an encoder-decoder folder then fails with "Missing the following inputs: attention_mask").
//
// Prints ONE line of JSON on stdout:
//   {"ok": bool, "tokens": [...], "error": "...", "stage": "load"|"generate"|null,
//    "class": "...", "dtype": "...", "warnings": [...]}
// - tokens: row 0 of what model.generate() returns, unchanged. For a decoder-only model that is the
//   4-token prompt followed by the new tokens; for an encoder-decoder model it is the decoder start
//   token followed by the new tokens. [] when not ok.
// - error: the thrown Error's message, exactly ("" when ok); stage: where it was thrown:
//   "load" (from_pretrained rejected), "generate" (generate rejected), "setup" (this script), or
//   "unhandled-rejection": transformers.js threw inside an async Promise executor (4.3.1's
//   getModelDataFiles does, when an external-data file is missing), so the error never reaches
//   from_pretrained's caller: from_pretrained never settles, and without a handler Node prints the
//   error and exits 1. This script reports the first such rejection and exits.
// - warnings: what transformers.js logged through console.warn/console.error meanwhile.
// Exit status 0 whenever the JSON was printed (also when ok is false); 2 on bad usage.
//
// What it does: env.allowRemoteModels = false, env.localModelPath = "./" after chdir to FOLDER's
// parent (so every path in an error message is "./<folder>/..."), no FS/browser/WASM caches; the
// Auto class is picked from config.json: is_encoder_decoder -> AutoModelForSeq2SeqLM, model_type
// llava -> AutoModelForImageTextToText (text only, no pixel_values), else AutoModelForCausalLM;
// from_pretrained(folderName, {dtype, device: "cpu"}); then
// generate({input_ids: int64 [1, 4] = PROMPT, attention_mask: int64 ones [1, 4],
// max_new_tokens: 16, do_sample: false}).
// It writes nothing anywhere (nothing into FOLDER: the caches are off and ORT is given no
// optimized-model path).
//
// Which transformers.js: $TRANSFORMERS_JS_DIR (the @huggingface/transformers package folder, e.g.
// /work/tjs-scratch/node_modules/@huggingface/transformers) if set, else the bare
// '@huggingface/transformers' import resolved from this file's location.
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

export const PROMPT = [37, 205, 411, 89];
export const MAX_NEW_TOKENS = 16;

function usage() {
    process.stderr.write('usage: node tjs_consumer_run.mjs FOLDER DTYPE [--model-file-name NAME] [--no-attention-mask]\n');
    process.exit(2);
}

const args = process.argv.slice(2);
let modelFileName = null;
let withMask = true;
const pos = [];
for (let i = 0; i < args.length; ++i) {
    if (args[i] === '--model-file-name') {
        if (i + 1 >= args.length) usage();
        modelFileName = args[++i];
    } else if (args[i] === '--no-attention-mask') {
        withMask = false;
    } else {
        pos.push(args[i]);
    }
}
if (pos.length !== 2) usage();
const folder = path.resolve(pos[0]);
const dtypeArg = pos[1];

// Keep stdout for the one JSON line: everything transformers.js / ORT logs goes to stderr.
const warnings = [];
const toStderr =
    (keep) =>
    (...xs) => {
        const line = xs.map((x) => (typeof x === 'string' ? x : JSON.stringify(x, (k, v) => (typeof v === 'bigint' ? v.toString() : v)))).join(' ');
        if (keep) warnings.push(line);
        process.stderr.write(line + '\n');
    };
console.log = toStderr(false);
console.info = toStderr(false);
console.debug = toStderr(false);
console.warn = toStderr(true);
console.error = toStderr(true);

async function importTransformers() {
    const dir = process.env.TRANSFORMERS_JS_DIR;
    if (dir) {
        const pkg = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'));
        const entry = pkg.exports?.node?.import?.default ?? './dist/transformers.node.mjs';
        return await import(pathToFileURL(path.resolve(dir, entry)).href);
    }
    return await import('@huggingface/transformers');
}

let emitted = false;
function emit(result) {
    if (emitted) return;
    emitted = true;
    process.stdout.write(JSON.stringify(result) + '\n');
}

const result = { ok: false, tokens: [], error: '', stage: null, class: null, dtype: dtypeArg, warnings };
process.on('unhandledRejection', (e) => {
    result.ok = false;
    result.tokens = [];
    result.error = e instanceof Error ? e.message : String(e);
    result.stage = 'unhandled-rejection';
    emit(result);
    process.exit(0);
});
try {
    result.stage = 'setup';
    const tjs = await importTransformers();
    const { env, Tensor, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoModelForImageTextToText } = tjs;
    env.allowRemoteModels = false;
    env.allowLocalModels = true;
    env.useFSCache = false;
    env.useBrowserCache = false;
    env.useCustomCache = false;
    env.useWasmCache = false;
    process.chdir(path.dirname(folder));
    env.localModelPath = './';
    const name = path.basename(folder);

    // The class choice needs config.json; reading it here is only for that choice (transformers.js
    // reads it again itself). A missing or unreadable config.json falls through to CausalLM, whose
    // own loading then reports the problem.
    let cfg = {};
    try {
        cfg = JSON.parse(fs.readFileSync(path.join(name, 'config.json'), 'utf8'));
    } catch (_) {}
    let Auto = AutoModelForCausalLM;
    if (cfg.is_encoder_decoder) Auto = AutoModelForSeq2SeqLM;
    else if (cfg.model_type === 'llava') Auto = AutoModelForImageTextToText;
    result.class = Auto.name;

    const opts = { device: 'cpu' };
    if (dtypeArg !== 'default') opts.dtype = dtypeArg;
    if (modelFileName) opts.model_file_name = modelFileName;

    result.stage = 'load';
    const model = await Auto.from_pretrained(name, opts);

    result.stage = 'generate';
    const input_ids = new Tensor('int64', BigInt64Array.from(PROMPT.map(BigInt)), [1, PROMPT.length]);
    const inputs = { input_ids };
    if (withMask) inputs.attention_mask = new Tensor('int64', new BigInt64Array(PROMPT.length).fill(1n), [1, PROMPT.length]);
    const out = await model.generate({ ...inputs, max_new_tokens: MAX_NEW_TOKENS, do_sample: false });
    const seq = out.sequences ?? out;
    result.tokens = seq.tolist()[0].map((x) => Number(x));
    result.ok = true;
    result.stage = null;
    try {
        await model.dispose();
    } catch (_) {}
} catch (e) {
    result.ok = false;
    result.tokens = [];
    result.error = e instanceof Error ? e.message : String(e);
}
emit(result);
