//! ONNX Runtime: finding the library (`locate`) and the versions it accepts
//! (`compat`), sessions (`session`), the child process that isolates a crash
//! (`child`), the host process running a folder's jobs as threads (`host`)
//! with the companion sessions they share (`shared`), the events a job
//! reports (`events`), the job it is given
//! (`options`), feeds (`feeds`), the job's shared state (`context`), the
//! step driver's pieces (`driver`), the encoder run (`encoder`), a replay's
//! re-created feeds (`replay`) and rows (`rows`), and the report a run's
//! events become (`runtime_report`).
//!
//! Without the `runtime` feature only the pure parts are built: the locator,
//! the IR/opset table, the events and the report types; nothing links ONNX
//! Runtime.

pub mod compat;
pub mod events;
pub mod locate;
pub mod messages;
pub mod runtime_report;

/// The beam search the emitted programs run, for their reference.
#[cfg(feature = "runtime")]
pub(crate) mod beam;
#[cfg(feature = "runtime")]
pub(crate) mod child;
#[cfg(feature = "runtime")]
pub(crate) mod context;
#[cfg(feature = "runtime")]
pub(crate) mod driver;
#[cfg(feature = "runtime")]
pub(crate) mod embed;
#[cfg(feature = "runtime")]
pub(crate) mod encoder;
#[cfg(feature = "runtime")]
pub(crate) mod feeds;
/// One child process running a folder check's jobs as threads.
#[cfg(feature = "runtime")]
pub(crate) mod host;
/// Embedded weights read by ONNX Runtime in place from the model file.
#[cfg(feature = "runtime")]
pub mod mapped;
#[cfg(feature = "runtime")]
pub(crate) mod npy;
#[cfg(feature = "runtime")]
pub(crate) mod options;
/// A recorded call's feeds re-created for `replay`, each with where its values came from.
#[cfg(feature = "runtime")]
pub mod replay;
/// Rows of a replay's tensors: recorders' digests, a beam search's origins.
#[cfg(feature = "runtime")]
pub mod rows;
#[cfg(feature = "runtime")]
pub(crate) mod session;
/// A companion model's session shared by the jobs of one process.
#[cfg(feature = "runtime")]
pub(crate) mod shared;
#[cfg(feature = "runtime")]
pub(crate) mod wire;

pub use runtime_report::RuntimeReport;
