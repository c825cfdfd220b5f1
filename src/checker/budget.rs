//! What a runtime job is expected to need in memory, and its lease from the
//! check's budget ([`crate::memory::Budget`]): taken before the child
//! starts, given back when it ends.

use super::Checker;
use crate::finding::{Code, Finding};
use crate::memory::show;
#[cfg(feature = "runtime")]
use {
    crate::memory::Lease,
    std::path::{Path, PathBuf},
};

/// A child running ONNX Runtime on a tiny model peaks near 50 MiB (the
/// runtime's code, our own); each session then holds its weights and
/// arenas for its activations.
#[cfg(feature = "runtime")]
pub(crate) const CHILD_BASE: u64 = 64 << 20;

/// Every model file a job opens at once: the driven one, its encoder, the
/// no-past half of a pair, the embedding model, and a variant's fp32 reference with its encoder.
#[cfg(feature = "runtime")]
pub(crate) fn job_files(job: &crate::engine::options::Job) -> Vec<PathBuf> {
    let o = &job.options;
    let mut files = vec![job.model.clone()];
    let others = [&o.encoder, &o.embed_tokens, &o.no_cache_model, &o.step0_model, &o.compare_encoder];
    for f in others.into_iter().flatten().chain(o.compare_to.as_ref().map(|(p, _)| p)) {
        if !files.contains(f) {
            files.push(f.clone());
        }
    }
    files
}

impl Checker {
    /// The job's lease, waiting for room; a job larger than the whole
    /// budget gets the finding that says so in `findings` instead, and is not run.
    #[cfg(feature = "runtime")]
    pub(crate) fn lease(&self, job: &crate::engine::options::Job, findings: &mut Vec<Finding>) -> Option<Lease> {
        self.lease_or(job).map_err(|f| findings.push(*f)).ok()
    }

    #[cfg(feature = "runtime")]
    pub(crate) fn lease_or(&self, job: &crate::engine::options::Job) -> Result<Lease, Box<Finding>> {
        let files = job_files(job);
        let need = CHILD_BASE
            + files
                .iter()
                .map(|f| crate::model::weights::session_need(crate::model::weights::weight_bytes(f)))
                .sum::<u64>();
        let name = |p: &Path| p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into());
        let what = files.iter().map(|f| name(f)).collect::<Vec<_>>().join(" + ");
        let scope = job.model.parent().unwrap_or(Path::new("."));
        self.memory.take(scope, &format!("{what} ({})", show(need)), need).map_err(|too| {
            let budget = &self.memory;
            Box::new(
                Finding::error(
                    Code::MemoryBudget,
                    format!(
                        "not run: its runtime job ({what}) is expected to need {} (the weights of every file it opens and each session's arenas, plus {} for ONNX Runtime itself), more than the memory budget of {} ({}); the static checks above still hold",
                        show(too.need),
                        show(CHILD_BASE),
                        show(too.limit),
                        budget.source()
                    ),
                )
                .tensor(name(&job.model)),
            )
        })
    }

    /// The information that runs of the folder `dir` waited for memory, when any did.
    pub(crate) fn memory_waits(&self, dir: &std::path::Path) -> Option<Finding> {
        let waited = self.memory.take_waited(dir);
        if waited.is_empty() {
            return None;
        }
        Some(Finding::new(
            Code::MemoryBudget,
            crate::finding::Severity::Info,
            format!(
                "memory budget {} ({}): {} run(s) waited for others to end rather than run beside them: {}",
                show(self.memory.limit()),
                self.memory.source(),
                waited.len(),
                waited.join("; ")
            ),
        ))
    }
}
