//! Multimodal rotary positions (`[sections, batch, seq]`, Qwen2-VL's
//! M-RoPE): for text tokens every section's row holds the same positions, so
//! a graph whose sections all read row 0 passes every text-only run and is
//! wrong on every image. The probe feeds the prompt once with equal rows and
//! once with rows 1.. changed: a graph that reads them moves its logits.

use crate::engine::context::Ctx;
use crate::engine::events::{Event, StepIssue};
use crate::engine::feeds::{cached_step, Cache, StepInput, Values};
use crate::engine::session::run;
use crate::finding::Code;

/// The prompt with equal position rows, then with rows 1.. doubled and zeroed.
pub(crate) fn probe(ctx: &mut Ctx<'_>, emit: &mut dyn FnMut(Event)) {
    let plan = &ctx.job.plan;
    let (Some(name), Some(k)) = (plan.position_ids.clone(), plan.position_rows) else { return };
    if k < 2 {
        return;
    }
    let prompt = ctx.prompt.clone();
    let cache = Cache::empty(plan, 0);
    let input = StepInput { step: 0, new_tokens: &prompt, encoder_states: None, enc_len: 0 };
    let feeds = match ctx.embedded(cached_step(plan, &input, &cache)) {
        Ok(f) => f,
        Err(_) => return,
    };
    let mut moved = feeds.clone();
    if let Some(Values::Int(a)) = moved.iter_mut().find(|f| f.name == name).map(|f| &mut f.values) {
        for (section, mut row) in a.axis_iter_mut(ndarray::Axis(0)).enumerate() {
            // Row 1 twice the text positions, row 2 (and on) all zero: an image's grid would differ so.
            row.mapv_inplace(|p| {
                if section == 1 {
                    2 * p
                } else if section >= 2 {
                    0
                } else {
                    p
                }
            });
        }
    }
    let logits = |out: Result<crate::engine::feeds::Outputs, String>| out.ok()?.floats.get(&plan.logits).cloned();
    let (Some(a), Some(b)) = (logits(run(&mut ctx.session, &feeds)), logits(run(&mut ctx.session, &moved))) else {
        return;
    };
    let gap = a.iter().zip(b.iter()).fold(0.0f64, |m, (x, y)| m.max(f64::from((x - y).abs())));
    let issues = if gap == 0.0 {
        vec![StepIssue::error(
            Code::PositionRows,
            format!(
                "`{name}` has {k} rows (one per rotary section), but changing rows 1 to {} leaves the logits exactly unchanged: every section reads row 0, so text-only calls (equal rows) are right and every image call (rows that differ) is wrong",
                k - 1
            ),
            Some(&name),
        )]
    } else {
        Vec::new()
    };
    emit(Event::Probe { what: format!("`{name}` rows 1.. changed: logits moved by {gap:.3e}"), issues });
}
