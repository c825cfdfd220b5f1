//! Fixed cache buffers (a static cache written at `cache_position`,
//! onnxruntime-genai's shared past/present buffers): a call must write the
//! slots of the tokens it was fed and leave every other slot as it was. A
//! write at the wrong slot (positions that restart, a `cache_position`
//! ignored) corrupts the cache while the shapes stay right, so no growth
//! check can see it. Pure: compares the fed pasts with the presents.

use crate::engine::events::StepIssue;
use crate::engine::feeds::{Feed, Outputs, Values};
use crate::finding::Code;
use crate::plan::Plan;
use ndarray::{ArrayD, Axis};

/// Slots on `axis` where `a` and `b` differ (NaN equals NaN: a slot left as it was).
fn changed(a: &ArrayD<f32>, b: &ArrayD<f32>, axis: usize) -> Vec<usize> {
    a.axis_iter(Axis(axis))
        .zip(b.axis_iter(Axis(axis)))
        .enumerate()
        .filter(|(_, (x, y))| x.iter().zip(y.iter()).any(|(p, q)| p != q && !(p.is_nan() && q.is_nan())))
        .map(|(slot, _)| slot)
        .collect()
}

fn slots(s: &[usize]) -> String {
    let shown: Vec<String> = s.iter().take(6).map(usize::to_string).collect();
    let more = if s.len() > 6 { format!(" and {} more", s.len() - 6) } else { String::new() };
    format!("{}{more}", shown.join(", "))
}

/// What a call fed `past..past + n` did to each fixed buffer, against what it must.
pub(crate) fn writes(plan: &Plan, feeds: &[Feed], out: &Outputs, past: usize, n: usize) -> Vec<StepIssue> {
    let mut issues = Vec::new();
    let axis = plan.seq_axis;
    // onnxruntime-genai binds each shared buffer as both past and present:
    // the slots past the tokens so far are never the graph's to write, and
    // returned out of place (as here) they hold whatever the kernel left
    // (GroupQueryAttention with a windowed cache leaves them unset). Only a
    // static cache, which copies its past through, must keep them.
    let shared = plan.buffer.as_ref().is_some_and(|b| b.form == crate::plan::roles::CacheForm::SharedBuffer);
    for c in plan.self_past.iter().filter(|c| c.buffer) {
        let fed = feeds.iter().find(|f| f.name == c.past).and_then(|f| match &f.values {
            Values::Float(a) => Some(a),
            _ => None,
        });
        let (Some(fed), Some(present)) = (fed, out.floats.get(&c.present)) else { continue };
        // A shape that moved is the step check's finding.
        if fed.shape() != present.shape() || axis >= fed.ndim() {
            continue;
        }
        let moved = changed(fed, present, axis);
        let outside: Vec<usize> =
            moved.iter().copied().filter(|s| !((past..past + n).contains(s) || shared && *s >= past + n)).collect();
        let unwritten: Vec<usize> = (past..past + n).filter(|s| !moved.contains(s)).collect();
        // A slot fed zeros and left zero was not written (a token's keys are never all zero).
        let zero =
            |slot: usize| slot < fed.shape()[axis] && present.index_axis(Axis(axis), slot).iter().all(|v| *v == 0.0);
        let unwritten: Vec<usize> = unwritten.into_iter().filter(|&s| zero(s)).collect();
        if !outside.is_empty() {
            issues.push(StepIssue::error(
                Code::CacheWrite,
                format!(
                    "`{}` changed slot(s) {} on axis {axis}, outside the {} of the tokens fed: the call writes its keys and values at the wrong place in the buffer",
                    c.present,
                    slots(&outside),
                    if n == 1 { format!("slot {past}") } else { format!("slots {past}..={}", past + n - 1) },
                ),
                Some(&c.present),
            ));
        } else if !unwritten.is_empty() {
            issues.push(StepIssue::error(
                Code::CacheWrite,
                format!(
                    "`{}` left slot(s) {} on axis {axis} empty although tokens were fed there: the call does not write its keys and values where the caller's position says",
                    c.present,
                    slots(&unwritten)
                ),
                Some(&c.present),
            ));
        }
    }
    issues
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::IxDyn;

    #[test]
    fn only_changes_outside_the_fed_slots_count() {
        let a = ArrayD::<f32>::zeros(IxDyn(&[1, 1, 4, 2]));
        let mut b = a.clone();
        b[[0, 0, 1, 0]] = 1.0;
        assert_eq!(changed(&a, &b, 2), vec![1]);
        b[[0, 0, 3, 1]] = f32::NAN;
        assert_eq!(changed(&a, &b, 2), vec![1, 3]);
        assert_eq!(slots(&[1, 2, 3, 4, 5, 6, 7, 8]), "1, 2, 3, 4, 5, 6 and 2 more");
    }
}
