//! `protocol`: how to call *this* model, written out for the caller. Every
//! row comes from the plan the runtime check drives the model with
//! (`plan`), never restated by hand; `table` lays it out per step,
//! `emit` writes it as a program.

#[cfg(feature = "runtime")]
pub mod consumer;
pub mod emit;
mod emit_encoder;
mod emit_js;
mod emit_python;
mod emit_rust;
mod emit_rust_helpers;
mod forms;
#[cfg(feature = "runtime")]
pub mod reference;
mod rules;
#[cfg(feature = "runtime")]
pub mod source;
mod spec;
pub mod table;

pub use table::{describe, FeedRow, Loop, Protocol, StepFeeds};
