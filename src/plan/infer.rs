//! Protocol inference: the role of every input and output of a decoder, read
//! from the graph (names, element types, ranks, symbolic dims and the
//! expressions between them, what each input reaches) and from what the
//! folder's configs say, never from a contract. Each conclusion keeps its
//! evidence, so a report can say *why* `k0` is a past and `cat_7` its present.
//!
//! Rules run in order: names first (every exporter in the wild keeps
//! `input_ids`, `attention_mask`, `cache_position`…), then shapes (a float
//! input an output refreshes is a cache, whatever its name), then what is
//! left is said to be unplaced, with the reason, rather than guessed.

use super::roles::{CacheForm, Inferred, InputRole, MaskSpan, Pairing, PlacedInput};
use crate::model::dims::Expr;
use crate::model::names::{is_cross_name, is_past_name, present_by_convention};
use crate::model::signature::{Dim, ElemType, Port, Signature};

/// What the folder's configs say that the graph cannot.
#[derive(Clone, Debug, Default)]
pub struct Hints {
    /// The vocabulary size (config.json `vocab_size`, genai_config `model.vocab_size`).
    pub vocab: Option<i64>,
    /// genai_config.json `search.past_present_share_buffer`.
    pub share_buffer: Option<bool>,
    /// genai_config.json `search.max_length`: the shared buffers' length.
    pub max_length: Option<i64>,
    /// config.json `num_codebooks`: token rows per batch item of a multi-codebook decoder.
    pub codebooks: Option<i64>,
}

fn parts(p: &Port) -> Option<(ElemType, &[Dim])> {
    match p.ty.tensor_parts() {
        Some((e, Some(d))) => Some((e, d)),
        _ => None,
    }
}

fn is_int(e: ElemType) -> bool {
    matches!(e, ElemType::I64 | ElemType::I32)
}

fn sym(d: &Dim) -> Option<&str> {
    match d {
        Dim::Symbolic(s) => Some(s.as_str()),
        _ => None,
    }
}

fn shape(dims: &[Dim]) -> String {
    format!("[{}]", dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "))
}

/// Roles a name alone settles, with the element type and rank that must go with it.
fn by_name(p: &Port) -> Option<(InputRole, String)> {
    let (e, d) = parts(p)?;
    let n = p.name.to_ascii_lowercase();
    let said = |what: &str| format!("name `{}`, {e} {}: {what}", p.name, shape(d));
    let role = if e == ElemType::BOOL && n.contains("use_cache") {
        (InputRole::BranchFlag, said("the merged decoder's branch flag"))
    } else if is_int(e) && d.is_empty() && n.contains("logits_to_keep") {
        (InputRole::LogitsToKeep, said("a scalar count of trailing positions to keep logits for"))
    } else if is_int(e) && n.contains("cache_position") {
        (InputRole::CachePosition, said("where the new tokens are written in the cache"))
    } else if is_int(e) && (n.contains("position_ids") || n.ends_with("position_id")) {
        // `position_id`: winml-cli's sliding-window decoders.
        let what = if d.len() == 3 { "3-D positions (M-RoPE)" } else { "positions of the new tokens" };
        (InputRole::PositionIds, said(what))
    } else if n.contains("encoder_attention_mask") {
        (InputRole::EncoderMask, said("the encoder's mask"))
    } else if n.contains("attention_mask") || n == "mask" {
        (InputRole::AttentionMask, said("the attention mask"))
    } else if is_int(e) && n.contains("input_ids") {
        (InputRole::TokenIds, said("token ids"))
    } else if e.is_float() && n.contains("inputs_embeds") {
        (InputRole::InputsEmbeds, said("embeddings of the new tokens"))
    } else if e.is_float() && (n.contains("encoder_hidden_states") || n == "encoder_outputs") {
        (InputRole::EncoderStates, said("the encoder's output states"))
    } else if e.is_float() && n.contains("input_values") {
        (InputRole::AudioSamples, said("raw audio samples"))
    } else if e.is_float() && (n.contains("input_features") || n.contains("audio_features")) {
        (InputRole::AudioFeatures, said("audio features"))
    } else if e.is_float() && n.contains("pixel_values") {
        (InputRole::PixelValues, said("image pixels"))
    } else {
        return None;
    };
    Some(role)
}

/// A name that marks a fixed-size state rather than a key/value cache.
fn is_state_name(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    ["conv", "ssm", "recurrent", "state"].iter().any(|k| n.contains(k))
}

/// The present a past's name points to, by the conventions in the wild, not yet taken.
fn present_by_name(sig: &Signature, past: &str, taken: &[String]) -> Option<(String, String)> {
    present_by_convention(past, |p| sig.output(p).is_some() && !taken.iter().any(|t| t == p))
        .map(|(p, how)| (p, how.to_string()))
}

/// How an output's dims line up with a past's: `Some(grown axis)` when every
/// axis agrees but one whose output dim is the past's dim grown (an
/// expression over the past's symbol, or another symbol), `Some(None)` when
/// identical, `None` when they do not line up.
fn lines_up(past: &[Dim], out: &[Dim]) -> Option<Option<usize>> {
    if past.len() != out.len() {
        return None;
    }
    let mut grown = None;
    for (axis, (a, b)) in past.iter().zip(out).enumerate() {
        if a == b {
            continue;
        }
        let grows = match (a, b) {
            (Dim::Symbolic(s), Dim::Symbolic(t)) => {
                // `s88` → `s70 + s88`; `past_sequence_length` → `past_sequence_length + 1`;
                // or a fresh total (`total_sequence_length`).
                // A compound expression must grow this very symbol; a bare other
                // symbol is a fresh total (`total_sequence_length`).
                match Expr::parse(t) {
                    Expr::Sym(_) => true,
                    e => e.symbols().contains(s),
                }
            }
            (Dim::Fixed(0), Dim::Symbolic(_)) | (Dim::Unknown, _) | (_, Dim::Unknown) => true,
            _ => false,
        };
        if !grows || grown.is_some() {
            return None;
        }
        grown = Some(axis);
    }
    Some(grown)
}

/// Infers the protocol of `sig`.
pub fn infer(sig: &Signature, hints: &Hints) -> Inferred {
    let mut inputs: Vec<PlacedInput> = Vec::new();
    let mut candidates: Vec<&Port> = Vec::new();
    for p in &sig.inputs {
        if let Some((role, evidence)) = by_name(p) {
            inputs.push(PlacedInput { name: p.name.clone(), role, evidence });
            continue;
        }
        let cache_like = parts(p).is_some_and(|(e, d)| e.is_float() && d.len() >= 3);
        if is_past_name(&p.name) || is_state_name(&p.name) || cache_like {
            candidates.push(p);
        }
        inputs.push(PlacedInput { name: p.name.clone(), role: InputRole::Unplaced, evidence: String::new() });
    }

    // Logits by name first: they are never a present.
    let mut logits =
        sig.outputs.iter().find(|o| o.name.contains("logits")).map(|o| (o.name.clone(), format!("name `{}`", o.name)));

    // Pasts: paired with the output that refreshes them.
    let mut pairs: Vec<Pairing> = Vec::new();
    let mut taken: Vec<String> = logits.iter().map(|(n, _)| n.clone()).collect();
    // Outputs a past claims by name are never another past's by shape.
    let mut by_name: Vec<Option<(String, String)>> = Vec::new();
    for p in &candidates {
        let found = present_by_name(sig, &p.name, &taken);
        if let Some((present, _)) = &found {
            taken.push(present.clone());
        }
        by_name.push(found);
    }
    for (p, named) in candidates.iter().zip(by_name) {
        let Some((e, pd)) = parts(p) else { continue };
        let by_shape = || {
            sig.outputs.iter().filter(|o| !taken.contains(&o.name)).find_map(|o| {
                let (oe, od) = parts(o)?;
                (oe == e).then_some(())?;
                let grown = lines_up(pd, od)?;
                Some((o, grown))
            })
        };
        let named_present = named.as_ref().map(|(n, _)| n.clone());
        let found = match named {
            Some((present, how)) => {
                let od = sig.output(&present).and_then(parts).map(|(_, d)| d).unwrap_or(&[]);
                Some((present, lines_up(pd, od).flatten(), how))
            }
            None => by_shape().map(|(o, grown)| {
                let od = parts(o).map(|(_, d)| d).unwrap_or(&[]);
                let how = match grown {
                    Some(axis) => format!(
                        "shape: the first free output of its dtype and rank, {} → {}, axis {axis} grows",
                        shape(pd),
                        shape(od)
                    ),
                    None => format!("shape: the first free output of its dtype and shape {}", shape(pd)),
                };
                (o.name.clone(), grown, how)
            }),
        };
        let slot = inputs.iter_mut().find(|i| i.name == p.name).expect("every input is placed");
        match found {
            Some((present, grows_on, how)) => {
                if named_present.as_ref() != Some(&present) {
                    taken.push(present.clone());
                }
                let (role, what) = if is_cross_name(&p.name) {
                    (InputRole::CrossPast, "a cross-attention cache")
                } else if grows_on.is_none() && is_state_name(&p.name) {
                    (InputRole::State, "a fixed-size state")
                } else {
                    (InputRole::Past, "a self-attention cache")
                };
                slot.role = role;
                slot.evidence = format!("{what}, refreshed from `{present}` ({how})");
                pairs.push(Pairing { past: p.name.clone(), present, grows_on, evidence: how });
            }
            None if is_cross_name(&p.name) => {
                slot.role = InputRole::CrossPast;
                slot.evidence = format!(
                    "name `{}`: a cross-attention cache with no present of its own here (taken from step 0's outputs)",
                    p.name
                );
            }
            None => {
                slot.evidence = format!(
                    "a {e} input of shape {} that no output refreshes (no present by name, none of its dtype and shape)",
                    shape(pd)
                );
            }
        }
    }

    // Token ids without the usual name: an integer [batch, seq] read by a Gather (an embedding lookup).
    if !inputs.iter().any(|i| matches!(i.role, InputRole::TokenIds | InputRole::InputsEmbeds)) {
        for slot in inputs.iter_mut().filter(|i| i.role == InputRole::Unplaced) {
            let Some(p) = sig.input(&slot.name) else { continue };
            let Some((e, d)) = parts(p) else { continue };
            let gathers = sig.input_reach.get(&p.name).is_some_and(|ops| ops.contains("Gather"));
            if is_int(e) && d.len() == 2 && gathers {
                slot.role = InputRole::TokenIds;
                slot.evidence = format!("{e} {} read by a Gather (an embedding lookup)", shape(d));
                break;
            }
        }
    }
    for slot in inputs.iter_mut().filter(|i| i.role == InputRole::Unplaced && i.evidence.is_empty()) {
        let p = sig.input(&slot.name);
        slot.evidence = match p.and_then(parts) {
            Some((e, d)) => format!("a {e} input of shape {} whose name and use say nothing we know", shape(d)),
            None => "not a tensor with a declared shape".into(),
        };
    }

    // Without a name, logits are read from shape only beside a cache: an
    // encoder's [batch, length, hidden] output is not logits.
    if logits.is_none() && !pairs.is_empty() {
        logits = sig.outputs.iter().filter(|o| !taken.contains(&o.name)).find_map(|o| {
            let (e, d) = parts(o)?;
            let last = match d.last()? {
                Dim::Fixed(v) => *v,
                _ => return None,
            };
            let vocab_ok = hints.vocab.is_none_or(|v| v == last);
            (e.is_float() && d.len() == 3 && vocab_ok).then(|| {
                let why = match hints.vocab {
                    Some(v) => format!("the float output of rank 3 whose last axis is the vocabulary ({v})"),
                    None => format!("the float output of rank 3 with a fixed last axis ({last}) that no past takes"),
                };
                (o.name.clone(), why)
            })
        });
    }

    let (cache_form, cache_form_evidence) = cache_form(sig, &inputs, &pairs, hints);
    let (mask_span, bindings) = mask_span(sig, &inputs, &pairs, cache_form);
    Inferred { inputs, logits, pairs, cache_form, cache_form_evidence, mask_span, bindings }
}

fn cache_form(sig: &Signature, inputs: &[PlacedInput], pairs: &[Pairing], hints: &Hints) -> (CacheForm, String) {
    let pasts: Vec<&Pairing> =
        pairs.iter().filter(|p| inputs.iter().any(|i| i.name == p.past && i.role == InputRole::Past)).collect();
    if pairs.is_empty() {
        return (CacheForm::None, "no input is refreshed from an output".into());
    }
    // onnxruntime-genai shares the buffers only where GroupQueryAttention writes them in place.
    if hints.share_buffer == Some(true) && sig.op_types.contains("GroupQueryAttention") {
        return (
            CacheForm::SharedBuffer,
            "genai_config.json past_present_share_buffer: true, and GroupQueryAttention writes the cache: pasts and presents share max_length buffers".into(),
        );
    }
    if pasts.is_empty() {
        return (CacheForm::FixedState, "only fixed-size states, no key/value cache".into());
    }
    let has_cache_position = inputs.iter().any(|i| i.role == InputRole::CachePosition);
    let fixed_buffers = pasts.iter().all(|p| {
        p.grows_on.is_none()
            && sig
                .input(&p.past)
                .and_then(parts)
                .is_some_and(|(_, d)| d.iter().skip(1).all(|d| matches!(d, Dim::Fixed(_))))
    });
    // Presents that hold only the new rows of a fixed buffer: the caller keeps the buffer.
    if fixed_buffers && pasts.iter().all(|p| new_rows_axis(sig, p).is_some()) {
        let p = pasts[0];
        let (_, d) = sig.input(&p.past).and_then(parts).unwrap_or((ElemType::F32, &[]));
        let od = sig.output(&p.present).and_then(parts).map(|(_, d)| shape(d)).unwrap_or_default();
        let axis = new_rows_axis(sig, p).unwrap_or(2);
        return if has_cache_position {
            (
                CacheForm::CallerWritten,
                format!("`cache_position` input, pasts of fixed shape {}, presents only the new rows {od} (axis {axis}): the caller writes them into its buffer at `cache_position`", shape(d)),
            )
        } else {
            (
                CacheForm::CallerRolled,
                format!("pasts of fixed shape {}, presents only the new rows {od} (axis {axis}), no `cache_position`: the caller drops the oldest rows and appends the new ones", shape(d)),
            )
        };
    }
    if fixed_buffers && has_cache_position {
        let p = pasts[0];
        let d = sig.input(&p.past).and_then(parts).map(|(_, d)| shape(d)).unwrap_or_default();
        return (
            CacheForm::StaticBuffer,
            format!("`cache_position` input, pasts of fixed shape {d}, every present the same shape as its past"),
        );
    }
    let first = pasts[0];
    match first.grows_on {
        Some(axis) => (
            CacheForm::Growing,
            format!("`{}` axis {axis} grows into `{}` ({})", first.past, first.present, first.evidence),
        ),
        None => (CacheForm::Growing, format!("`{}` refreshed from `{}`", first.past, first.present)),
    }
}

/// The axis on which a fixed past's present holds only the new tokens'
/// rows: the one axis where the two differ, the past's a fixed length and
/// the present's shorter (fixed) or the new-token count (symbolic).
pub(crate) fn new_rows_axis(sig: &Signature, p: &Pairing) -> Option<usize> {
    let (_, pd) = sig.input(&p.past).and_then(parts)?;
    let (_, od) = sig.output(&p.present).and_then(parts)?;
    if pd.len() != od.len() || p.grows_on.is_some() {
        return None;
    }
    let differ: Vec<usize> = (1..pd.len()).filter(|&a| pd[a] != od[a]).collect();
    let [axis] = differ[..] else { return None };
    match (&pd[axis], &od[axis]) {
        (Dim::Fixed(len), Dim::Fixed(n)) if n < len => Some(axis),
        (Dim::Fixed(_), Dim::Symbolic(_)) => Some(axis),
        _ => None,
    }
}

/// What the mask spans, and the symbols bound on the way.
fn mask_span(
    sig: &Signature,
    inputs: &[PlacedInput],
    pairs: &[Pairing],
    form: CacheForm,
) -> (Option<MaskSpan>, Vec<(String, String)>) {
    let mut bindings = Vec::new();
    let Some(mask) = inputs.iter().find(|i| i.role == InputRole::AttentionMask) else { return (None, bindings) };
    let Some((e, d)) = sig.input(&mask.name).and_then(parts) else { return (Some(MaskSpan::Unknown), bindings) };
    if e.is_float() && d.len() == 4 {
        return (Some(MaskSpan::FourD), bindings);
    }
    let Some(len) = d.get(1) else { return (Some(MaskSpan::Unknown), bindings) };
    // The new-token symbol: axis 1 of the ids (or embeddings).
    let new_sym = inputs
        .iter()
        .find(|i| matches!(i.role, InputRole::TokenIds | InputRole::InputsEmbeds))
        .and_then(|i| sig.input(&i.name).and_then(parts))
        .and_then(|(_, d)| d.get(1).and_then(sym).map(str::to_string));
    // The past symbol: the grown axis of the first growing past.
    let grown = pairs.iter().find_map(|p| {
        let axis = p.grows_on?;
        let past = sig.input(&p.past).and_then(parts)?.1.get(axis)?.clone();
        let present = sig.output(&p.present).and_then(parts)?.1.get(axis)?.clone();
        Some((past, present))
    });
    let buffers = [CacheForm::StaticBuffer, CacheForm::SharedBuffer, CacheForm::CallerWritten, CacheForm::CallerRolled];
    if buffers.contains(&form) && matches!(len, Dim::Fixed(_)) {
        return (Some(MaskSpan::Buffer), bindings);
    }
    let Dim::Symbolic(m) = len else {
        return (Some(if matches!(len, Dim::Fixed(_)) { MaskSpan::Buffer } else { MaskSpan::Unknown }), bindings);
    };
    if Some(m) == new_sym.as_ref() && !pairs.is_empty() {
        return (Some(MaskSpan::NewOnly), bindings);
    }
    let expr = Expr::parse(m);
    if let Some((past, present)) = &grown {
        if Dim::Symbolic(m.clone()) == *present {
            return (Some(MaskSpan::PastAndNew), bindings);
        }
        let (Some(ps), Some(ns)) = (sym(past), new_sym.as_deref()) else { return (Some(MaskSpan::Unknown), bindings) };
        if let Some((a, b)) = expr.sum_of_two_symbols() {
            if (a == ps && b == ns) || (a == ns && b == ps) {
                return (Some(MaskSpan::PastAndNew), bindings);
            }
        }
    }
    // A symbol no other tensor uses is free: bind it to past + new, and let the run confirm it.
    let uses = sig
        .inputs
        .iter()
        .chain(&sig.outputs)
        .filter_map(|p| parts(p))
        .flat_map(|(_, d)| d.iter())
        .filter(|d| sym(d) == Some(m.as_str()))
        .count();
    if uses == 1 && !pairs.is_empty() {
        bindings.push((
            m.clone(),
            format!("`{m}` (attention_mask axis 1) appears on no other tensor: bound to past + new tokens, as a standard caller feeds it"),
        ));
        return (Some(MaskSpan::PastAndNew), bindings);
    }
    (Some(MaskSpan::Unknown), bindings)
}
