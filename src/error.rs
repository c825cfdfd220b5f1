//! Every error of the library, on the ground floor so that each room can
//! return its own and the crate-wide [`Error`] without importing upward: a
//! model file that cannot be read, a contract mistake, a folder that cannot be
//! listed, a config that cannot be parsed, and the [`Error`] that wraps them.

use std::path::PathBuf;

/// Why a model could not be judged at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The model file cannot be read as ONNX.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The contract file is invalid, or a parameter override names no parameter.
    #[error(transparent)]
    Contract(#[from] ContractError),
    /// The model's external data is missing, short or points outside its folder.
    #[error("{}: external data: {problems}", path.display())]
    ExternalData {
        /// The model file.
        path: PathBuf,
        /// Every problem, joined.
        problems: String,
    },
    /// An export folder cannot be listed (or holds no ONNX file).
    #[error(transparent)]
    Folder(#[from] FolderError),
    /// A folder's config.json or generation_config.json is unreadable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A caller trace cannot be read (the file and line to blame).
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// [`Checker::run`](crate::Checker::run) was called without a contract.
    #[error("no contract to check against: give the checker a contract")]
    NoContract,
    /// A runtime check was asked of a build without the `runtime` feature.
    #[error("this build of onnx-contract has no `runtime` feature: only the static check is available")]
    RuntimeFeature,
    /// Something in this process failed (not the model's fault).
    #[error("internal error: {0}")]
    Internal(String),
}

/// Why a file could not be read as a model; every message names the file.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // the variants' messages are their documentation
pub enum ModelError {
    /// The file cannot be opened or read.
    #[error("{path}: cannot open: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    /// The file is empty.
    #[error("{path}: empty file (0 bytes), not an ONNX model")]
    Empty { path: PathBuf },
    /// The bytes are not an ONNX model.
    #[error("{path}: not a readable ONNX model: {reason}")]
    NotOnnx { path: PathBuf, reason: String },
}

/// A contract mistake, always with the file and, when known, line and column.
#[derive(Debug, thiserror::Error)]
#[error("{}{}: {message}", path.display(), location(*line, *column))]
#[non_exhaustive]
pub struct ContractError {
    /// The contract file.
    pub path: PathBuf,
    /// 1-based line, when known.
    pub line: Option<u64>,
    /// 1-based column, when known.
    pub column: Option<u64>,
    /// What is wrong.
    pub message: String,
    /// Whether the file is wrong or a parameter override names no parameter.
    pub kind: ContractErrorKind,
}

/// What kind of mistake a [`ContractError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ContractErrorKind {
    /// The contract file itself (syntax, unknown keys, bad values).
    Invalid,
    /// A parameter override names a parameter the contract does not have.
    UnknownParam,
}

fn location(line: Option<u64>, column: Option<u64>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(":{l}:{c}"),
        (Some(l), None) => format!(":{l}"),
        _ => String::new(),
    }
}

/// Why a folder could not be listed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FolderError {
    /// The path cannot be read as a directory.
    #[error("{}: cannot read the folder: {source}", path.display())]
    Io {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// No readable `.onnx` file in the folder or its `onnx/` subfolder.
    #[error("{}: no {}.onnx file in this folder or in its onnx/ subfolder{}", path.display(), if odd.is_empty() { "" } else { "readable " }, if odd.is_empty() { String::new() } else { format!(": {odd}") })]
    Empty {
        /// The folder.
        path: PathBuf,
        /// The `.onnx` entries that are not readable files, with what is wrong with each.
        odd: String,
    },
}

/// Why a config file could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct ConfigError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong, with line and column for JSON syntax.
    pub message: String,
}

/// A trace that cannot be read, with the file and line.
#[derive(Debug, thiserror::Error)]
#[error("{}{}: {message}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct TraceError {
    /// The trace file.
    pub path: PathBuf,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}
