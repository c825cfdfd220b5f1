//! A trace's calls judged one by one by the feed guard (every call shown to
//! it, the watched models' judged), the departures folded to their first
//! call, and row digests a format-1 trace lacks filled in from a bit-exact
//! re-run before the calls are judged again.

use super::guard::FeedGuard;
use super::trace::Call;
use crate::finding::{Code, Finding, Severity};
use crate::model::signature::Signature;
use crate::plan::Plan;
use std::collections::BTreeMap;

fn basename(s: &str) -> &str {
    s.rsplit(['/', '\\']).next().unwrap_or(s)
}

/// Every departure of `calls` from the protocols of `models` (the files the
/// trace calls that are checked, by name: `known`), and each recorded error.
pub(crate) fn judge_calls(
    models: &[(String, Signature, Option<Plan>)],
    known: &[String],
    calls: &[Call],
) -> Vec<Finding> {
    let mut findings = Vec::new();
    let mut guard = FeedGuard::for_models(models.to_vec());
    for c in calls {
        let name = basename(&c.model);
        if !known.iter().any(|k| k == name) {
            guard.observe(c.call, name, &c.feeds, c.outputs.as_ref());
            continue;
        }
        findings.extend(guard.check(c.call, name, &c.feeds));
        // A call the caller's runtime refused is never "both fine": an error,
        // whose fault the re-run of the correct protocol decides.
        if let Some(err) = &c.error {
            let mut f = Finding::new(
                Code::CallerError,
                Severity::Error,
                format!("call {} failed in ONNX Runtime: {}", c.call, err.lines().next().unwrap_or(err)),
            );
            f.call = Some(c.call);
            findings.push(f);
        }
        guard.observe(c.call, name, &c.feeds, c.outputs.as_ref());
    }
    findings.extend(guard.summary());
    findings
}

/// Fills the row digests a re-run computed (`feed:NAME` / `output:NAME`,
/// by call) into the calls that lack them; how many tensors got rows.
pub(crate) fn fill_rows(calls: &mut [Call], computed: &[(usize, crate::engine::events::ComputedRows)]) -> usize {
    let mut filled = 0;
    for (call, rows) in computed {
        let Some(c) = calls.iter_mut().find(|c| c.call == *call) else { continue };
        for (key, r) in rows {
            let t = match key.split_once(':') {
                Some(("feed", n)) => c.feeds.get_mut(n),
                Some(("output", n)) => c.outputs.as_mut().and_then(|o| o.get_mut(n)),
                _ => None,
            };
            if let Some(t) = t.filter(|t| t.rows.is_none() && t.shape.first() == Some(&(r.len() as i64))) {
                t.rows = Some(r.clone());
                filled += 1;
            }
        }
    }
    filled
}

/// Marks each caller-kept buffer a re-run showed (`kept:NAME`, `unkept:NAME`);
/// returns how many.
pub(crate) fn fill_kept(calls: &mut [Call], computed: &[(usize, crate::engine::events::ComputedRows)]) -> usize {
    use super::trace::Kept;
    let mut filled = 0;
    for (call, rows) in computed {
        let Some(c) = calls.iter_mut().find(|c| c.call == *call) else { continue };
        for (key, words) in rows {
            let (kept, name) = match key.split_once(':') {
                Some(("kept", n)) => (Kept::Right(words.join(" ")), n),
                Some(("unkept", n)) => (Kept::Wrong(words.join(" ")), n),
                _ => continue,
            };
            if let Some(t) = c.feeds.get_mut(name) {
                t.kept = Some(kept);
                filled += 1;
            }
        }
    }
    filled
}

/// Keeps the first finding of each code and message shape; later ones become "also at calls …".
pub(crate) fn first_departures(findings: Vec<Finding>) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::new();
    let mut also: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for f in findings {
        let same = |g: &Finding| g.code == f.code && g.names == f.names && g.tensor == f.tensor;
        match out.iter().position(|g| same(g) && g.code != Code::CallerError) {
            Some(i) => also.entry(i).or_default().extend(f.call),
            None => out.push(f),
        }
    }
    for (i, mut calls) in also {
        calls.dedup();
        calls.retain(|c| Some(*c) != out[i].call);
        if calls.is_empty() {
            continue;
        }
        // A long trace repeats its mistake thousands of times: the first few say where.
        const SHOWN: usize = 8;
        let list: Vec<String> = calls.iter().take(SHOWN).map(|c| c.to_string()).collect();
        let more = calls.len().saturating_sub(SHOWN);
        out[i].message.push_str(&format!(
            " (again at call{} {}{})",
            if calls.len() == 1 { "" } else { "s" },
            list.join(", "),
            if more > 0 { format!(" and {more} more") } else { String::new() }
        ));
    }
    out
}
