//! An error that ends a command, with its exit code and kind (for the JSON
//! error document), from each library error; and a check's exit code.

use onnx_contract::contract::{ContractError, ContractErrorKind};
use onnx_contract::model::reader::ModelError;
use onnx_contract::{exit, Code, Verdict};

/// An error that ends the command, with its exit code.
pub(crate) struct Fail {
    pub(crate) code: i32,
    pub(crate) kind: &'static str,
    pub(crate) message: String,
}

impl From<ModelError> for Fail {
    fn from(e: ModelError) -> Self {
        Fail { code: exit::BAD_MODEL, kind: "model", message: e.to_string() }
    }
}

/// The exit code `e` ends a command with (what a folder of several that
/// could not be checked counts as).
pub(crate) fn code_of(e: &onnx_contract::Error) -> i32 {
    use onnx_contract::Error as E;
    match e {
        E::Contract(_) => exit::BAD_CONTRACT,
        E::Model(_) | E::ExternalData { .. } | E::Folder(_) | E::Config(_) | E::Trace(_) => exit::BAD_MODEL,
        E::NoContract => exit::USAGE,
        _ => exit::INTERNAL,
    }
}

impl From<onnx_contract::Error> for Fail {
    fn from(e: onnx_contract::Error) -> Self {
        use onnx_contract::Error as E;
        match e {
            E::Contract(c) => c.into(),
            E::Model(_) | E::ExternalData { .. } | E::Folder(_) | E::Config(_) => {
                Fail { code: exit::BAD_MODEL, kind: "model", message: e.to_string() }
            }
            E::Trace(_) => Fail { code: exit::BAD_MODEL, kind: "trace", message: e.to_string() },
            E::NoContract => Fail { code: exit::USAGE, kind: "usage", message: e.to_string() },
            other => Fail { code: exit::INTERNAL, kind: "internal", message: other.to_string() },
        }
    }
}

impl From<ContractError> for Fail {
    fn from(e: ContractError) -> Self {
        match e.kind {
            ContractErrorKind::UnknownParam => {
                Fail { code: exit::USAGE, kind: "usage", message: format!("--param: {e}") }
            }
            _ => Fail { code: exit::BAD_CONTRACT, kind: "contract", message: e.to_string() },
        }
    }
}

/// The exit code of a check: 69 only when the runtime could not load and
/// nothing else failed (a violation seen with another runtime is still 2).
pub(crate) fn exit_code(verdict: Verdict, mut error_codes: impl Iterator<Item = Code>) -> i32 {
    match verdict {
        Verdict::Pass => exit::OK,
        // Nothing wrong was found: what runs the model is missing, or would not fit in memory.
        _ if error_codes.all(|c| matches!(c, Code::RuntimeLoad | Code::MemoryBudget)) => exit::NO_RUNTIME,
        _ => exit::VIOLATED,
    }
}
