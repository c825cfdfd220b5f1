//! What every emitter reads off a protocol loop and its plan.

use super::table::Loop;
use crate::plan::Plan;

/// What every emitter needs, read off a loop and its plan.
pub(crate) struct Spec<'a> {
    pub(crate) l: &'a Loop,
    pub(crate) plan: &'a Plan,
    pub(crate) seq2seq: bool,
    pub(crate) pair: bool,
    /// `(name, dtype, dims)` of the encoder's inputs.
    pub(crate) encoder_inputs: &'a [(String, String, Vec<i64>)],
    /// The step-0 file's input names (a split pair's no-past decoder).
    pub(crate) step0_inputs: &'a [String],
}

impl Spec<'_> {
    pub(crate) fn audio(&self) -> bool {
        self.encoder_inputs.iter().any(|(_, t, _)| t.starts_with("float"))
    }
    /// The encoder states' element type: declared by the plan's model, else
    /// (a split pair's no-past decoder) the cache's float type.
    pub(crate) fn states_dtype(&self) -> String {
        match &self.plan.encoder_hidden_states {
            Some(n) => self.plan.dtype_of(n).to_string(),
            None => self.plan.self_past.first().map_or("float32".into(), |c| c.dtype.to_string()),
        }
    }
    /// The encoder-states input name at step 0 (the pair's no-past decoder has one the plan lacks).
    pub(crate) fn states_name(&self) -> Option<String> {
        self.plan.encoder_hidden_states.clone().or_else(|| {
            (self.pair && self.step0_inputs.iter().any(|n| n == "encoder_hidden_states"))
                .then(|| "encoder_hidden_states".to_string())
        })
    }
}
