//! A call's self-attention pasts, buffers and states against the previous
//! call's presents: fed back as they came out, gathered to the beams'
//! origins (and every layer alike), cropped after a verified draft, or
//! something else — named by where it did come from, or said undecidable
//! where neither the trace nor a bit-exact re-run gives the rows.

use super::origin::History;
use super::{Generation, Tensors};
use crate::finding::{Code, Finding};
use crate::model::fold::fold_names;
use crate::plan::Plan;

/// Self-attention pasts, buffers and states: the previous call's presents.
pub(super) fn self_pasts(plan: &Plan, g: &Generation, history: &mut History, feeds: &Tensors) -> Option<Finding> {
    let (last, prev) = g.prev.as_ref()?;
    let seq = plan.seq_axis;
    let mut wrong = Vec::new();
    let mut undecided = Vec::new();
    // A past of the call shown (by its rows) to be a gather of the present's rows: a beam's reorder.
    let mut gathered: Option<(String, Vec<usize>)> = None;
    // Pasts fed as the present came out (rows in order).
    let mut as_returned = Vec::new();
    // Pasts whose present's rows the bit-exact re-run gives, that are no gather of them.
    let mut exact_unmatched: Vec<String> = Vec::new();
    let mut detail = String::new();
    // Buffers the caller keeps: what the fed one is, only a re-run can show.
    let mut unshown = Vec::new();
    for c in &plan.self_past {
        let (Some(fed), Some(present)) = (feeds.get(&c.past), prev.get(&c.present)) else { continue };
        // A buffer the plan says the caller keeps, or a fixed state whose present is only its newest rows.
        let whole = fed.shape.get(1..) == c.shape.get(1..);
        if (c.buffer && plan.caller_kept().is_some()) || (c.fixed && whole && fed.shape != present.shape) {
            match &fed.kept {
                Some(crate::caller::trace::Kept::Right(_)) => {}
                Some(crate::caller::trace::Kept::Wrong(w)) => {
                    wrong.push(c.past.clone());
                    if detail.is_empty() {
                        detail = format!("`{}` is {w}", c.past);
                    }
                }
                None if history.is_zeros(fed) => {
                    wrong.push(c.past.clone());
                    if detail.is_empty() {
                        detail = format!("`{}` is fresh zeros {:?} (the buffer kept so far is thrown away); put `{}` of call {last} into the buffer fed at that call", c.past, fed.shape, c.present);
                    }
                }
                None => unshown.push(c.past.clone()),
            }
            continue;
        }
        let other_values = fed.digest.is_some() && present.digest.is_some() && fed.digest != present.digest;
        // Rows of the present gathered (a beam search's reorder): the
        // decoding strategy judges whether they are the rows the beams chose.
        if fed.shape == present.shape && other_values {
            if let Some(origin) = rows_of(fed, present) {
                gathered.get_or_insert((c.past.clone(), origin));
                continue;
            }
        }
        if fed.shape == present.shape && fed.digest.is_some() && !other_values {
            as_returned.push(c.past.clone());
        }
        // Several tokens verified at once, the rejected ones cropped away
        // (speculative decoding): the past is the present cut to the accepted length.
        if cropped(plan, g, fed, present) {
            continue;
        }
        if fed.shape == present.shape && !other_values {
            continue;
        }
        let known = history.provenance(&c.past, &c.present, fed, *last);
        let zeros = known.is_none() && history.is_zeros(fed);
        // The present's rows gathered (a beam search) cannot be told from other
        // values without row digests: neither the trace's nor a re-run's.
        if known.is_none() && !zeros && fed.shape == present.shape && (fed.rows.is_none() || present.rows.is_none()) {
            // The present's rows known (its re-run bit-exact) and the fed past none of them.
            if present.rows.is_some() {
                exact_unmatched.push(c.past.clone());
            }
            undecided.push(c.past.clone());
            continue;
        }
        wrong.push(c.past.clone());
        if !detail.is_empty() {
            continue;
        }
        detail = if let Some(p) = known {
            p
        } else if zeros {
            let what = if c.fixed && !c.buffer {
                "a state is carried from call to call, never zeroed again"
            } else if c.buffer {
                "the buffer written so far is thrown away"
            } else {
                "the cache so far is thrown away"
            };
            format!("`{}` is fresh zeros {:?} ({what}); feed `{}` of call {last}", c.past, fed.shape, c.present)
        } else if fed.shape != present.shape {
            format!(
                "length {} on axis {seq} where the previous present has {}",
                fed.shape.get(seq).copied().unwrap_or(-1),
                present.shape.get(seq).copied().unwrap_or(-1)
            )
        } else {
            format!("same shape {:?}, other values (no earlier output has them)", fed.shape)
        };
    }
    // One layer's cache reordered and another's fed as it came out: every layer is reordered alike.
    if let Some((shown, origin)) = gathered.as_ref().filter(|(_, o)| o.iter().enumerate().any(|(i, r)| i != *r)) {
        if wrong.is_empty() && !as_returned.is_empty() {
            return Some(
                Finding::error(
                    Code::CallerPast,
                    format!(
                        "{} is call {last}'s present as it came out, while `{shown}` is that call's present gathered by rows {origin:?} (the beams' reorder): gather every layer's past by the same rows",
                        fold_names(&as_returned).join(", ")
                    ),
                )
                .names(as_returned),
            );
        }
    }
    // Another layer shows the beams' rows, and this one's present is known row by row
    // (its re-run bit-exact): a correct client's past would be those rows gathered alike.
    if let Some((shown, origin)) = gathered.as_ref().filter(|_| wrong.is_empty() && !exact_unmatched.is_empty()) {
        return Some(
            Finding::error(
                Code::CallerPast,
                format!(
                    "{} is not call {last}'s present gathered by rows {origin:?}, as `{shown}` is (the re-run of that present is bit-exact with the caller's, so that gather's digest is known and is not the one fed): other values",
                    fold_names(&exact_unmatched).join(", ")
                ),
            )
            .names(exact_unmatched),
        );
    }
    if wrong.is_empty() && !undecided.is_empty() {
        let message = match &gathered {
            Some((shown, origin)) => format!("`{shown}` is call {last}'s present gathered by rows {origin:?} (a beam search's reorder), but {} has other values whose rows neither the trace nor the re-run gives (the re-run is not bit-exact with the caller's there), so they cannot be told the same gather or a wrong past (record with the current recorder, format 2, which keeps a digest per row)", fold_names(&undecided).join(", ")),
            None => {
                let shape = feeds.get(&undecided[0]).map(|t| t.shape.clone()).unwrap_or_default();
                format!("{} has the shape of call {last}'s present ({shape:?}) and other values, which no earlier output has whole: rows of that present gathered to the beams' origins (a beam search) would look so, and so would a wrong past; the trace keeps no row digests and the re-run could not recompute them, so this call cannot be told right or wrong (record with the current recorder, format 2, which keeps a digest per row)", fold_names(&undecided).join(", "))
            }
        };
        return Some(Finding::new(Code::CallerUndecided, crate::finding::Severity::Info, message).names(undecided));
    }
    if wrong.is_empty() && !unshown.is_empty() {
        // Why no re-run settled it: tokens the trace keeps as digests only, or no re-run at all.
        let ids_unknown = feeds.get(&plan.input_ids).is_some_and(|t| t.value.is_none());
        let why = if ids_unknown {
            format!("the trace keeps `{}` as a digest only, so no re-run can reproduce the caller's presents (record the ids' values: the current recorder keeps every small integer tensor)", plan.input_ids)
        } else {
            "that takes a re-run whose presents are bit-exact with the caller's (run without --static-only, on the runtime that recorded it)".to_string()
        };
        let message = format!(
            "{} is a buffer the caller keeps (the model's presents hold only the new rows): whether call {last}'s present was put into it as the protocol says cannot be shown from the trace's digests: {why}",
            fold_names(&unshown).join(", ")
        );
        return Some(Finding::new(Code::CallerUndecided, crate::finding::Severity::Info, message).names(unshown));
    }
    (!wrong.is_empty()).then(|| {
        let kept = plan.caller_kept().is_some();
        let what = if kept { "the buffer a correct caller keeps" } else { "the previous call's present" };
        Finding::error(Code::CallerPast, format!("{} is not {what}: {detail}", fold_names(&wrong).join(", ")))
            .names(wrong)
    })
}

/// `fed` is `present` cut on the sequence axis to a length between the
/// previous call's past and its present, after a call of several tokens.
fn cropped(plan: &Plan, g: &Generation, fed: &super::TensorMeta, present: &super::TensorMeta) -> bool {
    let seq = plan.seq_axis;
    let Some((k, _)) = g.prev_ids.as_ref().filter(|(k, _)| *k > 1) else { return false };
    let (Some(&f), Some(&p)) = (fed.shape.get(seq), present.shape.get(seq)) else { return false };
    let same_elsewhere = fed.shape.len() == present.shape.len()
        && fed.shape.iter().zip(&present.shape).enumerate().all(|(i, (a, b))| i == seq || a == b);
    // After a prompt (no past before it) nothing was verified: nothing to crop.
    let before = p - *k as i64;
    same_elsewhere && before > 0 && f < p && f >= before
}

/// For each row of `fed`, the first row of `source` with its digest, when
/// every row has one (format-2 traces): `fed` is a gather of `source`'s rows.
pub(crate) fn rows_of(fed: &super::TensorMeta, source: &super::TensorMeta) -> Option<Vec<usize>> {
    let (fed_rows, source_rows) = (fed.rows.as_ref()?, source.rows.as_ref()?);
    fed_rows.iter().map(|r| source_rows.iter().position(|s| s == r)).collect()
}
