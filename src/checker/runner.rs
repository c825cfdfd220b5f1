//! Where a check's runtime jobs run: a folder's on its host process (one
//! ONNX Runtime and one encoder session for all its runs), a job its host
//! did not finish in a child of its own, or in this process when asked.

use super::Checker;
use crate::error::Error;
#[cfg(feature = "runtime")]
use {
    super::Isolation,
    crate::engine::RuntimeReport,
    std::path::{Path, PathBuf},
    std::sync::Arc,
};

impl Checker {
    /// This executable when jobs run in a child process (crash isolation), `None` in-process.
    #[cfg(feature = "runtime")]
    pub(super) fn runner(&self) -> Result<Option<PathBuf>, Error> {
        match self.isolation {
            Isolation::ChildProcess => std::env::current_exe()
                .map(Some)
                .map_err(|e| Error::Internal(format!("cannot find this executable: {e}"))),
            Isolation::InProcess => Ok(None),
        }
    }

    /// Runs `job` in the child `exe` (killed after the time limit) or in this process.
    #[cfg(feature = "runtime")]
    pub(super) fn run_job(&self, exe: Option<&Path>, job: &crate::engine::options::Job, source: &str) -> RuntimeReport {
        let progress = |m: &str| self.progress(m);
        // On the folder's host; a job its host did not finish (it died) runs again alone.
        let hosted = self.hosts.as_ref().and_then(|h| h.run(job, source, self.timeout, &progress));
        match (hosted, exe) {
            (Some(report), _) => report,
            (None, Some(exe)) => crate::engine::child::run(exe, job, source, self.timeout, &progress),
            (None, None) => crate::checks::job::run_in_process(job, source),
        }
    }

    /// This checker with a runtime host for a folder's runs, when they run in child processes.
    #[cfg(feature = "runtime")]
    pub(crate) fn hosted(&self) -> Result<Checker, Error> {
        let mut c = self.clone();
        if let Some(exe) = self.runner()? {
            c.hosts = Some(Arc::new(crate::engine::host::Hosts::new(&exe)));
        }
        Ok(c)
    }

    /// Without the runtime feature nothing runs: the checker as it is.
    #[cfg(not(feature = "runtime"))]
    pub(crate) fn hosted(&self) -> Result<Checker, Error> {
        Ok(self.clone())
    }
}
