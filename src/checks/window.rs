//! The sliding-window probe. A config's `sliding_window` that the exported
//! graph ignores is consistent with itself (cached = uncached) and wrong
//! (sonos/tract#2323), so parity cannot see it. What a window means can be
//! measured instead: one new token on a past longer than the window, and the
//! cache changed at one position in the windowed layers only. Outside the
//! window the change must not reach the logits; inside it, it must. The cache
//! is fed, not recomputed, so the receptive field does not grow with depth
//! and a past of `window + 2` suffices whatever the layer count.

use crate::checks::batch::{padded_step, Padded};
use crate::checks::step;
use crate::engine::events::{Event, StepIssue, WindowProbe};
use crate::engine::feeds::{past_zeros, Rng};
use crate::engine::options::Window;
use crate::engine::session::run;
use crate::finding::Code;
use crate::model::signature::ElemType;
use crate::plan::Plan;
use ndarray::{ArrayD, Axis};
use ort::session::Session;

/// Windows longer than this are not probed: the past alone would be too
/// large for a default check (the static graph is all that speaks then).
pub(crate) const MAX_PROBED: usize = 4096;

type Pasts = Vec<(String, ElemType, ArrayD<f32>)>;

/// The layer a cache tensor belongs to: the first number in its name
/// (`past_key_values.3.key`, `past_key_3`, `past.3.value`), else by order.
pub(crate) fn layer_of(name: &str, index: usize, count: usize, layers: usize) -> usize {
    let digits: String = name.chars().skip_while(|c| !c.is_ascii_digit()).take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().unwrap_or(index * layers.max(1) / count.max(1))
}

/// Seeded pasts of `len` positions at batch 1.
fn seeded_pasts(plan: &Plan, len: usize, rng: &mut Rng) -> Pasts {
    plan.self_past
        .iter()
        .map(|c| {
            let mut a = past_zeros(&c.shape, plan.seq_axis, 1, len);
            a.mapv_inplace(|_| rng.normal());
            (c.past.clone(), c.dtype, a)
        })
        .collect()
}

/// The same pasts with `position` re-drawn in the windowed layers only.
fn changed(plan: &Plan, pasts: &Pasts, w: &Window, position: usize, rng: &mut Rng) -> Pasts {
    let layers = plan.self_past.len() / 2;
    pasts
        .iter()
        .enumerate()
        .map(|(i, (name, elem, a))| {
            let mut a = a.clone();
            let layer = layer_of(name, i, pasts.len(), layers);
            if w.layers.as_ref().is_none_or(|l| l.contains(&layer)) {
                a.index_axis_mut(Axis(plan.seq_axis), position).mapv_inplace(|_| 2.0 * rng.normal());
            }
            (name.clone(), *elem, a)
        })
        .collect()
}

/// Runs the probe on `session` and says what it measured.
pub(crate) fn probe(session: &mut Session, plan: &Plan, w: &Window, rng: &mut Rng) -> Result<Event, String> {
    let past_len = w.size + 2;
    let token = rng.below(plan.vocab);
    let pasts = seeded_pasts(plan, past_len, rng);
    let batch = Padded::new(vec![vec![token]]);
    let mut logits = |p: &Pasts| -> Result<ArrayD<f32>, String> {
        let feeds = padded_step(plan, &batch, &[vec![token]], past_len, p, 0);
        run(session, &feeds)?.floats.get(&plan.logits).cloned().ok_or_else(|| "no logits".to_string())
    };
    let base = logits(&pasts)?;
    let outside = step::gap(&logits(&changed(plan, &pasts, w, 0, rng))?, &base);
    let inside = step::gap(&logits(&changed(plan, &pasts, w, past_len - 1, rng))?, &base);
    let probe =
        WindowProbe { size: w.size, source: w.source.clone(), past_len, outside: outside.abs, inside: inside.abs };
    let issues = judge(plan, &probe, outside.rel).into_iter().collect();
    Ok(Event::Window { probe, issues })
}

/// A window is ignored when a change outside it moves the logits beyond the
/// numeric form's tolerance and comparably to a change inside it (an honoured
/// window masks the old position exactly: 0 on every fixture that keeps one).
fn judge(plan: &Plan, p: &WindowProbe, outside_rel: f64) -> Option<StepIssue> {
    if !plan.tolerance.exceeded(p.outside, outside_rel) || p.outside < 0.05 * p.inside {
        return None;
    }
    let mut i = StepIssue::error(
        Code::SlidingWindow,
        format!(
            "{} = {}, but the graph attends beyond it: on a past of {}, changing the cache at position 0 ({} positions back) moves the logits by {:.3e} (a change inside the window: {:.3e})",
            p.source, p.size, p.past_len, p.past_len, p.outside, p.inside
        ),
        Some(&plan.logits),
    );
    i.cause = Some(format!(
        "the export traced full causal attention (no banded mask, no `local_window_size`): every position up to {} generates as the config says, later ones attend to tokens the trained model never saw together; export with the window kept in the config (optimum traces it as a banded mask) or drop `sliding_window` from config.json if the model is meant to attend to everything",
        p.size
    ));
    Some(i)
}

#[cfg(test)]
mod tests {
    use super::layer_of;

    #[test]
    fn layers_from_names_of_every_convention_else_by_order() {
        assert_eq!(layer_of("past_key_values.3.key", 0, 8, 4), 3);
        assert_eq!(layer_of("past_key_12", 0, 8, 4), 12);
        assert_eq!(layer_of("past.1.value", 0, 8, 4), 1);
        assert_eq!(layer_of("cache_k", 5, 8, 4), 2);
    }
}
