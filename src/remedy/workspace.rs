//! A copy of an export folder to try changes on: built once, each trial
//! writes its changed files and puts the originals back after. Files are
//! hard-linked where the file system allows (a large model is not copied
//! per trial) and a changed file replaces its link, never writes through
//! it; `--fix-out` makes real copies. Directory links are not followed, as
//! in a check.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Changed files, by their path relative to the folder.
pub type Edits = BTreeMap<String, Vec<u8>>;

/// Every regular file under `folder` (file links followed, directory links
/// not), relative, at most 4 levels down.
pub(crate) fn files(folder: &Path) -> Result<Vec<String>, String> {
    fn walk(root: &Path, rel: &Path, depth: usize, out: &mut Vec<String>) -> Result<(), String> {
        let dir = root.join(rel);
        let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for e in entries {
            let e = e.map_err(|e| format!("{}: {e}", dir.display()))?;
            let link = e.file_type().map_err(|err| format!("{}: {err}", e.path().display()))?;
            let child = rel.join(e.file_name());
            if link.is_dir() && depth < 4 {
                walk(root, &child, depth + 1, out)?;
            } else if !link.is_dir() && std::fs::metadata(e.path()).is_ok_and(|m| m.is_file()) {
                out.push(child.to_string_lossy().replace('\\', "/"));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(folder, Path::new(""), 0, &mut out)?;
    out.sort();
    Ok(out)
}

/// A scratch copy of a folder under the system's temporary directory.
pub(crate) struct Workspace {
    pub(crate) dir: PathBuf,
    source: PathBuf,
    changed: Vec<String>,
}

impl Workspace {
    /// Links (or copies) every file of `source` into a new temporary folder.
    pub(crate) fn new(source: &Path) -> Result<Workspace, String> {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("onnx-contract-remedy-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let ws = Workspace { dir, source: source.to_path_buf(), changed: Vec::new() };
        for rel in files(source)? {
            ws.restore(&rel)?;
        }
        Ok(ws)
    }

    fn restore(&self, rel: &str) -> Result<(), String> {
        let (from, to) = (self.source.join(rel), self.dir.join(rel));
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        let _ = std::fs::remove_file(&to);
        // A hub cache's file is a link to a blob: link to what it points at.
        let real = std::fs::canonicalize(&from).map_err(|e| format!("{}: {e}", from.display()))?;
        if std::fs::hard_link(&real, &to).is_err() {
            std::fs::copy(&real, &to).map_err(|e| format!("{} → {}: {e}", from.display(), to.display()))?;
        }
        Ok(())
    }

    /// The folder as `edits` change it (files of earlier trials put back first).
    pub(crate) fn apply(&mut self, edits: &Edits) -> Result<(), String> {
        for rel in std::mem::take(&mut self.changed) {
            self.restore(&rel)?;
        }
        for (rel, bytes) in edits {
            let to = self.dir.join(rel);
            // Never through a hard link into the checked folder.
            let _ = std::fs::remove_file(&to);
            std::fs::write(&to, bytes).map_err(|e| format!("{}: {e}", to.display()))?;
            self.changed.push(rel.clone());
        }
        Ok(())
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Writes `source` as `edits` change it into `out`, as real copies.
pub(crate) fn write_folder(source: &Path, edits: &Edits, out: &Path) -> Result<(), String> {
    for rel in files(source)? {
        let to = out.join(&rel);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        let _ = std::fs::remove_file(&to);
        match edits.get(&rel) {
            Some(bytes) => std::fs::write(&to, bytes).map(|_| ()),
            None => std::fs::copy(source.join(&rel), &to).map(|_| ()),
        }
        .map_err(|e| format!("{}: {e}", to.display()))?;
    }
    Ok(())
}

/// `dir` is not inside `checked` (a folder, or a file's folder): nothing is
/// ever written into the checked export. Resolved through links, also when
/// `dir` does not exist yet.
pub fn outside(dir: &Path, checked: &Path) -> Result<(), String> {
    let folder = if checked.is_dir() { checked } else { checked.parent().unwrap_or(Path::new(".")) };
    let folder = std::fs::canonicalize(if folder.as_os_str().is_empty() { Path::new(".") } else { folder })
        .map_err(|e| format!("{}: {e}", folder.display()))?;
    let abs = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir().map_err(|e| e.to_string())?.join(dir)
    };
    let mut existing = abs.clone();
    let mut rest = Vec::new();
    while !existing.exists() {
        match (existing.file_name().map(|n| n.to_os_string()), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => break,
        }
    }
    let mut resolved = std::fs::canonicalize(&existing).unwrap_or(existing);
    for part in rest.into_iter().rev() {
        resolved.push(part);
    }
    if resolved.starts_with(&folder) {
        return Err(format!(
            "{} is inside the checked folder {}: nothing is written there; choose a folder outside it",
            dir.display(),
            folder.display()
        ));
    }
    Ok(())
}
