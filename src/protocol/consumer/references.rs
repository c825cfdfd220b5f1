//! The plans and references a consumer's own generation is compared with:
//! the text form it generates from, and the tool's uncached reference of
//! the very files it opens (a dtype variant, an encoder-decoder's variant
//! pair) with the tolerance of their numeric form.

use std::path::Path;

/// The plan of `p`'s text decoder-only form, the one the consumers'
/// causal-LM programs generate from (a decoder fed embeddings belongs to a
/// multimodal class, which is not run).
pub fn text_decoder(p: &crate::protocol::Protocol) -> Option<&crate::plan::Plan> {
    text_plan(p).filter(|pl| pl.family == crate::plan::Family::DecoderOnly)
}

/// The plan of `p`'s text form a consumer generates from with token ids
/// alone: decoder-only, or an encoder-decoder fed source ids.
pub fn text_plan(p: &crate::protocol::Protocol) -> Option<&crate::plan::Plan> {
    let l = p.loops.iter().find(|l| l.form != "with-past-alone")?;
    let text = l.embed.is_none()
        && l.plan.as_ref().is_some_and(|pl| !pl.dtypes.iter().any(|(n, _)| n.contains("inputs_embeds")));
    l.plan
        .as_ref()
        .filter(|pl| matches!(pl.family, crate::plan::Family::DecoderOnly | crate::plan::Family::Seq2Seq) && text)
}

/// The plan of `p`'s form a consumer generates from with a text prompt:
/// [`text_plan`]'s, or a decoder-only form fed the embeddings of the
/// folder's `embed_tokens` file (an image-text model's text path).
pub(super) fn prompt_plan(p: &crate::protocol::Protocol) -> Option<&crate::plan::Plan> {
    text_plan(p).or_else(|| {
        let l = p.loops.iter().find(|l| l.form != "with-past-alone")?;
        l.embed.as_ref()?;
        l.plan.as_ref().filter(|pl| pl.family == crate::plan::Family::DecoderOnly)
    })
}

/// The uncached reference of an encoder-decoder's dtype variant as a
/// consumer opens it: the decoder file `decoder` (its own protocol, its own
/// numeric form) fed by the states of `encoder` (the folder's first
/// encoder when none is named), from the folder's decoder start.
pub(super) fn variant_pair_reference(
    p: &crate::protocol::Protocol,
    dir: &Path,
    decoder: &str,
    encoder: Option<&str>,
    ids: &[i64],
    fallback: &crate::plan::numeric::Tolerance,
    steps: usize,
) -> (Result<crate::protocol::reference::Generated, String>, crate::plan::numeric::Tolerance) {
    let Some(folder) = p.loops.iter().find(|l| l.form != "with-past-alone") else {
        return (Err("no decoder form".into()), fallback.clone());
    };
    let path = dir.join(decoder);
    let mut v = match crate::protocol::describe(&path) {
        Ok(v) => v,
        Err(e) => return (Err(format!("{}: {e}", path.display())), fallback.clone()),
    };
    let Some(l) = v.loops.iter_mut().find(|l| l.form != "with-past-alone") else {
        return (Err(format!("{decoder}: no decoder form")), fallback.clone());
    };
    // Files of the variant's protocol are named beside the decoder.
    let beside = |rel: &str| dir.join(rel).file_name().map(|n| n.to_string_lossy().into_owned());
    l.encoder = encoder.and_then(beside).or_else(|| folder.encoder.as_deref().and_then(beside));
    (l.decoder_start, l.eos) = (folder.decoder_start, folder.eos);
    let tolerance = l.plan.as_ref().map_or_else(|| fallback.clone(), |pl| pl.tolerance.clone());
    (crate::protocol::reference::generate(&v, &path, ids.to_vec(), None, steps, false, Some(1)), tolerance)
}

/// The uncached reference of one file of the folder (a dtype variant a
/// consumer opens), with the tolerance of its numeric form.
pub(crate) fn reference_of_file(
    path: &Path,
    ids: &[i64],
    fallback: &crate::plan::numeric::Tolerance,
    steps: usize,
) -> (Result<crate::protocol::reference::Generated, String>, crate::plan::numeric::Tolerance) {
    match crate::protocol::describe(path) {
        Ok(p) => {
            let tolerance = text_decoder(&p).map_or_else(|| fallback.clone(), |pl| pl.tolerance.clone());
            (crate::protocol::reference::generate(&p, path, ids.to_vec(), None, steps, false, Some(1)), tolerance)
        }
        Err(e) => (Err(format!("{}: {e}", path.display())), fallback.clone()),
    }
}
