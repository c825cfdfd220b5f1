//! What must hold after each step: outputs present and shaped right, the
//! self-attention cache grown by the tokens fed, the cross-attention cache at
//! the encoder length, finite logits; and the parity measure. Pure functions
//! of the outputs, unit-tested without ONNX Runtime.

use crate::engine::events::StepIssue;
use crate::engine::feeds::Outputs;
use crate::finding::Code;
use crate::plan::Plan;
use ndarray::{ArrayD, Axis};

/// Sizes a step's outputs are checked against.
pub(crate) struct Expect {
    pub(crate) batch: usize,
    pub(crate) new_tokens: usize,
    /// Self-attention present length: past + new on cached steps, new otherwise.
    pub(crate) present_len: i64,
    pub(crate) enc_len: i64,
    pub(crate) step: usize,
    /// Whether this run must return the cross-attention presents (step 0 of a
    /// merged decoder or of a split pair; never a with-past decoder).
    pub(crate) cross_presents: bool,
}

/// Every check of one step's outputs that did not hold.
pub(crate) fn step_outputs(plan: &Plan, out: &Outputs, e: &Expect) -> Vec<StepIssue> {
    let mut issues = Vec::new();
    let mut issue =
        |code: Code, message: String, tensor: &str| issues.push(StepIssue::error(code, message, Some(tensor)));
    match out.shape(&plan.logits) {
        None => issue(Code::StepOutput, format!("`{}` was not produced", plan.logits), &plan.logits),
        Some(s) => {
            let want = vec![e.batch as i64, e.new_tokens as i64, plan.vocab];
            if s != want {
                issue(
                    Code::LogitsShape,
                    format!("`{}` is {s:?}, expected [batch, new tokens, vocab] = {want:?}", plan.logits),
                    &plan.logits,
                );
            }
        }
    }
    // NaN/Inf in logits or in a present (float16 overflow): which tensor, how many.
    for name in std::iter::once(&plan.logits).chain(plan.self_past.iter().map(|c| &c.present)) {
        if let Some(l) = out.floats.get(name) {
            let nan = l.iter().filter(|v| v.is_nan()).count();
            let inf = l.iter().filter(|v| v.is_infinite()).count();
            if nan + inf > 0 {
                issue(Code::NonFinite, format!("`{name}` has {nan} NaN and {inf} Inf values (of {})", l.len()), name);
            }
        }
    }
    let axis = plan.seq_axis;
    for c in &plan.self_past {
        match out.shape(&c.present) {
            // A caller-kept buffer's present is the new tokens' rows alone.
            Some(s) if c.buffer && plan.caller_kept().is_some() => {
                if s.get(axis) != Some(&(e.new_tokens as i64)) {
                    issue(
                        Code::CacheGrowth,
                        format!(
                            "`{}` has length {} on axis {axis}, expected the {} new token(s): this export's presents are the new rows the caller writes into its buffer",
                            c.present,
                            s.get(axis).map(|v| v.to_string()).unwrap_or("?".into()),
                            e.new_tokens
                        ),
                        &c.present,
                    );
                }
            }
            // A fixed-size state keeps its shape: nothing to grow.
            Some(s) if c.fixed => {
                let want: Vec<i64> = c.shape.iter().skip(1).copied().collect();
                if s.iter().skip(1).copied().collect::<Vec<i64>>() != want {
                    issue(
                        Code::CacheGrowth,
                        format!(
                            "`{}` has shape {s:?}, expected its fixed shape {:?}: {} is carried from call to call, never grown",
                            c.present,
                            c.shape,
                            if c.buffer { "a fixed cache buffer" } else { "a state" }
                        ),
                        &c.present,
                    );
                }
            }
            None => issue(Code::StepOutput, format!("`{}` was not produced", c.present), &c.present),
            Some(s) if s.get(axis) != Some(&e.present_len) => issue(
                Code::CacheGrowth,
                format!(
                    "`{}` has length {} on axis {axis}, expected {} (past + {} new): {}",
                    c.present,
                    s.get(axis).map(|v| v.to_string()).unwrap_or("?".into()),
                    e.present_len,
                    e.new_tokens,
                    growth(s.get(axis).copied(), e.present_len - e.new_tokens as i64, e.new_tokens as i64)
                ),
                &c.present,
            ),
            Some(_) => {}
        }
    }
    for c in &plan.cross_past {
        match out.shape(&c.present) {
            None if e.cross_presents => {
                issue(Code::StepOutput, format!("`{}` was not produced", c.present), &c.present)
            }
            // Cached steps of optimum merged decoders return [0, heads, 1, head_dim] dummies: not to be fed back.
            Some(s) if e.step > 0 && s.first() == Some(&0) => {}
            Some(s) if s.get(axis) != Some(&e.enc_len) => issue(
                Code::CrossCache,
                format!(
                    "`{}` has length {:?} on axis {axis}, expected the encoder length {}",
                    c.present,
                    s.get(axis),
                    e.enc_len
                ),
                &c.present,
            ),
            _ => {}
        }
    }
    issues
}

/// Logits beyond ± `cap` where config.json's `final_logit_softcapping` bounds them.
pub(crate) fn softcap_issue(logits: &ArrayD<f32>, cap: f64, name: &str) -> Option<StepIssue> {
    let worst = logits.iter().map(|v| f64::from(v.abs())).filter(|v| v.is_finite()).fold(0.0, f64::max);
    let beyond = logits.iter().filter(|v| f64::from(v.abs()) > cap * (1.0 + 1e-3)).count();
    (beyond > 0).then(|| {
        let mut i = StepIssue::error(
            Code::LogitSoftcap,
            format!("`{name}` reaches |x| = {worst:.4} ({beyond} of {} values beyond ± {cap}) where config.json's final_logit_softcapping caps every logit at ± {cap}", logits.len()),
            Some(name),
        );
        i.cause = Some("the graph does not apply the final softcap tanh(x / cap) · cap (an export from a config without it, or an exporter that dropped it): sampling temperatures and repetition penalties act on other logits than the model's".into());
        i
    })
}

/// What a present's length says about how the graph writes the cache, from
/// the past length fed and the tokens fed: the arithmetic, not a guess.
pub(crate) fn growth(got: Option<i64>, past: i64, new: i64) -> String {
    let Some(got) = got else { return "the cache does not grow by the tokens fed".into() };
    let grown = got - past;
    if new > 0 && grown > new && grown % new == 0 {
        let k = grown / new;
        return format!(
            "the cache grows by {k} × the tokens fed ({got} after a past of {past} and {new} new): each new entry is appended {k} times"
        );
    }
    if past > 0 && got == new {
        return format!(
            "the present holds only the {new} token(s) fed: the past fed ({past}) is dropped, not extended"
        );
    }
    if past > 0 && got == past {
        return "the present is the past fed, unchanged: the new tokens are not appended".into();
    }
    "the cache does not grow by the tokens fed".into()
}

/// Cached against uncached logits at the last position, in f64.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Gap {
    /// Max |cached − uncached|.
    pub(crate) abs: f64,
    /// `abs` over max |uncached logit|.
    pub(crate) rel: f64,
    /// Every row's greedy (argmax) token is the same on both paths.
    pub(crate) greedy_agrees: bool,
}

/// The gap between cached and uncached logits at the last position.
pub(crate) fn gap(cached: &ArrayD<f32>, full: &ArrayD<f32>) -> Gap {
    let worst = Gap { abs: f64::INFINITY, rel: f64::INFINITY, greedy_agrees: false };
    let last = |a: &ArrayD<f32>| a.index_axis(Axis(1), a.shape()[1].saturating_sub(1)).to_owned();
    if cached.ndim() < 3 || full.ndim() < 3 || cached.shape()[1] == 0 || full.shape()[1] == 0 {
        return worst;
    }
    let (x, y) = (last(cached), last(full));
    if x.shape() != y.shape() {
        return worst;
    }
    // A NaN on either side is a NaN gap (f64::max would skip it).
    let abs = x.iter().zip(y.iter()).map(|(a, b)| (f64::from(*a) - f64::from(*b)).abs()).fold(0.0_f64, |m, d| {
        if d.is_nan() || m.is_nan() {
            f64::NAN
        } else {
            m.max(d)
        }
    });
    let scale = y.iter().map(|v| f64::from(*v).abs()).fold(0.0, f64::max);
    let rel = if scale > 0.0 { abs / scale } else { abs };
    let greedy_agrees = (0..x.shape()[0]).all(|row| argmax_last(cached, row) == argmax_last(full, row));
    Gap { abs, rel, greedy_agrees }
}

/// The greedy token of row `batch` at the last position.
pub(crate) fn argmax_last(logits: &ArrayD<f32>, batch: usize) -> i64 {
    if logits.ndim() < 3 || batch >= logits.shape()[0] || logits.shape()[1] == 0 {
        return 0;
    }
    let row = logits.index_axis(Axis(0), batch);
    let last = row.index_axis(Axis(0), row.shape()[0] - 1);
    let mut best = (0usize, f32::NEG_INFINITY);
    for (i, v) in last.iter().enumerate() {
        if *v > best.1 {
            best = (i, *v);
        }
    }
    best.0 as i64
}

/// The parity issue, when the gap is beyond what the numeric form explains.
pub(crate) fn parity_issue(plan: &Plan, g: Gap) -> Option<StepIssue> {
    plan.tolerance.exceeded(g.abs, g.rel).then(|| {
        StepIssue::error(
            Code::Parity,
            format!(
                "cached logits differ from recomputing the prefix without cache: max |Δ| {:.3e} (relative {:.2e}) > tolerance {}{}",
                g.abs,
                g.rel,
                plan.tolerance.describe(),
                if g.greedy_agrees { "" } else { "; the greedy token differs" }
            ),
            Some(&plan.logits),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::growth;

    #[test]
    fn growth_names_the_arithmetic() {
        // A 4-token prompt whose key is appended twice: 8.
        assert!(growth(Some(8), 0, 4).contains("2 × the tokens fed"), "{}", growth(Some(8), 0, 4));
        assert!(growth(Some(7), 5, 1).contains("2 × the tokens fed"));
        assert!(growth(Some(1), 5, 1).contains("past fed (5) is dropped"));
        assert!(growth(Some(5), 5, 1).contains("unchanged"));
        assert_eq!(growth(Some(3), 5, 1), "the cache does not grow by the tokens fed");
        assert_eq!(growth(None, 5, 1), "the cache does not grow by the tokens fed");
    }
}
