//! A file's role, read from its signature (file names are only a hint):
//! what a caller must feed it and when.

use crate::model::signature::{ElemType, Signature};
use serde::{Deserialize, Serialize};

/// What a file is in an export.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Role {
    /// A text or audio encoder: no logits, a `[batch, length, hidden]` float output.
    Encoder,
    /// A seq2seq decoder without past inputs (step 0 of the split pair).
    Decoder,
    /// A seq2seq decoder with past inputs and no branch flag (steps ≥ 1 of the pair).
    DecoderWithPast,
    /// A seq2seq or decoder-only model with a `use_cache_branch` flag and both branches.
    MergedDecoder,
    /// A decoder-only model with past inputs.
    DecoderOnly,
    /// A decoder-only model without any cache (every step re-feeds the prefix).
    DecoderOnlyNoCache,
    /// The embedding model of an embeddings-split export: token ids in,
    /// the decoder's `inputs_embeds` out, run before every decoder call.
    EmbedTokens,
    /// An image encoder: pixels in, image features out (merged into the
    /// embeddings by the application).
    VisionEncoder,
    /// An audio codec's decoder (MusicGen's `encodec_decode`): codes in,
    /// audio out, run once on the generated codes.
    CodecDecoder,
    /// A helper graph computing a decoding pattern (MusicGen's
    /// `build_delay_pattern_mask`): int ids in, int ids out.
    DelayPattern,
    /// None of the above.
    Unknown,
}

impl Role {
    /// A decoder of any form.
    pub fn is_decoder(self) -> bool {
        matches!(
            self,
            Role::Decoder | Role::DecoderWithPast | Role::MergedDecoder | Role::DecoderOnly | Role::DecoderOnlyNoCache
        )
    }

    /// `merged-decoder`, …
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Encoder => "encoder",
            Role::Decoder => "decoder",
            Role::DecoderWithPast => "decoder-with-past",
            Role::MergedDecoder => "merged-decoder",
            Role::DecoderOnly => "decoder-only",
            Role::DecoderOnlyNoCache => "decoder-only-no-cache",
            Role::EmbedTokens => "embed-tokens",
            Role::VisionEncoder => "vision-encoder",
            Role::CodecDecoder => "codec-decoder",
            Role::DelayPattern => "delay-pattern",
            Role::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

use crate::model::names::{is_cross_name, is_past_name};
use crate::plan::infer::{infer, Hints};
use crate::plan::roles::InputRole;

/// The role of a model with this signature. Pasts and logits are what the
/// protocol inference finds (a dynamo export's `k0` refreshed from `cat_7`,
/// its logits `linear_14`), besides the names every convention uses.
pub fn role_of(sig: &Signature) -> Role {
    let inferred = infer(sig, &Hints::default());
    let mut past: Vec<&str> = sig.inputs.iter().map(|p| p.name.as_str()).filter(|n| is_past_name(n)).collect();
    for p in inferred.inputs.iter().filter(|p| matches!(p.role, InputRole::Past | InputRole::CrossPast)) {
        if !past.contains(&p.name.as_str()) {
            past.push(p.name.as_str());
        }
    }
    let flag = sig.inputs.iter().any(|p| {
        matches!(p.ty.tensor_parts(), Some((e, Some(d))) if e == ElemType::BOOL && d.len() <= 1)
            && (p.name.contains("cache") || p.name.contains("branch"))
    });
    let logits = sig.outputs.iter().any(|p| p.name.contains("logits")) || inferred.logits.is_some();
    let encoder_side = sig.input("encoder_hidden_states").is_some() || past.iter().any(|n| is_cross_name(n));
    let hidden_out =
        sig.outputs.iter().any(|p| matches!(p.ty.tensor_parts(), Some((e, Some(d))) if e.is_float() && d.len() == 3));
    // Companions of an embeddings-split decoder, by what goes in and comes out.
    let one_float_out = sig.outputs.len() == 1 && hidden_out;
    let pixels = inferred.inputs.iter().any(|p| p.role == InputRole::PixelValues);
    // Image features of any rank (Qwen2-VL's `[image tokens, hidden]` from flattened patches).
    let features_out = hidden_out
        || sig
            .outputs
            .iter()
            .any(|p| p.name.contains("image_features") && p.ty.tensor_parts().is_some_and(|(e, _)| e.is_float()));
    if !logits && past.is_empty() && pixels && features_out {
        return Role::VisionEncoder;
    }
    // Multi-codebook audio helpers, by what they take and give.
    let int_in = |p: &crate::model::signature::Port| {
        p.ty.tensor_parts().is_some_and(|(e, _)| matches!(e, ElemType::I64 | ElemType::I32))
    };
    if !logits
        && past.is_empty()
        && sig.inputs.iter().any(|p| int_in(p) && p.name.contains("codes"))
        && sig.outputs.iter().any(|p| p.name.contains("audio"))
    {
        return Role::CodecDecoder;
    }
    if !logits && past.is_empty() && sig.outputs.iter().any(|p| p.name.contains("delay_pattern")) {
        return Role::DelayPattern;
    }
    let ids_only = sig.inputs.len() == 1
        && matches!(sig.inputs[0].ty.tensor_parts(), Some((e, Some(d))) if matches!(e, ElemType::I64 | ElemType::I32) && d.len() == 2);
    // An embedding lookup: its output is named so, or it is a Gather on a table and little else.
    let lookup = sig.outputs.iter().any(|p| p.name.contains("embeds"))
        || (sig.op_types.contains("Gather")
            && sig
                .op_types
                .iter()
                .all(|op| ["Gather", "Mul", "Cast", "Constant", "Identity", "Sqrt"].contains(&op.as_str())));
    if !logits && past.is_empty() && ids_only && one_float_out && lookup {
        return Role::EmbedTokens;
    }
    match (logits, past.is_empty(), flag, encoder_side) {
        (true, false, true, _) => Role::MergedDecoder,
        (true, false, false, true) => Role::DecoderWithPast,
        (true, false, false, false) => Role::DecoderOnly,
        (true, true, _, true) => Role::Decoder,
        (true, true, _, false) => Role::DecoderOnlyNoCache,
        (false, true, _, _) if hidden_out && !sig.inputs.is_empty() => Role::Encoder,
        _ => Role::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn role(rel: &str) -> Role {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models").join(rel);
        role_of(&crate::model::reader::read_signature(&path).unwrap())
    }

    #[test]
    fn every_fixture_file_gets_its_role_from_its_signature() {
        for family in ["marian-tiny", "bart-tiny", "t5-tiny", "whisper-tiny", "bart-tjs/onnx"] {
            assert_eq!(role(&format!("{family}/encoder_model.onnx")), Role::Encoder, "{family}");
            assert_eq!(role(&format!("{family}/decoder_model.onnx")), Role::Decoder, "{family}");
            assert_eq!(role(&format!("{family}/decoder_with_past_model.onnx")), Role::DecoderWithPast, "{family}");
            assert_eq!(role(&format!("{family}/decoder_model_merged.onnx")), Role::MergedDecoder, "{family}");
        }
        for m in ["gpt2-tiny", "llama-tiny", "qwen2-tiny", "mistral-tiny", "gemma-tiny", "gpt2-position-bug"] {
            assert_eq!(role(&format!("{m}/model.onnx")), Role::DecoderOnly, "{m}");
        }
        // Incident 1's 15-input export has no flag and no encoder past, but its
        // encoder_hidden_states input makes it a seq2seq decoder with past.
        assert_eq!(role("marian-15-inputs/decoder_model_merged.onnx"), Role::DecoderWithPast);
        assert_eq!(role("marian-pair-baked-past/decoder_with_past_model.onnx"), Role::DecoderWithPast);
        assert_eq!(role("tjs-vlm/onnx/embed_tokens.onnx"), Role::EmbedTokens);
        assert_eq!(role("tjs-vlm/onnx/vision_encoder.onnx"), Role::VisionEncoder);
        assert_eq!(role("musicgen-tiny/encodec_decode.onnx"), Role::CodecDecoder);
        assert_eq!(role("musicgen-tiny/build_delay_pattern_mask.onnx"), Role::DelayPattern);
        assert_eq!(role("qwen2vl-tiny/onnx/vision_encoder.onnx"), Role::VisionEncoder);
        assert_eq!(role("qwen2vl-tiny/onnx/decoder_model_merged.onnx"), Role::DecoderOnly);
        assert_eq!(role("gpt2-merged-decoders/decoder_model_merged.onnx"), Role::MergedDecoder);
        assert_eq!(role("llama-no-cache/model.onnx"), Role::DecoderOnlyNoCache);
        assert_eq!(role("gpt2-legacy-pair/decoder_model.onnx"), Role::DecoderOnlyNoCache);
        assert_eq!(role("gpt2-legacy-pair/decoder_with_past_model.onnx"), Role::DecoderOnly);
        assert_eq!(role("tjs-vlm/onnx/decoder_model_merged.onnx"), Role::DecoderOnly);
        let toy = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/odd_types.onnx");
        assert_eq!(role_of(&crate::model::reader::read_signature(&toy).unwrap()), Role::Unknown);
    }
}
