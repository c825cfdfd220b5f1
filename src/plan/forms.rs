//! Plans of the forms that have no cache to drive: a decoder-only export
//! without past (every call re-feeds the prefix) and an encoder alone (an
//! embeddings model), read by the same driver as every other plan.

use super::{numeric, Family, Plan};
use crate::model::signature::{Dim, ElemType, Signature};

/// Tokens an encoder alone is run on at batch 1 (the check, and the
/// example shapes `protocol` shows for it).
pub const ENCODER_TOKENS: usize = 6;

impl Plan {
    /// A decoder-only model with no cache at all (optimum's `text-generation`
    /// without past): every call re-feeds the whole prefix.
    pub fn is_cacheless(&self) -> bool {
        self.family == Family::DecoderOnly
            && self.self_past.is_empty()
            && self.cross_past.is_empty()
            && self.buffer.is_none()
    }

    /// How the caller puts the new rows into buffers it keeps itself, when
    /// the presents hold only those rows (written at `cache_position`, or
    /// appended after dropping the oldest); `None` when presents are fed back whole.
    pub fn caller_kept(&self) -> Option<super::roles::CacheForm> {
        use super::roles::CacheForm::{CallerRolled, CallerWritten};
        self.buffer.as_ref().map(|b| b.form).filter(|f| matches!(f, CallerWritten | CallerRolled))
    }

    /// The plan of an encoder alone: its token ids, its mask, and the first
    /// float output of rank 3 (the hidden states) in place of logits; ids
    /// drawn below `vocab`.
    pub fn for_encoder(sig: &Signature, vocab: i64) -> Result<Plan, String> {
        let int2 = |p: &&crate::model::signature::Port| matches!(p.ty.tensor_parts(), Some((e, Some(d))) if matches!(e, ElemType::I64 | ElemType::I32) && d.len() == 2);
        let ids = sig
            .inputs
            .iter()
            .filter(int2)
            .find(|p| p.name.contains("input_ids"))
            .ok_or("an encoder alone is driven with token ids: it has no integer `input_ids` of rank 2")?;
        let states = sig
            .outputs
            .iter()
            .find(|p| matches!(p.ty.tensor_parts(), Some((e, Some(d))) if e.is_float() && d.len() == 3))
            .ok_or("an encoder alone gives hidden states: it has no float output of rank 3")?;
        let dtype = ids.ty.tensor_parts().map_or(ElemType::I64, |(e, _)| e);
        Ok(bare(sig, &ids.name, dtype, &states.name, vocab))
    }

    /// The plan a file of unknown role is run once with: nothing to drive,
    /// only its own signature (the child builds its inputs from it).
    pub fn placeholder(sig: &Signature) -> Plan {
        let first = |ports: &[crate::model::signature::Port]| ports.first().map_or(String::new(), |p| p.name.clone());
        bare(sig, &first(&sig.inputs), ElemType::I64, &first(&sig.outputs), 2)
    }
}

/// A plan with no cache, no positions and no encoder: one input and one
/// output the child reads, the rest of the signature as declared.
fn bare(sig: &Signature, input: &str, input_dtype: ElemType, output: &str, vocab: i64) -> Plan {
    Plan {
        family: Family::EncoderOnly,
        input_ids: input.to_string(),
        input_ids_dtype: input_dtype,
        logits: output.to_string(),
        vocab: vocab.max(2),
        branch_flag: None,
        self_past: Vec::new(),
        cross_past: Vec::new(),
        seq_axis: 2,
        step0_past_lengths: vec![0],
        tolerance: numeric::tolerance(numeric::form(sig), None),
        attention_mask: sig.input("attention_mask").map(|p| p.name.clone()),
        position_ids: None,
        encoder_hidden_states: None,
        encoder_attention_mask: None,
        hidden: None,
        unknown_inputs: Vec::new(),
        dtypes: sig.inputs.iter().filter_map(|p| p.ty.tensor_parts().map(|(e, _)| (p.name.clone(), e))).collect(),
        buffer: None,
        cache_position: None,
        logits_to_keep: None,
        inputs_embeds: None,
        embeds_width: None,
        tokens_per_call: None,
        position_rows: None,
        codebooks: None,
    }
}

/// M-RoPE: positions `[sections, batch, seq]`; text tokens repeat their position in each row.
pub(super) fn position_rows(sig: &Signature, position_ids: Option<&str>) -> Option<usize> {
    let (_, d) = sig.input(position_ids?)?.ty.tensor_parts()?;
    let d = d?;
    (d.len() == 3).then(|| match d[0] {
        Dim::Fixed(v) if v > 0 => v as usize,
        _ => 3,
    })
}

/// A multi-codebook decoder (MusicGen): its token ids' rows are named batch
/// × codebooks (`total_batch_size_x_num_codebooks`) while its caches keep
/// the batch; how many codebooks, the folder's config says.
pub(super) fn codebooks(sig: &Signature, input_ids: &str, hints: &super::infer::Hints) -> Option<i64> {
    let (_, d) = sig.input(input_ids)?.ty.tensor_parts()?;
    let named = matches!(d?.first(), Some(Dim::Symbolic(s)) if s.contains("codebooks"));
    hints.codebooks.filter(|&k| named && k > 1)
}
