//! Many export folders in one run (`check DIR…`, `--from-list`, `--jobs`),
//! and reports made on several machines joined into one (`merge`): each
//! folder's report as `check DIR` makes it, a verdict over all of them, and
//! the folders that could not be checked with why. The distributed form of a
//! CI gate whose export tree outgrows one machine: shard the list, merge.

use super::report::{FolderReport, Verdict, SCHEMA_VERSION};
use super::Checker;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A folder that could not be checked at all, and why.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Unchecked {
    /// The path given.
    pub path: String,
    /// What is wrong with it.
    pub message: String,
    /// The exit code a `check` of it alone ends with.
    pub code: i32,
}

/// Everything a check of several folders found.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct ManyReport {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Fail when any folder fails or could not be checked.
    pub verdict: Verdict,
    /// Each folder's report, in the order given (merged: in the order read).
    pub folders: Vec<FolderReport>,
    /// Folders that could not be checked.
    #[serde(default)]
    pub unchecked: Vec<Unchecked>,
}

impl ManyReport {
    /// Folder reports and failures joined, the verdict over all of them.
    pub fn new(folders: Vec<FolderReport>, unchecked: Vec<Unchecked>) -> ManyReport {
        let fail = !unchecked.is_empty() || folders.iter().any(|f| f.verdict == Verdict::Fail);
        ManyReport {
            schema_version: SCHEMA_VERSION,
            verdict: if fail { Verdict::Fail } else { Verdict::Pass },
            folders,
            unchecked,
        }
    }

    /// Reports written by `check DIR --format json` (one folder) or by a
    /// check or merge of several (`{"folders": …}`), joined; a document that
    /// is neither is an error naming its file.
    pub fn merge(documents: &[(PathBuf, String)]) -> Result<ManyReport, String> {
        let mut folders = Vec::new();
        let mut unchecked = Vec::new();
        for (path, text) in documents {
            let value: serde_json::Value =
                serde_json::from_str(text).map_err(|e| format!("{}: not a JSON report: {e}", path.display()))?;
            if value.get("folders").is_some() {
                let many: ManyReport = serde_json::from_value(value)
                    .map_err(|e| format!("{}: not a report of several folders: {e}", path.display()))?;
                folders.extend(many.folders);
                unchecked.extend(many.unchecked);
            } else if value.get("files").is_some() {
                let one: FolderReport = serde_json::from_value(value)
                    .map_err(|e| format!("{}: not a folder report: {e}", path.display()))?;
                folders.push(one);
            } else {
                return Err(format!(
                    "{}: neither a folder report (`check DIR --format json`) nor one of several folders",
                    path.display()
                ));
            }
        }
        Ok(ManyReport::new(folders, unchecked))
    }
}

impl Checker {
    /// Checks every folder of `dirs`, `jobs` at a time (each folder's own
    /// runtime jobs still run in parallel inside it), in the order given.
    /// `code_of` says what exit code an error would have alone.
    pub fn run_folders(
        &self,
        dirs: &[PathBuf],
        jobs: usize,
        code_of: &(dyn Fn(&crate::error::Error) -> i32 + Sync),
    ) -> ManyReport {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let results: std::sync::Mutex<Vec<Option<Result<FolderReport, Unchecked>>>> =
            std::sync::Mutex::new(vec![None; dirs.len()]);
        let work = || loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let Some(dir) = dirs.get(i) else { break };
            let r = self.run_folder(dir).map_err(|e| Unchecked {
                path: dir.display().to_string(),
                message: e.to_string(),
                code: code_of(&e),
            });
            if let Ok(mut slot) = results.lock() {
                slot[i] = Some(r);
            }
        };
        std::thread::scope(|s| {
            for _ in 1..jobs.clamp(1, dirs.len().max(1)) {
                s.spawn(work);
            }
            work();
        });
        let (mut folders, mut unchecked) = (Vec::new(), Vec::new());
        for r in results.into_inner().unwrap_or_default().into_iter().flatten() {
            match r {
                Ok(f) => folders.push(f),
                Err(u) => unchecked.push(u),
            }
        }
        ManyReport::new(folders, unchecked)
    }
}

/// The paths of a list file: one per line, blank lines and `#` comments skipped.
pub fn read_list(path: &Path) -> Result<Vec<PathBuf>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    Ok(text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(PathBuf::from).collect())
}
