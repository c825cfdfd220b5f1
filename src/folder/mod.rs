//! Export folders: what optimum, transformers.js or a custom script writes.
//! A room above `contract/` and below `plan/`: it finds the ONNX files
//! (`discover`), tells each file's role from its signature (`roles`) and
//! reads the sizes the folder's config files state (`config`).

pub mod config;
pub mod consistency;
pub mod contracts;
pub mod discover;
pub mod genai;
pub mod init;
pub mod layout;
pub mod roles;
pub mod rope;
pub mod scales;
pub mod sizes;
pub mod summary;
pub mod window;

pub use config::{ModelConfig, Size};
pub use discover::{discover, FolderError, FoundFile};
pub use roles::{role_of, Role};
pub use summary::{summarize, FileSummary, FolderSummary};
