//! A consumer's own tokens judged against the tool's uncached reference
//! from the same prompt: agreement, a near tie within the model's numeric
//! form, or the first departing token.

use crate::finding::{Code, Finding, Severity};

/// A consumer's error as one line (ONNX Runtime's messages run on over
/// several), at most 600 characters.
pub(super) fn one_line(error: &str) -> String {
    let joined = error.split_whitespace().collect::<Vec<_>>().join(" ");
    match joined.char_indices().nth(600) {
        Some((i, _)) => format!("{}…", &joined[..i]),
        None => joined,
    }
}

/// The reference's tokens and each step's top 5 (token, logit).
pub(super) type Reference = (Vec<i64>, Vec<Vec<(i64, f64)>>);

/// The consumer's tokens against the tool's uncached reference. A token
/// the consumer chose from a near tie — within what the model's numeric
/// form explains between a cached and an uncached run (a quantized graph's
/// activation ranges differ per call) — is agreement, said with its figure.
pub(super) fn against_reference(
    reference: &Result<Reference, String>,
    tolerance: &crate::plan::numeric::Tolerance,
    ids: &[i64],
    who: &str,
    tokens: &[i64],
) -> Finding {
    let (reference, top) = match reference {
        Ok((r, top)) => (r, top),
        Err(e) => {
            return Finding::new(
                Code::ConsumerNotRun,
                Severity::Info,
                format!("{who} generated {tokens:?}; the tool's reference could not run to compare: {e}"),
            )
        }
    };
    let first = tokens.iter().zip(reference.iter()).position(|(a, b)| a != b);
    // The consumer's token among the reference's top 5 at that step, and by how much it trails.
    let trail = first.and_then(|k| {
        let step = top.get(k)?;
        let best = step.first()?.1;
        let theirs = step.iter().find(|(t, _)| *t == tokens[k])?.1;
        Some((k, best - theirs, (best - theirs) / best.abs().max(1e-9)))
    });
    if let Some((k, gap, rel)) = trail.filter(|(_, gap, rel)| !tolerance.exceeded(*gap, *rel)) {
        return Finding::new(
            Code::ConsumerRun,
            Severity::Info,
            format!("{who}'s own greedy generation agrees with the model's uncached reference up to new token {k}, where it takes {} over the reference's {}: a near tie ({gap:.2e} apart in the reference's logits, {rel:.1e} relative) within the tolerance of the model's numeric form ({}: {}), after which the two continue different texts", tokens[k], reference[k], tolerance.describe(), tolerance.reason),
        );
    }
    match first {
        Some(k) => Finding::error(
            Code::ConsumerRun,
            format!(
                "{who}'s own greedy generation departs from the model's uncached reference at new token {k} (prompt {}): {who} gives {}, the reference {}; what the consumer feeds is not what the graph needs",
                prompt(ids),
                tokens[k],
                reference[k]
            ),
        ),
        None => Finding::new(
            Code::ConsumerRun,
            Severity::Info,
            format!("{who}'s own greedy generation gives the reference's tokens ({} compared, prompt {})", tokens.len().min(reference.len()), prompt(ids)),
        ),
    }
}

/// An image-text model's text-only generation departing in its consumer: a
/// warning, not the folder's failure. The check's own cached run of the
/// same file agrees with the reference (else it fails on its own), so the
/// difference is what the consumer feeds on a path applications of an
/// image model seldom take; with multimodal rotary positions the cause is
/// known.
pub(super) fn text_only_departure(f: Finding, position_rows: bool) -> Finding {
    if f.severity != Severity::Error {
        return f;
    }
    let why = if position_rows {
        "transformers.js 4.3.1 feeds a text-only prompt's cached steps multimodal positions off by twice the prompt's length (src/models/qwen2_vl/modeling_qwen2_vl.js: _get_text_only_rope_index adds the prompt length to the rope delta where transformers subtracts it)"
    } else {
        "the check's own cached run of this file agrees with the uncached reference, so what differs is what the consumer feeds on a text-only prompt"
    };
    Finding::warning(
        Code::ConsumerRun,
        format!("{} — on a text prompt alone (no image): {why}; a consumer's fault, not the export's", f.message),
    )
}

/// A prompt in words: its ids, a run of one id (an image's tokens) as `id ×n`.
fn prompt(ids: &[i64]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let run = ids[i..].iter().take_while(|&&x| x == ids[i]).count();
        if run >= 4 {
            parts.push(format!("{} ×{run}", ids[i]));
            i += run;
        } else {
            parts.push(ids[i].to_string());
            i += 1;
        }
    }
    format!("[{}]", parts.join(", "))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_prompt_s_image_tokens_are_said_as_a_run() {
        assert_eq!(super::prompt(&[1, 3, 14, 15]), "[1, 3, 14, 15]");
        assert_eq!(super::prompt(&[1, 9, 9, 9, 9, 9, 3]), "[1, 9 ×5, 3]");
        assert_eq!(super::prompt(&[]), "[]");
    }
}
