//! Is it the model or the caller? A recorded trace of what an application fed
//! (`trace`), the decoding strategy a trace shows (`strategy`), the feed guard an application calls before each run (`guard`),
//! the values a trace keeps only as digests, recovered by testing hypotheses (`hypotheses`),
//! and `replay` of a trace against the protocol the model needs. The rules
//! come from the runtime's plan (what a correct caller feeds), never restated.

#[cfg(feature = "runtime")]
pub mod fix;
pub mod guard;
#[cfg(feature = "runtime")]
mod hypotheses;
#[cfg(feature = "runtime")]
mod judge;
#[cfg(feature = "runtime")]
pub mod replay;
#[cfg(feature = "runtime")]
pub mod strategy;
pub mod trace;

pub use guard::{FeedGuard, GuardError, TensorMeta};
pub use trace::{Call, Kept, TensorRecord};
