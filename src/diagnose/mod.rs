//! What a failure means: the cause sentences (`cause`); the failing node with
//! its real input shapes, also inside `If` branches (`failing_node`); the
//! graph edits that expose a node's tensors (`graph_edit`) and a run with
//! every tensor exposed (`exposed`); the first non-finite node (`non_finite`)
//! the first node where a variant departs from fp32 (`diverge`); named
//! tensors at one uncached step (`probe`, `--source`'s layer search).

pub mod graph_edit;

#[cfg(feature = "runtime")]
pub(crate) mod cause;
#[cfg(feature = "runtime")]
pub(crate) mod diverge;
#[cfg(feature = "runtime")]
pub(crate) mod exposed;
#[cfg(feature = "runtime")]
pub(crate) mod failing_node;
#[cfg(feature = "runtime")]
pub(crate) mod non_finite;
#[cfg(feature = "runtime")]
pub(crate) mod probe;
