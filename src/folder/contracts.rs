//! Which contract each file of a folder is judged against: the family's
//! built-in contract (by config.json `model_type`, else by signature), sized
//! from the folder's sizes, and adapted to the file's role: a with-past
//! decoder has no branch flag, no encoder states and no cross presents; a
//! no-past decoder has no past; an encoder has its own small contract.

use super::config::Size;
use super::roles::Role;
use crate::contract::{builtin, parse, Contract, ContractError, DimRule};
use crate::model::signature::Signature;
use std::collections::BTreeMap;
use std::path::Path;

/// The built-in family contract for a folder: by `model_type` when we know
/// it, else the generic seq2seq or decoder-only one by the signature.
pub fn family(model_type: Option<&str>, seq2seq: bool) -> &'static str {
    model_type.and_then(builtin::for_model_type).unwrap_or(if seq2seq {
        builtin::GENERIC_SEQ2SEQ
    } else {
        builtin::GENERIC_DECODER_ONLY
    })
}

/// Built-in contract `name` with its params set from `sizes` (those it has).
pub fn sized(name: &str, sizes: &BTreeMap<String, Size>) -> Result<Contract, ContractError> {
    let (_, text) =
        builtin::text(name).unwrap_or_else(|| builtin::text(builtin::GENERIC_DECODER_ONLY).expect("built in"));
    let path = format!("builtin:{name}");
    let defaults = parse(Path::new(&path), text, &[])?;
    let overrides: Vec<(String, i64)> =
        defaults.params.iter().filter_map(|(k, _)| sizes.get(k.as_str()).map(|s| (k.clone(), s.value))).collect();
    parse(Path::new(&path), text, &overrides)
}

/// A text or audio encoder: ids (+ mask), features or raw samples (Moonshine's
/// `input_values`) in, `[batch, length, hidden]` out.
fn encoder_contract(family: &str, sizes: &BTreeMap<String, Size>) -> Result<Contract, ContractError> {
    let hidden = sizes.get("hidden").map(|s| s.value);
    let width = if hidden.is_some() { "$hidden" } else { "any" };
    let text = format!(
        "name: {family}-encoder\nparams:\n  hidden: {}\nextra_inputs: error\nextra_outputs: warn\ninputs:\n  \
         input_ids: {{dtype: int64|int32, shape: [batch, encoder_seq], optional: true}}\n  \
         attention_mask: {{dtype: int64|int32, shape: [batch, encoder_seq], optional: true}}\n  \
         token_type_ids: {{dtype: int64|int32, shape: [batch, encoder_seq], optional: true}}\n  \
         position_ids: {{dtype: int64|int32, shape: [batch, encoder_seq], optional: true}}\n  \
         input_features: {{dtype: float32|float16|bfloat16, shape: [batch, any, any], optional: true}}\n  \
         input_values: {{dtype: float32|float16|bfloat16, shape: [batch, any], optional: true}}\n  \
         audio_features: {{dtype: float32|float16|bfloat16, shape: [batch, any, any], optional: true}}\n\
         outputs:\n  last_hidden_state: {{dtype: float32|float16|bfloat16, shape: [batch, any, {width}]}}\n",
        hidden.unwrap_or(1)
    );
    parse(Path::new(&format!("builtin:{family}-encoder")), &text, &[])
}

/// The contract a file of `role` is judged against, from the family contract.
/// `None` for files of unknown role (reported, not judged).
pub fn for_role(role: Role, family: &str, sizes: &BTreeMap<String, Size>) -> Option<Result<Contract, ContractError>> {
    if role == Role::Encoder {
        return Some(encoder_contract(family.split('-').next().unwrap_or(family), sizes));
    }
    match role {
        Role::Unknown | Role::CodecDecoder | Role::DelayPattern => return None,
        Role::EmbedTokens => return Some(sized("embed-tokens", sizes)),
        Role::VisionEncoder => return Some(sized("vision-encoder", sizes)),
        _ => {}
    }
    Some(sized(family, sizes).map(|mut c| {
        adapt(&mut c, role);
        c
    }))
}

/// Adapts a merged (or decoder-only) contract to another form of the same decoder.
fn adapt(c: &mut Contract, role: Role) {
    let flag = c.cache.as_ref().and_then(|k| k.branch_flag.clone()).unwrap_or_else(|| "use_cache_branch".into());
    let is_past = |n: &str| n.starts_with("past_key_values") || n.starts_with("past");
    match role {
        Role::DecoderWithPast => {
            // optimum's with-past decoder: cross-attention from the past, so no
            // encoder states; only self-attention presents; logits `[batch, "1", vocab]`.
            c.inputs.retain(|r| r.name != flag && r.name != "encoder_hidden_states");
            c.outputs.retain(|r| !(r.name.starts_with("present") && r.name.contains(".encoder.")));
            relax_axis(c, "logits", 1);
            if let Some(k) = c.cache.as_mut() {
                k.branch_flag = None;
                k.step0_past_lengths = Some(vec![0]);
            }
            c.name = c.name.replace("-merged", "-with-past");
        }
        Role::Decoder => {
            c.inputs.retain(|r| r.name != flag && !is_past(&r.name));
            if let Some(k) = c.cache.as_mut() {
                k.branch_flag = None;
            }
            c.name = c.name.replace("-merged", "-no-past");
        }
        // A decoder-only export without a cache (optimum's `text-generation`):
        // no past in, no present out; every call re-feeds the prefix.
        Role::DecoderOnlyNoCache => {
            c.inputs.retain(|r| r.name != flag && !is_past(&r.name));
            // optimum's legacy prompt half returns presents; `text-generation` does not.
            for r in c.outputs.iter_mut().filter(|r| r.name.starts_with("present")) {
                r.optional = true;
            }
            relax_axis(c, "attention_mask", 1);
            c.cache = None;
            c.name = format!("{}-no-cache", c.name);
        }
        // A decoder-only family's merged file (optimum's `merge_decoders` of the
        // pair): the branch flag besides the pasts; the mask keeps the no-past
        // decoder's axis name (merge_decoders takes the first file's names).
        Role::MergedDecoder if c.cache.as_ref().is_some_and(|k| k.branch_flag.is_none()) => {
            let like = c.inputs.iter().find(|r| r.name == "input_ids").cloned();
            if let Some(mut rule) = like {
                rule.name = "use_cache_branch".into();
                rule.template = rule.name.clone();
                rule.dtypes = vec![crate::model::signature::ElemType::BOOL];
                rule.shape = Some(vec![DimRule::Any]);
                rule.optional = true;
                rule.order_key.0 += 1000;
                c.inputs.push(rule);
            }
            relax_axis(c, "attention_mask", 1);
            if let Some(k) = c.cache.as_mut() {
                k.branch_flag = Some("use_cache_branch".into());
            }
            c.name = format!("{}-merged", c.name);
        }
        _ => {}
    }
}

/// A decoder with multimodal rotary (Qwen2-VL's M-RoPE) takes its positions
/// as `[sections, batch, seq]`: the family's `[batch, seq]` rule gains the
/// sections axis in front.
pub fn fit_positions(c: &mut Contract, sig: &Signature) {
    let rank3 =
        sig.input("position_ids").and_then(|p| p.ty.tensor_parts()).and_then(|(_, d)| d).is_some_and(|d| d.len() == 3);
    if let Some(shape) = c.inputs.iter_mut().find(|r| r.name == "position_ids").and_then(|r| r.shape.as_mut()) {
        if rank3 && shape.len() == 2 {
            shape.insert(0, DimRule::Any);
        }
    }
}

/// A multi-codebook decoder (MusicGen): its token and logits rows are batch ×
/// codebooks where the encoder's are the batch (× 2 under guidance, the
/// `total` of its dim names), and it projects the text encoder's states to
/// its own width: those axes are the decoder's own, not the family's batch
/// and hidden.
pub fn fit_codebooks(c: &mut Contract, sig: &Signature) {
    let codebooks = sig
        .input("input_ids")
        .and_then(|p| p.ty.tensor_parts())
        .and_then(|(_, d)| d)
        .and_then(|d| d.first().cloned())
        .is_some_and(|d| matches!(d, crate::model::signature::Dim::Symbolic(s) if s.contains("codebooks")));
    if !codebooks {
        return;
    }
    let free = |rules: &mut Vec<crate::contract::TensorRule>, name: &str, axes: &[usize]| {
        if let Some(shape) = rules.iter_mut().find(|r| r.name == name).and_then(|r| r.shape.as_mut()) {
            for &a in axes {
                if let Some(d) = shape.get_mut(a) {
                    *d = DimRule::Any;
                }
            }
        }
    };
    free(&mut c.inputs, "input_ids", &[0]);
    free(&mut c.inputs, "encoder_hidden_states", &[0, 2]);
    free(&mut c.outputs, "logits", &[0]);
}

/// The family contract speaks optimum's cache names; a model that names its
/// cache otherwise (`past_key_0` / `present_key_0`, `past.0.key`, …) is
/// judged with the contract's cache rules renamed to its own names, slot by
/// slot (layer, key or value, self or cross).
pub fn rename_cache(c: &mut Contract, sig: &Signature) {
    let pasts: Vec<&str> =
        sig.inputs.iter().map(|p| p.name.as_str()).filter(|n| crate::model::names::is_past_name(n)).collect();
    if pasts.is_empty() || pasts.iter().any(|n| n.starts_with("past_key_values")) {
        return;
    }
    let presents: Vec<&str> = sig.outputs.iter().map(|p| p.name.as_str()).filter(|n| n.contains("present")).collect();
    let rename = |rules: &mut Vec<crate::contract::TensorRule>, prefix: &str, names: &[&str]| {
        for r in rules.iter_mut().filter(|r| r.name.starts_with(prefix)) {
            if let Some(slot) = crate::model::names::cache_slot(&r.name) {
                if let Some(n) = names.iter().find(|n| crate::model::names::cache_slot(n) == Some(slot)) {
                    r.name = n.to_string();
                }
            }
        }
    };
    rename(&mut c.inputs, "past_key_values", &pasts);
    rename(&mut c.outputs, "present", &presents);
}

/// A hybrid's contract: key/value caches only on the layers that have them
/// (config.json `layer_types`); the family's templates put one on every layer.
pub fn keep_layers(c: &mut Contract, layers: &[i64]) {
    use crate::model::names::{cache_slot, is_past_name};
    let cache = |name: &str| is_past_name(name) || name.starts_with("present");
    let keep = |name: &str| !cache(name) || cache_slot(name).is_none_or(|(l, ..)| layers.contains(&l));
    c.inputs.retain(|r| keep(&r.name));
    c.outputs.retain(|r| keep(&r.name));
}

/// A family contract fitted to the protocol the inference reads from the
/// graph where that protocol is another form of the same call: a decoder fed
/// embeddings (`inputs_embeds` where the family says `input_ids`, the ids
/// going through the folder's embedding model) and a scalar count of
/// trailing positions to keep logits for (then logits hold that many).
pub fn fit_protocol(c: &mut Contract, sig: &Signature) {
    use crate::model::signature::ElemType;
    use crate::plan::roles::InputRole;
    let inferred = crate::plan::infer::infer(sig, &crate::plan::infer::Hints::default());
    let embeds = inferred.input(InputRole::InputsEmbeds).filter(|_| sig.input("input_ids").is_none());
    if let (Some(e), Some(rule)) = (embeds, c.inputs.iter_mut().find(|r| r.name == "input_ids")) {
        rule.name = e.name.clone();
        rule.template = e.name.clone();
        rule.dtypes = vec![ElemType::F32, ElemType::F16, ElemType::BF16];
        if let Some(shape) = rule.shape.as_mut() {
            shape.push(DimRule::Any);
        }
    }
    if let Some(keep) = inferred.input(InputRole::LogitsToKeep) {
        if let Some(model) = c.inputs.first().cloned() {
            c.inputs.push(crate::contract::TensorRule {
                name: keep.name.clone(),
                template: keep.name.clone(),
                dtypes: vec![ElemType::I64, ElemType::I32],
                shape: Some(Vec::new()),
                optional: true,
                ..model
            });
        }
        if let Some(l) = inferred.logits.as_ref() {
            relax_axis(c, &l.0, 1);
        }
    }
}

/// Multi-head latent attention: the keys' last axis is `key_dim`, the
/// values' `value_dim`, where the family's contract says `$head_dim` for both.
pub fn split_head_dims(c: &mut Contract, key_dim: i64, value_dim: i64) {
    for r in c.inputs.iter_mut().chain(c.outputs.iter_mut()) {
        let cache = crate::model::names::is_past_name(&r.name) || r.name.starts_with("present");
        if !cache || r.name.ends_with("key_value") {
            continue;
        }
        let (v, p) = match crate::model::names::cache_slot(&r.name) {
            Some((_, "key", _)) => (key_dim, "key_dim"),
            Some((_, "value", _)) => (value_dim, "value_dim"),
            _ => continue,
        };
        if let Some(last) = r.shape.as_mut().and_then(|s| s.last_mut()) {
            if matches!(last, DimRule::Fixed(_, Some(p)) if p == "head_dim") {
                *last = DimRule::Fixed(v, Some(p.into()));
            }
        }
    }
}

/// Any size on `axis` of input or output `name` (exporters spell a new-token
/// count `"1"`; a merged file keeps its no-past half's mask axis name).
fn relax_axis(c: &mut Contract, name: &str, axis: usize) {
    let mut rules = c.inputs.iter_mut().chain(c.outputs.iter_mut());
    if let Some(rule) = rules.find(|r| r.name == name) {
        if let Some(slot) = rule.shape.as_mut().and_then(|s| s.get_mut(axis)) {
            *slot = DimRule::Any;
        }
    }
}

/// Whether a decoder signature is a seq2seq one (encoder states or cross pasts).
pub fn is_seq2seq(sig: &Signature) -> bool {
    sig.input("encoder_hidden_states").is_some() || sig.inputs.iter().any(|p| p.name.contains(".encoder."))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::folder::config::ModelConfig;
    use crate::folder::roles::role_of;
    use std::path::PathBuf;

    #[test]
    fn every_role_of_a_family_has_its_contract_and_good_files_pass_it() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models");
        for folder in ["marian-tiny", "bart-tiny", "t5-tiny", "whisper-tiny", "bart-tjs"] {
            let config = ModelConfig::read(&root.join(folder)).unwrap().unwrap();
            let fam = family(config.model_type.as_deref(), true);
            for f in crate::folder::discover(&root.join(folder)).unwrap() {
                let sig = crate::model::reader::read_signature(&f.path).unwrap();
                let role = role_of(&sig);
                let contract = for_role(role, fam, &config.sizes).unwrap().unwrap();
                let findings = crate::contract::check(&sig, &contract);
                let errors: Vec<_> =
                    findings.iter().filter(|f| f.severity == crate::finding::Severity::Error).collect();
                assert!(errors.is_empty(), "{folder}/{} as {role}: {errors:#?}", f.rel);
            }
        }
        // Incident 1's 15-input file, judged as what it is (a with-past decoder):
        // the 12 encoder pasts are missing, named and folded.
        let config = ModelConfig::read(&root.join("marian-15-inputs")).unwrap().unwrap();
        let sig =
            crate::model::reader::read_signature(&root.join("marian-15-inputs/decoder_model_merged.onnx")).unwrap();
        let c = for_role(role_of(&sig), "marian-decoder-merged", &config.sizes).unwrap().unwrap();
        let findings = crate::contract::check(&sig, &c);
        assert!(
            findings
                .iter()
                .any(|f| f.message == "missing input past_key_values.{0..5}.encoder.{key,value} (12 tensors)"),
            "{findings:#?}"
        );
    }
}
