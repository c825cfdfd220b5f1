//! The config audit beyond rope: the multipliers config.json says the model
//! applies (Granite's `embedding_multiplier` and `logits_scaling`, Cohere's
//! `logit_scale`, Gemma's embedding normalizer, MiniCPM's `scale_emb`) and
//! the ALiBi slopes its head count gives, held against the graph's own
//! constants. Exporters trace them as constants next to the node they
//! scale: a `Mul`/`Div` by a scalar right after the token embedding's
//! `Gather` or before `logits`, and a slope tensor of one value per head
//! multiplying the positions. Those constants are read (the graph decoded
//! without its weights; only the few constants are), and compared at the
//! precision they are stored in. Pure: no runtime.

use super::chain::{Chain, HEAD, PASS};
use super::constants::{tolerance, Const, Graph};
use crate::engine::events::StepIssue;
use crate::finding::Code;
use crate::folder::scales::{Alibi, Scale, Scales, Site};
use std::path::Path;

/// The multiplier between the head's product and `logits`, walking back.
fn logits_chain(g: &Graph<'_>, logits: &str) -> Result<Chain, String> {
    let mut chain = Chain::new();
    let mut at = g.resolve(logits).to_string();
    for _ in 0..64 {
        let i = *g.producer.get(&at).ok_or_else(|| format!("no node writes `{at}`"))?;
        let n = &g.nodes[i];
        let input = |k: usize| n.input.get(k).cloned().unwrap_or_default();
        match g.op(i) {
            op if HEAD.contains(&op) => {
                chain.words.push(format!("{op} `{}`", g.name(i)));
                chain.words.reverse();
                return Ok(chain);
            }
            op if PASS.contains(&op) => at = input(0),
            "Mul" => {
                at = chain
                    .fold_back(g, i, false)?
                    .ok_or_else(|| format!("`{}` (Mul) multiplies by a value computed at run time", g.name(i)))?
            }
            "Div" if !g.is_constant(&input(0)) => {
                at = chain
                    .fold_back(g, i, false)?
                    .ok_or_else(|| format!("`{}` (Div) divides by a value computed at run time", g.name(i)))?
            }
            // A bias shifts the logits; it does not scale them.
            "Add" | "Sub" if g.is_constant(&input(1)) => at = input(0),
            "Add" if g.is_constant(&input(0)) => at = input(1),
            op => {
                return Err(format!(
                    "the logits come from `{}` ({op}), which is no multiplier the audit reads",
                    g.name(i)
                ))
            }
        }
    }
    Err("the logits chain is longer than 64 nodes".into())
}

/// The token embedding's `Gather`: a constant table indexed by the token ids.
fn embedding_gather(g: &Graph<'_>, input_ids: &str) -> Option<usize> {
    let from_ids = |mut t: String| {
        for _ in 0..8 {
            if t == input_ids {
                return true;
            }
            let Some(&i) = g.producer.get(&t) else { return false };
            if !PASS.contains(&g.op(i)) {
                return false;
            }
            t = g.nodes[i].input.first().cloned().unwrap_or_default();
        }
        false
    };
    (0..g.nodes.len()).find(|&i| {
        let n = &g.nodes[i];
        g.op(i) == "Gather"
            && n.input.first().is_some_and(|d| g.initializers.get(d).is_some_and(|(dims, _)| dims.len() == 2))
            && n.input.get(1).is_some_and(|ids| from_ids(ids.clone()))
    })
}

/// The multiplier after the token embedding, walking forward while the
/// embeddings have one reader that scales or passes them.
fn embedding_chain(g: &Graph<'_>, input_ids: &str) -> Result<Chain, String> {
    let gather = embedding_gather(g, input_ids).ok_or("no Gather reads a constant table at the token ids")?;
    let mut chain = Chain::new();
    chain.words.push(format!("Gather `{}`", g.name(gather)));
    let mut at = g.nodes[gather].output.first().cloned().unwrap_or_default();
    for _ in 0..16 {
        // Readers of the shape alone (the positions' count) do not take the values.
        let readers: Vec<usize> = g
            .readers
            .get(&at)
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .copied()
            .filter(|&r| !matches!(g.op(r), "Shape" | "Size"))
            .collect();
        let [i] = readers[..] else { break };
        let i = &i;
        let n = &g.nodes[*i];
        let other = n.input.iter().find(|x| **x != at).cloned().unwrap_or_default();
        match g.op(*i) {
            "Cast" | "Identity" => {}
            "Mul" => match g.constant(&other) {
                Some(c) => chain.scale(g, *i, &c, false)?,
                None => break,
            },
            "Div" if n.input.first() == Some(&at) => match g.constant(&other) {
                Some(c) => chain.scale(g, *i, &c, true)?,
                None => break,
            },
            _ => break,
        }
        at = n.output.first().cloned().unwrap_or_default();
    }
    Ok(chain)
}

/// Every float constant of one value per head that multiplies a computed
/// tensor (the positions, or the mask's running count): the slope candidates.
fn slope_constants(g: &Graph<'_>, heads: usize) -> Vec<(String, Const)> {
    let mut out = Vec::new();
    for (i, n) in g.nodes.iter().enumerate() {
        if g.op(i) != "Mul" || n.input.len() != 2 {
            continue;
        }
        for (k, t) in n.input.iter().enumerate() {
            let Some(c) = g.constant(t) else { continue };
            let computed = !g.is_constant(&n.input[1 - k]);
            if computed && c.values.len() == heads && heads > 1 && c.values.iter().all(|v| *v > 0.0 && *v <= 1.0) {
                out.push((g.name(i).to_string(), c));
            }
        }
    }
    out
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b.abs().max(1e-30)
}

/// One multiplier audited: a finding when the graph's differs from the config's.
fn audit_scale(
    g: &Graph<'_>,
    s: &Scale,
    head_dim: Option<f64>,
    logits: &str,
    input_ids: &str,
) -> Result<(String, Option<StepIssue>), String> {
    let (chain, place) = match s.site {
        Site::Logits => (logits_chain(g, logits)?, "between the head's product and the logits".to_string()),
        Site::Embedding => (embedding_chain(g, input_ids)?, "after the token embedding".to_string()),
        Site::Residual => (
            super::attention_scale::residual_chain(g)?,
            "between the attention's output projection and the residual Add".to_string(),
        ),
        Site::Attention => {
            let layers = super::attention_scale::attention_chains(g, head_dim)?;
            let n = layers.len();
            // The first layer that scales otherwise than the config says, else the first.
            let wrong = layers.iter().position(|(_, c)| !close(c.factor, s.factor, tolerance(c.dtype)));
            let (node, chain) = layers.into_iter().nth(wrong.unwrap_or(0)).ok_or("no attention layer")?;
            let place = match wrong {
                Some(k) => format!("on the attention scores of layer {} of {n} (`{node}`)", k + 1),
                None => format!("on the attention scores of all {n} layers (the first: `{node}`)"),
            };
            (chain, place)
        }
    };
    let place = place.as_str();
    let said = format!("{}: {}", place, chain.words.join(" → "));
    if close(chain.factor, s.factor, tolerance(chain.dtype)) {
        return Ok((format!("{} applied ({said})", s.source), None));
    }
    let effect = match s.site {
        Site::Logits => "every logit is off by that ratio from step 0: greedy tokens may survive it, but probabilities, sampling, temperatures and beam scores are another model's",
        Site::Embedding => "every token's embedding enters the first layer at another scale from step 0: the model computes other hidden states and logits",
        Site::Attention => "every attention distribution is sharper or flatter than the model's from the second token on (one token attends to itself alone): another model from step 0 of any longer prompt",
        Site::Residual => "each layer adds its attention output at another weight from step 0: the model computes other hidden states and logits",
    };
    let issue = StepIssue::error(
        Code::ConfigScale,
        format!(
            "the graph multiplies by {:.6} {place} ({}) where {} gives {:.6} ({:.4}× the config's): {effect}",
            chain.factor,
            chain.words.join(" → "),
            s.source,
            s.factor,
            chain.factor / s.factor
        ),
        None,
    );
    Ok((said, Some(issue)))
}

/// The ALiBi slopes audited.
fn audit_alibi(g: &Graph<'_>, a: &Alibi, max_positions: Option<i64>) -> Result<Option<StepIssue>, String> {
    let n = a.slopes.len();
    let found = slope_constants(g, n);
    let Some((node, c)) = found.first() else {
        return Err(format!("no constant of {n} slopes (one per head) multiplies the positions"));
    };
    let tol = tolerance(c.dtype);
    let Some(h) = (0..n).find(|&h| !close(c.values[h], a.slopes[h], tol)) else { return Ok(None) };
    // Whose slopes they are: another head count's, by the same formula.
    let whose: Vec<String> = (1..=4 * n)
        .filter(|&m| m != n)
        .filter(|&m| {
            let other = crate::folder::scales::bloom_slopes(m);
            other.len() >= n && (0..n).all(|k| close(c.values[k], other[k], tol))
        })
        .map(|m| m.to_string())
        .collect();
    // BLOOM's formula gives every head count from one power of two to the next the same first slopes.
    let whose = match (whose.first(), whose.last()) {
        (Some(a), Some(b)) if a == b => format!(": they are the first {n} slopes of a model with {a} heads"),
        (Some(a), Some(b)) => format!(": they are the first {n} slopes of a model with {a} to {b} heads"),
        _ => String::new(),
    };
    let worst = (0..n).map(|k| (c.values[k] - a.slopes[k]).abs()).fold(0.0, f64::max);
    let at = max_positions.unwrap_or(2048).max(1);
    Ok(Some(StepIssue::error(
        Code::Alibi,
        format!(
            "the graph's ALiBi slope for head {h} is {:.6e} where {} gives {:.6e} (`{node}` multiplies by {n} slopes{whose}): the attention bias differs by {worst:.3e} per token of distance, from distance 1 (step 0 of any prompt of 2 tokens) to {:.3} at distance {at}",
            c.values[h],
            a.source,
            a.slopes[h],
            worst * at as f64
        ),
        None,
    )))
}

/// The whole audit of `model` (its external data beside it in `dir`): a
/// line saying what was read, and the findings.
pub(crate) fn audit(
    model: &[u8],
    dir: &Path,
    flag: Option<&str>,
    scales: &Scales,
    logits: &str,
    input_ids: &str,
    max_positions: Option<i64>,
) -> (String, Vec<StepIssue>) {
    let unaudited = |what: &str, why: String| StepIssue {
        severity: crate::finding::Severity::Warning,
        ..StepIssue::info(Code::ConfigUnaudited, format!("{what}: not audited: {why}"), None)
    };
    let g = match Graph::read(model, dir, flag) {
        Ok(g) => g,
        Err(why) => {
            return (
                "config audit: the graph could not be read".into(),
                vec![unaudited("config.json's multipliers", why)],
            )
        }
    };
    let mut said = Vec::new();
    let mut issues: Vec<StepIssue> = scales
        .unread
        .iter()
        .map(|(what, why)| StepIssue::info(Code::ConfigUnaudited, format!("{what}: not audited: {why}"), None))
        .collect();
    for s in &scales.scales {
        match audit_scale(&g, s, scales.head_dim, logits, input_ids) {
            Ok((what, issue)) => {
                said.push(what);
                issues.extend(issue);
            }
            Err(why) => issues.push(unaudited(&s.source, why)),
        }
    }
    if let Some(a) = &scales.alibi {
        match audit_alibi(&g, a, max_positions) {
            Ok(issue) => {
                said.push(format!("ALiBi slopes ({})", a.source));
                issues.extend(issue);
            }
            Err(why) => issues.push(unaudited(&a.source, why)),
        }
    }
    (format!("config audit: {}", if said.is_empty() { "nothing read".into() } else { said.join("; ") }), issues)
}
