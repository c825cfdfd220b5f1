//! What an export folder holds: every ONNX file with its role, variant and
//! signature, and the sizes its config files state (`sig DIR`).

use super::config::{ModelConfig, Size};
use super::discover::discover;
use super::roles::{role_of, Role};
use crate::model::summary::ModelSummary;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// One ONNX file of a folder.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct FileSummary {
    /// Relative to the folder (`onnx/decoder_model_merged.onnx`).
    pub path: String,
    /// Its role, from its signature.
    pub role: Role,
    /// Its numeric variant suffix (`fp16`, `quantized`, …), if any.
    pub variant: Option<String>,
    /// What it declares.
    pub signature: ModelSummary,
}

/// An export folder at a glance.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct FolderSummary {
    /// The folder, as given.
    pub path: String,
    /// `model_type` from config.json.
    pub model_type: Option<String>,
    /// Sizes config.json and generation_config.json state, with their keys.
    pub sizes: BTreeMap<String, Size>,
    /// Every ONNX file, sorted by path.
    pub files: Vec<FileSummary>,
}

/// Lists, reads and classifies every ONNX file of `dir` (no weights are read).
pub fn summarize(dir: &Path) -> Result<FolderSummary, crate::error::Error> {
    let mut config = ModelConfig::read(dir)?.unwrap_or_default();
    // genai_config.json, written with the model by its exporter, wins where both state a size.
    if let Some(g) = super::genai::GenaiConfig::read(dir)? {
        config.sizes.extend(g.config.sizes);
        config.model_type = config.model_type.or(g.model_type);
    }
    let mut files = Vec::new();
    for f in discover(dir)? {
        let sig = crate::model::reader::read_signature(&f.path)?;
        let problems = crate::model::reader::external_data_problems(&f.path, &sig);
        files.push(FileSummary {
            path: f.rel.clone(),
            role: role_of(&sig),
            variant: f.variant,
            signature: ModelSummary::of(&f.rel, &sig, problems),
        });
    }
    Ok(FolderSummary { path: dir.display().to_string(), model_type: config.model_type, sizes: config.sizes, files })
}
