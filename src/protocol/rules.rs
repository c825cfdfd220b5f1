//! The rules under a loop's tables: what a caller gets wrong with no error
//! (an empty past of length 1, positions restarting, a cross past fed back
//! from a cached step), said for the plan's own form (a fixed buffer, tokens
//! per call, a branch flag, beams the folder's generation config asks for).

use crate::folder::layout::Entry;
use crate::model::signature::Dim;
use crate::plan::{Family, Plan};

/// The rules of one loop.
pub(super) fn rules(plan: &Plan, form: &str, e: &Entry, beams: Option<i64>) -> Vec<String> {
    let mut out = Vec::new();
    if plan.is_cacheless() {
        out.push("No cache: every call re-feeds the whole prefix, the mask over all of it and positions from 0; generating n tokens costs O(n²) token-passes (an export with past inputs runs one token per call).".to_string());
        return out;
    }
    if let Some(flag) = &plan.branch_flag {
        out.push(format!("`{flag}` is false at step 0 (with an empty past) and true at every later step; the inputs are the same on both branches."));
    }
    if !plan.cross_past.is_empty() {
        let example = plan.cross_past.first().map(|c| c.present.clone()).unwrap_or_default();
        out.push(format!(
            "The cross-attention past is step 0's `{example}` (…), kept for every later step; never feed back what a cached step returns there (optimum's merged decoders return [0, heads, 1, head_dim] dummies)."
        ));
    }
    match &plan.buffer {
        Some(b) if plan.caller_kept() == Some(crate::plan::roles::CacheForm::CallerRolled) => out.push(format!(
            "The cache is a fixed buffer of {} slots on axis {} that the caller keeps: the presents hold only the new tokens' rows; after each call drop as many of the buffer's oldest rows and append them at its end (a sliding window), the attention mask right-aligned (ones over the last past + new slots); feeding a present back as the next past is wrong.",
            b.len, plan.seq_axis
        )),
        Some(b) if plan.caller_kept().is_some() => out.push(format!(
            "The cache is a fixed buffer of {} slots on axis {} that the caller keeps: the presents hold only the new tokens' rows; after each call write them into the buffer at the slots the call's tokens fill{}; feeding a present back as the next past is wrong, and a generation ends when the buffer is full.",
            b.len,
            plan.seq_axis,
            plan.cache_position.as_ref().map(|c| format!(" (`{c}`)")).unwrap_or_default()
        )),
        Some(b) => out.push(format!(
            "The cache is a fixed buffer of {} slots on axis {}: every call writes its tokens in place at the past length{}; it never grows, and a generation ends when it is full.",
            b.len,
            plan.seq_axis,
            plan.cache_position.as_ref().map(|c| format!(" (`{c}` says where)")).unwrap_or_default()
        )),
        None => out.push(format!(
            "An empty past at step 0 has length 0 on the past axis (axis {}), not 1: a zero slot of length 1 is attended to.",
            plan.seq_axis
        )),
    }
    if let Some(k) = plan.tokens_per_call {
        out.push(format!("The graph takes exactly {k} token(s) per call, the prompt included: feed it call by call."));
    }
    if let Some(n) = beams.filter(|&n| n > 1) {
        out.push(format!("generation_config.json asks for beam search (num_beams {n}): rows are batch × {n}; after each step, reorder every self-attention past's rows (axis 0) to the beams' origins before feeding it (the encoder states and cross pasts are expanded per beam once)."));
    }
    if let Some(mask) = &plan.attention_mask {
        let dim =
            e.sig.input(mask).and_then(|p| p.ty.tensor_parts()).and_then(|(_, d)| d.and_then(|d| d.get(1).cloned()));
        let said = match dim {
            Some(Dim::Symbolic(s)) => format!(" (the export names this axis `{s}`)"),
            _ => String::new(),
        };
        out.push(format!("`{mask}` covers the past AND the new tokens: past_len + new{said}."));
    }
    match &plan.position_ids {
        Some(p) => out.push(format!("`{p}` continue from the past: past_len + arange(new); restarting at 0 gives wrong logits with no error.")),
        None if plan.family == Family::DecoderOnly => out.push(
            "This export takes no position_ids: positions follow the past length inside the graph, so rows of a left-padded batch are shifted.".into(),
        ),
        None => {}
    }
    if form == "split-pair" {
        out.push("Step 0 runs the no-past decoder on the start token; its present.* (decoder and encoder) seed the with-past decoder, whose outputs carry no encoder presents: keep step 0's.".into());
    }
    if e.sig.op_types.contains("GroupQueryAttention") {
        out.push("GroupQueryAttention: seqlens_k and total_sequence_length are computed inside the graph from attention_mask, as onnxruntime-genai feeds it.".into());
    }
    out
}

/// What an image call needs, from the vision encoder's own signature: its
/// inputs as declared, its output in place of the image tokens' embeddings,
/// and (3-D positions) the image tokens' own position rows.
pub(super) fn image_call(plan: &Plan, v: &Entry) -> String {
    let ins: Vec<String> = v
        .sig
        .inputs
        .iter()
        .filter_map(|p| {
            let (t, d) = p.ty.tensor_parts()?;
            let dims: Vec<String> = d.unwrap_or_default().iter().map(ToString::to_string).collect();
            Some(format!("`{}` {t} [{}]", p.name, dims.join(", ")))
        })
        .collect();
    let out = v.sig.outputs.first().map_or("its output".to_string(), |o| format!("`{}`", o.name));
    let mut s = format!(
        "An image call: run {} on {} once per image; {out} replaces the embeddings of the image's placeholder tokens in `{}`, one row per image token.",
        v.file.rel,
        ins.join(" and "),
        plan.inputs_embeds.as_deref().unwrap_or("inputs_embeds")
    );
    if let (Some(rows), Some(p)) = (plan.position_rows, &plan.position_ids) {
        s.push_str(&format!(" Those tokens' `{p}` rows differ (the {rows} sections hold their time, height and width indices), where text tokens repeat one position in every row."));
    }
    s
}

/// The rule under an encoder alone's one call.
pub(super) fn encoder_rule(plan: &Plan) -> String {
    format!(
        "One call per batch of texts, no cache and no loop: `{}` [batch, seq, hidden] holds each token's embedding; pooling (the mean over the mask, or the first token) is the application's.",
        plan.logits
    )
}
