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

/// Inputs whose values must matter but reach no node (or only `Shape`):
/// the graph's own fact, said whatever the run shows.
pub fn unread_inputs(sig: &Signature, inferred: &super::roles::Inferred) -> Vec<Finding> {
    use super::roles::InputRole as R;
    inferred
        .inputs
        .iter()
        .filter_map(|p| {
            let consequence = match p.role {
                R::AttentionMask => "padding is attended: a left-padded row departs from the same prompt alone",
                R::EncoderMask => "the encoder's padding is attended: a padded source row departs from the row alone",
                R::PositionIds => "positions come from elsewhere in the graph: left-padded rows and chunks get the positions the graph assumes, not those fed",
                R::CachePosition => "the cache slots written do not follow what is fed",
                R::Past => "the past is ignored: every cached step sees only its new tokens",
                R::TokenIds | R::InputsEmbeds => "the tokens fed do not change the output",
                R::PixelValues | R::AudioFeatures | R::AudioSamples => "the input fed does not change the output",
                _ => return None,
            };
            let how = sig.unread(&p.name)?;
            Some(
                Finding::warning(Code::InputUnread, format!("`{}` {how}", p.name))
                    .tensor(&p.name)
                    .cause(Some(consequence.to_string())),
            )
        })
        .collect()
}

/// A merged decoder whose `If` takes the branch that reads no past when the
/// branch flag says "use the cache", and the other one when it does not:
/// the branches are exchanged (the run confirms it with the flag inverted).
pub fn swapped_branches(sig: &Signature, inferred: &super::roles::Inferred) -> Vec<Finding> {
    use super::roles::InputRole as R;
    let pasts: Vec<&str> = inferred.inputs.iter().filter(|p| p.role == R::Past).map(|p| p.name.as_str()).collect();
    let flags: Vec<&str> =
        inferred.inputs.iter().filter(|p| p.role == R::BranchFlag).map(|p| p.name.as_str()).collect();
    let reads_past = |s: &std::collections::BTreeSet<String>| s.iter().any(|n| pasts.contains(&n.as_str()));
    sig.if_branches
        .iter()
        .filter(|b| flags.contains(&b.cond.as_str()) && !reads_past(&b.then_reads) && reads_past(&b.else_reads))
        .map(|b| {
            Finding::error(
                Code::BranchSwapped,
                format!(
                    "the `If` on `{}` reads the pasts only in its else-branch, taken when `{}` is false: the branch a caller selects with `{}` = true (every cached step) ignores the past, and step 0's (false) runs the cached branch",
                    b.cond, b.cond, b.cond
                ),
            )
            .tensor(&b.cond)
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
