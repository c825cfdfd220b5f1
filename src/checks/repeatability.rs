//! Repeatability: the same feeds run twice on one session must give the same
//! logits bit for bit (onnxruntime#22723: a kernel that keeps state between
//! runs answers differently the second time). The cache run asks it of step 0
//! of its first run only.

use crate::checks::step;
use crate::engine::events::StepIssue;
use crate::engine::feeds::{Feed, Outputs};
use crate::engine::session::run;
use crate::finding::Code;
use ort::session::Session;

/// Runs `feeds` again on `session` and compares the logits with `out`'s; an
/// issue when they differ. A second run that fails says nothing here (the
/// cache run has its own answer to a failing run).
pub(crate) fn check(session: &mut Session, feeds: &[Feed], out: &Outputs, logits: &str) -> Option<StepIssue> {
    let again = run(session, feeds).ok()?;
    let (a, b) = (out.floats.get(logits)?, again.floats.get(logits)?);
    // Bit for bit (NaN where NaN was is the same answer).
    let same = a.shape() == b.shape()
        && a.iter().zip(b.iter()).all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()));
    if same {
        return None;
    }
    let g = step::gap(a, b);
    Some(StepIssue::error(
        Code::Repeatability,
        format!("step 0 run twice on one session: the logits differ by {:.3e} the second time", g.abs),
        Some(logits),
    ))
}
