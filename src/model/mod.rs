//! Reading a model without its weights: the trimmed protobuf schema and the
//! file reader (`onnx_proto`, `file_buf`, `reader`), our own [`Signature`]
//! apart from the protobuf types (`signature`), per-layer name folding
//! (`fold`), the summary reports show (`summary`), side-by-side comparison
//! (`diff`), symbolic dimension expressions (`dims`), and the naming
//! conventions exporters use (`names`).
//!
//! [`Signature`]: signature::Signature

pub mod diff;
pub mod dims;
mod file_buf;
pub mod fold;
pub mod names;
pub(crate) mod onnx_proto;
pub mod reader;
pub mod signature;
pub(crate) mod summary;
pub mod weights;
