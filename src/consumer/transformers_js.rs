//! transformers.js' loading rules: which files `from_pretrained` opens from
//! a local folder, under which names, and what it starts generation from —
//! read from its source (`src/models.js`, `src/utils/hub.js`,
//! `src/utils/dtypes.js`, `src/configs.js`; versions 2, 3 and 4, see each
//! rule's comment).

use super::view::{ModelFile, View};
use crate::finding::{Code, Finding};
use crate::folder::Role;
use serde_json::Value;
use std::collections::BTreeSet;

/// The file suffix of each dtype (`src/utils/dtypes.js`: `DEFAULT_DTYPE_SUFFIX_MAPPING`).
pub const SUFFIXES: &[(&str, &str)] = &[
    ("fp32", ""),
    ("fp16", "_fp16"),
    ("q8", "_quantized"),
    ("int8", "_int8"),
    ("uint8", "_uint8"),
    ("q4", "_q4"),
    ("q4f16", "_q4f16"),
    ("bnb4", "_bnb4"),
];

/// The dtype whose file carries `variant` (`model_quantized.onnx` → q8).
fn dtype_of(variant: Option<&str>) -> Option<&'static str> {
    let suffix = variant.map(|v| format!("_{v}")).unwrap_or_default();
    SUFFIXES.iter().find(|(_, s)| *s == suffix).map(|(d, _)| *d)
}

fn suffix_of(dtype: &str) -> Option<&'static str> {
    SUFFIXES.iter().find(|(d, _)| *d == dtype).map(|(_, s)| *s)
}

/// Whether the folder is laid out for transformers.js: ONNX files in `onnx/`
/// (where `from_pretrained` looks), or its own config block.
pub fn laid_out_for(view: &View<'_>) -> Option<String> {
    if view.models.iter().any(|m| m.rel.starts_with("onnx/")) {
        return Some("ONNX files in onnx/".into());
    }
    view.config_value("transformers.js_config").map(|_| "config.json: transformers.js_config".into())
}

/// `config.json`'s `transformers.js_config`, when it is an object.
fn tjs_config<'v>(view: &'v View<'_>) -> Option<&'v serde_json::Map<String, Value>> {
    view.config_value("transformers.js_config").and_then(Value::as_object)
}

/// The session files (stems in `onnx/`) the model class opens, and why; none
/// when the folder's form is not one whose files are fixed by the class
/// (multimodal and audio classes name their own).
fn sessions(view: &View<'_>, major: u32) -> Option<(Vec<&'static str>, String)> {
    // No readable model (each unreadable one is named as such): no form to tell.
    if view.models.is_empty() {
        return None;
    }
    let has = |r: Role| view.models.iter().any(|m| m.role == r);
    // A decoder fed embeddings belongs to a multimodal class, which names its own files.
    let embeds = view
        .models
        .iter()
        .any(|m| m.role.is_decoder() && m.sig.inputs.iter().any(|p| p.name.contains("inputs_embeds")));
    if embeds || has(Role::EmbedTokens) || has(Role::VisionEncoder) || has(Role::CodecDecoder) {
        return None;
    }
    let encoder_decoder = has(Role::Encoder) && view.models.iter().any(|m| m.role.is_decoder())
        || view.config_value("is_encoder_decoder").and_then(Value::as_bool) == Some(true);
    if encoder_decoder {
        // `src/models.js: constructSessions` for MODEL_TYPES.Seq2Seq /
        // Vision2Seq: `encoder_model` and `decoder_model_merged` (all versions).
        return Some((vec!["encoder_model", "decoder_model_merged"], "an encoder-decoder model".into()));
    }
    if !view.models.iter().any(|m| m.role.is_decoder()) {
        // An encoder alone (MODEL_TYPES.EncoderOnly): `model`.
        return Some((vec!["model"], "an encoder-only model".into()));
    }
    // MODEL_TYPES.DecoderOnly: v2 opened `decoder_model_merged`
    // (`@xenova/transformers` 2.17 `models.js: DecoderOnly`); v3 and v4 open `model`.
    Some(if major <= 2 {
        (vec!["decoder_model_merged"], "a decoder-only model in transformers.js 2".into())
    } else {
        (vec!["model"], "a decoder-only model in transformers.js 3+".into())
    })
}

/// The dtypes a load can ask for: the config's (global or per file), the
/// default on Node's CPU (fp32; the browser's q8 — and 2's `quantized:
/// true` — is a file the folder offers or not), and every dtype the folder
/// offers a file for.
fn dtypes(view: &View<'_>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut add = |d: &str, why: String| {
        if !out.iter().any(|(x, _)| x == d) {
            out.push((d.to_string(), why));
        }
    };
    match tjs_config(view).and_then(|c| c.get("dtype")) {
        Some(Value::String(d)) => add(d, "config.json's transformers.js_config.dtype".into()),
        Some(Value::Object(m)) => {
            for (file, d) in m {
                if let Some(d) = d.as_str() {
                    add(d, format!("config.json's transformers.js_config.dtype.{file}"));
                }
            }
        }
        _ => add("fp32", "the default dtype on Node's CPU".into()),
    }
    for m in view.models.iter().filter(|m| m.rel.starts_with("onnx/")) {
        if let Some(d) = dtype_of(m.variant) {
            add(d, format!("the folder offers {}", m.rel));
        }
    }
    out
}

/// The decoder file `from_pretrained` opens on Node's CPU at the dtype the
/// config selects (`src/utils/model_registry/get_model_files.js:
/// add_model_file`: the per-file dtype, else the global one, else fp32),
/// relative to the folder: the file its own generation runs.
pub fn loaded_decoder(view: &View<'_>, major: u32) -> Option<String> {
    loaded_files(view, major).into_iter().find(|f| f.contains("decoder") || f.starts_with("onnx/model"))
}

/// Every file `from_pretrained` opens (each session's stem at the dtype the
/// config selects for it), relative to the folder.
pub fn loaded_files(view: &View<'_>, major: u32) -> Vec<String> {
    let Some((stems, _)) = sessions(view, major) else { return Vec::new() };
    let config = tjs_config(view).and_then(|c| c.get("dtype"));
    stems
        .iter()
        .map(|stem| {
            let dtype = match config {
                Some(Value::String(d)) => d.clone(),
                Some(Value::Object(m)) => m.get(*stem).and_then(Value::as_str).unwrap_or("fp32").to_string(),
                _ => "fp32".into(),
            };
            format!("onnx/{stem}{}.onnx", suffix_of(&dtype).unwrap_or(""))
        })
        .collect()
}

/// Every loading rule, on `view`, as transformers.js `major` loads it.
pub fn check(view: &View<'_>, major: u32) -> Vec<Finding> {
    let mut out = Vec::new();
    if major <= 2 {
        // 2 reads no `transformers.js_config` (no dtype, no external-data
        // format): its own rules, run with @xenova/transformers 2.17.2
        // (models/TJS2-RUN-NOTES.md).
        out.extend(version_2(view));
    } else {
        out.extend(layout_and_dtypes(view, major));
        out.extend(external_data(view));
    }
    out.extend(decoder_start(view));
    out.extend(cache_sizes(view));
    out
}

/// The model types whose cache sizes transformers.js reads from a
/// sub-config (`src/configs.js: getNormalizedConfig`, 3.x and 4.3: the
/// "Sub-configs" cases, plus moondream1, musicgen, multi_modality and
/// vision-encoder-decoder); every other type is read at config.json's top level.
const SUB_CONFIG_TYPES: &[&str] = &[
    "llava",
    "paligemma",
    "gemma3",
    "florence2",
    "llava_onevision",
    "idefics3",
    "granite_speech",
    "ultravox",
    "voxtral",
    "voxtral_realtime",
    "smolvlm",
    "gemma3n",
    "gemma4",
    "lfm2_vl",
    "chatterbox",
    "lighton_ocr",
    "glm_ocr",
    "mistral3",
    "qwen2_5_vl",
    "qwen3_vl",
    "qwen3_vl_moe",
    "moondream1",
    "musicgen",
    "multi_modality",
    "vision-encoder-decoder",
];

/// transformers.js sizes the empty past of its first call from config.json
/// (`src/configs.js: getNormalizedConfig` maps `num_layers` to
/// `num_hidden_layers`, …, at the top level for every type it does not
/// read from a sub-config). A config that keeps them only under
/// `text_config` — as transformers' `save_pretrained` writes Qwen2-VL's —
/// gets no past: the decoder's first call fails ("Missing the following
/// inputs: past_key_values…").
fn cache_sizes(view: &View<'_>) -> Option<Finding> {
    let model_type = view.config_value("model_type")?.as_str()?;
    let takes_past = view
        .models
        .iter()
        .any(|m| m.role.is_decoder() && m.sig.inputs.iter().any(|i| i.name.starts_with("past_key_values")));
    let top =
        ["num_hidden_layers", "n_layer", "num_layers", "decoder_layers"].iter().any(|k| view.config_value(k).is_some());
    let nested = view.config_value("text_config").and_then(|t| t.get("num_hidden_layers")).is_some();
    if SUB_CONFIG_TYPES.contains(&model_type) || !takes_past || top || !nested {
        return None;
    }
    Some(Finding::error(
        Code::ConsumerSize,
        format!(
            "config.json keeps {model_type}'s layer and head counts only under text_config, and transformers.js reads them for this type at the top level (src/configs.js: getNormalizedConfig): it makes no past, so the decoder's first call fails (\"Missing the following inputs: past_key_values…\"); copy text_config's num_hidden_layers, num_attention_heads, num_key_value_heads, hidden_size (and head_dim) to the top level, as the Hub's {model_type} configs have them"
        ),
    ))
}

/// The highest ONNX IR version transformers.js 2's runtime reads:
/// `@xenova/transformers` 2.17 pins `onnxruntime-node` 1.14.0, which says
/// "Unsupported model IR version: 9, max supported IR version: 8".
const V2_MAX_IR: i64 = 8;

/// The ONNX files the folder has under `onnx/`, where transformers.js looks.
fn onnx_files<'v>(view: &'v View<'_>) -> Vec<&'v str> {
    view.models.iter().filter(|m| m.rel.starts_with("onnx/")).map(|m| m.rel).collect()
}

/// What a layout finding says the folder has instead.
fn listing(have: &[&str]) -> String {
    match have.is_empty() {
        true => "it has no ONNX file under onnx/".to_string(),
        false => format!("it has {}", have.join(", ")),
    }
}

/// transformers.js 2's loading, as `@xenova/transformers` 2.17.2 does it
/// (`src/models.js: constructSession`): `onnx/<stem>_quantized.onnx` by
/// default (`quantized = true`), `onnx/<stem>.onnx` with `quantized: false`;
/// the file's bytes handed to ONNX Runtime (`InferenceSession.create(buffer)`),
/// so external data is looked for beside the process, not the model.
fn version_2(view: &View<'_>) -> Vec<Finding> {
    let Some((stems, form)) = sessions(view, 2) else { return Vec::new() };
    let mut out = Vec::new();
    let onnx = |name: &str| view.models.iter().find(|m| m.rel == name);
    let plain: Vec<String> = stems.iter().map(|s| format!("onnx/{s}.onnx")).collect();
    let quantized: Vec<String> = stems.iter().map(|s| format!("onnx/{s}_quantized.onnx")).collect();
    let absent = |files: &[String]| files.iter().filter(|f| !view.has(f)).cloned().collect::<Vec<_>>();
    let (no_plain, no_quantized) = (absent(&plain), absent(&quantized));
    if !no_plain.is_empty() && !no_quantized.is_empty() {
        let have = onnx_files(view);
        let hint = if stems == ["decoder_model_merged"] && have.iter().any(|r| r.starts_with("onnx/model")) {
            "this is the layout of transformers.js 3 and later (onnx/model.onnx): load it with a current release"
                .to_string()
        } else {
            listing(&have)
        };
        out.push(Finding::error(
            Code::ConsumerLayout,
            format!(
                "transformers.js 2 opens {} ({} with `quantized: false`) for {form}, and the folder has neither: from_pretrained fails (\"file was not found locally at …/{}\"); {hint}",
                quantized.join(" and "),
                plain.join(" and "),
                no_quantized[0],
            ),
        ));
        return out;
    }
    if !no_quantized.is_empty() {
        out.push(Finding::error(
            Code::ConsumerFile,
            format!(
                "transformers.js 2 opens {} by default (`quantized: true`), which is not in the folder: from_pretrained(name) fails (\"file was not found locally at …/{}\"); only from_pretrained(name, {{quantized: false}}) loads it: add the quantized file, or say so wherever the model is published",
                no_quantized.join(" and "),
                no_quantized[0],
            ),
        ));
    }
    for rel in plain.iter().chain(&quantized).filter(|f| view.has(f)) {
        let Some(m) = onnx(rel) else { continue };
        if let Some(ir) = m.sig.ir_version.filter(|v| *v > V2_MAX_IR) {
            out.push(
                Finding::error(
                    Code::ConsumerConfig,
                    format!(
                        "{rel} is ONNX IR version {ir}; transformers.js 2 runs onnxruntime-node 1.14, which reads IR {V2_MAX_IR} at most: \"Can't create a session\" (\"Unsupported model IR version: {ir}, max supported IR version: {V2_MAX_IR}\"); export with IR {V2_MAX_IR} (onnx.helper's ir_version, or an older exporter) or load it with transformers.js 3 or later"
                    ),
                )
                .tensor(rel),
            );
        }
        if let Some(data) = m.sig.external_data.first() {
            out.push(
                Finding::error(
                    Code::ConsumerFile,
                    format!(
                        "{rel} keeps its weights in `{}`; transformers.js 2 hands ONNX Runtime the .onnx file's bytes, so the data is looked for relative to the process's working directory, not the model's folder: \"Can't create a session\" (\"GetFileLength for ./{} failed\") unless the process runs inside onnx/; save the weights inside the .onnx (under 2 GB) or load it with transformers.js 3 or later",
                        data.location, data.location
                    ),
                )
                .tensor(rel),
            );
        }
    }
    out
}

/// The files the class opens exist for every dtype asked or offered
/// (`src/utils/hub.js: getModelFile` → "Could not locate file" /
/// "file was not found locally at …").
fn layout_and_dtypes(view: &View<'_>, major: u32) -> Vec<Finding> {
    let Some((stems, form)) = sessions(view, major) else { return Vec::new() };
    let mut out = Vec::new();
    // The class's files at fp32 are absent altogether: the layout is another's.
    let base_missing: Vec<&str> = stems
        .iter()
        .copied()
        .filter(|s| !view.models.iter().any(|m| m.rel.starts_with("onnx/") && m.base == *s))
        .collect();
    if !base_missing.is_empty() {
        let have = onnx_files(view);
        let hint = if base_missing == ["model"] && have.iter().any(|r| r.contains("decoder_model_merged")) {
            "transformers.js 2 opened decoder_model_merged for a decoder-only model; 3 and later open onnx/model.onnx: rename it (or export again with a current converter)".to_string()
        } else if base_missing == ["decoder_model_merged"] && have.iter().any(|r| r.contains("decoder_with_past")) {
            "transformers.js opens the merged decoder, never the split pair: merge them (optimum's `merge_decoders`, or export with `--task …-with-past` and the merge step)".to_string()
        } else {
            listing(&have)
        };
        out.push(Finding::error(
            Code::ConsumerLayout,
            format!(
                "transformers.js opens {} for {form}, and the folder has no {}: from_pretrained fails (\"Could not locate file\"); {hint}",
                stems.iter().map(|s| format!("onnx/{s}.onnx")).collect::<Vec<_>>().join(" and "),
                base_missing.iter().map(|s| format!("onnx/{s}*.onnx")).collect::<Vec<_>>().join(" or "),
            ),
        ));
        return out;
    }
    for (dtype, why) in dtypes(view) {
        let Some(suffix) = suffix_of(&dtype) else {
            // `src/utils/dtypes.js`: 3 throws "Invalid dtype"; 4 falls back to the device's default.
            let known = SUFFIXES.iter().map(|(d, _)| *d).collect::<Vec<_>>().join(", ");
            out.push(if major == 3 {
                Finding::error(Code::ConsumerConfig, format!("{why} is `{dtype}`, not a dtype transformers.js knows ({known}): from_pretrained fails (\"Invalid dtype: {dtype}\")"))
            } else {
                Finding::warning(Code::ConsumerConfig, format!("{why} is `{dtype}`, not a dtype transformers.js knows ({known}): transformers.js {major} silently loads the device's default instead"))
            });
            continue;
        };
        let missing: Vec<String> =
            stems.iter().map(|s| format!("onnx/{s}{suffix}.onnx")).filter(|f| !view.has(f)).collect();
        if missing.is_empty() {
            continue;
        }
        out.push(Finding::error(
            Code::ConsumerFile,
            format!(
                "dtype {dtype} ({why}): transformers.js opens {}, which is not in the folder: from_pretrained(…, {{dtype: '{dtype}'}}) fails (\"file was not found locally at …/{}\"); add the file, or drop the dtype from the config",
                missing.join(" and "),
                missing[0],
            ),
        ));
    }
    out
}

/// How many external-data files transformers.js fetches for `file`
/// (`src/models.js: getSession` reads `use_external_data_format`: `true` is
/// one, a number that many chunks, an object per file; `src/utils/hub.js`
/// names them `<file>.onnx_data`, `<file>.onnx_data_1`, …).
fn chunks(view: &View<'_>, m: &ModelFile<'_>) -> usize {
    let v = tjs_config(view).and_then(|c| c.get("use_external_data_format"));
    let n = |v: &Value| match v {
        Value::Bool(b) => usize::from(*b),
        Value::Number(n) => n.as_u64().unwrap_or(0).min(100) as usize,
        _ => 0,
    };
    // `src/utils/model-loader.js: resolveExternalDataFormat(config, fullName,
    // fileName)`: the file's full name (`model_fp16.onnx`), else the session's (`model`).
    let full = m.rel.trim_start_matches("onnx/");
    match v {
        Some(Value::Object(map)) => map.get(full).or_else(|| map.get(m.base)).map_or(0, n),
        Some(v) => n(v),
        None => 0,
    }
}

/// The external data each `.onnx` references is where transformers.js
/// fetches it from, under the names it derives.
fn external_data(view: &View<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    for m in view.models.iter().filter(|m| m.rel.starts_with("onnx/")) {
        let file = m.rel.trim_start_matches("onnx/");
        let count = chunks(view, m);
        let derived: Vec<String> =
            (0..count).map(|i| if i == 0 { format!("{file}_data") } else { format!("{file}_data_{i}") }).collect();
        let referenced: BTreeSet<&str> = m.sig.external_data.iter().map(|r| r.location.as_str()).collect();
        // Declared chunks are fetched before the session is made: a missing one
        // rejects inside a promise nobody awaits (Node exits; `model-loader.js`).
        let absent: Vec<String> = derived.iter().map(|d| format!("onnx/{d}")).filter(|d| !view.has(d)).collect();
        if !absent.is_empty() {
            out.push(
                Finding::error(Code::ConsumerFile, format!("config.json's transformers.js_config.use_external_data_format makes transformers.js fetch {} for {}, which is not in the folder: loading fails (\"file was not found locally at …\", an unhandled rejection that ends a Node process); name the data files so, or correct the count", absent.join(", "), m.rel))
                    .tensor(m.rel),
            );
            continue;
        }
        if referenced.is_empty() {
            continue;
        }
        let stray: Vec<&str> = referenced.iter().copied().filter(|r| !derived.iter().any(|d| d == r)).collect();
        if stray.is_empty() {
            continue;
        }
        // In Node, ONNX Runtime opens the .onnx by path and reads what it names;
        // in a browser transformers.js hands over only the data it fetched, under its own names.
        let said = if count == 0 {
            "config.json does not set transformers.js_config.use_external_data_format for it, so transformers.js fetches no external data: Node may still load it from disk, a browser cannot".to_string()
        } else {
            format!(
                "transformers.js fetches {} (use_external_data_format) and a browser hands ONNX Runtime only those",
                derived.join(", ")
            )
        };
        // Node's transformers.js loads it (measured: ONNX Runtime reads what the file names): a warning.
        out.push(
            Finding::warning(
                Code::ConsumerFile,
                format!(
                    "{} keeps its weights in {}; {said}: in a browser loading fails (ModelFileNotFoundError / ONNX Runtime cannot find the data); save the external data as {file}_data and set use_external_data_format",
                    m.rel,
                    stray.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", "),
                ),
            )
            .tensor(m.rel),
        );
    }
    out
}

/// An encoder-decoder starts generation from `decoder_start_token_id`
/// (`src/generation/configuration_utils.js`; `src/models.js:
/// _prepare_decoder_input_ids_for_generation`): without it, from bos (often
/// the end token), so every translation starts wrong.
fn decoder_start(view: &View<'_>) -> Option<Finding> {
    let encoder_decoder = view.models.iter().any(|m| m.role == Role::Encoder)
        && view.models.iter().any(|m| m.role.is_decoder() && crate::folder::contracts::is_seq2seq(m.sig));
    if !encoder_decoder || view.generation_value("decoder_start_token_id").is_some() {
        return None;
    }
    let bos = view.generation_value("bos_token_id").map(|(_, v)| v.to_string());
    Some(Finding::error(
        Code::ConsumerToken,
        format!(
            "an encoder-decoder folder with no decoder_start_token_id (config.json, generation_config.json): transformers.js starts every generation from {}; state the token the model was trained to start from",
            bos.map_or("nothing it can use".into(), |b| format!("bos_token_id {b}")),
        ),
    ))
}
