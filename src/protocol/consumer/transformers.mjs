// transformers.js' own greedy generation on an export folder, as an
// application runs it (from_pretrained on the local folder, generate with
// do_sample false, no tokenizer): written by `onnx-contract protocol`, run
// by `onnx-contract check` in a child. Prints one JSON line.
//   node transformers.mjs PACKAGE_DIR FOLDER IDS_JSON MAX_NEW_TOKENS [seq2seq|causal|image-text[=PATH:INPUT]|audio=PATH:INPUT]
// PACKAGE_DIR: the @huggingface/transformers package folder. IDS_JSON is the
// prompt, or an encoder-decoder's source ids (AutoModelForSeq2SeqLM), or an
// audio model's decoder start (AutoModelForSpeechSeq2Seq, fed the float32
// .npy PATH as INPUT); the tokens printed are the new ones (after the
// decoder start token). An image-text model (AutoModelForImageTextToText)
// is given the text prompt alone, or with `=PATH:INPUT` the float32 .npy
// PATH as its pixels (INPUT), the prompt holding the image's tokens.
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const [pkgDir, folder, idsJson, maxNew, mode] = process.argv.slice(2);
const ids = JSON.parse(idsJson);
const out = { installed: true, ok: false, tokens: [], error: null, stage: 'import' };
let said = false;
const done = () => {
    if (!said) process.stdout.write(JSON.stringify(out) + '\n');
    said = true;
    process.exit(0);
};
// Keep stdout for the one line.
for (const k of ['log', 'info', 'debug', 'warn', 'error']) console[k] = (...xs) => process.stderr.write(xs.join(' ') + '\n');
// transformers.js rejects inside a promise nobody awaits when an external-data file is missing.
process.on('unhandledRejection', (e) => {
    out.error = e instanceof Error ? e.message : String(e);
    out.stage = 'unhandled-rejection';
    done();
});
let tjs;
try {
    const pkg = JSON.parse(fs.readFileSync(path.join(pkgDir, 'package.json'), 'utf8'));
    const entry = pkg.exports?.node?.import?.default ?? './dist/transformers.node.mjs';
    tjs = await import(pathToFileURL(path.resolve(pkgDir, entry)).href);
} catch (e) {
    out.installed = false;
    out.error = e instanceof Error ? e.message : String(e);
    done();
}
// The tokens are compared with the graph's own plain greedy argmax: these
// generation-config processors (Marian and BART ship forced_eos_token_id,
// which forces the end token at the last step) change the argmax without
// being the graph's doing, so they are off.
// decoder_start_token_id, eos_token_id and pad_token_id stay the folder's own.
const PLAIN = {
    bad_words_ids: null,
    begin_suppress_tokens: null,
    encoder_no_repeat_ngram_size: 0,
    encoder_repetition_penalty: 1.0,
    exponential_decay_length_penalty: null,
    forced_bos_token_id: null,
    forced_decoder_ids: null,
    forced_eos_token_id: null,
    guidance_scale: null,
    min_length: 0,
    min_new_tokens: null,
    no_repeat_ngram_size: 0,
    remove_invalid_values: false,
    repetition_penalty: 1.0,
    suppress_tokens: null,
};
const encoderDecoder = () => {
    try {
        return JSON.parse(fs.readFileSync(path.join(folder, 'config.json'), 'utf8')).is_encoder_decoder === true;
    } catch {
        return false; // no readable config: from_pretrained says why
    }
};
// A float32 .npy (as np.save writes it, C order) as a Tensor.
const readNpy = (file, Tensor) => {
    const b = fs.readFileSync(file);
    const start = b[6] === 1 ? 10 : 12;
    const length = b[6] === 1 ? b.readUInt16LE(8) : b.readUInt32LE(8);
    const header = b.subarray(start, start + length).toString('latin1');
    if (!header.includes("'<f4'") || header.includes("'fortran_order': True")) throw new Error(`${file}: not a C-order float32 .npy`);
    const shape = header.match(/'shape': \(([^)]*)\)/)[1].split(',').map((d) => d.trim()).filter(Boolean).map(Number);
    const data = b.subarray(start + length);
    return new Tensor('float32', new Float32Array(data.buffer.slice(data.byteOffset, data.byteOffset + data.length)), shape);
};
try {
    // MODE (seq2seq | causal | audio=PATH:INPUT), as `check` tells it from the graphs; else config.json's flag.
    const audio = mode?.startsWith('audio=') ? mode.slice('audio='.length).split(/:(?=[^:]*$)/) : null;
    const image = mode?.startsWith('image-text=') ? mode.slice('image-text='.length).split(/:(?=[^:]*$)/) : null;
    const seq2seq = audio ? true : mode ? mode === 'seq2seq' : encoderDecoder();
    const { env, Tensor, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoModelForSpeechSeq2Seq, AutoModelForImageTextToText } = tjs;
    env.allowRemoteModels = false;
    env.useFSCache = false;
    env.useBrowserCache = false;
    process.chdir(path.dirname(path.resolve(folder)));
    env.localModelPath = './';
    out.stage = 'from_pretrained';
    const Auto = audio
        ? AutoModelForSpeechSeq2Seq
        : seq2seq
          ? AutoModelForSeq2SeqLM
          : mode?.startsWith('image-text')
            ? AutoModelForImageTextToText
            : AutoModelForCausalLM;
    const model = await Auto.from_pretrained(path.basename(path.resolve(folder)), { device: 'cpu' });
    out.stage = 'generate';
    const input_ids = new Tensor('int64', BigInt64Array.from(ids.map(BigInt)), [1, ids.length]);
    const attention_mask = new Tensor('int64', new BigInt64Array(ids.length).fill(1n), [1, ids.length]);
    // An audio model starts from the decoder start given (Whisper's generate would
    // add language and task tokens the reference does not pick).
    const inputs = audio
        ? { [audio[1]]: readNpy(audio[0], Tensor), decoder_input_ids: [ids] }
        : image
          ? { input_ids, attention_mask, [image[1]]: readNpy(image[0], Tensor) }
          : { input_ids, attention_mask };
    const seq = await model.generate({
        ...inputs,
        max_new_tokens: Number(maxNew),
        do_sample: false,
        num_beams: 1,
        ...PLAIN,
    });
    // An encoder-decoder's output is the decoder's: its start token, then the new ones.
    out.tokens = (seq.sequences ?? seq).tolist()[0].slice(seq2seq ? 1 : ids.length).map(Number);
    out.ok = true;
    out.stage = null;
} catch (e) {
    out.error = e instanceof Error ? e.message : String(e);
}
done();
