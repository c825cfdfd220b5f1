//! Complete, minimal decoding programs for a protocol: Python (onnxruntime +
//! numpy), Rust (ort 2 + ndarray) and JavaScript (onnxruntime-node), each a
//! rendering of the same recipe (`spec`) read off the plan the runtime check
//! drives the model with. Interface of every program: `--model-dir DIR`,
//! `--ids 5,17,42` (the prompt of a decoder-only model, the source ids of a
//! text seq2seq model), `--features file.npy` (an audio encoder's input,
//! float32), `--max-new-tokens N`, `--num-beams N` (default: the folder's
//! generation_config.json `num_beams`, else 1: greedy), `--ignore-eos`;
//! prints one JSON object: `{"ids": [new ids], "score": their summed
//! log-probability, "top5": [[[id, logit], …] per new token]}` (`top5` of
//! the greedy run only).

use super::spec::Spec;
use super::table::Protocol;
use crate::plan::Family;

pub use super::spec::Lang;

/// The program for the protocol's first decoder form (a merged decoder when
/// the folder has one, else the pair, else the decoder-only model).
pub fn program(p: &Protocol, lang: Lang) -> Result<String, String> {
    let l = p
        .loops
        .iter()
        .min_by_key(|l| match l.form.as_str() {
            "merged-decoder" | "decoder-only" | "no-cache" | "encoder-alone" => 0,
            "split-pair" | "cross-from-encoder" => 1,
            _ => 2,
        })
        .ok_or("no decoder (and no encoder alone) to write a program for")?;
    if l.form == "with-past-alone" {
        return Err(
            "a with-past decoder alone cannot start a generation: it needs the no-past decoder or the merged one"
                .into(),
        );
    }
    let plan = l.plan.as_ref().ok_or("no plan")?;
    if l.form == "encoder-alone" {
        return Ok(super::emit_encoder::encoder(l, plan, lang));
    }
    for c in plan.self_past.iter().chain(&plan.cross_past) {
        if !matches!(c.dtype.to_string().as_str(), "float32" | "float16") {
            return Err(format!("`{}` is {}: the emitted programs feed float32 or float16", c.past, c.dtype));
        }
    }
    if let Some(x) = plan.unknown_inputs.first() {
        return Err(format!("`{x}` is an input the plan cannot fill: no program is written around a guess"));
    }
    if plan.inputs_embeds.is_some() && l.embed.is_none() {
        return Err(format!(
            "the decoder takes `{}` and the folder has no embedding model to make them",
            plan.inputs_embeds.as_deref().unwrap_or_default()
        ));
    }
    let spec = Spec {
        l,
        plan,
        seq2seq: plan.family == Family::Seq2Seq,
        pair: l.form == "split-pair",
        encoder_inputs: &l.encoder_inputs,
        step0_inputs: &l.step0_inputs,
        beams: super::spec::default_beams(l),
    };
    Ok(match lang {
        Lang::Python => super::emit_python::python(&spec),
        Lang::Rust => super::emit_rust::rust(&spec),
        Lang::Js => super::emit_js::js(&spec),
    })
}
