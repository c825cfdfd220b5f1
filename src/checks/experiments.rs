//! Counterfactual runs: when a cached step departs from the uncached
//! recompute, the same step is run again with one thing changed, and the
//! change that restores agreement is the cause, with its figure. What the
//! graph itself shows is read first and costs no run: each present's past
//! positions equal exactly one fed past (a `Concat` copies it), so a present
//! that carries another layer's (or the value's) past is seen, not guessed.
//! The runs are few and short (one session, the step's own feeds), and only
//! a departing run pays for them.

use crate::checks::step::{gap, Gap};
use crate::engine::context::Ctx;
use crate::engine::driver::uncached_outputs;
use crate::engine::feeds::{Cache, Feed, Outputs, Values};
use crate::engine::session::run;
use crate::plan::Plan;
use ndarray::{ArrayD, Axis, IxDyn};

/// The departing step, as the cache run saw it.
pub(crate) struct Departure<'a> {
    pub(crate) step: usize,
    pub(crate) feeds: &'a [Feed],
    pub(crate) out: &'a Outputs,
    /// The uncached recompute's logits for the same prefix.
    pub(crate) reference: &'a ArrayD<f32>,
    pub(crate) past_len: i64,
    pub(crate) new_tokens: &'a [Vec<i64>],
    pub(crate) cache: &'a Cache,
}

/// What the experiments found: the cause when one restored agreement or a
/// measured fact names it, and every experiment with its figure.
pub(crate) struct Verdict {
    pub(crate) cause: String,
    pub(crate) tried: Vec<String>,
}

/// One counterfactual: what was changed, and the gap it left.
struct Trial {
    what: String,
    gap: Result<Gap, String>,
}

fn float<'a>(feeds: &'a [Feed], name: &str) -> Option<&'a ArrayD<f32>> {
    feeds.iter().find(|f| f.name == name).and_then(|f| match &f.values {
        Values::Float(a) => Some(a),
        _ => None,
    })
}

fn replace(feeds: &mut [Feed], name: &str, values: Values) {
    if let Some(f) = feeds.iter_mut().find(|f| f.name == name) {
        f.values = values;
    }
}

/// max |a − b| / max |b|, or `None` when the shapes differ.
fn rel(a: &ArrayD<f32>, b: &ArrayD<f32>) -> Option<f64> {
    if a.shape() != b.shape() || a.is_empty() {
        return None;
    }
    let (mut d, mut s) = (0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b.iter()) {
        d = d.max((f64::from(*x) - f64::from(*y)).abs());
        s = s.max(f64::from(*y).abs());
    }
    Some(if s > 0.0 { d / s } else { d })
}

/// The first `n` positions of `a` on `axis`.
fn head(a: &ArrayD<f32>, axis: usize, n: usize) -> Option<ArrayD<f32>> {
    (a.ndim() > axis && a.shape()[axis] >= n).then(|| a.slice_axis(Axis(axis), (0..n).into()).to_owned())
}

/// Row 0's entry at `pos` on the sequence axis.
fn slot(a: &ArrayD<f32>, seq_axis: usize, pos: usize) -> Option<ArrayD<f32>> {
    if a.ndim() <= seq_axis || seq_axis == 0 || a.shape()[seq_axis] <= pos || a.shape()[0] == 0 {
        return None;
    }
    Some(a.index_axis(Axis(0), 0).index_axis(Axis(seq_axis - 1), pos).to_owned())
}

/// A cache tensor's layer number and kind (`key` or `value`).
type Slot = (Option<usize>, &'static str);

/// Layer number and kind read from a cache name (`present.3.key` → (3, key)).
fn layer_of(name: &str) -> Slot {
    let n = name.to_ascii_lowercase();
    let dynamo_value = n.starts_with('v') && n[1..].chars().all(|c| c.is_ascii_digit());
    let kind = if n.ends_with("value") || n.ends_with(".v") || dynamo_value { "value" } else { "key" };
    let digits: String = n.chars().skip_while(|c| !c.is_ascii_digit()).take_while(char::is_ascii_digit).collect();
    (digits.parse().ok(), kind)
}

/// For each self present, the fed past its past positions equal exactly.
fn echoes(plan: &Plan, d: &Departure<'_>) -> Vec<(usize, usize)> {
    let p = d.past_len.max(0) as usize;
    let mut map = Vec::new();
    if p == 0 {
        return map;
    }
    let pasts: Vec<Option<&ArrayD<f32>>> = plan.self_past.iter().map(|c| float(d.feeds, &c.past)).collect();
    for (i, c) in plan.self_past.iter().enumerate().filter(|(_, c)| !c.fixed) {
        let Some(past_part) = d.out.floats.get(&c.present).and_then(|a| head(a, plan.seq_axis, p)) else { continue };
        let same: Vec<usize> = pasts
            .iter()
            .enumerate()
            .filter(|(_, fed)| fed.and_then(|f| rel(&past_part, f)).is_some_and(|r| r <= 1e-6))
            .map(|(j, _)| j)
            .collect();
        if let [j] = same[..] {
            map.push((i, j));
        }
    }
    map
}

/// What a permutation of the presents is, in words.
fn describe(plan: &Plan, moved: &[(usize, usize)]) -> String {
    let kinds: Vec<(Slot, Slot)> =
        moved.iter().map(|&(i, j)| (layer_of(&plan.self_past[i].present), layer_of(&plan.self_past[j].past))).collect();
    let layers = plan.self_past.iter().filter_map(|c| layer_of(&c.past).0).max().map_or(0, |m| m + 1);
    if kinds.iter().all(|((l, a), (m, b))| l == m && a != b) {
        return "each layer's key and value presents are exchanged".into();
    }
    if kinds.iter().all(|((l, a), (m, b))| a == b && matches!((l, m), (Some(l), Some(m)) if l + m + 1 == layers)) {
        return "the presents are listed in reverse layer order".into();
    }
    if kinds.iter().all(|((l, a), (m, b))| a == b && matches!((l, m), (Some(l), Some(m)) if l.abs_diff(*m) == 1)) {
        return "neighbouring layers' presents are exchanged".into();
    }
    "the presents are not in their pasts' order".into()
}

/// Re-runs the departing step with `feeds` and measures it against the reference.
fn trial(ctx: &mut Ctx<'_>, d: &Departure<'_>, what: String, feeds: &[Feed]) -> Trial {
    let logits = ctx.job.plan.logits.clone();
    let gap = run(&mut ctx.session, feeds)
        .and_then(|o| o.floats.get(&logits).cloned().ok_or_else(|| format!("no `{logits}`")))
        .map(|l| gap(&l, d.reference));
    Trial { what, gap }
}

fn figure(t: &Trial) -> String {
    match &t.gap {
        Ok(g) => format!("{}: max |Δ| {:.1e}", t.what, g.abs),
        Err(e) => format!("{}: refused ({})", t.what, crate::diagnose::cause::first_line(e)),
    }
}

/// The experiments for a departing cached step, in the order they are tried.
pub(crate) fn explain(ctx: &mut Ctx<'_>, d: &Departure<'_>) -> Verdict {
    let job = ctx.job;
    let plan = &job.plan;
    let restores = |t: &Trial| t.gap.as_ref().is_ok_and(|g| !plan.tolerance.exceeded(g.abs, g.rel));
    let mut tried = Vec::new();
    let mut cause = None;

    // 1. The graph's own fact: which past each present carries.
    let map = echoes(plan, d);
    let moved: Vec<(usize, usize)> = map.iter().copied().filter(|(i, j)| i != j).collect();
    if !moved.is_empty() {
        let mut feeds = d.feeds.to_vec();
        for &(i, j) in &moved {
            if let Some(a) = float(d.feeds, &plan.self_past[i].past) {
                replace(&mut feeds, &plan.self_past[j].past, Values::Float(a.clone()));
            }
        }
        let (i, j) = moved[0];
        let t = trial(ctx, d, "each present fed to the past its layer reads".into(), &feeds);
        let what = describe(plan, &moved);
        let seen = format!(
            "`{}` carries what the graph reads as `{}` (its past positions equal it exactly): {what}",
            plan.self_past[i].present, plan.self_past[j].past
        );
        cause = Some(match &t.gap {
            Ok(g) if restores(&t) => {
                format!("{seen}; feeding each present to the past its layer reads restores parity to {:.1e}", g.abs)
            }
            _ => seen,
        });
        tried.push(figure(&t));
    }

    // 2. Cross-attention key and value exchanged between the step that writes them and the steps that read them.
    if cause.is_none() && !plan.cross_past.is_empty() {
        let mut feeds = d.feeds.to_vec();
        let mut pairs = 0;
        for c in &plan.cross_past {
            let other = match (c.past.strip_suffix("key"), c.past.strip_suffix("value")) {
                (Some(stem), _) => format!("{stem}value"),
                (_, Some(stem)) => format!("{stem}key"),
                _ => continue,
            };
            if let (Some(a), true) = (float(d.feeds, &c.past), plan.cross_past.iter().any(|x| x.past == other)) {
                replace(&mut feeds, &other, Values::Float(a.clone()));
                pairs += 1;
            }
        }
        if pairs > 0 {
            let t = trial(ctx, d, "cross-attention key and value exchanged".into(), &feeds);
            if restores(&t) {
                let g = t.gap.as_ref().map_or(0.0, |g| g.abs);
                let (key, value) =
                    (&plan.cross_past[0], plan.cross_past.iter().find(|x| x.past != plan.cross_past[0].past));
                cause = Some(format!(
                    "feeding `{}` as `{}` (and each value as its key) restores parity to {g:.1e}: the cross-attention key and value are exchanged between step 0, which writes them, and the cached steps, which read them",
                    value.map_or(String::new(), |v| v.present.clone()),
                    key.past
                ));
            }
            tried.push(figure(&t));
        }
    }

    // 3. The merged decoder's branch flag inverted on the cached step.
    if let (None, Some(flag)) = (&cause, &plan.branch_flag) {
        let mut feeds = d.feeds.to_vec();
        replace(&mut feeds, flag, Values::Bool(ArrayD::from_elem(IxDyn(&[1]), false)));
        let t = trial(ctx, d, format!("`{flag}` false on the cached step"), &feeds);
        if restores(&t) {
            let g = t.gap.as_ref().map_or(0.0, |g| g.abs);
            cause = Some(format!(
                "running step {} with `{flag}` false restores parity to {g:.1e}: the If's branches are exchanged (the branch taken when `{flag}` is true ignores the past)",
                d.step
            ));
        }
        tried.push(figure(&t));
    }

    // 4. Where the graph put the new token: its key against the same token's keys at every position.
    if cause.is_none() {
        if let Some((at, fact)) = new_token_position(ctx, d, &mut tried) {
            if at != d.past_len.max(0) as usize {
                cause = Some(fact);
            }
        }
    }

    // 5. The mask over only the new tokens, or only the past.
    if let (None, Some(mask)) = (&cause, plan.attention_mask.clone().filter(|_| plan.buffer.is_none())) {
        let (b, n) = (d.new_tokens.len(), d.new_tokens.first().map_or(0, Vec::len));
        for (what, len) in
            [("the mask over only the new tokens", n), ("the mask over only the past", d.past_len as usize)]
        {
            let mut feeds = d.feeds.to_vec();
            replace(&mut feeds, &mask, Values::Int(ArrayD::from_elem(IxDyn(&[b, len]), 1)));
            let t = trial(ctx, d, what.into(), &feeds);
            if cause.is_none() && restores(&t) {
                let g = t.gap.as_ref().map_or(0.0, |g| g.abs);
                cause = Some(format!("feeding {what} restores parity to {g:.1e}: the graph reads `{mask}` as covering a different span than past + new tokens"));
            }
            tried.push(figure(&t));
        }
    }

    let cause = cause.unwrap_or_else(|| {
        format!(
            "no experiment restored agreement ({} tried, listed with --verbose); the measured facts are the figures above",
            tried.len()
        )
    });
    Verdict { cause, tried }
}

/// One uncached run of the new token repeated at positions 0 … past + 1:
/// in the first layer a key depends only on its token and position, so the
/// position whose key equals the cached run's new key is where the graph
/// put it.
fn new_token_position(ctx: &mut Ctx<'_>, d: &Departure<'_>, tried: &mut Vec<String>) -> Option<(usize, String)> {
    let job = ctx.job;
    let plan = &job.plan;
    let p = d.past_len.max(0) as usize;
    let token = *d.new_tokens.first()?.first()?;
    if d.new_tokens.len() != 1 || d.new_tokens[0].len() != 1 || plan.buffer.is_some() || plan.inputs_embeds.is_some() {
        return None;
    }
    let repeated = vec![vec![token; p + 2]];
    let out = match uncached_outputs(ctx, &repeated, 0, d.cache) {
        Ok(o) => o,
        Err(e) => {
            tried.push(format!(
                "the new token at positions 0..{}: refused ({})",
                p + 1,
                crate::diagnose::cause::first_line(&e)
            ));
            return None;
        }
    };
    let mut votes: Vec<usize> = Vec::new();
    for c in plan.self_past.iter().filter(|c| !c.fixed) {
        let (Some(cached), Some(all)) = (d.out.floats.get(&c.present), out.floats.get(&c.present)) else { continue };
        let Some(new_key) = slot(cached, plan.seq_axis, p) else { continue };
        let dist: Vec<f64> = (0..p + 2)
            .map(|q| slot(all, plan.seq_axis, q).and_then(|k| rel(&new_key, &k)).unwrap_or(f64::INFINITY))
            .collect();
        let best = (0..dist.len()).min_by(|&a, &b| dist[a].total_cmp(&dist[b]))?;
        let second = (0..dist.len()).filter(|&q| q != best).map(|q| dist[q]).fold(f64::INFINITY, f64::min);
        // Exact at one position and clearly not at the others: a key that carries its position.
        if dist[best] <= 1e-3 && second > 1e-2 {
            votes.push(best);
        }
    }
    let at = *votes.first()?;
    if votes.iter().any(|&v| v != at) {
        return None;
    }
    let fact = match at {
        0 => format!("the new token's key is the one it has at position 0, where the cache holds {p}: positions restart at 0 every call (the graph does not continue them from the past length)"),
        q if q == p => format!("the new token's key is at position {p}, as it must be: positions continue the cache"),
        q if q + 1 == p => format!("the new token's key is the one it has at position {q}, one before the cache length {p}: positions are offset by -1"),
        q if q == p + 1 => format!("the new token's key is the one it has at position {q}, one past the cache length {p}: positions are offset by +1"),
        q => format!("the new token's key is the one it has at position {q}, where the cache holds {p}"),
    };
    tried.push(format!("the new token's key against its keys at positions 0..{}: position {at}", p + 1));
    Some((at, fact))
}
