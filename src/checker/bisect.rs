//! A crash named at its node. When ONNX Runtime kills the child inside a
//! folder's encoder, or inside the decoder at some step, further children
//! run the same file on the same (seeded) feeds — a decoder's steps before
//! the crashing one whole, that step cut — with its graph cut after node k,
//! halving the range until the first node whose execution kills the process
//! is found: at most log2(nodes) + 1 short children, each under the check's
//! time limit. The last one runs the graph cut just before that node and
//! reports the shapes and element types of what the node was about to read.

use super::Checker;
use crate::engine::events::TensorInfo;
use crate::engine::options::Job;
use crate::engine::runtime_report::RuntimeReport;
use crate::finding::Code;
use std::path::Path;

/// The node found, and what the search did.
pub(crate) struct Culprit {
    /// `name (Op)`.
    pub(crate) node: String,
    /// The node's own name.
    pub(crate) name: String,
    /// Its inputs as the cut run computed them.
    pub(crate) inputs: Vec<TensorInfo>,
    /// Index in execution order, of how many.
    pub(crate) index: usize,
    pub(crate) of: usize,
    /// Children run.
    pub(crate) children: usize,
}

impl Checker {
    /// Bisects the crash of `report` (run as `job`) to its node, in the
    /// encoder or in the file the decoder's crashing step ran, and names it
    /// on the crash finding.
    pub(crate) fn name_crash_node(&self, exe: &Path, job: &Job, source: &str, report: &mut RuntimeReport) {
        // A hang is no node's execution killing the process: bisecting it would cost a time limit per child.
        if report.crash.as_deref().is_none_or(|how| how.starts_with("did not finish")) {
            return;
        }
        let crash = report.findings.iter().find(|f| f.code == Code::Crash);
        let (file, at, what) = match (&report.crashed_in, crash.and_then(|f| Some((f.step?, f.step0_past_len?)))) {
            (Some(_), _) => match job.options.encoder.clone() {
                Some(e) => (e, None, "the encoder".to_string()),
                None => return,
            },
            (None, Some((step, past))) => {
                // Step 0 of a split pair runs its no-past file.
                let pair0 = job.options.step0_model.clone().or_else(|| job.options.no_cache_model.clone());
                let file = pair0.filter(|_| step == 0).unwrap_or_else(|| job.model.clone());
                (file, Some((step, past)), format!("the decoder at step {step}"))
            }
            (None, None) => return,
        };
        let found = self.bisect(exe, job, &file, at, source);
        let text = match &found {
            Ok(c) => format!(
                "bisected in {} further runs ({what} cut after node k, halving): node {} of {}, {}, kills the process when it runs; its inputs: {}",
                c.children,
                c.index + 1,
                c.of,
                c.node,
                c.inputs
                    .iter()
                    .map(|i| match &i.shape {
                        Some(s) => format!("{} {} {s:?}", i.name, i.dtype),
                        None if i.dtype == crate::model::signature::ElemType::Undefined => format!("{} (a weight)", i.name),
                        None => format!("{} (a graph input, {}, as fed above)", i.name, i.dtype),
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Err(why) => format!("could not bisect the crash to a node: {why}"),
        };
        // The node is verified before it is named: alone (else with its
        // producers), on the values it was about to read, it must kill a
        // child. `--repro DIR` keeps that reduction; without it the reduction
        // goes to a temporary folder, removed after.
        let mut text = text;
        let mut verified = false;
        if let Ok(c) = &found {
            let scratch = std::env::temp_dir().join(format!("onnx-contract-verify-{}", std::process::id()));
            let mut job = job.clone();
            let kept = job.options.repro.is_some();
            if !kept {
                job.options.repro = Some(crate::engine::options::ReproTo {
                    dir: scratch.clone(),
                    command: "(crash verification)".into(),
                });
            }
            let r = self.reproduce_crash(exe, &job, at, &c.name, source);
            verified = r.as_ref().is_some_and(|r| r.reproduces);
            match r.as_ref() {
                Some(r) if r.reproduces && kept => text.push_str(&format!(
                    "; reproduced by {} node(s) alone in {} (python {}/repro.py)",
                    r.nodes.1, r.dir, r.dir
                )),
                Some(r) if r.reproduces => text.push_str(&format!(
                    "; verified: {} node(s) alone, on those values, kill a child (`--repro DIR` keeps it)",
                    r.nodes.1
                )),
                Some(r) => text = format!(
                    "could not localise the crash to a node: the halving cuts point at {} (node {} of {}), but that node alone, on the values it was about to read, does not kill a child ({}): the cut runs kept other work (session creation, a fusion across the cut), so no node is named{}",
                    c.node,
                    c.index + 1,
                    c.of,
                    r.observed,
                    if kept { "; nothing kept in the --repro folder" } else { "" }
                ),
                None => {}
            }
            if kept {
                report.repros.extend(r);
            } else {
                let _ = std::fs::remove_dir_all(&scratch);
            }
        }
        for f in report.findings.iter_mut().filter(|f| f.code == Code::Crash) {
            if let (Ok(c), true) = (&found, verified) {
                f.node = Some(c.node.clone());
            }
            f.cause = Some(match f.cause.take() {
                Some(c) => format!("{text}; {c}"),
                None => text.clone(),
            });
        }
    }

    /// The crash's reproduction: for each depth (the node alone first), a
    /// child writes the reduction and runs it; the first whose child dies
    /// is kept (the child left it in place), announced as reproducing.
    fn reproduce_crash(
        &self,
        exe: &Path,
        job: &Job,
        at: Option<(usize, i64)>,
        node: &str,
        source: &str,
    ) -> Option<crate::engine::events::Repro> {
        let mut last = None;
        for depth in 0..=crate::repro::MAX_DEPTH {
            let mut child = job.clone();
            (child.options.cut, child.options.cut_step) = (None, at);
            child.options.crash_repro = Some((node.to_string(), depth));
            let r = crate::engine::child::run(exe, &child, source, self.timeout, &|_: &str| {});
            let mut written = r.repros.last().cloned()?;
            if written.observed.starts_with("not written") {
                return Some(written);
            }
            if let Some(how) = r.crash.as_ref().filter(|_| r.repros.len() == 1) {
                written.reproduces = true;
                written.observed =
                    format!("{}: the process {how}", written.observed.trim_end_matches(", as the check's run did"));
                return Some(written);
            }
            last = Some(written);
        }
        // No reduction up to MAX_DEPTH kills the process alone: nothing kept (the child removed each).
        last.map(|mut r| {
            r.observed = format!(
                "no reduction up to {} producer levels kills the process here (last: {})",
                crate::repro::MAX_DEPTH,
                r.observed
            );
            r
        })
    }

    fn bisect(
        &self,
        exe: &Path,
        job: &Job,
        file: &Path,
        at: Option<(usize, i64)>,
        source: &str,
    ) -> Result<Culprit, String> {
        let bytes = std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
        let (_, nodes) = crate::diagnose::graph_edit::flatten(&bytes, &|_| Some(false))?;
        // The graph's inputs as declared (read once, from the bytes already read).
        let fed = crate::model::reader::signature_from_bytes(&bytes).map(|s| s.inputs).unwrap_or_default();
        let outputs = |k: usize| -> Vec<String> {
            nodes[..k].iter().flat_map(|n| n.outputs.iter().filter(|o| !o.is_empty()).cloned()).collect()
        };
        let mut children = 0;
        // A cut run that ended with an error rather than dying, and why.
        let failed: std::cell::RefCell<Option<String>> = Default::default();
        let mut run = |wanted: Vec<String>| -> Option<Vec<TensorInfo>> {
            // After a run without evidence the halving stops: no more children.
            if failed.borrow().is_some() {
                return None;
            }
            children += 1;
            let mut cut = job.clone();
            cut.options.cut = Some(wanted);
            cut.options.cut_step = at;
            let r = crate::engine::child::run(exe, &cut, source, self.timeout, &|_: &str| {});
            // Survived: the cut run said what it computed and the child ended normally.
            if r.crash.as_deref().is_some_and(|how| how.starts_with("did not finish")) {
                // A cut that runs out of time neither ran nor died of a node.
                *failed.borrow_mut() = Some(format!("a cut run {}", r.crash.clone().unwrap_or_default()));
            } else if r.crash.is_none() && r.cut.is_none() {
                // Neither ran nor died (the cut did not load): no evidence either way.
                let why = r.findings.iter().find(|f| f.severity == crate::finding::Severity::Error);
                *failed.borrow_mut() = Some(why.map_or_else(|| "no answer".to_string(), |f| f.message.clone()));
            }
            r.cut.clone().filter(|_| r.crash.is_none())
        };
        // Invariant: the graph cut after `lo` nodes runs, after `hi` nodes it dies.
        let (mut lo, mut hi) = (0usize, nodes.len());
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if outputs(mid).is_empty() || run(outputs(mid)).is_some() {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        if let Some(why) = failed.borrow_mut().take() {
            return Err(format!("a cut run ended with an error instead of running or dying, so the halving has no evidence ({children} runs): {why}"));
        }
        // No cut survived: when a graph that computes nothing (its output one
        // of its inputs) dies as well, the process dies before any node runs.
        let nothing = fed.first().map(|p| vec![p.name.clone()]);
        // (A decoder step's only: an encoder cut to nothing may still not load, whisper-genai's does not.)
        if hi == 1 && at.is_some() && nothing.is_some_and(|n| run(n).is_none()) {
            return Err(format!(
                "every cut run died, even one computing no node: the crash is not one node's execution ({children} runs)"
            ));
        }
        let culprit = &nodes[hi - 1];
        let reads: Vec<String> = culprit.inputs.iter().filter(|i| !i.is_empty()).cloned().collect();
        // The node's inputs, from a run cut just before it (weights are not computed: none to report).
        let computed: Vec<String> =
            reads.iter().filter(|i| nodes[..hi - 1].iter().any(|n| n.outputs.contains(i))).cloned().collect();
        let mut inputs = if computed.is_empty() { Vec::new() } else { run(computed).unwrap_or_default() };
        // What it reads from outside the cut: the graph's inputs as fed, its weights.
        let outside: Vec<String> = reads.iter().filter(|r| !inputs.iter().any(|i| &i.name == *r)).cloned().collect();
        for r in &outside {
            // No shape: a graph input (its type known) or a weight (undefined).
            let dtype = fed
                .iter()
                .find(|p| &p.name == r)
                .and_then(|p| p.ty.tensor_parts())
                .map_or(crate::model::signature::ElemType::Undefined, |(e, _)| e);
            inputs.push(TensorInfo { name: r.clone(), dtype, shape: None });
        }
        Ok(Culprit {
            node: format!("{} ({})", culprit.path, culprit.op_type),
            name: culprit.name.clone(),
            inputs,
            index: hi - 1,
            of: nodes.len(),
            children,
        })
    }
}
