//! Finds every ONNX file of an export folder: the folder itself and its
//! `onnx/` subfolder (transformers.js layout). Reads directory listings only;
//! follows no directory link (a link out of the folder is never walked) but
//! accepts file links (hub caches are made of them).

pub use crate::error::FolderError;
use std::path::{Path, PathBuf};

/// Suffixes converters append for numeric variants (`decoder_model_merged_fp16.onnx`).
pub const VARIANT_SUFFIXES: &[&str] =
    &["q4f16", "fp16", "bf16", "q4", "q8", "bnb4", "quantized", "int8", "uint8", "int4", "uint4", "fp32"];

/// One ONNX file found in a folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundFile {
    /// Its path (inside the folder, or the folder's file link).
    pub path: PathBuf,
    /// Its path relative to the folder, `/`-separated (`onnx/encoder_model.onnx`).
    pub rel: String,
    /// The file stem without a variant suffix (`decoder_model_merged`).
    pub base: String,
    /// The variant suffix, when there is one (`fp16`, `quantized`, …).
    pub variant: Option<String>,
}

/// `decoder_model_merged_fp16` → (`decoder_model_merged`, `fp16`).
pub fn split_variant(stem: &str) -> (String, Option<String>) {
    for suffix in VARIANT_SUFFIXES {
        if let Some(base) = stem.strip_suffix(suffix).and_then(|b| b.strip_suffix('_')) {
            if !base.is_empty() {
                return (base.to_string(), Some(suffix.to_string()));
            }
        }
    }
    (stem.to_string(), None)
}

/// A `.onnx` entry of the folder that is not a readable model file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OddFile {
    /// Its path relative to the folder (`onnx/model.onnx`).
    pub rel: String,
    /// What is wrong with it, in words (`a link to /x/model.onnx, which does not exist`).
    pub problem: String,
    /// Whether a runtime loading the folder would fail on it (a link or an
    /// unreadable file), rather than only find something odd (a directory).
    pub breaks: bool,
}

/// What is wrong with the `.onnx` entry at `path`, or `None` for a readable regular file.
fn oddity(path: &Path) -> Option<(String, bool)> {
    let link = std::fs::symlink_metadata(path).ok()?.file_type().is_symlink();
    let target = || std::fs::read_link(path).map(|t| t.display().to_string()).unwrap_or_else(|_| "?".into());
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        // ELOOP: a link that leads back to itself.
        Err(e) if e.raw_os_error() == Some(40) => {
            return Some((format!("a link that loops (→ {}): no file at its end", target()), true))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && link => {
            return Some((format!("a link to {}, which does not exist", target()), true))
        }
        Err(e) => return Some((format!("cannot be read: {e}"), true)),
    };
    if meta.is_dir() {
        let what = if link { format!("a link to the directory {}", target()) } else { "a directory".into() };
        return Some((format!("{what}, not a model file"), false));
    }
    if !meta.is_file() {
        // A fifo or a socket: opening it could block, so it is never opened.
        return Some(("not a regular file (a fifo, socket or device): not read".into(), true));
    }
    match std::fs::File::open(path) {
        Ok(_) => None,
        Err(e) => Some((format!("cannot be read: {e}"), true)),
    }
}

fn onnx_files_in(
    dir: &Path,
    prefix: &str,
    out: &mut Vec<FoundFile>,
    odd: &mut Vec<OddFile>,
) -> Result<(), FolderError> {
    let entries = std::fs::read_dir(dir).map_err(|source| FolderError::Io { path: dir.to_path_buf(), source })?;
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".onnx") else { continue };
        // `metadata` follows a file link to its target; a directory (or a
        // link to one), a dangling or looping link, an unreadable file is
        // named with what is wrong, and the rest of the folder is checked.
        if let Some((problem, breaks)) = oddity(&path) {
            odd.push(OddFile { rel: format!("{prefix}{name}"), problem, breaks });
            continue;
        }
        let (base, variant) = split_variant(stem);
        out.push(FoundFile { path, rel: format!("{prefix}{name}"), base, variant });
    }
    Ok(())
}

/// Every `.onnx` file of `dir` and of `dir/onnx/`, sorted by relative path.
pub fn discover(dir: &Path) -> Result<Vec<FoundFile>, FolderError> {
    discover_all(dir).map(|(found, _)| found)
}

/// [`discover`], with the `.onnx` entries that are not readable model files.
pub fn discover_all(dir: &Path) -> Result<(Vec<FoundFile>, Vec<OddFile>), FolderError> {
    if !dir.exists() && std::fs::symlink_metadata(dir).is_err() {
        return Err(FolderError::Io {
            path: dir.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or folder"),
        });
    }
    let (mut found, mut odd) = (Vec::new(), Vec::new());
    onnx_files_in(dir, "", &mut found, &mut odd)?;
    let sub = dir.join("onnx");
    // `symlink_metadata`: an `onnx` link to a directory elsewhere is not followed.
    if std::fs::symlink_metadata(&sub).is_ok_and(|m| m.is_dir()) {
        onnx_files_in(&sub, "onnx/", &mut found, &mut odd)?;
    }
    odd.sort_by(|a, b| a.rel.cmp(&b.rel));
    if found.is_empty() {
        return Err(FolderError::Empty {
            path: dir.to_path_buf(),
            odd: odd.iter().map(|o| format!("{} is {}", o.rel, o.problem)).collect::<Vec<_>>().join("; "),
        });
    }
    found.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok((found, odd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_are_split_from_the_stem() {
        assert_eq!(split_variant("decoder_model_merged_fp16"), ("decoder_model_merged".into(), Some("fp16".into())));
        assert_eq!(split_variant("model_q4f16"), ("model".into(), Some("q4f16".into())));
        assert_eq!(split_variant("model_quantized"), ("model".into(), Some("quantized".into())));
        assert_eq!(split_variant("encoder_model"), ("encoder_model".into(), None));
        assert_eq!(split_variant("fp16"), ("fp16".into(), None));
    }

    #[test]
    fn finds_the_onnx_subfolder_ignores_other_files_and_follows_no_directory_link() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models");
        let tjs = discover(&root.join("bart-tjs")).unwrap();
        let rels: Vec<&str> = tjs.iter().map(|f| f.rel.as_str()).collect();
        assert_eq!(
            rels,
            [
                "onnx/decoder_model.onnx",
                "onnx/decoder_model_merged.onnx",
                "onnx/decoder_with_past_model.onnx",
                "onnx/encoder_model.onnx"
            ]
        );
        let tmp = std::env::temp_dir().join(format!("onnx-contract-discover-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).unwrap();
        assert!(matches!(discover(&tmp), Err(FolderError::Empty { .. })));
        #[cfg(unix)]
        {
            // A directory link named onnx/ pointing elsewhere is not walked; a file link is read.
            std::os::unix::fs::symlink(root.join("bart-tjs/onnx"), tmp.join("onnx")).unwrap();
            std::os::unix::fs::symlink(root.join("gpt2-tiny/model.onnx"), tmp.join("model_quantized.onnx")).unwrap();
            std::fs::write(tmp.join("notes.txt"), "x").unwrap();
            let found = discover(&tmp).unwrap();
            assert_eq!(found.len(), 1, "{found:?}");
            assert_eq!((found[0].base.as_str(), found[0].variant.as_deref()), ("model", Some("quantized")));
        }
        assert!(discover(&tmp.join("missing")).unwrap_err().to_string().contains("cannot read the folder"));
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
