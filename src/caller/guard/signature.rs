//! The signature rules of one call: inputs fed that the model lacks, inputs
//! it needs that are not fed, every fed input's dtype, rank, fixed sizes,
//! and the symbols one call binds.

use super::Tensors;
use crate::finding::{Code, Finding};
use crate::model::fold::fold_names;
use crate::model::signature::{Dim, Signature};
use std::collections::BTreeMap;

/// Inputs fed that the model lacks, inputs it needs that are not fed, and
/// every fed input's dtype, rank, fixed sizes and symbols.
pub(super) fn signature_rules(sig: &Signature, feeds: &Tensors, spans_past: Option<&str>) -> Vec<Finding> {
    // A past's symbols are bound by what the protocol feeds (an empty dummy at
    // step 0 shares `encoder_sequence_length` with the mask): only the batch
    // axis binds across pasts and the other inputs.
    let is_past = |n: &str| crate::model::names::is_past_name(n);
    let mut out = Vec::new();
    let extra: Vec<String> = feeds.keys().filter(|n| sig.input(n).is_none()).cloned().collect();
    if !extra.is_empty() {
        out.push(
            Finding::error(
                Code::CallerSignature,
                format!(
                    "you feed {} input{} this model does not have: {}",
                    extra.len(),
                    if extra.len() == 1 { "" } else { "s" },
                    fold_names(&extra).join(", ")
                ),
            )
            .names(extra),
        );
    }
    let missing: Vec<String> = sig.inputs.iter().map(|p| p.name.clone()).filter(|n| !feeds.contains_key(n)).collect();
    if !missing.is_empty() {
        out.push(
            Finding::error(
                Code::CallerSignature,
                format!(
                    "you do not feed {} input{} the model requires: {}",
                    missing.len(),
                    if missing.len() == 1 { "" } else { "s" },
                    fold_names(&missing).join(", ")
                ),
            )
            .names(missing),
        );
    }
    let mut symbols: BTreeMap<String, (i64, String)> = BTreeMap::new();
    // (symbol, first size, first input) -> (other size, inputs)
    let mut conflicts: BTreeMap<(String, i64, String), (i64, Vec<String>)> = BTreeMap::new();
    for p in &sig.inputs {
        let (Some(r), Some((elem, dims))) = (feeds.get(&p.name), p.ty.tensor_parts()) else { continue };
        if r.dtype != elem.to_string() {
            out.push(
                Finding::error(
                    Code::CallerSignature,
                    format!("`{}` is fed {}; the model declares {elem}", p.name, r.dtype),
                )
                .tensor(&p.name),
            );
            continue;
        }
        let Some(dims) = dims else { continue };
        if r.shape.len() != dims.len() {
            out.push(
                Finding::error(
                    Code::CallerSignature,
                    format!(
                        "`{}` is fed with rank {} {:?}; the model declares rank {}",
                        p.name,
                        r.shape.len(),
                        r.shape,
                        dims.len()
                    ),
                )
                .tensor(&p.name),
            );
            continue;
        }
        for (axis, (d, v)) in dims.iter().zip(&r.shape).enumerate() {
            match d {
                Dim::Fixed(f) if f != v => out.push(
                    Finding::error(
                        Code::CallerSignature,
                        format!("`{}` axis {axis} is {v}; the model fixes it at {f}", p.name),
                    )
                    .tensor(&p.name),
                ),
                // A cached branch's [0, h, 1, d] dummy fed back is the cache rules' to name.
                Dim::Symbolic(_) if is_past(&p.name) && (axis > 0 || *v == 0) => {}
                // The mask over past and new tokens: its length is the protocol's rules' to judge.
                Dim::Symbolic(_) if axis > 0 && Some(p.name.as_str()) == spans_past => {}
                Dim::Symbolic(s) if !s.contains('+') => match symbols.get(s) {
                    Some((size, first)) if size != v => {
                        conflicts
                            .entry((s.clone(), *size, first.clone()))
                            .or_insert((*v, Vec::new()))
                            .1
                            .push(p.name.clone());
                    }
                    Some(_) => {}
                    None => {
                        symbols.insert(s.clone(), (*v, p.name.clone()));
                    }
                },
                _ => {}
            }
        }
    }
    for ((s, size, first), (v, names)) in conflicts {
        // Encoder-side tensors with fewer rows than the decoder's, a whole multiple:
        // a beam search (or several samples per source) that did not expand them.
        let encoder_side = |n: &str| n.starts_with("encoder_") && !n.contains("past");
        let beams = (size > 0 && v > size && v % size == 0 && encoder_side(&first)).then(|| v / size);
        let f = match beams {
            Some(k) => Finding::error(
                Code::CallerBeams,
                format!(
                    "`{first}` has {size} row{} for {v} decoder rows ({}): the encoder states and mask are not expanded per beam; repeat each source's rows {k} times (repeat_interleave), as the decoder's rows are",
                    if size == 1 { "" } else { "s" },
                    fold_names(&names).join(", ")
                ),
            ),
            None => Finding::error(
                Code::CallerSignature,
                format!(
                    "`{s}` is {size} in `{first}` and {v} in {} within one call: one symbol, two sizes",
                    fold_names(&names).join(", ")
                ),
            ),
        };
        out.push(f.names(names));
    }
    out
}
