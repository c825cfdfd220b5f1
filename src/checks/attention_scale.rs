//! Where the config's constants sit inside a layer, read off the graph: the
//! attention scores' scale (between the query and key projections and the
//! `Softmax`: a `Mul`/`Div` by a scalar after `Q·Kᵀ`, or one on each of `Q`
//! and `Kᵀ` before it as torch's `scaled_dot_product_attention` traces it, a
//! soft-cap's `Div`→`Tanh`→`Mul` cancelling out; a fused attention op's
//! `scale` attribute), and the residual branch's multiplier (between the
//! attention's output projection and the residual `Add`). Every attention
//! `Softmax` of the graph is read, one per layer, so a layer that scales
//! otherwise is named. Pure: no runtime.

use super::chain::{Chain, HEAD, PASS};
use super::constants::{Graph, FLOAT};

/// Ops a query or key passes on its way to `Q·Kᵀ` without being scaled.
const MOVES: &[&str] = &["Cast", "Identity", "Reshape", "Squeeze", "Unsqueeze", "Transpose", "Expand", "Flatten"];

/// Fused attention ops that carry the scale as an attribute.
const FUSED: &[&str] = &["GroupQueryAttention", "MultiHeadAttention", "Attention", "PackedMultiHeadAttention"];

/// Whether `t` is a weight the graph stores (an initializer, however large,
/// or a constant): the audit decodes small constants only, but a projection's
/// weight is stored whatever its size.
fn stored(g: &Graph<'_>, t: &str) -> bool {
    g.is_constant(t) || g.initializers.contains_key(g.resolve(t))
}

/// Whether `t` is a scale computed by the graph's own arithmetic from tensor
/// shapes or a few constants (SDPA's default `1/√(q.shape[-1])`, traced as
/// Shape → … → Sqrt → Div, or the same left unfolded over constants): a
/// value the audit does not evaluate, said as unread rather than guessed.
fn shape_derived(g: &Graph<'_>, t: &str, depth: usize) -> bool {
    let Some(&i) = g.producer.get(g.resolve(t)) else {
        // A leaf: a scalar-sized stored constant (of any type: a slice's int64 bounds) takes
        // part in such arithmetic; a weight does not.
        return g.initializers.get(g.resolve(t)).is_some_and(|(dims, _)| dims.iter().product::<i64>() <= 8);
    };
    if g.op(i) == "Shape" {
        return true;
    }
    if g.op(i) == "Constant" {
        return g.constant(t).is_some_and(|c| c.values.len() <= 8);
    }
    let arithmetic = [
        "Cast",
        "Sqrt",
        "Div",
        "Mul",
        "Reciprocal",
        "Slice",
        "Gather",
        "Unsqueeze",
        "Squeeze",
        "Concat",
        "Reshape",
        "Pow",
        "Add",
        "Sub",
    ];
    let inputs: Vec<&String> = g.nodes[i].input.iter().filter(|x| !x.is_empty()).collect();
    depth > 0
        && arithmetic.contains(&g.op(i))
        && !inputs.is_empty()
        && inputs.iter().all(|x| shape_derived(g, x, depth - 1))
}

/// Whether `t` is a `MatMul` of two computed tensors, walking back through
/// what the scores pass on the way to the `Softmax` (a few nodes).
fn reaches_scores(g: &Graph<'_>, t: &str, depth: usize) -> bool {
    let Some(&i) = g.producer.get(g.resolve(t)) else { return false };
    let n = &g.nodes[i];
    match g.op(i) {
        "MatMul" => n.input.iter().all(|x| !stored(g, x)),
        _ if depth == 0 => false,
        op if PASS.contains(&op) || matches!(op, "Mul" | "Div" | "Add" | "Sub" | "Where") => {
            n.input.iter().any(|x| !stored(g, x) && reaches_scores(g, x, depth - 1))
        }
        _ => false,
    }
}

/// The scale on one side of `Q·Kᵀ`: scalar `Mul`/`Div`s among shape moves,
/// back to the first node that computes (the rotary `Add`, the projection).
fn side(g: &Graph<'_>, mut at: String, chain: &mut Chain) -> Result<(), String> {
    for _ in 0..32 {
        let Some(&i) = g.producer.get(g.resolve(&at)) else { return Ok(()) };
        let n = &g.nodes[i];
        let input = |k: usize| n.input.get(k).cloned().unwrap_or_default();
        match g.op(i) {
            op if MOVES.contains(&op) => at = input(0),
            "Mul" | "Div" => match chain.fold_back(g, i, true)? {
                Some(next) => at = next,
                // A scale computed from the query's shape at run time: not the config's constant, unread.
                None if g.op(i) == "Mul" && n.input.iter().any(|x| shape_derived(g, x, 10)) => {
                    return Err(format!(
                        "`{}` (Mul) scales by a value computed at run time from a tensor's shape",
                        g.name(i)
                    ))
                }
                None if g.op(i) == "Div" && shape_derived(g, &input(1), 10) => {
                    return Err(format!(
                        "`{}` (Div) divides by a value computed at run time from a tensor's shape",
                        g.name(i)
                    ))
                }
                // A product of two computed tensors (a norm's weight, a rotary product): the side's own values.
                None => return Ok(()),
            },
            _ => return Ok(()),
        }
    }
    Ok(())
}

/// The scale between the scores' `MatMul` and `Softmax` node `softmax`,
/// both sides of the `MatMul` included; `None` when that `Softmax` is not
/// an attention's (no `Q·Kᵀ` behind it).
fn softmax_chain(g: &Graph<'_>, softmax: usize) -> Option<Result<Chain, String>> {
    let mut at = g.nodes[softmax].input.first()?.clone();
    if !reaches_scores(g, &at, 8) {
        return None;
    }
    let mut chain = Chain::new();
    let mut walk = || -> Result<(), String> {
        for _ in 0..32 {
            let i = *g.producer.get(g.resolve(&at)).ok_or_else(|| format!("no node writes `{at}`"))?;
            let n = &g.nodes[i];
            let input = |k: usize| n.input.get(k).cloned().unwrap_or_default();
            match g.op(i) {
                "MatMul" => {
                    chain.words.push(format!("MatMul `{}`", g.name(i)));
                    side(g, input(0), &mut chain)?;
                    side(g, input(1), &mut chain)?;
                    chain.words.reverse();
                    return Ok(());
                }
                op if PASS.contains(&op) => at = input(0),
                op @ ("Mul" | "Div") => match chain.fold_back(g, i, false)? {
                    Some(next) => at = next,
                    None if op == "Mul" => {
                        return Err(format!("`{}` (Mul) scales the scores by a value computed at run time", g.name(i)))
                    }
                    None => {
                        return Err(format!("`{}` (Div) divides the scores by a value computed at run time", g.name(i)))
                    }
                },
                // The mask (added, or selected with `Where`): the scores are the input behind which Q·Kᵀ is.
                "Add" | "Sub" | "Where" => {
                    at = n.input.iter().find(|x| !stored(g, x) && reaches_scores(g, x, 8)).cloned().ok_or_else(
                        || format!("`{}` ({}) mixes the scores with no Q·Kᵀ behind it", g.name(i), g.op(i)),
                    )?;
                }
                op => {
                    return Err(format!(
                        "the scores reach the Softmax through `{}` ({op}), which the audit does not read",
                        g.name(i)
                    ))
                }
            }
        }
        Err("the scores' chain is longer than 32 nodes".into())
    };
    Some(walk().map(|()| chain))
}

/// Each attention layer's scale, in node order: (the layer's `Softmax`, or
/// fused op, and the chain read there).
pub(crate) fn attention_chains(g: &Graph<'_>, head_dim: Option<f64>) -> Result<Vec<(String, Chain)>, String> {
    let mut out = Vec::new();
    for i in 0..g.nodes.len() {
        match g.op(i) {
            "Softmax" => {
                if let Some(chain) = softmax_chain(g, i) {
                    out.push((g.name(i).to_string(), chain?));
                }
            }
            op if FUSED.contains(&op) => {
                let attr = g.nodes[i].attribute.iter().find(|a| a.name.as_deref() == Some("scale"));
                let mut chain = Chain::new();
                chain.dtype = FLOAT;
                match (attr.and_then(|a| a.f).filter(|v| *v != 0.0), head_dim) {
                    (Some(v), _) => {
                        chain.factor = f64::from(v);
                        chain.words.push(format!("{op} `{}` scale {v}", g.name(i)));
                    }
                    // The op's default (onnxruntime's contrib ops: 1/√head_size), at the config's head size.
                    (None, Some(h)) => {
                        chain.factor = h.powf(-0.5);
                        chain.words.push(format!("{op} `{}` with no scale: its default 1/√{h}", g.name(i)));
                    }
                    (None, None) => {
                        return Err(format!(
                        "`{}` ({op}) leaves its scale at the default 1/√head_size, and the config states no head size",
                        g.name(i)
                    ))
                    }
                }
                out.push((g.name(i).to_string(), chain));
            }
            _ => {}
        }
    }
    if out.is_empty() {
        return Err("no Softmax with Q·Kᵀ behind it, and no fused attention op".into());
    }
    Ok(out)
}

/// The readers of `t` that take its values (a `Shape` reads only its form).
fn value_readers(g: &Graph<'_>, t: &str) -> Vec<usize> {
    g.readers
        .get(t)
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .copied()
        // A predicate on the values (SDPA's `IsNaN` guard) selects, it does not carry them.
        .filter(|&r| !matches!(g.op(r), "Shape" | "Size" | "IsNaN" | "IsInf" | "Equal" | "Not"))
        .collect()
}

/// The multiplier of the attention branch before the residual `Add`, from
/// the first attention `Softmax` forward: `·V`, the head merge, the output
/// projection, then scalar `Mul`/`Div`s (a bias passes) up to the `Add` of
/// two computed tensors.
pub(crate) fn residual_chain(g: &Graph<'_>) -> Result<Chain, String> {
    let softmax = (0..g.nodes.len())
        .find(|&i| g.op(i) == "Softmax" && softmax_chain(g, i).is_some())
        .ok_or("no attention Softmax to start from")?;
    let mut at = g.nodes[softmax].output.first().cloned().unwrap_or_default();
    let mut chain = Chain::new();
    let mut projected = false;
    for _ in 0..48 {
        let [i] = value_readers(g, &at)[..] else {
            return Err(format!("`{at}` is read by several nodes: no single residual branch to follow"));
        };
        let n = &g.nodes[i];
        let other = n.input.iter().find(|x| **x != at).cloned().unwrap_or_default();
        match g.op(i) {
            op if HEAD.contains(&op) && stored(g, &other) => {
                projected = true;
                chain.words.push(format!("{op} `{}`", g.name(i)));
            }
            op if HEAD.contains(&op) || PASS.contains(&op) => {}
            // SDPA's guard `Where(IsNaN(p), 0, p)` passes the probabilities on.
            "Where" if !projected && n.input.first() != Some(&at) => {}
            op @ ("Mul" | "Div") if projected => {
                let divides = op == "Div";
                match g.constant(&other) {
                    Some(c) if !divides || n.input.first() == Some(&at) => chain.scale(g, i, &c, divides)?,
                    _ => {
                        return Err(format!(
                            "`{}` ({op}) scales the attention's output by a value computed at run time",
                            g.name(i)
                        ))
                    }
                }
            }
            "Add" if projected && g.is_constant(&other) => {}
            "Add" if projected => {
                chain.words.push(format!("Add `{}` (the residual)", g.name(i)));
                return Ok(chain);
            }
            op => {
                return Err(format!(
                    "the attention's output passes `{}` ({op}), which the audit does not read",
                    g.name(i)
                ))
            }
        }
        at = n.output.first().cloned().unwrap_or_default();
    }
    Err("the attention's output reaches no residual Add within 48 nodes".into())
}
