//! The decoding strategy of a recorded caller, inferred from its calls and
//! the re-run's next-token log-probabilities: greedy (each next token its
//! row's argmax), sampling (tokens within the distribution, never flagged),
//! beam search (rows = batch × beams; each new beam's origin and token from
//! cumulative log-probabilities, as transformers' beam search picks them),
//! several tokens per call (speculative verification, chunked prefill). A
//! beam caller is then judged on the rows it feeds: the cache must be the
//! previous present's rows gathered to the beams' origins.
//!
//! Pure: reads the trace, the plan and the scores, returns a line and findings.

use super::trace::{Call, TensorRecord};
use crate::engine::events::RowScores;
use crate::finding::{Code, Finding};
use crate::plan::Plan;
use std::collections::BTreeMap;

/// What the strategy inference says of a trace.
#[derive(Clone, Debug, Default)]
pub struct Decoding {
    /// One line: "beam search, 3 beams; cache reordered at calls 3, 4, 5 as the beams chose".
    pub line: String,
    /// The caller's faults the strategy explains (beams not reordered, encoder states not per beam).
    pub findings: Vec<Finding>,
}

/// Infers the strategy of `calls` (the decoder's, in order) from the re-run's
/// `scores` (per call index, per row) and judges the rows a beam caller feeds.
pub fn infer(plan: &Plan, calls: &[&Call], scores: &BTreeMap<usize, Vec<RowScores>>) -> Option<Decoding> {
    if plan.buffer.is_some() || calls.is_empty() {
        return None;
    }
    let mut kinds: Vec<String> = Vec::new();
    let mut findings = Vec::new();
    for generation in generations(plan, calls) {
        let g = judge_generation(plan, &generation, scores, &mut findings);
        if !kinds.contains(&g) {
            kinds.push(g);
        }
    }
    kinds.retain(|k| !k.is_empty());
    (!kinds.is_empty()).then(|| Decoding { line: kinds.join("; then "), findings })
}

/// The past length a call feeds (the first growing self past's, on the sequence axis).
fn past_len(plan: &Plan, c: &Call) -> Option<i64> {
    plan.self_past.iter().filter(|p| !p.fixed).find_map(|p| c.feeds.get(&p.past)?.shape.get(plan.seq_axis).copied())
}

/// The calls split where a new sequence starts (an empty past again).
fn generations<'a>(plan: &Plan, calls: &[&'a Call]) -> Vec<Vec<&'a Call>> {
    let mut out: Vec<Vec<&Call>> = Vec::new();
    for &c in calls {
        let flag = plan.branch_flag.as_ref().and_then(|f| c.feeds.get(f)?.value.as_ref()?.first().copied());
        let fresh = past_len(plan, c) == Some(0) || flag == Some(0);
        match out.last_mut() {
            Some(g) if !fresh => g.push(c),
            _ => out.push(vec![c]),
        }
    }
    out
}

/// Tokens of each row fed by a call, when the trace holds its ids.
fn tokens(plan: &Plan, c: &Call) -> Option<(usize, usize, Vec<i64>)> {
    let ids = c.feeds.get(&plan.input_ids)?;
    let (rows, per) = (usize::try_from(*ids.shape.first()?).ok()?, usize::try_from(*ids.shape.get(1)?).ok()?);
    let v = ids.value.clone().filter(|v| v.len() == rows * per)?;
    Some((rows, per, v))
}

/// Rows that start a group of equal rows (a prompt expanded per beam): the
/// group length when every group is as long, else 1.
fn group_size(plan: &Plan, first: &Call) -> usize {
    let ids = first.feeds.get(&plan.input_ids);
    let enc = plan.encoder_hidden_states.as_ref().and_then(|e| first.feeds.get(e));
    let values = tokens(plan, first);
    // A row's key: its ids (by row digest, else by value) and, for a seq2seq
    // decoder whose every row starts from one token, its encoder states' row.
    let key = |r: usize| -> Option<(String, Option<String>)> {
        let id = match (ids.and_then(|t| t.rows.as_ref()), &values) {
            (Some(rows), _) => rows.get(r)?.clone(),
            (None, Some((_, per, v))) => format!("{:?}", v.get(r * per..(r + 1) * per)?),
            (None, None) => return None,
        };
        Some((id, enc.and_then(|t| t.rows.as_ref()?.get(r).cloned())))
    };
    let Some(rows) = ids.and_then(|t| t.shape.first()).and_then(|&r| usize::try_from(r).ok()) else { return 1 };
    let keys: Option<Vec<_>> = (0..rows).map(key).collect();
    keys.map_or(1, |k| crate::engine::rows::equal_runs(&k))
}

/// For each row of `fed`, whether it equals row `origin[j]` of `present`:
/// `Some(true)` when every row does, `Some(false)` when one does not,
/// `None` when the trace cannot tell (no row digests).
fn rows_match(fed: &TensorRecord, present: &TensorRecord, origin: &[usize]) -> Option<bool> {
    if fed.digest.is_some() && fed.digest == present.digest {
        let rows = present.rows.as_ref()?;
        return Some(origin.iter().enumerate().all(|(j, &o)| rows.get(j) == rows.get(o)));
    }
    let (f, p) = (fed.rows.as_ref()?, present.rows.as_ref()?);
    Some(f.len() == origin.len() && origin.iter().enumerate().all(|(j, &o)| p.get(o) == f.get(j)))
}

/// Which rows of `present` the fed rows are ("rows [0, 0, 2]"), or "the present as returned".
fn fed_rows(fed: &TensorRecord, present: &TensorRecord) -> String {
    if fed.digest.is_some() && fed.digest == present.digest {
        let n = present.shape.first().copied().unwrap_or(0).max(0) as usize;
        return format!("rows {} (the present as returned, not reordered)", list(&(0..n).collect::<Vec<_>>()));
    }
    match (&fed.rows, &present.rows) {
        (Some(f), Some(p)) => {
            let idx: Vec<String> =
                f.iter().map(|r| p.iter().position(|x| x == r).map_or("?".into(), |i| i.to_string())).collect();
            format!("rows [{}]", idx.join(", "))
        }
        _ => "other rows".into(),
    }
}

fn list(v: &[usize]) -> String {
    format!("[{}]", v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", "))
}

/// One generation: its strategy in words; beam faults pushed to `findings`.
fn judge_generation(
    plan: &Plan,
    calls: &[&Call],
    scores: &BTreeMap<usize, Vec<RowScores>>,
    findings: &mut Vec<Finding>,
) -> String {
    judge_rows(plan, calls, scores, findings, None)
}

/// The generation read as independent rows (greedy or sampled each), when
/// its expanded prompt turned out not to be beams.
fn independent_rows(plan: &Plan, calls: &[&Call], scores: &BTreeMap<usize, Vec<RowScores>>) -> String {
    judge_rows(plan, calls, scores, &mut Vec::new(), Some(1))
}

/// [`judge_generation`], with the group size given (`Some(1)`: no beams).
fn judge_rows(
    plan: &Plan,
    calls: &[&Call],
    scores: &BTreeMap<usize, Vec<RowScores>>,
    out: &mut Vec<Finding>,
    forced: Option<usize>,
) -> String {
    // Faults are kept only when the whole generation reads as beams.
    let mut kept = Vec::new();
    let line = judge_into(plan, calls, scores, &mut kept, forced);
    // (A generation refuted as beams partway has no beam faults.)
    if line.starts_with("beam search") {
        out.extend(kept);
    }
    line
}

/// The body of [`judge_rows`]: faults go to `findings`, kept by the caller
/// only when the generation is read as beams to the end.
fn judge_into(
    plan: &Plan,
    calls: &[&Call],
    scores: &BTreeMap<usize, Vec<RowScores>>,
    findings: &mut Vec<Finding>,
    forced: Option<usize>,
) -> String {
    let Some(first) = calls.first() else { return String::new() };
    let rows = tokens(plan, first).map_or(0, |t| t.0);
    let mut beams = forced.unwrap_or_else(|| group_size(plan, first));
    let mut running = crate::engine::rows::start_scores(rows, beams);
    let (mut greedy, mut sampled, mut chunks, mut judged) = (0usize, 0usize, 0usize, 0usize);
    let mut reordered: Vec<usize> = Vec::new();
    let mut faulted = false;
    // Argmax tokens a non-argmax choice passed over: one token never fed is a
    // greedy caller's suppressed token (end of sequence before a minimum length).
    let mut passed_over: Vec<i64> = Vec::new();
    for pair in calls.windows(2) {
        let (now, next) = (pair[0], pair[1]);
        let (Some(rs), Some((n_rows, per, toks))) = (scores.get(&now.call), tokens(plan, next)) else { continue };
        if per > 1 {
            chunks += 1;
            continue;
        }
        if n_rows != rs.len() || n_rows != rows || rows == 0 {
            continue;
        }
        judged += 1;
        // Identical prompts decoded greedily stay identical: no beams after all.
        if beams > 1 && judged == 1 && toks.chunks(beams).all(|g| g.iter().all(|t| *t == g[0])) {
            beams = 1;
        }
        if beams == 1 {
            for (r, &t) in toks.iter().enumerate() {
                if t == rs[r].argmax {
                    greedy += 1;
                } else {
                    sampled += 1;
                    passed_over.push(rs[r].argmax);
                }
            }
            continue;
        }
        // Several samples of one prompt are expanded like beams: beams only
        // when the fed tokens are the best candidates, group by group.
        let groups = rows / beams;
        let explained = (0..groups).all(|g| {
            let r = g * beams..(g + 1) * beams;
            crate::engine::rows::explains(&running[r.clone()], &toks[r.clone()], &rs[r], beams)
        });
        if !explained {
            return independent_rows(plan, calls, scores);
        }
        // Each new beam's origin: the row of its group whose running score
        // plus the token's log-probability is highest (a pair taken once).
        let (origin, next_scores) = crate::engine::rows::assign(beams, &running, &toks, rs);
        running = next_scores;
        let identity: Vec<usize> = (0..rows).collect();
        let mut wrong = None;
        let mut moved = false;
        for p in plan.self_past.iter().chain(&plan.cross_past) {
            let (Some(fed), Some(present)) =
                (next.feeds.get(&p.past), now.outputs.as_ref().and_then(|o| o.get(&p.present)))
            else {
                continue;
            };
            if fed.shape.first() != present.shape.first() {
                continue;
            }
            match rows_match(fed, present, &origin) {
                Some(true) => moved |= rows_match(fed, present, &identity) == Some(false),
                Some(false) if wrong.is_none() => {
                    wrong = Some((p.past.clone(), p.present.clone(), fed_rows(fed, present)))
                }
                _ => {}
            }
        }
        if moved {
            reordered.push(next.call);
        }
        if let (Some((past, present, got)), false) = (wrong, faulted) {
            faulted = true;
            let chosen: Vec<String> = toks.iter().map(|t| t.to_string()).collect();
            let mut f = Finding::error(
                Code::CallerBeams,
                format!(
                    "beam search ({beams} beams): the cache is not reordered to the chosen beams: the beams fed at call {} (tokens [{}]) came from rows {} of call {} by their cumulative log-probabilities, but `{past}` is {got} of call {}'s `{present}`: gather every past's rows to the beams' origins (index_select on the batch axis with beam_idx {}) before the call",
                    next.call,
                    chosen.join(", "),
                    list(&origin),
                    now.call,
                    now.call,
                    list(&origin)
                ),
            )
            .tensor(&past);
            f.call = Some(next.call);
            findings.push(f);
        }
    }
    if let Some(enc) = plan.encoder_hidden_states.as_ref().and_then(|e| first.feeds.get(e)) {
        let enc_rows = enc.shape.first().copied().unwrap_or(0);
        if beams > 1 && enc_rows > 0 && (enc_rows as usize) < rows {
            let mut f = Finding::error(
                Code::CallerBeams,
                format!("`{}` has {enc_rows} rows for {rows} decoder rows: the encoder states are expanded per beam (repeat_interleave by {beams})", plan.encoder_hidden_states.as_deref().unwrap_or("")),
            );
            f.call = Some(first.call);
            findings.push(f);
        }
    }
    let several = if chunks > 0 {
        format!(
            "; several tokens per call at {chunks} call{} (speculative verification or a chunked prefill)",
            if chunks == 1 { "" } else { "s" }
        )
    } else {
        String::new()
    };
    if beams > 1 {
        let batch = rows / beams;
        let how = if faulted {
            "the cache NOT reordered as the beams chose".to_string()
        } else if reordered.is_empty() {
            "no reorder was needed (every beam kept its row)".to_string()
        } else {
            format!(
                "cache reordered at calls {} as the beams chose",
                reordered.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(", ")
            )
        };
        let batch = if batch > 1 { format!(" × batch {batch}") } else { String::new() };
        return format!("beam search, {beams} beams{batch}; {how}{several}");
    }
    let padded = first
        .feeds
        .get(plan.attention_mask.as_deref().unwrap_or(""))
        .and_then(|m| m.value.as_ref())
        .is_some_and(|v| v.contains(&0));
    let batch = if rows > 1 {
        format!(", batch of {rows}{}", if padded { " (left-padded)" } else { "" })
    } else {
        String::new()
    };
    // Tokens the caller chose (the first call's are its prompt or start token).
    let fed: Vec<i64> = calls.iter().skip(1).filter_map(|c| tokens(plan, c)).flat_map(|t| t.2).collect();
    let suppressed = passed_over.first().filter(|t| passed_over.iter().all(|x| x == *t) && !fed.contains(t));
    match (greedy, sampled) {
        (0, 0) if chunks > 0 => format!("{}{batch}", several.trim_start_matches("; ")),
        (0, 0) => String::new(),
        (_, 0) => format!("greedy (every next token its row's argmax){batch}{several}"),
        (_, s) if suppressed.is_some() => format!(
            "greedy (every next token its row's argmax, but for token {} passed over {s} time{}: a suppressed token, e.g. the end of sequence before a minimum length){batch}{several}",
            suppressed.copied().unwrap_or_default(),
            if s == 1 { "" } else { "s" }
        ),
        (g, s) => format!("sampling ({s} of {} tokens not the argmax, each within the distribution){batch}{several}", g + s),
    }
}
