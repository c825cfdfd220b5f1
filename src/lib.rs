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
