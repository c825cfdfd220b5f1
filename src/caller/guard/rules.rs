//! One decoder call judged against the plan and what its generation has
//! bound so far: the branch flag, each past against the present it must be
//! (named by where it did come from), the cross past, the whole prefix fed
//! again, buffers' length, the batch, the encoder states, the mask, the
//! positions and cache slots continuing the real length, embeddings of this
//! call's tokens. Every rule reads the plan; no rule names a model family.

use super::origin::History;
use super::pasts::{rows_of, self_pasts};
use super::{Generation, Tensors};
use crate::finding::{Code, Finding};
use crate::model::fold::fold_names;
use crate::plan::{Family, Plan};

/// What one decoder call feeds, read through the plan.
pub(super) struct Call {
    pub index: usize,
    /// The first decoder call of its generation.
    pub first: bool,
    /// Tokens (or embedding vectors) fed.
    pub new_tokens: i64,
    /// Their ids, when the trace holds them.
    pub ids: Option<Vec<i64>>,
    pub batch: Option<i64>,
    /// A growing past's length on the sequence axis.
    pub past_len: Option<i64>,
    /// A fixed buffer's length on the sequence axis.
    pub buffer_len: Option<i64>,
    /// The branch flag's value.
    pub flag: Option<i64>,
    /// The encoder states' digest.
    pub encoder_states: Option<String>,
}

impl Call {
    pub fn read(plan: &Plan, feeds: &Tensors, index: usize) -> Call {
        let tokens = feeds.get(&plan.input_ids).or_else(|| plan.inputs_embeds.as_ref().and_then(|e| feeds.get(e)));
        let seq = plan.seq_axis;
        let axis_of = |fixed: bool| {
            plan.self_past
                .iter()
                .filter(|c| if fixed { c.buffer } else { !c.fixed })
                .find_map(|c| feeds.get(&c.past))
                .and_then(|r| r.shape.get(seq).copied())
        };
        Call {
            index,
            first: false,
            new_tokens: tokens.and_then(|r| r.shape.get(1).copied()).unwrap_or(1),
            ids: feeds.get(&plan.input_ids).and_then(|r| r.value.clone()),
            batch: tokens.and_then(|r| r.shape.first().copied()),
            past_len: axis_of(false),
            buffer_len: axis_of(true),
            flag: plan.branch_flag.as_ref().and_then(|f| feeds.get(f)).and_then(|r| r.value.as_ref()?.first().copied()),
            encoder_states: plan.encoder_hidden_states.as_ref().and_then(|e| feeds.get(e)?.digest.clone()),
        }
    }
}

/// What judging one call found.
pub(super) struct Judged {
    pub findings: Vec<Finding>,
    /// The call ran the no-cache path re-feeding the prefix one token longer.
    pub no_cache_refeed: bool,
}

/// The call feeds the whole prefix again, one token longer than the last call.
pub(super) fn refeeds(g: &Generation, c: &Call) -> bool {
    match &g.prev_ids {
        Some((n, Some(prev))) => match &c.ids {
            Some(ids) => ids.len() == n + 1 && ids.starts_with(prev),
            None => c.new_tokens as usize == n + 1,
        },
        Some((n, None)) => c.new_tokens as usize == n + 1,
        None => false,
    }
}

/// A new sequence begins: a decoder-only caller feeds an empty past again, or
/// every fixed buffer and state is fed as fresh zeros (a new generation, not
/// a lost cache: the KV pasts are zeroed too).
pub(super) fn starts_anew(plan: &Plan, g: &Generation, c: &Call, history: &mut History, feeds: &Tensors) -> bool {
    if g.calls == 0 || plan.branch_flag.is_some() {
        return false;
    }
    if plan.self_past.iter().all(|p| !p.fixed) {
        return c.past_len == Some(0);
    }
    let fresh = plan.self_past.iter().filter_map(|p| feeds.get(&p.past)).all(|r| history.is_zeros(r));
    let at_zero =
        plan.cache_position.as_ref().and_then(|p| feeds.get(p)?.value.clone()).is_none_or(|v| v.first() == Some(&0));
    fresh && at_zero
}

/// Every departure of call `c`, given what its generation `g` has bound.
pub(super) fn judge(
    plan: &Plan,
    g: &Generation,
    history: &mut History,
    c: &Call,
    feeds: &Tensors,
    refeed: bool,
) -> Judged {
    let mut out = Vec::new();
    let first = c.first || (g.calls == 0 && g.prev.is_none());
    // A flag the trace holds no value of (a digest-only recorder) is the
    // one the call's own evidence fits: a call re-feeding the whole prefix
    // one token longer runs the no-cache branch (the seed's workaround;
    // on the cached branch it would be a prefix onto its past), any other
    // call after the generation's first the cached one.
    // A model without a cache takes the whole prefix at every call: no call is cached.
    let cached = !plan.is_cacheless()
        && match c.flag {
            Some(f) => f != 0,
            None => !(first || refeed && c.new_tokens > 1),
        };
    let flag_name = plan.branch_flag.as_deref().unwrap_or("");
    // The real length before this call: a growing past says it; a buffer
    // keeps its size, so the tokens fed so far do; without a cache it is 0.
    let real = match c.past_len {
        _ if plan.is_cacheless() => 0,
        Some(l) if plan.buffer.is_none() => l,
        _ if first => 0,
        _ => g.tokens,
    };
    if let (Some(f), Some(l)) = (c.flag, c.past_len) {
        if f != 0 && l == 0 && g.step0.is_none() {
            out.push(Finding::error(
                Code::CallerFlag,
                format!("`{flag_name}` is true (cached branch) with an empty past (length 0): step 0 runs the no-cache branch"),
            ));
        }
        if f == 0 && !first && (l > 1 || fed_back(plan, feeds, g)) {
            out.push(Finding::error(Code::CallerFlag, format!(
                "`{flag_name}` is false after step 0 while a past of length {l} is fed: the no-cache branch ignores it, the cache is not used"
            )));
        }
    }
    if cached {
        out.extend(self_pasts(plan, g, history, feeds));
        out.extend(cross_pasts(plan, g, history, feeds));
        let whole = c.new_tokens > 1 && real > 0 && (refeed || c.new_tokens == real + 1);
        if whole {
            out.push(Finding::error(Code::CallerPrefix, format!(
                "`{}` feeds {} tokens on top of a past of length {real}: the whole prefix again (only the new tokens go with a cache)",
                plan.input_ids, c.new_tokens
            )));
        }
        out.extend(bound(g, c, real));
    }
    match uncropped(plan, g, c, feeds).filter(|_| cached) {
        Some((kept, k)) => {
            let (from, seq) = (g.prev.as_ref().map_or(0, |(i, _)| *i), plan.seq_axis);
            out.push(Finding::error(Code::CallerCrop, format!(
                "call {from} verified {k} tokens at once and this call's mask and positions continue from {kept} (the accepted ones), but the past fed is call {from}'s present of {real} as returned: the rejected drafts are still in the cache; crop every past to {kept} on axis {seq} before the next call"
            )));
        }
        None => out.extend(continuing(plan, c, feeds, real)),
    }
    out.extend(embeddings(plan, history, feeds, c.index));
    // (A model without a cache has no other way.)
    Judged { findings: out, no_cache_refeed: !cached && !first && refeed && !plan.is_cacheless() }
}

/// Whether the past fed is exactly the previous call's present.
fn fed_back(plan: &Plan, feeds: &Tensors, g: &Generation) -> bool {
    let Some((_, prev)) = &g.prev else { return false };
    plan.self_past.iter().any(|c| match (feeds.get(&c.past), prev.get(&c.present)) {
        (Some(a), Some(b)) => a.digest.is_some() && a.digest == b.digest,
        _ => false,
    })
}

/// After a call of several tokens, the whole present fed back while the
/// caller's own mask (or positions) continue from fewer tokens: the drafts
/// it rejected are still in the cache. The caller's length and the tokens verified.
fn uncropped(plan: &Plan, g: &Generation, c: &Call, feeds: &Tensors) -> Option<(i64, i64)> {
    let k = g.prev_ids.as_ref().map(|(k, _)| *k as i64).filter(|&k| k > 1)?;
    let past = c.past_len.filter(|&p| p == g.tokens)?;
    let by_mask =
        plan.attention_mask.as_ref().and_then(|m| feeds.get(m)?.shape.get(1).copied()).map(|l| l - c.new_tokens);
    let by_positions = || plan.position_ids.as_ref().and_then(|p| feeds.get(p)?.value.as_ref()?.first().copied());
    let callers = by_mask.or_else(by_positions)?;
    (past - k > 0 && callers < past && callers >= past - k).then_some((callers, k))
}

/// Cross-attention pasts: step 0's presents, kept.
fn cross_pasts(plan: &Plan, g: &Generation, history: &History, feeds: &Tensors) -> Option<Finding> {
    let mut dummy = Vec::new();
    let mut other = Vec::new();
    for c in &plan.cross_past {
        let Some(fed) = feeds.get(&c.past) else { continue };
        if fed.shape.first() == Some(&0) {
            dummy.push(c.past.clone());
        } else if let Some((_, kept)) = g.step0.as_ref().and_then(|(i, s)| Some((i, s.get(&c.present)?))) {
            let gathered = fed.shape.get(1..) == kept.shape.get(1..) && rows_of(fed, kept).is_some();
            if fed.digest.is_some() && kept.digest.is_some() && fed.digest != kept.digest && !gathered {
                other.push(c.past.clone());
            }
        }
    }
    if let Some(first_dummy) = dummy.first() {
        let shape = feeds.get(first_dummy).map(|r| r.shape.clone()).unwrap_or_default();
        // Where it came from, when the trace's digests say.
        let like = plan.cross_past.iter().find(|c| c.past == *first_dummy).map_or("", |c| c.present.as_str());
        let from = feeds.get(first_dummy).and_then(|f| history.origin_like(f, like)).map_or(String::new(), |(e, name)| {
            let kept = g.step0.as_ref().map_or(0, |(c, _)| *c);
            format!(" (`{first_dummy}` = `{name}` of call {}, which the cache branch returns as a placeholder; feed call {kept}'s encoder presents for every later call)", e.call)
        });
        return Some(Finding::error(Code::CallerCrossPast, format!(
            "{} is {shape:?}: the cached branch's dummy present.*.encoder.* fed back as the cross-attention past; keep step 0's{from}",
            fold_names(&dummy).join(", ")
        )).names(dummy));
    }
    (!other.is_empty()).then(|| {
        Finding::error(
            Code::CallerCrossPast,
            format!(
                "{} is not step 0's present.*.encoder.*: the cross-attention past is taken once, at step 0, and kept",
                fold_names(&other).join(", ")
            ),
        )
        .names(other)
    })
}

/// What a generation binds once: the batch, the buffers' length, the encoder states.
fn bound(g: &Generation, c: &Call, real: i64) -> Vec<Finding> {
    let mut out = Vec::new();
    if let (Some((b0, at)), Some(b)) = (g.batch, c.batch) {
        if b != b0 {
            out.push(Finding::error(
                Code::CallerBatch,
                format!(
                "the batch is {b} here and was {b0} at call {at}: a generation keeps its rows (every cache holds {b0})"
            ),
            ));
        }
    }
    if let (Some((l0, at)), Some(l)) = (g.buffer_len, c.buffer_len) {
        if l != l0 {
            out.push(Finding::error(Code::CallerPast, format!(
                "the cache buffers are {l} long here and were {l0} at call {at}: a fixed buffer keeps its length, written in place"
            )));
        }
    }
    if let Some(l) = c.buffer_len.filter(|&l| real + c.new_tokens > l) {
        out.push(Finding::error(
            Code::CallerPast,
            format!(
                "{} tokens do not fit buffers of {l}: the generation is longer than the cache it was given",
                real + c.new_tokens
            ),
        ));
    }
    if let (Some((d0, at)), Some(d)) = (&g.encoder_states, &c.encoder_states) {
        if d != d0 {
            out.push(Finding::error(
                Code::CallerEncoder,
                format!(
                "the encoder states fed are not those of call {at}: one source's states for every call of a generation"
            ),
            ));
        }
    }
    out
}

/// The mask, positions and cache slots: they continue the real length.
fn continuing(plan: &Plan, c: &Call, feeds: &Tensors, real: i64) -> Vec<Finding> {
    let mut out = Vec::new();
    let n = c.new_tokens;
    let want: Vec<i64> = (real..real + n).collect();
    if plan.family == Family::DecoderOnly {
        if let Some((m, r)) = plan.attention_mask.as_ref().and_then(|m| feeds.get(m).map(|r| (m, r))) {
            let len = r.shape.get(1).copied().unwrap_or(-1);
            let over_buffer =
                plan.buffer.as_ref().filter(|b| b.mask_over_buffer).map(|b| c.buffer_len.unwrap_or(b.len));
            match over_buffer {
                Some(b) if len != b => out.push(Finding::error(Code::CallerMask, format!(
                    "`{m}` covers {len} positions; this export's mask spans the whole cache buffer ({b}), ones over the {} tokens so far",
                    real + n
                ))),
                None if len != real + n => out.push(Finding::error(Code::CallerMask, format!(
                    "`{m}` covers {len} positions; the past ({real}) + the new tokens ({n}) are {}: the mask covers past AND new, whatever the dim name says",
                    real + n
                ))),
                _ => {}
            }
        }
        if let Some(f) = positions_from_mask(plan, feeds, n) {
            out.push(f);
        } else if let Some((p, r)) = plan.position_ids.as_ref().and_then(|p| feeds.get(p).map(|r| (p, r))) {
            if let Some(v) = r.value.as_ref().filter(|v| v.len() as i64 == n && **v != want) {
                out.push(Finding::error(
                    Code::CallerPositions,
                    format!(
                        "`{p}` is {v:?}; after a past of {real} the positions are {want:?}: they continue the past"
                    ),
                ));
            }
        }
    }
    if let Some((p, r)) = plan.cache_position.as_ref().and_then(|p| feeds.get(p).map(|r| (p, r))) {
        if let Some(v) = r.value.as_ref().filter(|v| v.len() as i64 == n && **v != want) {
            out.push(Finding::error(Code::CallerPositions, format!(
                "`{p}` is {v:?}; after {real} token{} the slots written are {want:?}: the cache position continues the real length (the buffer keeps its size)",
                if real == 1 { "" } else { "s" }
            )));
        }
    }
    if let Some(bad) = c.ids.as_ref().and_then(|ids| ids.iter().find(|&&i| i < 0 || i >= plan.vocab)) {
        out.push(Finding::error(Code::CallerSignature, format!(
            "`{}` holds {bad}, outside the vocabulary of {} (a Gather on the embedding table fails or reads another row)",
            plan.input_ids, plan.vocab
        )));
    }
    out
}

/// A padded batch (a mask with zeros): each row's positions are its own
/// count of real tokens (`cumsum(mask) - 1`), checked where the mask is 1.
fn positions_from_mask(plan: &Plan, feeds: &Tensors, n: i64) -> Option<Finding> {
    let (p, pos) = plan.position_ids.as_ref().and_then(|p| Some((p, feeds.get(p)?)))?;
    let mask = feeds.get(plan.attention_mask.as_ref()?)?;
    let (m, v) = (mask.value.as_ref()?, pos.value.as_ref()?);
    let rows = usize::try_from(*mask.shape.first()?).ok()?;
    let (len, n) = (usize::try_from(*mask.shape.get(1)?).ok()?, usize::try_from(n).ok()?);
    if !m.contains(&0) || rows == 0 || m.len() != rows * len || v.len() != rows * n || n > len {
        return None;
    }
    for r in 0..rows {
        let row = &m[r * len..(r + 1) * len];
        let mut count = 0i64;
        let want: Vec<Option<i64>> = row
            .iter()
            .map(|&x| {
                count += i64::from(x != 0);
                (x != 0).then_some(count - 1)
            })
            .skip(len - n)
            .collect();
        let got = &v[r * n..(r + 1) * n];
        if want.iter().zip(got).any(|(w, g)| w.is_some_and(|w| w != *g)) {
            let shown: Vec<String> = want.iter().map(|w| w.map_or("_".into(), |w| w.to_string())).collect();
            return Some(Finding::error(
                Code::CallerPositions,
                format!(
                    "`{p}` row {r} is {got:?} where its mask {:?} places its tokens at [{}]: in a padded batch each row's positions come from its own mask (cumsum(mask) - 1), not from the column",
                    &row[len - n..],
                    shown.join(", ")
                ),
            ));
        }
    }
    None
}

/// Embeddings: the output of the embedding call made for this call's tokens.
fn embeddings(plan: &Plan, history: &History, feeds: &Tensors, call: usize) -> Option<Finding> {
    let name = plan.inputs_embeds.as_ref()?;
    let (from, out) = history.origin(feeds.get(name)?)?;
    let newest = history.last_of(&from.model, call)?;
    if newest.call == from.call {
        return None;
    }
    let ids = |e: &super::origin::Earlier| {
        e.fed_values.iter().find(|(n, _)| n.contains("ids")).map_or(String::new(), |(_, v)| format!(" on ids {v:?}"))
    };
    Some(
        Finding::error(
            Code::CallerEmbeds,
            format!(
                "`{name}` = `{out}` of call {} ({}{}), not of call {}{}, the embedding call made for this step: feed the embeddings of this call's tokens",
                from.call,
                from.model,
                ids(from),
                newest.call,
                ids(newest)
            ),
        )
        .tensor(name),
    )
}
