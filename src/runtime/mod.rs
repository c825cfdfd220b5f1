//! The runtime smoke test: drive the model through ONNX Runtime for several
//! cache steps, in a child process, and turn what happened into findings.

pub mod child;
pub mod compat;
mod diagnose;
pub mod driver;
pub mod events;
mod feeds;
pub mod graph_edit;
pub mod locate;
pub mod plan;
pub mod report;

pub use driver::Options;
pub use report::RuntimeReport;
