//! What the inferred protocol shows wrong before anything runs: faults of
//! the cache protocol itself, whatever a contract says (a contract checks
//! names and sizes; these are about the loop every caller writes).

use crate::finding::{Code, Finding};
use crate::model::signature::{Port, Signature};

/// Presents whose element type is not their past's: what a caller feeds
/// back is refused (or must be converted) at the first cached step.
pub fn present_dtypes(sig: &Signature, inferred: &super::roles::Inferred) -> Vec<Finding> {
    let elem = |p: Option<&Port>| p.and_then(|p| p.ty.tensor_parts()).map(|(e, _)| e);
    inferred
        .pairs
        .iter()
        .filter_map(|p| {
            let (past, present) = (elem(sig.input(&p.past))?, elem(sig.output(&p.present))?);
            (past != present).then(|| {
                Finding::error(
                    Code::CacheDtype,
                    format!("`{}` is {present}, but it is fed back as `{}`, which takes {past}", p.present, p.past),
                )
                .tensor(&p.present)
                .cause(Some("a caller that feeds each present back as the next past (every runtime's loop) is refused at the first cached step, or must convert the whole cache every step: the export cast one side and not the other".into()))
            })
        })
        .collect()
}

/// The first input the plan cannot place, with the inference's reason.
pub fn unplaced(plan: &super::Plan, inferred: &super::roles::Inferred, sig: &Signature) -> Option<Finding> {
    let first = plan.unknown_inputs.first()?;
    let why = inferred.inputs.iter().find(|p| &p.name == first).map_or(String::new(), |p| p.evidence.clone());
    Some(
        Finding::error(
            Code::Plan,
            format!(
                "cannot place input `{first}` ({} of {} inputs unplaced): {why}; the driver feeds only what it can place (by name: input_ids, attention_mask, position_ids, cache_position, num_logits_to_keep, use_cache_branch; by use: ids an embedding Gather reads, a float input an output refreshes): name it in a contract's `cache` section",
                plan.unknown_inputs.len(),
                sig.inputs.len()
            ),
        )
        .tensor(first),
    )
}
