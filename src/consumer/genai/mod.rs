//! onnxruntime-genai's loading rules: what `og.Model(dir)` and the first
//! `Generator` steps require of a folder, read from its source (0.18, see
//! each rule's comment). genai reads `genai_config.json` alone: no
//! config.json, no generation_config.json.

mod keys;

use keys::{at, config_error};

use super::view::{ids, View};
use crate::finding::{Code, Finding};
use crate::model::signature::{Dim, Signature};
use serde_json::Value;

/// The model types genai 0.18 builds a model for (`src/models/model_type.h`
/// and the 0.18 wheel; the match in `src/models/model.cpp: CreateModel` is
/// exact): any other `type` fails at `og.Model` with "Unsupported model_type
/// in config.json: …".
pub const KNOWN_TYPES: &[&str] = &[
    // decoder-only LLMs
    "chatglm",
    "decoder",
    "ernie4_5",
    "gemma",
    "gemma2",
    "gemma3_text",
    "gemma3_vl_text",
    "gemma4_text",
    "gpt2",
    "gptoss",
    "granite",
    "granitemoehybrid",
    "hunyuandensev1",
    "internlm2",
    "lfm2",
    "lfm2_moe",
    "lfm2_vl_text",
    "lfm2_audio_text",
    "llama",
    "mistral",
    "mistral3_text",
    "nemotron",
    "olmo",
    "phi",
    "phimoe",
    "phi3",
    "phi3small",
    "qwen2",
    "qwen2_5_vl_text",
    "qwen3",
    "qwen3_vl_text",
    "qwen3_5_moe_text",
    "qwen3_5_text",
    "smollm3",
    // vision-language, multi-modal, speech, pipelines
    "fara",
    "gemma3",
    "mistral3",
    "phi3v",
    "qwen2_5_vl",
    "qwen3_vl",
    "qwen3_5",
    "qwen3_5_moe",
    "videochat_flash_qwen",
    "lfm2_vl",
    "lfm2_audio",
    "gemma4",
    "gemma4_unified",
    "phi4mm",
    "whisper",
    "nemotron_speech",
    "parakeet_tdt",
    "decoder-pipeline",
    "marian-ssru",
];

/// The `model.*` sections that name an ONNX file (`src/config.cpp`:
/// `Model_Element`, `Decoder_Element`, `Encoder_Element`, `Embedding_Element`,
/// `Vision_Element`, `Speech_Element`), each loaded by `OrtSession` at
/// `og.Model`.
const FILE_SECTIONS: &[&str] = &["decoder", "encoder", "embedding", "vision", "speech"];

/// Whether the folder is laid out for genai: its own config beside the model.
pub fn laid_out_for(view: &View<'_>) -> Option<String> {
    view.genai.as_ref().map(|_| "genai_config.json".into())
}

/// Every loading rule, on `view`.
pub fn check(view: &View<'_>) -> Vec<Finding> {
    let Some(g) = view.genai.as_ref() else { return Vec::new() };
    let mut out = Vec::new();
    out.extend(keys::check(g));
    out.extend(model_type(g));
    out.extend(files(view, g));
    let vocab = at(g, "model.vocab_size").and_then(Value::as_i64);
    out.extend(search(g, vocab));
    let decoder = at(g, "model.decoder.filename").and_then(Value::as_str).and_then(|f| view.model(f));
    if let Some(d) = decoder {
        out.extend(names(g, d.rel, d.sig));
        out.extend(sizes(g, d.rel, d.sig, vocab));
        out.extend(lengths(g, d.rel, d.sig));
        out.extend(shared_buffer(g, d.rel, d.sig));
    }
    out
}

/// `model.type` one genai builds (`src/models/model.cpp: CreateModel`).
fn model_type(g: &Value) -> Option<Finding> {
    let t = match at(g, "model.type") {
        Some(Value::String(t)) => t.as_str(),
        _ => "(none)",
    };
    (!KNOWN_TYPES.contains(&t)).then(|| {
        config_error("model.type", format!("model.type `{t}` is not a model type onnxruntime-genai builds: og.Model fails (\"Unsupported model_type in config.json: {t}\"); use the type its builder writes for the family (`llama`, `qwen2`, `gemma2`, …, or `decoder` for a generic one)"))
    })
}

/// Every file a section names is in the folder, relative and inside it
/// (`src/config.cpp: ValidateModelPaths`; `src/models/model.cpp:
/// Model::CreateSession` opens `config_path / filename`, and ONNX Runtime
/// fails at `og.Model` on a missing file).
fn files(view: &View<'_>, g: &Value) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut named: Vec<(String, String)> = FILE_SECTIONS
        .iter()
        .filter_map(|s| {
            let f = at(g, &format!("model.{s}.filename"))?.as_str()?;
            Some((format!("model.{s}.filename"), f.to_string()))
        })
        .collect();
    // A decoder pipeline names one file per stage.
    if let Some(stages) = at(g, "model.decoder.pipeline").and_then(Value::as_array) {
        for (i, stage) in stages.iter().enumerate() {
            for (name, body) in stage.as_object().into_iter().flatten() {
                if let Some(f) = body.get("filename").and_then(Value::as_str) {
                    named.push((format!("model.decoder.pipeline[{i}].{name}.filename"), f.to_string()));
                }
            }
        }
    }
    if at(g, "model.decoder").is_some() && !named.iter().any(|(k, _)| k == "model.decoder.filename") {
        named.push(("model.decoder.filename".into(), String::new()));
    }
    for (key, file) in named {
        let path = std::path::Path::new(&file);
        let why = if file.is_empty() {
            "is empty: og.Model opens the folder itself and fails (\"The model path is a directory\")".to_string()
        } else if path.is_absolute() {
            format!("is `{file}`: og.Model refuses it (\"{key}: Config path must be a relative path under the model directory\")")
        } else if path.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
            format!("is `{file}`: og.Model refuses it (\"{key}: Config path must not contain path traversal (..)\")")
        } else if !view.has(&file) {
            format!("names `{file}`, which is not in the folder: og.Model fails at load (\"Load model from …/{file} failed … File doesn't exist\")")
        } else {
            continue;
        };
        let onnx: Vec<&str> = view.models.iter().map(|m| m.rel).filter(|r| !r.contains('/')).collect();
        let fix = match onnx.as_slice() {
            [one] => format!("set it to `{one}`, the folder's ONNX file"),
            [] => "put the model beside genai_config.json".into(),
            many => {
                format!("set it to one of {}", many.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", "))
            }
        };
        out.push(Finding::error(Code::ConsumerFile, format!("genai_config.json: {key} {why}; {fix}")).tensor(key));
    }
    out
}

/// The lengths and ids `og.Generator` validates (`src/config.cpp:
/// Config::Config` — context_length required, max_length defaulting to it;
/// `src/generators.cpp: Generator::Generator` — "max_length (N) cannot be
/// greater than model context_length (M)", "vocab_size must be 1 or
/// greater", "eos_token_id (N) must be in range [0, V) (vocab_size)").
fn search(g: &Value, vocab: Option<i64>) -> Vec<Finding> {
    let mut out = Vec::new();
    let context = at(g, "model.context_length").and_then(Value::as_i64).unwrap_or(0);
    if context <= 0 && at(g, "model.type").and_then(Value::as_str) != Some("nemotron_speech") {
        out.push(config_error("model.context_length", "model.context_length is missing or not above 0: og.Model fails (\"model context_length is 0 or was not set. It must be greater than 0\"); set it to the longest sequence the model takes".into()));
    }
    let max = at(g, "search.max_length").and_then(Value::as_i64).unwrap_or(0);
    if context > 0 && max > context {
        out.push(
            Finding::error(Code::ConsumerLength, format!("genai_config.json: search.max_length = {max} is above model.context_length = {context}: og.Generator fails (\"max_length ({max}) cannot be greater than model context_length ({context})\"); lower it to {context}"))
                .tensor("search.max_length"),
        );
    }
    match vocab {
        Some(v) if v >= 1 => {
            for id in at(g, "model.eos_token_id").map(ids).unwrap_or_default().into_iter().filter(|id| !(0..v).contains(id)) {
                out.push(
                    Finding::error(Code::ConsumerToken, format!("genai_config.json: model.eos_token_id holds {id}, outside the vocabulary of {v}: og.Generator refuses it (\"eos_token_id ({id}) must be in range [0, {v}) (vocab_size)\"); keep only this model's end tokens (copied from another tokenizer?)"))
                        .tensor("model.eos_token_id"),
                );
            }
        }
        _ => out.push(config_error("model.vocab_size", "model.vocab_size is missing or below 1: og.Generator fails (\"vocab_size must be 1 or greater, is 0\"); set it to the logits' width".into())),
    }
    out
}

/// The indices `template` matches among `ports` (`past_key_values.%d.key`).
fn layers_matching<'p>(
    ports: &'p [crate::model::signature::Port],
    template: &'p str,
) -> impl Iterator<Item = &'p str> + 'p {
    let (head, tail) = template.split_once("%d").unwrap_or((template, ""));
    ports.iter().filter_map(move |p| {
        let n = p.name.strip_prefix(head)?.strip_suffix(tail)?;
        (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then_some(n)
    })
}

/// The names genai binds are the graph's (`src/models/model.cpp:
/// SessionInfo` — "Model input was not found", "Model output was not
/// found" for the required `input_ids` and `logits`; `kv_cache.cpp:
/// IsCacheNeeded` finds the pasts by the template, then composes the other
/// three per layer and binds them by name, "Invalid output name"), and every
/// graph input a kernel reads is one genai feeds (ONNX Runtime: "Missing
/// Input"). A named mask or positions the graph lacks is only not fed.
fn names(g: &Value, rel: &str, sig: &Signature) -> Vec<Finding> {
    let mut out = Vec::new();
    let name = |section: &str, key: &str, default: &'static str| {
        at(g, &format!("model.decoder.{section}.{key}")).and_then(Value::as_str).unwrap_or(default).to_string()
    };
    let missing = |key: &str, n: &str, what: &str, says: String| {
        Finding::error(
            Code::ConsumerName,
            format!(
                "genai_config.json: {key} is `{n}`, which names no {what} of {rel}: {says}; write the graph's own name"
            ),
        )
        .tensor(key)
    };
    let ids = name("inputs", "input_ids", "input_ids");
    if sig.input(&ids).is_none() && sig.input(&name("inputs", "inputs_embeds", "inputs_embeds")).is_none() {
        out.push(missing(
            "model.decoder.inputs.input_ids",
            &ids,
            "input",
            format!("og.Generator fails (\"Model input was not found: {ids}\")"),
        ));
    }
    let logits = name("outputs", "logits", "logits");
    if sig.output(&logits).is_none() {
        out.push(missing(
            "model.decoder.outputs.logits",
            &logits,
            "output",
            format!("og.Generator fails (\"Model output was not found: {logits}\")"),
        ));
    }
    let past_key = name("inputs", "past_key_names", "past_key_values.%d.key");
    let layers: Vec<&str> = layers_matching(&sig.inputs, &past_key).collect();
    let graph_has_past = sig.inputs.iter().any(|p| crate::model::names::is_past_name(&p.name));
    if layers.is_empty() && graph_has_past && at(g, "model.decoder.inputs.past_names").is_none() {
        out.push(missing(
            "model.decoder.inputs.past_key_names",
            &past_key,
            "input",
            "genai finds no cache by it, feeds no past, and the first step fails (\"Missing Input\")".into(),
        ));
    }
    for (section, key, default, output) in [
        ("inputs", "past_value_names", "past_key_values.%d.value", false),
        ("outputs", "present_key_names", "present.%d.key", true),
        ("outputs", "present_value_names", "present.%d.value", true),
    ] {
        let t = name(section, key, default);
        let ports = if output { &sig.outputs } else { &sig.inputs };
        if let Some(l) = layers.iter().find(|l| !ports.iter().any(|p| p.name == t.replace("%d", l))) {
            let n = t.replace("%d", l);
            let says = if output {
                format!("genai binds it for layer {l} and the first step fails (\"Invalid output name: {n}\")")
            } else {
                format!("genai feeds it for layer {l} and the first step fails (\"Invalid input name: {n}\")")
            };
            out.push(missing(
                &format!("model.decoder.{section}.{key}"),
                &t,
                if output { "output" } else { "input" },
                says,
            ));
        }
    }
    // What genai feeds a decoder: the named inputs, the default mask and
    // positions, the cache by template; the sequence lengths only in pairs.
    let named: Vec<String> = at(g, "model.decoder.inputs")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(k, _)| !NEVER_FED.contains(&k.as_str()))
        .filter_map(|(_, v)| v.as_str().map(str::to_string))
        .chain(["input_ids", "attention_mask", "position_ids"].map(String::from))
        .collect();
    // The sequence lengths are fed as a pair or not at all (`src/models/input_ids.cpp`).
    let pair = ["past_sequence_length", "current_sequence_length"].map(|k| {
        name("inputs", k, if k.starts_with("past") { "past_sequence_length" } else { "current_sequence_length" })
    });
    let pair_fed = pair.iter().all(|n| sig.input(n).is_some());
    let fed = |n: &str| {
        (pair_fed && pair.iter().any(|p| p == n))
            || named.iter().any(|t| match t.split_once("%d") {
                Some((h, tl)) => n
                    .strip_prefix(h)
                    .and_then(|r| r.strip_suffix(tl))
                    .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())),
                None => t == n,
            })
    };
    // A kernel must read it for ONNX Runtime to miss it.
    let read = |n: &str| sig.input_readers.get(n).is_none_or(|r| !r.is_empty());
    // Pasts the template missed are named once, above.
    let said = |n: &str| layers.is_empty() && crate::model::names::is_past_name(n);
    for p in sig.inputs.iter().filter(|p| !fed(&p.name) && read(&p.name) && !said(&p.name)) {
        out.push(
            Finding::error(Code::ConsumerName, format!("{rel} takes `{}`, which onnxruntime-genai never feeds a decoder (it is not a name genai_config.json gives, and the lengths and seqlens_k are computed in the graph by genai's builder): the first step fails (\"Missing Input: {}\"); compute it in the graph from attention_mask, or name it in model.decoder.inputs", p.name, p.name))
                .tensor(&p.name),
        );
    }
    out
}

/// Input keys genai never feeds to a decoder-only model
/// (`src/models/decoder_only.cpp`; used by Marian, Whisper and NPU builds only).
const NEVER_FED: &[&str] = &[
    "total_sequence_length",
    "past_key_values_length",
    "cache_indirection",
    "past_sequence_length",
    "current_sequence_length",
];

/// The vocabulary genai sizes its logits buffer with, against the graph
/// where it fixes it (`src/models/logits.cpp`: `[batch, tokens,
/// vocab_size]`; ONNX Runtime refuses another width at the first step).
/// Head sizes on a symbolic axis are the run's to settle: genai allocates
/// the cache with `head_size` and the run feeds the same.
fn sizes(g: &Value, rel: &str, sig: &Signature, vocab: Option<i64>) -> Option<Finding> {
    let logits_name = at(g, "model.decoder.outputs.logits").and_then(Value::as_str).unwrap_or("logits");
    let width = match sig.output(logits_name)?.ty.tensor_parts()?.1?.last()? {
        Dim::Fixed(v) => *v,
        _ => return None,
    };
    let v = vocab.filter(|v| *v >= 1)?;
    (v != width).then(|| {
        Finding::error(Code::ConsumerSize, format!("genai_config.json: model.vocab_size = {v}, but {rel}'s `{logits_name}` are {width} wide: genai sizes its logits buffer by vocab_size and the first step fails (\"Got invalid dimensions for output: {logits_name} … Got: {width} Expected: {v}\"); set it to {width}"))
            .tensor("model.vocab_size")
    })
}

/// `search.max_length` (defaulting to `context_length`) within the rotary
/// tables' rows: genai never compares them (`src/config.cpp`), and ONNX
/// Runtime's GroupQueryAttention refuses a longer sequence at the step that
/// reaches it ("cos_cache dimension 0 shall not be less than
/// total_sequence_length") — the first tokens generate fine.
fn lengths(g: &Value, rel: &str, sig: &Signature) -> Option<Finding> {
    let (table, rows) = sig.rotary_rows.as_ref()?;
    let (key, n) = match at(g, "search.max_length").and_then(Value::as_i64).filter(|&m| m > 0) {
        Some(m) => ("search.max_length", m),
        None => ("model.context_length", at(g, "model.context_length").and_then(Value::as_i64)?),
    };
    if n > *rows {
        return Some(Finding::error(Code::ConsumerLength, format!("genai_config.json: {key} = {n}, but {rel}'s rotary table `{table}` has {rows} rows: generation is right up to {rows} tokens and then fails in GroupQueryAttention (\"cos_cache dimension 0 shall not be less than total_sequence_length\"); set it to at most {rows}, or re-export with longer tables"))
            .tensor(key));
    }
    // The folder's own max_length fits, but genai accepts any caller's up to
    // context_length (`src/generators.cpp`: max_length > context_length is refused):
    // a caller raising it past the rows fails mid-generation instead of being refused.
    let context = at(g, "model.context_length").and_then(Value::as_i64).filter(|&c| c > *rows)?;
    Some(Finding::warning(Code::ConsumerLength, format!("genai_config.json: model.context_length = {context}, but {rel}'s rotary table `{table}` has {rows} rows: genai accepts any search.max_length up to {context}, and a caller setting one past {rows} gets {rows} right tokens and then a failure in GroupQueryAttention (\"cos_cache dimension 0 shall not be less than total_sequence_length\") instead of a refusal; set context_length to at most {rows}"))
        .tensor("model.context_length"))
}

/// `search.past_present_share_buffer` binds each past and its present to one
/// buffer of `max_length` (`src/models/kv_cache.cpp`): only an attention that
/// writes in place (GroupQueryAttention, PagedAttention) can fill it; a
/// present built by `Concat` fails at the first step.
fn shared_buffer(g: &Value, rel: &str, sig: &Signature) -> Option<Finding> {
    if at(g, "search.past_present_share_buffer").and_then(Value::as_bool) != Some(true) {
        return None;
    }
    let beams = at(g, "search.num_beams").and_then(Value::as_i64).unwrap_or(1);
    let in_place = sig.op_types.iter().any(|o| o == "GroupQueryAttention" || o == "PagedAttention");
    let has_cache = sig.inputs.iter().any(|p| crate::model::names::is_past_name(&p.name));
    (beams == 1 && has_cache && !in_place).then(|| {
        Finding::error(Code::ConsumerConfig, format!("genai_config.json: search.past_present_share_buffer is true, but {rel} has no attention that writes its cache in place (GroupQueryAttention): genai hands each present a buffer of max_length and the first step fails (\"The output OrtValue provided for output 'present.0.key' … has shape … but the computed output shape for this run is …\"); set it to false"))
            .tensor("search.past_present_share_buffer")
    })
}
