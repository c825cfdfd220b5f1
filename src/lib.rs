//! onnx-contract: checks that an exported ONNX decoder honours its contract.
//!
//! The library never prints: checks return [`finding::Finding`]s and the
//! binary renders them.
#![warn(clippy::print_stdout, clippy::print_stderr)]

pub mod contract;
pub mod diff;
pub mod exit;
mod file_buf;
pub mod finding;
pub mod fold;
mod onnx_proto;
pub mod reader;
pub mod render;
pub mod runtime;
pub mod signature;

use std::path::Path;

/// Why [`check_files`] could not judge the model at all.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Model(#[from] reader::ModelError),
    #[error(transparent)]
    Contract(#[from] contract::ContractError),
    #[error("{path}: external data: {problems}")]
    ExternalData { path: std::path::PathBuf, problems: String },
}

/// The static check in one call, for an application that wants to refuse a
/// wrong model at start-up: reads the signature (no weights), loads the
/// contract, checks external-data references, and returns the findings.
///
/// ```no_run
/// let findings = onnx_contract::check_files(
///     "decoder_model_merged.onnx".as_ref(),
///     "specs/marian-decoder-merged.yaml".as_ref(),
///     &[],
/// )?;
/// if onnx_contract::finding::verdict(&findings) == "fail" {
///     let first = findings.iter().find(|f| f.severity == onnx_contract::finding::Severity::Error).unwrap();
///     panic!("refusing the model: {}", first.message);
/// }
/// # Ok::<(), onnx_contract::Error>(())
/// ```
pub fn check_files(
    model: &Path,
    contract_path: &Path,
    params: &[(String, i64)],
) -> Result<Vec<finding::Finding>, Error> {
    let contract = contract::load(contract_path, params)?;
    let sig = read_usable_signature(model)?;
    Ok(contract::check(&sig, &contract))
}

/// The signature of a model that can actually be loaded: its external-data
/// references are checked too (a model whose weights are missing is unusable).
pub fn read_usable_signature(model: &Path) -> Result<signature::Signature, Error> {
    let sig = reader::read_signature(model)?;
    let problems = reader::external_data_problems(model, &sig);
    if !problems.is_empty() {
        return Err(Error::ExternalData { path: model.to_path_buf(), problems: problems.join("; ") });
    }
    Ok(sig)
}
