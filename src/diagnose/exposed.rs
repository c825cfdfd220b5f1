//! A model run with every intermediate tensor exposed as an output: what the
//! first non-finite node and the first diverging node are searched in.

use crate::diagnose::graph_edit;
use crate::engine::feeds::{Feed, Outputs, Values};
use crate::engine::options::Options;
use crate::engine::session::{run, with_threads};
use ort::session::Session;
use std::path::Path;

/// Runs `model` on `feeds` with every intermediate tensor exposed as an
/// output (the branches the feeds take lifted out of their `If`), without
/// graph optimizations so that each node's own output is what is seen.
pub(crate) fn exposed_run(
    env: &ort::environment::Environment,
    model: &Path,
    feeds: &[Feed],
    opts: &Options,
) -> Result<(Vec<graph_edit::FlatNode>, Outputs), String> {
    let every = |nodes: &[graph_edit::FlatNode]| -> Vec<String> {
        nodes.iter().flat_map(|n| n.outputs.iter().filter(|o| !o.is_empty()).cloned()).collect()
    };
    exposing(env, model, feeds, opts, &every)
}

/// [`exposed_run`] with only the tensors `wanted` picks from the nodes the
/// feeds run exposed (the rest of the graph cut away).
pub(crate) fn exposing(
    env: &ort::environment::Environment,
    model: &Path,
    feeds: &[Feed],
    opts: &Options,
    wanted: &dyn Fn(&[graph_edit::FlatNode]) -> Vec<String>,
) -> Result<(Vec<graph_edit::FlatNode>, Outputs), String> {
    let bytes = std::fs::read(model).map_err(|e| format!("{}: {e}", model.display()))?;
    let flag = |cond: &str| -> Option<bool> {
        feeds.iter().find(|f| f.name == cond).and_then(|f| match &f.values {
            Values::Bool(a) => a.iter().next().copied(),
            _ => None,
        })
    };
    let (path, nodes) = graph_edit::flatten(&bytes, &flag)?;
    let edited = graph_edit::expose(&bytes, &path, &wanted(&nodes))?;
    let builder = with_threads(Session::builder(env), opts.threads)
        .and_then(|b| Ok(b.with_optimization_level(ort::session::builder::GraphOptimizationLevel::Disable)?));
    let mut s = crate::engine::session::commit_edited(builder, &edited, model).map_err(|e| e.to_string())?;
    let declared: Vec<String> = s.inputs().iter().map(|i| i.name().to_string()).collect();
    let kept: Vec<Feed> = feeds.iter().filter(|f| declared.contains(&f.name)).cloned().collect();
    Ok((nodes, run(&mut s, &kept)?))
}
