//! The runtime smoke test: drive the model through ONNX Runtime for several
//! cache steps, in a child process, and turn what happened into findings.
//!
//! Without the `runtime` feature only the pure parts are built: the plan
//! (what to feed), the runtime locator, the IR/opset table and the report
//! types; nothing links ONNX Runtime.

pub mod compat;
pub mod events;
pub mod graph_edit;
pub mod locate;
pub mod numeric;
pub mod plan;
pub mod report;

#[cfg(feature = "runtime")]
mod batch;
#[cfg(feature = "runtime")]
mod checks;
#[cfg(feature = "runtime")]
pub(crate) mod child;
#[cfg(feature = "runtime")]
mod context;
#[cfg(feature = "runtime")]
mod diagnose;
#[cfg(feature = "runtime")]
mod diverge;
#[cfg(feature = "runtime")]
mod driver;
#[cfg(feature = "runtime")]
mod encoder;
#[cfg(feature = "runtime")]
mod feeds;
#[cfg(feature = "runtime")]
mod levels;
#[cfg(feature = "runtime")]
mod npy;
#[cfg(feature = "runtime")]
pub(crate) mod options;
#[cfg(feature = "runtime")]
mod session;
#[cfg(feature = "runtime")]
mod source_batch;
#[cfg(feature = "runtime")]
mod variant;
#[cfg(feature = "runtime")]
pub(crate) mod window;

pub use report::RuntimeReport;
