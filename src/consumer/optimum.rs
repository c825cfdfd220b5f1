//! optimum's `ORTModelFor*.from_pretrained` loading rules: which files it
//! picks from a folder and what it requires of them — read from
//! optimum-onnx 0.1.0 (`optimum/onnxruntime/modeling_decoder.py`,
//! `modeling_seq2seq.py`, `base.py`; see each rule's comment) and checked by
//! running optimum 2.1.0 on the committed folders.

use super::view::{ModelFile, View};
use crate::finding::{Code, Finding};
use crate::folder::Role;

/// optimum's own file names (`optimum/onnxruntime/constants.py`).
const NAMES: &[&str] = &["model", "decoder_model", "decoder_with_past_model", "decoder_model_merged", "encoder_model"];

/// The inputs optimum feeds a decoder (`base.py: ORTSessionMixin._prepare_onnx_inputs`
/// raises "Input X is required by model but not provided." for any other);
/// a past is any name with `.key` or `.value`.
const DECODER_INPUTS: &[&str] = &["input_ids", "attention_mask", "position_ids", "use_cache_branch"];
/// What a seq2seq decoder takes besides (`modeling_seq2seq.py: ORTDecoderForSeq2Seq.forward`).
const SEQ2SEQ_INPUTS: &[&str] = &["encoder_hidden_states", "encoder_attention_mask", "cache_position"];

fn is_cache(name: &str) -> bool {
    name.contains(".key") || name.contains(".value")
}

/// Whether the folder is laid out for optimum: its file names at the top
/// level beside a config.json, no genai_config.json, and decoders that use
/// optimum's tensor names (a dynamo export's `k0` is not optimum's).
pub fn laid_out_for(view: &View<'_>) -> Option<String> {
    if view.genai.is_some() || view.config.is_none() {
        return None;
    }
    let ours: Vec<&ModelFile<'_>> =
        view.models.iter().filter(|m| !m.rel.contains('/') && NAMES.contains(&m.base)).collect();
    let named = ours.iter().filter(|m| m.role.is_decoder()).all(|m| unfed(m).is_empty());
    (!ours.is_empty() && named).then(|| "its file and tensor names beside config.json".into())
}

/// A decoder's inputs optimum does not feed.
fn unfed<'a>(m: &ModelFile<'a>) -> Vec<&'a str> {
    let seq2seq = crate::folder::contracts::is_seq2seq(m.sig);
    m.sig
        .inputs
        .iter()
        .map(|p| p.name.as_str())
        .filter(|n| !(is_cache(n) || DECODER_INPUTS.contains(n) || seq2seq && SEQ2SEQ_INPUTS.contains(n)))
        .collect()
}

/// Every loading rule, on `view`.
pub fn check(view: &View<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    out.extend(files(view));
    for m in view.models.iter().filter(|m| m.role.is_decoder()) {
        out.extend(names(m));
    }
    out.extend(first_past(view));
    out
}

/// The model types whose first past optimum sizes with `num_key_value_heads`
/// (`modeling_decoder.py: ORTModelForCausalLM.__init__`, optimum-onnx 0.1.0);
/// every other type not special-cased there gets `num_attention_heads`.
const KV_HEADS_TYPES: &[&str] = &[
    "arcee",
    "deepseek_v3",
    "cohere",
    "gemma",
    "gemma3_text",
    "glm",
    "granite",
    "gpt_oss",
    "helium",
    "mistral",
    "llama",
    "nemotron",
    "qwen2",
    "qwen3",
    "qwen3_moe",
    "smollm3",
    "stablelm",
];
/// The model types whose head size optimum reads from `head_dim` (same
/// function); every other takes `hidden_size / num_attention_heads`.
const HEAD_DIM_TYPES: &[&str] = &["gemma", "gemma3_text", "gpt_oss", "nemotron"];

/// The (heads, head size) of the empty past optimum feeds at the first step,
/// as `ORTModelForCausalLM.__init__` computes them from config.json; none
/// for the types it sizes some other way (gemma3's text_config, falcon,
/// gpt_bigcode, deepseek_v3, bloom's old squeezed form), not modelled here.
fn optimum_past(view: &View<'_>) -> Option<(i64, i64)> {
    let int = |k: &str| view.config_value(k).and_then(|v| v.as_i64());
    let ty = view.config_value("model_type")?.as_str()?;
    if ["gemma3", "falcon", "gpt_bigcode", "deepseek_v3", "bloom"].contains(&ty) {
        return None;
    }
    let heads = int("num_attention_heads")?;
    let kv = if KV_HEADS_TYPES.contains(&ty) { int("num_key_value_heads")? } else { heads };
    let size = if HEAD_DIM_TYPES.contains(&ty) { int("head_dim")? } else { int("hidden_size")? / heads.max(1) };
    Some((kv, size))
}

/// optimum's first past against the cache the graph keeps: at the first
/// step `ORTModelForCausalLM.forward` feeds zeros of shape
/// (batch, heads, 0, head size) from [`optimum_past`]. Where the graph's past
/// (its fixed axes, else config.json's `num_key_value_heads` / `head_dim`)
/// has another size, optimum's generate fails on a correct export — its
/// limitation, said as a warning the consumer's own run settles.
fn first_past(view: &View<'_>) -> Option<Finding> {
    use crate::model::signature::Dim;
    let opened = ["model", "decoder_model_merged", "decoder_with_past_model"].iter().find_map(|b| {
        view.models.iter().find(|m| m.base == *b && m.variant.is_none() && !m.rel.contains('/') && m.role.is_decoder())
    })?;
    if crate::folder::contracts::is_seq2seq(opened.sig) {
        return None;
    }
    let key = opened.sig.inputs.iter().find(|p| p.name.contains(".key"))?;
    let (_, dims) = key.ty.tensor_parts()?;
    let dims = dims?;
    if dims.len() != 4 {
        return None;
    }
    let (heads, size) = optimum_past(view)?;
    let int = |k: &str| view.config_value(k).and_then(|v| v.as_i64());
    let fixed = |d: &Dim| if let Dim::Fixed(v) = d { Some(*v) } else { None };
    // What config.json itself says of the cache; a claim only where it agrees
    // with the graph (a config that contradicts its graph is the export's
    // fault, named by the size checks, not optimum's).
    let kv = int("num_key_value_heads").or(int("num_attention_heads"));
    let hd = int("head_dim").or_else(|| Some(int("hidden_size")? / int("num_attention_heads")?.max(1)));
    let ty = view.config_value("model_type").and_then(|v| v.as_str()).unwrap_or("?");
    // Only an axis the graph fixes: ONNX Runtime rejects a feed there before
    // any node runs; on a symbolic axis what happens is the graph's to say.
    let mut wrong = Vec::new();
    if let Some(v) = kv.filter(|v| *v != heads && fixed(&dims[1]) == Some(*v)) {
        wrong.push(format!("{heads} heads where the graph and config.json's num_key_value_heads have {v} (it reads num_attention_heads for model_type {ty}, which it does not list among the types whose num_key_value_heads it reads)"));
    }
    if let Some(v) = hd.filter(|v| *v != size && fixed(&dims[3]) == Some(*v)) {
        wrong.push(format!("a head size of {size} where the graph and config.json have {v} (it takes hidden_size / num_attention_heads for model_type {ty}, which it does not list among the types whose head_dim it reads)"));
    }
    if wrong.is_empty() {
        return None;
    }
    Some(
        Finding::warning(Code::ConsumerSize, format!("{}: optimum-onnx 0.1.0's ORTModelForCausalLM feeds its first, empty past `{}` with {} (modeling_decoder.py: ORTModelForCausalLM.__init__), so its generate fails at the first step (\"Got invalid dimensions for input\" on a past) although the export is right; drive it with the protocol's loop or a consumer that reads the config's sizes (onnxruntime-genai, transformers.js)", opened.rel, key.name, wrong.join(" and ")))
            .tensor(&key.name),
    )
}

/// The files `from_pretrained` needs (`modeling_decoder.py:
/// ORTModelForCausalLM._from_pretrained` takes `model.onnx`, else the merged
/// decoder, else the with-past decoder; `modeling_seq2seq.py:
/// _ORTModelForSeq2SeqLM._from_pretrained` needs an encoder, and the merged
/// decoder or the split pair: "Could not find any ONNX model file in the list
/// of candidates …"). The config's `use_cache` is overwritten by the call's
/// argument (default true).
fn files(view: &View<'_>) -> Vec<Finding> {
    let has = |base: &str| view.models.iter().any(|m| m.base == base && m.variant.is_none());
    let decoders: Vec<&ModelFile<'_>> = view.models.iter().filter(|m| m.role.is_decoder()).collect();
    let seq2seq = decoders.iter().any(|m| crate::folder::contracts::is_seq2seq(m.sig));
    let mut out = Vec::new();
    if seq2seq {
        let encoder = view.models.iter().any(|m| m.role == Role::Encoder);
        if !encoder {
            out.push(Finding::error(Code::ConsumerLayout, "an encoder-decoder folder without an encoder file: ORTModelForSeq2SeqLM.from_pretrained fails (\"Could not find any ONNX model file in the list of candidates … matching the pattern …encoder…\"); add encoder_model.onnx"));
        }
        if !(has("decoder_model_merged") || has("decoder_model") && has("decoder_with_past_model")) {
            let (have, need) = if has("decoder_model") {
                (
                    "decoder_model.onnx",
                    "decoder_with_past_model.onnx (or the merged decoder), unless every caller passes use_cache=False",
                )
            } else {
                (
                    "no decoder_model.onnx",
                    "decoder_model_merged.onnx, or the split pair decoder_model.onnx + decoder_with_past_model.onnx",
                )
            };
            out.push(Finding::error(Code::ConsumerLayout, format!("the folder has {have}: ORTModelForSeq2SeqLM.from_pretrained with use_cache (its default) fails (\"Could not find any ONNX model file in the list of candidates\"); add {need}")));
        }
        return out;
    }
    // Decoder-only: the one file CausalLM opens, in its order of preference.
    let opened = ["model", "decoder_model_merged", "decoder_with_past_model", "decoder_model"]
        .iter()
        .find_map(|b| decoders.iter().find(|m| m.base == *b && m.variant.is_none() && !m.rel.contains("/")));
    if let Some(m) = opened {
        if m.role == Role::DecoderOnlyNoCache || m.role == Role::Decoder {
            out.push(Finding::warning(Code::ConsumerLayout, format!("{} takes no past, and ORTModelForCausalLM's generate asks for the cache by default: it fails (\"`use_cache=True` was passed to the model but the loaded model does not support pkv cache reuse\") unless every caller passes use_cache=False to from_pretrained", m.rel)));
        }
    }
    out
}

/// optimum feeds only the inputs it knows (`base.py`: "Input X is required
/// by model but not provided."), and hands each present back as the past in
/// the same position (`modeling_decoder.py: ORTModelForCausalLM.forward`
/// zips the outputs after `logits` with the past inputs): presents in
/// another order than their pasts feed layers each other's cache, silently.
fn names(m: &ModelFile<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    for n in unfed(m) {
        out.push(
            Finding::error(Code::ConsumerName, format!("{} takes `{n}`, which optimum never feeds: ORTModel's forward fails (\"Input {n} is required by model but not provided.\"); optimum feeds input_ids, attention_mask, position_ids, use_cache_branch and the pasts (names with .key / .value)", m.rel))
                .tensor(n),
        );
    }
    let pasts: Vec<&str> = m.sig.inputs.iter().map(|p| p.name.as_str()).filter(|n| is_cache(n)).collect();
    let presents: Vec<&str> = m.sig.outputs.iter().map(|p| p.name.as_str()).filter(|n| is_cache(n)).collect();
    if pasts.len() == presents.len() {
        let as_past = |p: &str| p.replacen("present", "past_key_values", 1);
        if let Some((i, (past, present))) = pasts
            .iter()
            .zip(&presents)
            .enumerate()
            .find(|(_, (a, b))| **a != as_past(b) && presents.iter().any(|p| as_past(p) == **a))
        {
            out.push(
                Finding::error(Code::ConsumerName, format!("{}: output {} among the presents is `{present}`, but the past in that place is `{past}`: optimum feeds each present back by position, so this layer gets another layer's cache and generation is silently wrong; order the presents as their pasts", m.rel, i))
                    .tensor(*present),
            );
        }
    }
    out
}
