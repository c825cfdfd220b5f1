//! What crosses the pipe from the child: events as JSON lines. JSON has no
//! NaN or infinity (serde_json writes `null`, which a number field cannot
//! read back), so an event carrying one would be lost on the way, and with it
//! the finding it reports. Before an event is written, every non-finite
//! measure in it becomes the largest finite number and the event gets a
//! `non-finite` finding naming where it appeared: nothing a run finds is
//! dropped because a value does not serialize.

use crate::engine::events::{Event, StepIssue};
use crate::finding::Code;

/// A stand-in JSON can carry; the finding beside it says what it was.
fn stand_in(v: &mut f64) -> bool {
    if v.is_finite() {
        return false;
    }
    *v = f64::MAX;
    true
}

/// One finding per check: where the first non-finite value was, and how many.
fn issue(check: &str, at: &[String], of: usize) -> Option<StepIssue> {
    let first = at.first()?;
    Some(StepIssue::error(
        Code::NonFinite,
        format!(
            "{check}: the logits hold NaN or Inf at {} of {of} measured (first at {first}); the differences there are not numbers and are shown as the largest finite value",
            at.len()
        ),
        None,
    ))
}

/// `ev` with every non-finite measure replaced and named in a finding.
pub(crate) fn finite(mut ev: Event) -> Event {
    match &mut ev {
        Event::Batch { rows, issues } => {
            let at: Vec<String> = rows
                .iter_mut()
                .filter_map(|(row, step, abs, rel, _)| {
                    (stand_in(abs) | stand_in(rel)).then(|| format!("row {row}, step {step}"))
                })
                .collect();
            issues.extend(issue("left-padded batch", &at, rows.len()));
        }
        Event::Chunk { rows, issues } => {
            let at: Vec<String> = rows
                .iter_mut()
                .filter_map(|(k, abs, rel, _)| {
                    (stand_in(abs) | stand_in(rel)).then(|| format!("position {k} of the chunk"))
                })
                .collect();
            issues.extend(issue("chunk after a past", &at, rows.len()));
        }
        Event::Variant { positions, issues, .. } => {
            let at: Vec<String> = positions
                .iter_mut()
                .filter_map(|(k, abs, rel, _)| (stand_in(abs) | stand_in(rel)).then(|| format!("position {k}")))
                .collect();
            issues.extend(issue("variant against fp32", &at, positions.len()));
        }
        Event::Levels { levels, issues } => {
            let n = levels.steps.len();
            let at: Vec<String> = levels
                .steps
                .iter_mut()
                .filter_map(|(step, abs, rel)| (stand_in(abs) | stand_in(rel)).then(|| format!("step {step}")))
                .collect();
            issues.extend(issue("optimization levels", &at, n));
        }
        Event::Window { probe, issues } => {
            let bad = stand_in(&mut probe.outside) | stand_in(&mut probe.inside);
            if bad {
                issues.extend(issue("sliding-window probe", &[format!("a past of {}", probe.past_len)], 2));
            }
        }
        Event::Step { seconds, parity, parity_rel, issues, step, .. } => {
            stand_in(seconds);
            let bad = parity.is_some_and(|p| !p.is_finite()) || parity_rel.is_some_and(|p| !p.is_finite());
            if bad && !issues.iter().any(|i| i.code == Code::NonFinite) {
                issues.extend(issue("parity", &[format!("step {step}")], 1));
            }
            for p in [parity, parity_rel].into_iter().flatten() {
                stand_in(p);
            }
        }
        Event::Generated { top5, .. } => {
            for (_, logit) in top5.iter_mut().flatten() {
                stand_in(logit);
            }
        }
        _ => {}
    }
    ev
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nan_row_survives_the_pipe_with_a_finding() {
        let ev = finite(Event::Batch { rows: vec![(1, 2, f64::NAN, f64::NAN, false)], issues: Vec::new() });
        let line = serde_json::to_string(&ev).unwrap();
        let back: Event = serde_json::from_str(&line).expect("the event reads back");
        let Event::Batch { rows, issues } = back else { panic!() };
        assert_eq!(rows[0].2, f64::MAX);
        assert_eq!(issues[0].code, Code::NonFinite);
        assert!(issues[0].message.contains("at 1 of 1 measured (first at row 1, step 2)"), "{}", issues[0].message);
        // Without it the line does not read back: the event would be lost.
        let raw = Event::Batch { rows: vec![(1, 2, f64::NAN, 0.0, false)], issues: Vec::new() };
        assert!(serde_json::from_str::<Event>(&serde_json::to_string(&raw).unwrap()).is_err());
    }
}
