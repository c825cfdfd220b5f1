//! The runtime checks, one file each, from what the engine returns to
//! findings: what must hold after each step (`step`), the cache run with its
//! growth and parity (`cache`), repeatability (`repeatability`), left-padded
//! prompt batches (`batch`) and padded source batches (`source_batch`),
//! several tokens onto a non-empty cache (`chunk`), fixed buffers written in
//! place (`buffer`),
//! variants against fp32 (`variant`), optimization levels (`levels`),
//! sliding windows (`window`), and config.json's rotary embedding (`rotary`)
//! and multipliers and ALiBi slopes (`scales`) against the graph's. `job` is what the child process runs: these
//! checks in order, or the recorded calls of a `replay`, or a reference
//! generation for `protocol`.

mod attention_scale;
pub(crate) mod batch;
pub(crate) mod buffer;
pub(crate) mod cache;
mod chain;
pub(crate) mod chunk;
mod constants;
pub(crate) mod encoder_only;
pub(crate) mod experiments;
pub(crate) mod host;
pub(crate) mod job;
pub(crate) mod levels;
pub(crate) mod positions;
pub(crate) mod repeatability;
pub(crate) mod rotary;
mod rotary_tables;
pub(crate) mod scales;
pub(crate) mod smoke;
pub(crate) mod source_batch;
pub(crate) mod step;
pub(crate) mod variant;
pub(crate) mod window;
