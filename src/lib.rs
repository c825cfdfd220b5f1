//! onnx-contract: checks that an exported ONNX transformer decoder honours
//! its contract, statically and on real ONNX Runtime.
//!
//! The whole check is one call: a [`Checker`] built with a [`Contract`] runs
//! on a model file and returns a [`Report`], plain serde data that every
//! output format renders. The library never prints.
//!
//! ```no_run
//! use onnx_contract::{Checker, Contract, Verdict};
//! use std::path::Path;
//!
//! let params = vec![("hidden".to_string(), 32), ("head_dim".to_string(), 4), ("vocab".to_string(), 1000)];
//! let contract = Contract::load(Path::new("specs/marian-decoder-merged.yaml"), &params)?;
//! let report = Checker::new().contract(contract).static_only(true).run(Path::new("models/marian-tiny/decoder_model_merged.onnx"))?;
//! assert_eq!(report.verdict, Verdict::Pass);
//! # Ok::<(), onnx_contract::Error>(())
//! ```
//!
//! Features: `runtime` (the ONNX Runtime steps; links `ort`) and `cli` (the
//! command line and human tables), both on by default. With
//! `default-features = false` nothing links ONNX Runtime, so an application on
//! any `ort` version can use the static check.
#![warn(clippy::print_stdout, clippy::print_stderr)]
#![warn(missing_docs)]

pub mod caller;
mod checker;
#[cfg(feature = "runtime")]
mod checks;
pub mod consumer;
pub mod contract;
pub mod diagnose;
pub mod edit;
pub mod engine;
pub mod error;
pub mod exit;
pub mod finding;
pub mod folder;
pub mod memory;
pub mod model;
pub mod plan;
pub mod protocol;
pub mod remedy;
pub mod render;
#[cfg(feature = "runtime")]
pub(crate) mod repro;
#[cfg(feature = "schema")]
pub mod schema;

pub use checker::many::{read_list as read_folder_list, ManyReport, Unchecked};
pub use checker::report::{ContractInfo, FileReport, Fixed, FolderReport, Params, Report, Verdict, SCHEMA_VERSION};
pub use checker::{Checker, Isolation, DEEP_MAX_STEPS, DEEP_STEPS};
pub use contract::{Contract, ContractError};
pub use error::Error;
pub use finding::{Code, Finding, Severity};
pub use model::reader::read_usable_signature;
pub use model::summary::{ModelSummary, PortSummary};

use std::path::Path;

/// The static check in one call, for an application that wants to refuse a
/// wrong model at start-up: reads the signature (no weights), loads the
/// contract, checks external-data references, and returns the findings.
pub fn check_files(model: &Path, contract_path: &Path, params: &[(String, i64)]) -> Result<Vec<Finding>, Error> {
    let contract = contract::load(contract_path, params)?;
    let sig = read_usable_signature(model)?;
    Ok(contract::check(&sig, &contract))
}

/// Call first thing in `main` of any program that runs the runtime check in
/// a child process (the default): when this process was started as the
/// check's child, it drives the model and exits; otherwise it returns at once.
#[cfg(feature = "runtime")]
pub fn init_child() {
    match std::env::var_os(engine::child::CHILD_ENV) {
        Some(v) if v == "1" => std::process::exit(checks::job::child_main()),
        Some(v) if v == engine::host::HOST => std::process::exit(checks::host::host_main()),
        _ => {}
    }
}

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The library's page: its examples compile as documented.
#[cfg(doctest)]
#[doc = include_str!("../docs/library.md")]
pub struct LibraryDoctests;
