//! A consumer's own generation within the check's memory budget: what its
//! process is expected to need (its framework, and the weights of the files
//! it opens), started now when that fits beside the check's runs, later
//! (when its answer is due) when it does not, never when it exceeds the
//! whole budget.

use super::{start_one, Pending};
use crate::consumer::{Consumer, Target, View};
use crate::folder::Role;
use crate::memory::{show, Budget};
use crate::model::weights::{session_need, weight_bytes};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// A consumer's process before loading any model, measured here: Python
/// importing torch and optimum 655 MiB; onnxruntime-genai's Python module
/// with its runtime, and Node with transformers.js, far less.
fn framework(c: Consumer) -> u64 {
    match c {
        Consumer::Optimum => 768 << 20,
        Consumer::Genai => 128 << 20,
        Consumer::TransformersJs => 256 << 20,
    }
}

/// The files `c` opens, relative to the folder: transformers.js its
/// sessions at their selected dtype; optimum and genai the float32 files,
/// and of a merged decoder and the split pair beside it, the heavier
/// (optimum's `ORTModelForSeq2SeqLM` opened the pair of a full-size Marian
/// folder: 1,634 MiB at its peak, its framework 655 MiB of it).
fn opened(t: &Target, view: &View<'_>, dir: &Path) -> Vec<String> {
    if t.consumer == Consumer::TransformersJs {
        return crate::consumer::transformers_js::loaded_files(view, t.major);
    }
    // A folder of variants only (no float32 file): its files are what is opened.
    let only_variants = view.models.iter().all(|m| m.variant.is_some());
    let kept = |m: &&crate::consumer::ModelFile<'_>| m.variant.is_none() || only_variants;
    let fp32 = |r: &[Role]| -> Vec<String> {
        view.models.iter().filter(kept).filter(|m| r.contains(&m.role)).map(|m| m.rel.to_string()).collect()
    };
    let bytes = |files: &[String]| -> u64 { files.iter().map(|f| weight_bytes(&dir.join(f))).sum() };
    let (merged, pair) = (fp32(&[Role::MergedDecoder]), fp32(&[Role::Decoder, Role::DecoderWithPast]));
    let mut files: Vec<String> = view
        .models
        .iter()
        .filter(kept)
        .filter(|m| !matches!(m.role, Role::MergedDecoder | Role::Decoder | Role::DecoderWithPast))
        .map(|m| m.rel.to_string())
        .collect();
    files.extend(if bytes(&merged) >= bytes(&pair) { merged } else { pair });
    files
}

/// One consumer's run, with what it is expected to need.
pub(super) struct Later {
    consumer: Consumer,
    dir: PathBuf,
    ids: Vec<i64>,
    mode: String,
    timeout: Duration,
    need: u64,
    budget: Option<Arc<Budget>>,
}

impl Later {
    pub(super) fn new(
        t: &Target,
        view: &View<'_>,
        dir: &Path,
        ids: &[i64],
        mode: &str,
        timeout: Duration,
        budget: Option<Arc<Budget>>,
    ) -> Later {
        let weights: u64 = opened(t, view, dir).iter().map(|f| session_need(weight_bytes(&dir.join(f)))).sum();
        Later {
            consumer: t.consumer,
            dir: dir.to_path_buf(),
            ids: ids.to_vec(),
            mode: mode.to_string(),
            timeout,
            need: framework(t.consumer) + weights,
            budget,
        }
    }

    /// Started now when the budget has room; held for later when it has
    /// none yet; refused when it could never fit.
    pub(super) fn now_or_later(self) -> Pending {
        let Some(budget) = self.budget.clone() else { return self.start() };
        if budget.refuses(self.need) {
            return Pending::Refused(format!(
                "it is expected to need {} (its framework, and the weights and arenas of the files it opens), more than the memory budget of {} ({})",
                show(self.need),
                show(budget.limit()),
                budget.source()
            ));
        }
        match budget.try_take(self.need) {
            Some(lease) => start_one(self.consumer, &self.dir, &self.ids, &self.mode, self.timeout, Some(lease)),
            None => {
                let what = format!("{}'s own generation ({})", super::name(self.consumer), show(self.need));
                budget.note_waited(&self.dir, &what);
                Pending::Later(self)
            }
        }
    }

    /// Started, waiting for the budget's room first when there is one.
    pub(super) fn start(self) -> Pending {
        let lease = self.budget.as_ref().and_then(|b| b.take(&self.dir, "", self.need).ok());
        start_one(self.consumer, &self.dir, &self.ids, &self.mode, self.timeout, lease)
    }
}
