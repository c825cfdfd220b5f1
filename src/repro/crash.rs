//! A crash's reproduction: the node (with the least upstream graph) cut out
//! with the values it was about to read, written, then run in this process:
//! the process dying is the proof a parent reads (`checker::bisect`).

use super::{cut, flag, raw, runtime_version, script, session, started, write_reduction, Cut, Problem};
use crate::diagnose::graph_edit;
use crate::engine::feeds::Feed;
use crate::engine::options::Options;
use crate::finding::Code;
use std::path::Path;

/// A crash's reduction at `depth` (the node alone at 0), written under
/// `opts.repro` and then run here: the process dying is the proof, which
/// the parent reads (`checker::bisect`). Announced first with `emit`; when
/// the run survives, the files are removed and the announcement says so.
pub(crate) fn crash(
    env: &ort::environment::Environment,
    model: &Path,
    feeds: &[Feed],
    node: &str,
    depth: usize,
    opts: &Options,
    emit: &mut dyn FnMut(crate::engine::events::Event),
) {
    let Some(to) = opts.repro.as_ref() else { return };
    let (dir, mut repro) = started(to, model, node, Code::Crash);
    let written = (|| -> Result<Cut, String> {
        let bytes = std::fs::read(model).map_err(|e| format!("{}: {e}", model.display()))?;
        let path =
            graph_edit::find_node(&bytes, node, &flag(feeds)).ok_or_else(|| format!("node `{node}` not found"))?;
        repro.node = format!("{} ({})", path.display(), path.op_type);
        repro.nodes.0 = crate::edit::node_count(&bytes);
        let (c, _) = cut(env, model, &bytes, &path, node, depth, feeds, opts, true)?;
        let _ = std::fs::remove_dir_all(&dir);
        let ort_version = runtime_version();
        let observed = format!("running the reduction ({} node(s)) kills the process, as the check's run did", c.nodes);
        let ctx = script::Context {
            model,
            node: &repro.node,
            problem: &Problem::Crashes,
            observed: &observed,
            expected_error: None,
            command: &to.command,
            ort_version: &ort_version,
            nodes: (repro.nodes.0, c.nodes),
            bytes: (repro.bytes.0, c.bytes.len() as u64),
        };
        write_reduction(&dir, &c, None, &ctx)?;
        repro.observed = observed;
        Ok(c)
    })();
    let c = match written {
        Ok(c) => c,
        Err(e) => {
            repro.observed = format!("not written: {e}");
            return emit(crate::engine::events::Event::Repro(repro));
        }
    };
    repro.nodes.1 = c.nodes;
    repro.bytes.1 = c.bytes.len() as u64;
    // Announced as written; the parent decides from whether this process survives.
    emit(crate::engine::events::Event::Repro(repro.clone()));
    let ran = session(env, &c.bytes, opts, true).and_then(|mut s| raw::run(&mut s, &c.inputs).map(|_| ()));
    let _ = std::fs::remove_dir_all(&dir);
    repro.observed = match ran {
        Ok(()) => format!("the reduction ({} node(s)) runs to its end here", c.nodes),
        Err(e) => format!("the reduction ({} node(s)) raises instead of crashing: {}", c.nodes, first(&e)),
    };
    emit(crate::engine::events::Event::Repro(repro));
}

fn first(e: &str) -> &str {
    e.lines().next().unwrap_or(e)
}
