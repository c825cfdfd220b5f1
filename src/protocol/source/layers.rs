//! Where a departure from the checkpoint starts: the checkpoint's hidden
//! states (its decoder layer stack's input and each layer's output, by
//! forward hooks) against the graph's tensors at the same step, the graph's
//! layers found by their node scopes — an optimum (TorchScript) export names
//! the nodes of `model.layers.3` `/model/layers.3/…`.

use crate::diagnose::graph_edit::FlatNode;
use serde::Deserialize;
use std::collections::{HashMap, HashSet};

/// Where the checkpoint's program left its hidden states.
#[derive(Debug, Deserialize)]
pub(super) struct Saved {
    /// The layer stack's module path (`model.layers`, `model.decoder.layers`).
    path: String,
    /// `[steps, 1 + layers, hidden]` float32 (.npy): the first layer's
    /// input, then each layer's output, at each compared step's position.
    file: std::path::PathBuf,
}

/// The checkpoint's hidden states at each compared step's position.
#[derive(Debug)]
pub(super) struct Hidden {
    /// The layer stack's module path.
    pub(super) path: String,
    /// The first layer's input, per step.
    pub(super) embeddings: Vec<Vec<f64>>,
    /// Each layer's output, per step.
    pub(super) layers: Vec<Vec<Vec<f64>>>,
}

impl Saved {
    /// The hidden states, read from the program's .npy.
    pub(super) fn read(&self) -> Result<Hidden, String> {
        let a = crate::engine::npy::read_f32(&self.file)?;
        let &[steps, rows, width] = a.shape() else { return Err(format!("hidden states of shape {:?}", a.shape())) };
        let flat: Vec<f64> = a.iter().map(|v| f64::from(*v)).collect();
        let row = |s: usize, r: usize| flat[(s * rows + r) * width..(s * rows + r + 1) * width].to_vec();
        Ok(Hidden {
            path: self.path.clone(),
            embeddings: (0..steps).map(|s| row(s, 0)).collect(),
            layers: (0..steps).map(|s| (1..rows).map(|r| row(s, r)).collect()).collect(),
        })
    }
}

/// The graph's tensors that may hold what the checkpoint's hooks saw.
pub(super) struct Candidates {
    /// The node scope of layer N is `{prefix}N/`.
    pub(super) prefix: String,
    /// What enters the first layer from outside the stack.
    pub(super) embeddings: Vec<String>,
    /// Per layer, its tensors read outside it (the residual stream it hands on).
    pub(super) layers: Vec<Vec<String>>,
}

impl Candidates {
    pub(super) fn all(&self) -> Vec<String> {
        let mut v: Vec<String> = self.embeddings.iter().chain(self.layers.iter().flatten()).cloned().collect();
        v.dedup();
        v
    }
}

/// The layer of a node named `name` under `prefix`, when it is in one.
fn layer_of(name: &str, prefix: &str) -> Option<usize> {
    let rest = name.strip_prefix(prefix)?;
    let (n, _) = rest.split_once('/')?;
    n.parse().ok()
}

/// The candidates of `layers` layers under the module path `path`, from the
/// nodes the uncached run executes; none when no node carries that scope.
pub(super) fn candidates(nodes: &[FlatNode], path: &str, layers: usize) -> Option<Candidates> {
    let prefix = format!("/{}.", path.replace('.', "/"));
    let at: Vec<Option<usize>> = nodes.iter().map(|n| layer_of(&n.name, &prefix)).collect();
    if !at.iter().any(Option::is_some) {
        return None;
    }
    let mut made: HashMap<&str, Option<usize>> = HashMap::new();
    for (n, l) in nodes.iter().zip(&at) {
        for o in n.outputs.iter().filter(|o| !o.is_empty()) {
            made.insert(o, *l);
        }
    }
    let mut out = Candidates { prefix, embeddings: Vec::new(), layers: vec![Vec::new(); layers] };
    let mut seen: HashSet<(&str, Option<usize>)> = HashSet::new();
    for (n, reader) in nodes.iter().zip(&at) {
        for i in n.inputs.iter().filter(|i| !i.is_empty()) {
            let Some(maker) = made.get(i.as_str()) else { continue };
            if maker == reader || !seen.insert((i, *maker)) {
                continue;
            }
            match (maker, reader) {
                (Some(l), _) if *l < layers => out.layers[*l].push(i.clone()),
                (None, Some(0)) => out.embeddings.push(i.clone()),
                _ => {}
            }
        }
    }
    Some(out)
}

/// max |Δ| of `g` against `h`, and ‖Δ‖ / ‖h‖: relative over the whole
/// vector, so a few outlying dimensions (large in Llama-family residual
/// streams) do not hide a departure in the others.
fn gap(g: &[f32], h: &[f64]) -> Option<(f64, f64)> {
    if g.len() != h.len() || h.is_empty() {
        return None;
    }
    let d: Vec<f64> = g.iter().zip(h).map(|(a, b)| f64::from(*a) - b).collect();
    let max = d.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    Some((max, norm(&d) / norm(h).max(1e-12)))
}

/// The closest of `names` to `h` in `values`: (name, max |Δ|, relative).
fn closest<'a>(names: &'a [String], values: &HashMap<&str, &[f32]>, h: &[f64]) -> Option<(&'a str, f64, f64)> {
    names
        .iter()
        .filter_map(|n| gap(values.get(n.as_str())?, h).map(|(d, r)| (n.as_str(), d, r)))
        .min_by(|a, b| a.2.total_cmp(&b.2))
}

/// The sentence saying where the departure at `step` starts, `bound` the
/// relative gap within which a tensor agrees.
pub(super) fn locate(
    c: &Candidates,
    hidden: &Hidden,
    step: usize,
    values: &[(String, Vec<f32>)],
    bound: f64,
) -> String {
    let values: HashMap<&str, &[f32]> = values.iter().map(|(n, v)| (n.as_str(), v.as_slice())).collect();
    let path = &hidden.path;
    let (Some(emb), Some(layers)) = (hidden.embeddings.get(step), hidden.layers.get(step)) else {
        return format!("where it starts was not located: the checkpoint gave no hidden states at step {step}");
    };
    let mut worst = 0.0f64;
    match closest(&c.embeddings, &values, emb) {
        Some((t, d, r)) if r > bound => {
            return format!("it starts before the first layer: what enters {}0/ (`{t}`) is max |Δ| {d:.3e} from the checkpoint's input of {path}.0 ({r:.1e} relative): the embeddings (or what scales them) differ", c.prefix);
        }
        Some((_, _, r)) => worst = worst.max(r),
        None => {}
    }
    let mut found = Vec::new();
    for (i, h) in layers.iter().enumerate() {
        let Some(best) = c.layers.get(i).and_then(|names| closest(names, &values, h)) else {
            return format!(
                "where it starts was not located: no tensor of the graph's {}{i}/ has the width of {path}.{i}'s output",
                c.prefix
            );
        };
        found.push(best);
    }
    if let Some(i) = found.iter().position(|(_, _, r)| *r > bound) {
        // A departure carries on through the residual stream: a layer that
        // agrees after one that departs means the scopes do not cut the
        // stream where the checkpoint's layers do (a builder that adds the
        // residual in the next layer's fused norm), so no layer is named.
        if let Some(j) = found[i..].iter().position(|(_, _, r)| *r <= bound) {
            return format!("where it starts was not located: {path}.{i} departs but {path}.{} agrees again, so the graph's {} scopes do not cut the residual stream where the checkpoint's layers end", i + j, c.prefix);
        }
        let (t, d, r) = found[i];
        worst = found[..i].iter().fold(worst, |w, (_, _, r)| w.max(*r));
        let before = if i == 0 {
            "what enters it agrees".to_string()
        } else {
            format!("the layers before it agree (within {worst:.1e})")
        };
        return format!("the first departing layer is {path}.{i} (the graph's {}{i}/, its output `{t}`): max |Δ| {d:.3e} from the checkpoint's, {r:.1e} relative (‖Δ‖ / ‖h‖), where {before}", c.prefix);
    }
    for (_, _, r) in &found {
        worst = worst.max(*r);
    }
    format!("every layer agrees with the checkpoint (within {worst:.1e} relative, {} layers and what enters them): it starts after the last layer, in what turns its output into logits (final norm, head, logits scaling)", layers.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, inputs: &[&str], outputs: &[&str]) -> FlatNode {
        FlatNode {
            path: name.into(),
            name: name.into(),
            op_type: "Add".into(),
            domain: String::new(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: outputs.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn the_residual_stream_between_scoped_layers_is_found() {
        let nodes = [
            node("/model/embed_tokens/Gather", &["w", "ids"], &["e"]),
            node("/model/layers.0/Mul", &["e", "s"], &["a"]),
            node("/model/layers.0/Add", &["a", "e"], &["r0"]),
            node("/model/layers.1/Add", &["r0", "r0"], &["r1"]),
            node("/model/norm/Mul", &["r1"], &["n"]),
        ];
        let c = candidates(&nodes, "model.layers", 2).unwrap();
        assert_eq!(c.prefix, "/model/layers.");
        assert_eq!(c.embeddings, ["e"]);
        assert_eq!(c.layers, [vec!["r0".to_string()], vec!["r1".to_string()]]);
        assert!(candidates(&nodes, "model.decoder.layers", 2).is_none());
        let hidden = Hidden {
            path: "model.layers".into(),
            embeddings: vec![vec![1.0, 2.0]],
            layers: vec![vec![vec![1.0, 1.0], vec![4.0, 4.0]]],
        };
        let values = vec![
            ("e".to_string(), vec![1.0, 2.0]),
            ("r0".to_string(), vec![1.0, 1.0]),
            ("r1".to_string(), vec![2.0, 2.0]),
        ];
        let said = locate(&c, &hidden, 0, &values, 1e-3);
        assert!(
            said.starts_with(
                "the first departing layer is model.layers.1 (the graph's /model/layers.1/, its output `r1`)"
            ),
            "{said}"
        );
    }
}
