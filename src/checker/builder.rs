//! The checker's builder: every setting an application or the command line
//! gives before [`Checker::run`], with its default.

use super::{Checker, Isolation};
use crate::contract::Contract;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

impl Default for Checker {
    fn default() -> Self {
        Checker {
            contract: None,
            static_only: false,
            steps: 4,
            batch: 1,
            seed: 0,
            runtimes: Vec::new(),
            fetch: false,
            timeout: Duration::from_secs(600),
            target_ort: None,
            encoder: None,
            no_cache_model: None,
            isolation: Isolation::default(),
            notice: None,
            progress: None,
            family: None,
            deep: false,
            repro: None,
            consumer: crate::consumer::Choice::Infer,
            consumers_known: None,
            memory: crate::memory::Budget::of_machine(),
            #[cfg(feature = "runtime")]
            hosts: None,
        }
    }
}

impl std::fmt::Debug for Checker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checker")
            .field("contract", &self.contract.as_ref().map(|c| &c.name))
            .field("static_only", &self.static_only)
            .field("steps", &self.steps)
            .field("batch", &self.batch)
            .field("runtimes", &self.runtimes)
            .finish_non_exhaustive()
    }
}

impl Checker {
    /// A checker with the defaults.
    pub fn new() -> Self {
        Self::default()
    }
    /// The contract to check against.
    pub fn contract(mut self, contract: Contract) -> Self {
        self.contract = Some(contract);
        self
    }
    /// Write a minimal reproduction of each failing, non-finite or diverging
    /// node into `dir` (one folder per file and finding: model, inputs,
    /// script, README); `command` is quoted in their READMEs. The checked
    /// folder is never written to: see [`crate::remedy::outside`].
    pub fn repro(mut self, dir: impl Into<PathBuf>, command: impl Into<String>) -> Self {
        self.repro = Some((dir.into(), command.into()));
        self
    }
    /// Where `--repro` writes, as the job carries it.
    #[cfg(feature = "runtime")]
    pub(crate) fn repro_to(&self) -> Option<crate::engine::options::ReproTo> {
        self.repro
            .as_ref()
            .map(|(dir, command)| crate::engine::options::ReproTo { dir: dir.clone(), command: command.clone() })
    }
    /// The memory the check's processes may use in all (`--max-memory`;
    /// default: what the machine or its cgroup makes available when the
    /// checker is made). Jobs that do not fit beside each other run one
    /// after another; one larger than the budget is not started (a
    /// `memory-budget` finding naming it).
    pub fn max_memory(mut self, bytes: u64) -> Self {
        self.memory = crate::memory::Budget::asked(bytes);
        self
    }
    /// The budget every process of this check shares (a consumer's own generation takes its lease here too).
    pub fn memory(&self) -> Arc<crate::memory::Budget> {
        self.memory.clone()
    }
    /// Only the static signature check (no ONNX Runtime).
    pub fn static_only(mut self, yes: bool) -> Self {
        self.static_only = yes;
        self
    }

    /// Whether only the static check runs.
    pub fn is_static_only(&self) -> bool {
        self.static_only
    }
    /// Kept for applications written before the run decided: the runtime
    /// steps now run whenever a plan can be made, static failure or not.
    pub fn force_run(self, _yes: bool) -> Self {
        self
    }
    /// Decoding steps per run.
    pub fn steps(mut self, n: usize) -> Self {
        self.steps = n;
        self
    }
    /// Longer and slower runs: at least [`DEEP_STEPS`](super::DEEP_STEPS) steps (and past a
    /// config's sliding window + 2, up to [`DEEP_MAX_STEPS`](super::DEEP_MAX_STEPS)), and the first
    /// run's steps re-run with graph optimizations disabled.
    pub fn deep(mut self, yes: bool) -> Self {
        self.deep = yes;
        self
    }
    /// Rows fed at once.
    pub fn batch(mut self, n: i64) -> Self {
        self.batch = n;
        self
    }
    /// Seed for token ids and random encoder states.
    pub fn seed(mut self, n: u64) -> Self {
        self.seed = n;
        self
    }
    /// ONNX Runtime libraries to run with, one run each (default: the one found).
    pub fn runtimes(mut self, libs: impl IntoIterator<Item = PathBuf>) -> Self {
        self.runtimes = libs.into_iter().collect();
        self
    }
    /// Allow installing the pinned ONNX Runtime with pip when none is found.
    pub fn fetch(mut self, yes: bool) -> Self {
        self.fetch = yes;
        self
    }
    /// Time limit per runtime; a hung runtime is killed.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }
    /// Also say whether the model needs a newer ONNX Runtime than `version` (e.g. `1.16`).
    pub fn target_ort(mut self, version: impl Into<String>) -> Self {
        self.target_ort = Some(version.into());
        self
    }
    /// Produce the encoder states with this encoder model (seq2seq).
    pub fn encoder(mut self, path: impl Into<PathBuf>) -> Self {
        self.encoder = Some(path.into());
        self
    }
    /// Recompute uncached logits with this decoder (without past inputs).
    pub fn no_cache_model(mut self, path: impl Into<PathBuf>) -> Self {
        self.no_cache_model = Some(path.into());
        self
    }
    /// The built-in family contract for folder mode and contract-less files
    /// (`marian`, `llama-decoder`, …), instead of the one config.json's
    /// `model_type` chooses.
    pub fn family(mut self, name: impl Into<String>) -> Self {
        self.family = Some(name.into());
        self
    }
    /// Folder mode: whose loading rules the folder is checked against
    /// (default: the consumers it is laid out for).
    pub fn consumer(mut self, choice: crate::consumer::Choice) -> Self {
        self.consumer = choice;
        self
    }
    /// Folder mode: called with the folder, as its consumers see it, and
    /// the consumers it is checked for, once it is read and before its runs
    /// (an application starts the consumers' own generation there, so it
    /// runs beside the check).
    pub fn on_consumers(
        mut self,
        f: impl Fn(&std::path::Path, &crate::consumer::View<'_>, &[crate::consumer::Target]) + Send + Sync + 'static,
    ) -> Self {
        self.consumers_known = Some(Arc::new(f));
        self
    }
    /// Where the runtime steps run.
    pub fn isolation(mut self, isolation: Isolation) -> Self {
        self.isolation = isolation;
        self
    }
    /// Called with one-line notices (e.g. "fetching ONNX Runtime"); the library never prints.
    pub fn on_notice(mut self, f: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.notice = Some(Arc::new(f));
        self
    }

    /// Called with one line per stage of the runtime runs (session created,
    /// step k), for a progress display; the library never prints.
    pub fn on_progress(mut self, f: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(f));
        self
    }
}
