//! What the table says for the forms beyond a growing cache, read from the
//! same plan the driver runs: token ids turned into `inputs_embeds` by the
//! folder's embedding model, token rows of batch × codebooks, `cache_position`
//! and fixed buffers written in place, a mask over the whole buffer, fixed
//! states carried, 3-D positions, `logits_to_keep`.

use crate::plan::Plan;

/// One input row before folding: name, dtype, shape, where the value comes from.
pub(super) type Row = (String, String, String, String);

/// The rows of `plan`'s forms: `rows` as a growing cache would have them, changed in place.
pub(super) fn adjust(plan: &Plan, step0: bool, embed: Option<&str>, rows: &mut Vec<Row>) {
    let mut new =
        if step0 && plan.family != crate::plan::Family::Seq2Seq { "prompt_len".to_string() } else { "1".into() };
    // A graph that fixes its tokens per call takes the prompt in calls of that size too.
    if let (Some(k), true) = (plan.tokens_per_call, step0) {
        new = k.to_string();
        if let Some(r) = rows.iter_mut().find(|r| r.0 == plan.input_ids) {
            r.2 = format!("[batch, {k}]");
            r.3 = format!("the prompt's token ids, {k} per call (the graph takes no more), one call after another");
        }
        if let Some(r) = plan.position_ids.as_ref().and_then(|p| rows.iter_mut().find(|r| &r.0 == p)) {
            r.2 = format!("[batch, {k}]");
            r.3 = format!("the positions of the call's {k} prompt token(s): past_len + arange({k})");
        }
    }
    // Token rows: one per codebook of each batch item.
    if let Some(k) = plan.codebooks {
        if let Some(r) = rows.iter_mut().find(|r| r.0 == plan.input_ids) {
            r.2 = format!("[{k}×batch, {new}]");
            r.3 = format!("{} (one row per codebook: row b·{k} + c is item b's codebook c)", r.3);
        }
    }
    // Embeddings: the ids go through the embedding model first, every call.
    if let Some(embeds) = &plan.inputs_embeds {
        if let Some(r) = rows.iter_mut().find(|r| r.0 == plan.input_ids) {
            let width = plan.embeds_width.map_or("hidden".into(), |w| w.to_string());
            let ids = r.3.clone();
            *r = (
                embeds.clone(),
                plan.dtype_of(embeds).to_string(),
                format!("[batch, {new}, {width}]"),
                format!("{} → inputs_embeds of {ids} (run first, every call)", embed.unwrap_or("the embedding model")),
            );
        }
    }
    if let (Some(name), Some(rows_k)) = (&plan.position_ids, plan.position_rows) {
        if let Some(r) = rows.iter_mut().find(|r| &r.0 == name) {
            r.2 = r.2.replacen("[batch", &format!("[{rows_k}, batch"), 1);
            r.3 = format!("{} in each of the {rows_k} rows (text tokens: every rotary section the same)", r.3);
        }
    }
    if let Some(b) = &plan.buffer {
        if let (Some(name), true) = (&plan.attention_mask, b.mask_over_buffer) {
            if let Some(r) = rows.iter_mut().find(|r| &r.0 == name) {
                r.2 = format!("[batch, {}]", b.len);
                r.3 = if b.form == crate::plan::roles::CacheForm::CallerRolled {
                    format!(
                        "zeros, then ones over past + new at the end: the whole {}-slot buffer, right-aligned",
                        b.len
                    )
                } else {
                    format!("ones over past + new, zeros after: the whole {}-slot buffer", b.len)
                };
            }
        }
    }
    if let Some(name) = &plan.cache_position {
        let (shape, src) = if step0 {
            (
                format!("[{new}]"),
                "the slots this call's prompt tokens are written to (arange from the tokens already written)"
                    .to_string(),
            )
        } else {
            ("[1]".to_string(), "[past_len]: the slot the new token is written to".to_string())
        };
        rows.push((name.clone(), plan.dtype_of(name).to_string(), shape, src));
    }
    if let Some(name) = &plan.logits_to_keep {
        rows.push((name.clone(), plan.dtype_of(name).to_string(), "[]".into(), "0: logits for every position".into()));
    }
    // Fixed buffers and states keep their whole shape.
    for c in plan.self_past.iter().filter(|c| c.fixed) {
        let Some(r) = rows.iter_mut().find(|r| r.0 == c.past) else { continue };
        let dims: Vec<String> =
            c.shape.iter().enumerate().map(|(i, v)| if i == 0 { "batch".into() } else { v.to_string() }).collect();
        r.2 = format!("[{}]", dims.join(", "));
        let len = c.shape.get(plan.seq_axis).copied().unwrap_or(0);
        r.3 = match (c.buffer, step0) {
            (true, true) if plan.caller_kept().is_some() => {
                format!("zeros: the whole buffer of {len} slots, which the caller keeps (the presents are only the new rows)")
            }
            (true, true) => format!("zeros: the whole buffer of {len} slots, written in place at the past length"),
            (true, false) => match plan.caller_kept() {
                Some(crate::plan::roles::CacheForm::CallerRolled) => format!(
                    "the previous buffer with its oldest rows dropped and the previous step's {} (the new rows only) appended at the end: {len} slots",
                    c.present
                ),
                Some(_) => format!(
                    "the previous buffer with the previous step's {} (the new rows only) written at its slots (cache_position): {len} slots",
                    c.present
                ),
                None => format!(
                    "{} of the previous step: the same {len} slots, the new token written at slot past_len",
                    c.present
                ),
            },
            (false, true) => "zeros: a state of fixed shape".into(),
            (false, false) => format!("{} of the previous step (carried, never grown)", c.present),
        };
    }
}

/// The rows of an encoder alone's one call (an embeddings model): every
/// input with what to feed.
pub(super) fn encoder_rows(e: &crate::folder::layout::Entry, plan: &Plan) -> Vec<Row> {
    e.sig
        .inputs
        .iter()
        .filter_map(|p| {
            let (t, _) = p.ty.tensor_parts()?;
            let source = if p.name == plan.input_ids {
                "the token ids (a batch right-padded to its longest row)"
            } else if plan.attention_mask.as_ref() == Some(&p.name) {
                "ones over each row's tokens, zeros over its right padding"
            } else {
                "zeros(batch, seq) (one segment)"
            };
            Some((p.name.clone(), t.to_string(), "[batch, seq]".to_string(), source.to_string()))
        })
        .collect()
}

/// `num_beams` and `length_penalty` (default 1.0) of the folder's
/// generation_config.json (the folder of a file).
pub(super) fn beams(path: &std::path::Path) -> (Option<i64>, f64) {
    let dir = if path.is_dir() { Some(path) } else { path.parent() };
    let config = dir
        .and_then(|d| std::fs::read(d.join("generation_config.json")).ok())
        .and_then(|text| serde_json::from_slice::<serde_json::Value>(&text).ok());
    let get = |key: &str| config.as_ref().and_then(|c| c.get(key).cloned());
    (get("num_beams").and_then(|v| v.as_i64()), get("length_penalty").and_then(|v| v.as_f64()).unwrap_or(1.0))
}

/// The encoder's rows of the table: each declared input's (name, dtype,
/// shape, what to feed it).
pub(super) fn encoder_feeds(inputs: &[(String, String, Vec<i64>)]) -> Vec<(String, String, String, String)> {
    inputs
        .iter()
        .map(|(n, t, d)| {
            let shape: Vec<String> = d
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    if i == 0 {
                        "batch".into()
                    } else if *v > 0 {
                        v.to_string()
                    } else {
                        "src_len".into()
                    }
                })
                .collect();
            let source = if t.starts_with("float") {
                "the audio features (e.g. log-mel spectrogram)"
            } else if n.contains("mask") {
                "ones(batch, src_len)"
            } else {
                "the source token ids"
            };
            (n.clone(), t.clone(), format!("[{}]", shape.join(", ")), source.to_string())
        })
        .collect()
}

/// A symbolic shape with the batch the graph fixes written in: `[batch, 1]` → `[1, 1]`.
pub(super) fn fix_batch(shape: &str, batch: i64) -> String {
    let words: Vec<String> = shape
        .split_inclusive(|c: char| !c.is_alphanumeric() && c != '_')
        .map(|w| {
            let (word, sep) = w.split_at(w.trim_end_matches(|c: char| !c.is_alphanumeric() && c != '_').len());
            if word == "batch" {
                format!("{batch}{sep}")
            } else {
                w.to_string()
            }
        })
        .collect();
    words.concat()
}

/// `[1×2, 4]` → `[2, 4]`: products in an example shape worked out.
pub(super) fn multiply(shape: &str) -> String {
    shape
        .split(", ")
        .map(|part| {
            let (open, rest) = part.split_at(usize::from(part.starts_with('[')));
            let (body, close) = rest.split_at(rest.len() - usize::from(rest.ends_with(']')));
            let product: Option<i64> = body.split('×').map(|x| x.trim().parse::<i64>().ok()).product();
            match product {
                Some(p) if body.contains('×') => format!("{open}{p}{close}"),
                _ => part.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn products_in_example_shapes_are_worked_out() {
        assert_eq!(super::multiply("[2×1, 1]"), "[2, 1]");
        assert_eq!(super::multiply("[1, 2, 0, 16]"), "[1, 2, 0, 16]");
        assert_eq!(super::multiply("[1, 4×8]"), "[1, 32]");
    }

    #[test]
    fn a_fixed_batch_is_written_in_and_nothing_else() {
        assert_eq!(super::fix_batch("[batch, 2, 32, 16]", 1), "[1, 2, 32, 16]");
        assert_eq!(super::fix_batch("[batch, batch_size_x]", 1), "[1, batch_size_x]");
        assert_eq!(super::fix_batch("[3, batch, seq]", 1), "[3, 1, seq]");
    }
}
