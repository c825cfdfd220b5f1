//! Any bytes through the protobuf splicer used to expose a failing node's inputs.
#![no_main]
use libfuzzer_sys::fuzz_target;
use onnx_contract::diagnose::graph_edit::{expose, find_node, NodePath};

fuzz_target!(|data: &[u8]| {
    let found = find_node(data, "/Reshape_5", &|_| Some(true));
    let path = found.unwrap_or(NodePath {
        branches: vec![("optimum::if".into(), "then_branch".into())],
        name: "n".into(),
        op_type: "Add".into(),
        inputs: vec!["a".into()],
    });
    let _ = expose(data, &path, &["a".to_string(), "b".to_string()]);
});
