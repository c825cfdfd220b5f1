//! `--deep`: the first run's steps re-run, on the same feeds, with ONNX
//! Runtime's graph optimizations disabled. The default level (`all`) fuses
//! attention, LayerNorm and GELU patterns; a fusion that matches a pattern it
//! should not changes what the model computes (onnxruntime#18945, #17689,
//! optimum#325) while cached and uncached runs still agree with each other.

use crate::diagnose::cause::first_line;
use crate::diagnose::diverge::relative;
use crate::engine::context::Ctx;
use crate::engine::events::{Event, Levels, StepIssue};
use crate::engine::session::{run, with_threads};
use crate::finding::Code;
use crate::plan::numeric::Tolerance;
use ort::session::{builder::GraphOptimizationLevel, Session};

/// The level the driven session ran at: ONNX Runtime's default.
const RAN_AT: &str = "all (ONNX Runtime's default)";
/// The level the steps are re-run at.
const RERUN_AT: &str = "disabled";

/// The finding for the first step whose logits depart beyond `tolerance`.
pub(crate) fn judge(steps: &[(usize, f64, f64)], tolerance: &Tolerance) -> Option<StepIssue> {
    let &(step, abs, rel) = steps.iter().find(|(_, abs, rel)| tolerance.exceeded(*abs, *rel))?;
    let worst = steps.iter().map(|s| s.2).fold(0.0, f64::max);
    let mut i = StepIssue::error(
        Code::OptimizationLevels,
        format!(
            "graph optimizations {RERUN_AT} vs {RAN_AT}: the logits of step {step} differ by max |Δ| {abs:.3e} (relative {rel:.2e}) > tolerance {} (worst relative over {} steps {worst:.2e})",
            tolerance.describe(),
            steps.len()
        ),
        None,
    );
    i.cause = Some(
        "the same feeds give other logits once ONNX Runtime rewrites the graph: a fusion (attention, LayerNorm, GELU, …) matched a pattern it does not compute the same way; pin `graph_optimization_level` to the level that agrees with the framework, or export the pattern the fusion expects".into(),
    );
    Some(i)
}

/// Re-runs the recorded steps at the `disabled` level and compares the logits.
pub(crate) fn compare(ctx: &mut Ctx<'_>, emit: &mut dyn FnMut(Event)) {
    let recorded = std::mem::take(&mut ctx.recorded);
    if recorded.is_empty() {
        return;
    }
    let plan = &ctx.job.plan;
    let opened = with_threads(Session::builder(ctx.env), ctx.job.options.threads)
        .and_then(|b| Ok(b.with_optimization_level(GraphOptimizationLevel::Disable)?))
        .and_then(|mut b| b.commit_from_file(&ctx.job.model))
        .map_err(|e| e.to_string());
    let mut steps = Vec::new();
    let mut issues = Vec::new();
    let outcome = opened.and_then(|mut s| {
        for (step, feeds, logits) in &recorded {
            let out = run(&mut s, feeds)?;
            let other = out.floats.get(&plan.logits).ok_or("no logits")?;
            let (abs, rel) = relative(other, logits).unwrap_or((f64::INFINITY, f64::INFINITY));
            steps.push((*step, abs, rel));
        }
        Ok(())
    });
    if let Err(e) = outcome {
        issues.push(StepIssue::error(
            Code::OptimizationLevels,
            format!("the steps could not be re-run with graph optimizations {RERUN_AT}: {}", first_line(&e)),
            None,
        ));
    }
    issues.extend(judge(&steps, &plan.tolerance));
    let levels = Levels { ran_at: RAN_AT.into(), rerun_at: RERUN_AT.into(), steps };
    emit(Event::Levels { levels, issues });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::numeric::{NumericForm, Tolerance};

    #[test]
    fn the_first_step_beyond_the_form_s_tolerance_is_named_with_both_levels() {
        let t = Tolerance { abs: Some(1e-4), rel: None, reason: String::new(), form: NumericForm::Float32 };
        assert!(judge(&[(0, 1e-6, 1e-7), (1, 9e-5, 1e-5)], &t).is_none());
        let i = judge(&[(0, 1e-6, 1e-7), (1, 3e-3, 4e-4), (2, 5e-2, 8e-3)], &t).unwrap();
        assert_eq!(i.code, Code::OptimizationLevels);
        assert!(i.message.contains("step 1 differ by max |Δ| 3.000e-3"), "{}", i.message);
        assert!(i.message.contains("disabled vs all"), "{}", i.message);
        assert!(i.message.contains("worst relative over 3 steps 8.00e-3"), "{}", i.message);
        let nan = judge(&[(0, f64::NAN, f64::NAN)], &t);
        assert!(nan.is_some(), "a NaN on one level only is a difference");
    }
}
