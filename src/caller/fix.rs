//! The caller's remedy: the first wrong call as it was fed against what the
//! protocol feeds there, and the protocol's own run on the same model (the
//! corrected sequence, driven by the check) as the proof that the model
//! takes it.

use crate::caller::trace::Call;
use crate::checker::report::{measured, Report, Verdict};
use crate::finding::{Finding, Severity};
use serde::{Deserialize, Serialize};

/// The first wrong call, as fed and as the protocol feeds it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CallFix {
    /// The call's index in the trace.
    pub call: usize,
    /// The inputs concerned as the trace recorded them (`name dtype [shape] = values`).
    pub fed: Vec<String>,
    /// What was wrong with them.
    pub was: String,
    /// What the protocol feeds instead.
    pub instead: String,
    /// The protocol's run on the same model, when it ran: `PASS (8 steps, …)`.
    pub verified: Option<String>,
}

/// The inputs a finding is about: its names, its tensor, or the names in backticks of its message.
fn concerned<'a>(f: &Finding, call: &'a Call) -> Vec<&'a str> {
    let quoted: Vec<&str> = f.message.split('`').skip(1).step_by(2).collect();
    call.feeds
        .keys()
        .filter(|k| f.names.contains(k) || f.tensor.as_deref() == Some(k.as_str()) || quoted.contains(&k.as_str()))
        .map(String::as_str)
        .collect()
}

/// The first caller error's call, diffed; `None` when the caller made no error at a call.
pub(crate) fn first_wrong_call(findings: &[Finding], calls: &[Call], check: Option<&Report>) -> Option<CallFix> {
    let f = findings
        .iter()
        .filter(|f| {
            f.severity == Severity::Error && f.code.as_str().starts_with("caller-") && f.code.as_str() != "caller-error"
        })
        .filter(|f| f.call.is_some())
        .min_by_key(|f| f.call)?;
    let call = calls.iter().find(|c| Some(c.call) == f.call)?;
    // Inputs fed alike are one line (`past_key_values.{0..5}.encoder.{key,value} float32 [0, 8, 1, 4]`).
    let mut alike: Vec<(String, Vec<&str>)> = Vec::new();
    for name in concerned(f, call) {
        let r = &call.feeds[name];
        let values = match &r.value {
            Some(v) if v.len() <= 8 => format!(" = {v:?}"),
            _ => String::new(),
        };
        let what = format!("{} {:?}{values}", r.dtype, r.shape);
        match alike.iter_mut().find(|(w, _)| *w == what) {
            Some((_, names)) => names.push(name),
            None => alike.push((what, vec![name])),
        }
    }
    let fed = alike
        .into_iter()
        .map(|(what, names)| format!("{} {what}", crate::model::fold::fold_names(&names).join(", ")))
        .collect();
    // The guard says what was fed, then (after the first "; ") what to feed.
    let (was, instead) = match f.message.split_once("; ") {
        Some((a, b)) => (a.to_string(), b.to_string()),
        None => (f.message.clone(), "see the finding".to_string()),
    };
    let verified = check.and_then(|r| {
        let rt = r.runtime.as_ref()?;
        let verdict = if r.verdict == Verdict::Pass { "PASS" } else { "FAIL" };
        Some(format!("{verdict} ({})", measured(rt).unwrap_or_default()))
    });
    Some(CallFix { call: call.call, fed, was, instead, verified })
}
