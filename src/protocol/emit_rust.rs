//! The Rust program (ort 2 + ndarray).

use super::emit::Spec;

pub(crate) fn rust(_s: &Spec<'_>) -> String {
    String::from("// not yet\n")
}
