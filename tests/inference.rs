//! Protocol inference on real exports: every input's role, the pairing of
//! pasts with presents, the cache form and the mask span, read from the
//! graph alone (and the genai hint), with the evidence that says why.

mod common;
use common::*;
use onnx_contract::model::reader::read_signature;
use onnx_contract::plan::infer::{infer, Hints};
use onnx_contract::plan::roles::{CacheForm, Inferred, InputRole, MaskSpan};

fn inferred(rel: &str, hints: Hints) -> Inferred {
    let sig = read_signature(&root().join("models").join(rel)).unwrap();
    infer(&sig, &hints)
}

fn role(i: &Inferred, name: &str) -> InputRole {
    i.inputs.iter().find(|p| p.name == name).unwrap_or_else(|| panic!("no input {name}")).role.clone()
}

#[test]
fn optimum_decoder_only_is_a_growing_cache_with_a_past_and_new_mask() {
    let i = inferred("gpt2-tiny/model.onnx", Hints::default());
    assert_eq!(role(&i, "input_ids"), InputRole::TokenIds);
    assert_eq!(role(&i, "attention_mask"), InputRole::AttentionMask);
    assert_eq!(role(&i, "position_ids"), InputRole::PositionIds);
    assert_eq!(role(&i, "past_key_values.0.key"), InputRole::Past);
    assert_eq!(i.cache_form, CacheForm::Growing, "{}", i.cache_form_evidence);
    assert_eq!(i.mask_span, Some(MaskSpan::PastAndNew));
    assert_eq!(i.logits.as_ref().map(|l| l.0.as_str()), Some("logits"));
    let p = i.pair_of("past_key_values.1.value").unwrap();
    assert_eq!(p.present, "present.1.value");
    assert_eq!(p.grows_on, Some(2), "{}", p.evidence);
    assert!(i.inputs.iter().all(|p| p.role != InputRole::Unplaced), "{:?}", i.inputs);
}

#[test]
fn the_merged_seq2seq_decoder_has_a_branch_flag_and_cross_pasts() {
    let i = inferred("marian-tiny/decoder_model_merged.onnx", Hints::default());
    assert_eq!(role(&i, "use_cache_branch"), InputRole::BranchFlag);
    assert_eq!(role(&i, "encoder_hidden_states"), InputRole::EncoderStates);
    assert_eq!(role(&i, "encoder_attention_mask"), InputRole::EncoderMask);
    assert_eq!(role(&i, "past_key_values.0.decoder.key"), InputRole::Past);
    assert_eq!(role(&i, "past_key_values.0.encoder.value"), InputRole::CrossPast);
    assert_eq!(i.cache_form, CacheForm::Growing);
    assert!(i.inputs.iter().all(|p| p.role != InputRole::Unplaced), "{:?}", i.inputs);
}

#[test]
fn a_with_past_decoder_takes_its_cross_pasts_from_step_0() {
    let i = inferred("marian-tiny/decoder_with_past_model.onnx", Hints::default());
    let cross = i.inputs.iter().find(|p| p.name == "past_key_values.0.encoder.key").unwrap();
    assert_eq!(cross.role, InputRole::CrossPast);
    assert!(cross.evidence.contains("step 0"), "{}", cross.evidence);
}

#[test]
fn other_cache_names_pair_by_convention_and_the_genai_hint_sets_the_shared_buffer() {
    let i = inferred("gpt2-past-key-names/model.onnx", Hints::default());
    let p = i.pair_of("past_key_0").unwrap();
    assert_eq!(p.present, "present_key_0", "{}", p.evidence);
    let genai = inferred("llama-genai/model.onnx", Hints { share_buffer: Some(true), ..Hints::default() });
    assert_eq!(genai.cache_form, CacheForm::SharedBuffer, "{}", genai.cache_form_evidence);
    assert_eq!(role(&genai, "past_key_values.0.key"), InputRole::Past);
    let grown = inferred("llama-genai/model.onnx", Hints::default());
    assert_eq!(grown.cache_form, CacheForm::Growing, "{}", grown.cache_form_evidence);
}

#[test]
fn every_bundled_decoder_has_its_inputs_placed() {
    // Every decoder fixture the check drives today: no input left unplaced.
    for rel in [
        "bart-tiny/decoder_model_merged.onnx",
        "t5-tiny/decoder_model_merged.onnx",
        "whisper-tiny/decoder_model_merged.onnx",
        "llama-tiny/model.onnx",
        "qwen2-tiny/model.onnx",
        "gemma-tiny/model.onnx",
        "mistral-genai/model.onnx",
    ] {
        let i = inferred(rel, Hints::default());
        let unplaced: Vec<_> = i.inputs.iter().filter(|p| p.role == InputRole::Unplaced).collect();
        assert!(unplaced.is_empty(), "{rel}: {unplaced:?}");
        assert!(!i.pairs.is_empty(), "{rel}: no pasts paired");
        assert!(i.logits.is_some(), "{rel}: no logits");
    }
}

#[test]
fn a_dynamo_export_pairs_by_shape_and_binds_its_fresh_mask_symbol() {
    // torch.onnx.export(dynamo=True): `k0`/`v0` in, FX names out, `s70 + s88` dims.
    let i = inferred("dynamo-llama/model.onnx", Hints::default());
    for (past, present) in [("k0", "cat_7"), ("v0", "cat_8"), ("k1", "cat_11"), ("v1", "cat_12")] {
        assert_eq!(role(&i, past), InputRole::Past);
        let p = i.pair_of(past).unwrap();
        assert_eq!(p.present, present, "{}", p.evidence);
        assert_eq!(p.grows_on, Some(2), "{}", p.evidence);
    }
    let (logits, why) = i.logits.clone().unwrap();
    assert_eq!(logits, "linear_14", "{why}");
    assert_eq!(i.cache_form, CacheForm::Growing);
    assert_eq!(i.mask_span, Some(MaskSpan::PastAndNew));
    assert_eq!(i.bindings.len(), 1, "{:?}", i.bindings);
    assert_eq!(i.bindings[0].0, "s53");
}

#[test]
fn a_mask_named_total_seq_spans_past_and_new() {
    let i = inferred("custom-total-seq/model.onnx", Hints::default());
    assert_eq!(i.mask_span, Some(MaskSpan::PastAndNew));
    assert_eq!(i.cache_form, CacheForm::Growing);
}

#[test]
fn static_caches_are_fixed_buffers_written_at_cache_position() {
    let i = inferred("static-cache-llama/model.onnx", Hints::default());
    assert_eq!(role(&i, "cache_position"), InputRole::CachePosition);
    assert_eq!(i.cache_form, CacheForm::StaticBuffer, "{}", i.cache_form_evidence);
    assert!(i.pairs.iter().all(|p| p.grows_on.is_none()));
    // winml-cli's names and a mask over the whole buffer.
    let m = inferred("static-cache-with-mask/model.onnx", Hints::default());
    assert_eq!(m.pair_of("past_0_key").map(|p| p.present.as_str()), Some("present_0_key"));
    assert_eq!(m.cache_form, CacheForm::StaticBuffer);
    assert_eq!(m.mask_span, Some(MaskSpan::Buffer));
}

#[test]
fn the_transformers_js_image_text_layout_takes_embeddings_and_a_logits_count() {
    let d = inferred("tjs-vlm/onnx/decoder_model_merged.onnx", Hints::default());
    assert_eq!(role(&d, "inputs_embeds"), InputRole::InputsEmbeds);
    assert_eq!(role(&d, "num_logits_to_keep"), InputRole::LogitsToKeep);
    assert_eq!(d.cache_form, CacheForm::Growing);
    assert_eq!(d.mask_span, Some(MaskSpan::PastAndNew));
    let e = inferred("tjs-vlm/onnx/embed_tokens.onnx", Hints::default());
    assert_eq!(role(&e, "input_ids"), InputRole::TokenIds);
    assert_eq!(e.cache_form, CacheForm::None);
    let v = inferred("tjs-vlm/onnx/vision_encoder.onnx", Hints::default());
    assert_eq!(role(&v, "pixel_values"), InputRole::PixelValues);
}

#[test]
fn moonshine_takes_raw_samples_and_its_decoder_the_sample_length_mask() {
    let e = inferred("moonshine-tiny/encoder_model.onnx", Hints::default());
    assert_eq!(role(&e, "input_values"), InputRole::AudioSamples);
    let d = inferred("moonshine-tiny/decoder_model_merged.onnx", Hints::default());
    assert_eq!(role(&d, "encoder_attention_mask"), InputRole::EncoderMask);
    assert_eq!(role(&d, "past_key_values.0.encoder.key"), InputRole::CrossPast);
    assert!(d.inputs.iter().all(|p| p.role != InputRole::Unplaced), "{:?}", d.inputs);
}

#[test]
fn fused_mla_and_alibi_caches_are_paired_on_their_own_axes() {
    // GPT-BigCode: one fused key_value tensor per layer, growing on axis 1.
    let b = inferred("gpt-bigcode-tiny/model.onnx", Hints::default());
    let p = b.pair_of("past_key_values.0.key_value").unwrap();
    assert_eq!((p.present.as_str(), p.grows_on), ("present.0.key_value", Some(1)));
    // DeepSeek MLA: keys 24 wide, values 16, each paired with its own present.
    let m = inferred("deepseek-mla-tiny/model.onnx", Hints::default());
    assert_eq!(m.pair_of("past_key_values.1.value").map(|p| p.present.as_str()), Some("present.1.value"));
    // Bloom (ALiBi): no positions to feed.
    let a = inferred("bloom-tiny/model.onnx", Hints::default());
    assert!(a.input(InputRole::PositionIds).is_none());
    assert!(a.inputs.iter().all(|p| p.role != InputRole::Unplaced), "{:?}", a.inputs);
}

#[test]
fn genai_hybrids_carry_fixed_conv_states_beside_a_shared_kv_buffer() {
    // LFM2 from the onnxruntime-genai builder: KV only on the attention layers, conv states elsewhere.
    let i = inferred("lfm2-genai/model.onnx", Hints { share_buffer: Some(true), ..Hints::default() });
    for state in ["past.0.conv", "past.2.conv"] {
        assert_eq!(role(&i, state), InputRole::State);
        assert_eq!(i.pair_of(state).unwrap().grows_on, None);
    }
    assert_eq!(role(&i, "past_key_values.3.value"), InputRole::Past);
    assert_eq!(i.cache_form, CacheForm::SharedBuffer);
    // genai Whisper: int32 ids, keys-first self pasts, cross pasts fed every step from the encoder.
    let w = inferred("whisper-genai/decoder.onnx", Hints::default());
    assert_eq!(role(&w, "input_ids"), InputRole::TokenIds);
    assert_eq!(w.pair_of("past_value_self_1").map(|p| p.present.as_str()), Some("present_value_self_1"));
    assert_eq!(role(&w, "past_key_cross_0"), InputRole::CrossPast);
    let e = inferred("whisper-genai/encoder.onnx", Hints::default());
    assert_eq!(role(&e, "audio_features"), InputRole::AudioFeatures);
}
