//! The JavaScript program (onnxruntime-node).

use super::emit::Spec;

pub(crate) fn js(_s: &Spec<'_>) -> String {
    String::from("// not yet\n")
}
