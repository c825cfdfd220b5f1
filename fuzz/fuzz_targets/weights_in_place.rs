//! Any bytes through the rewrite that marks a model's large initializers as
//! external data at their own place in the file: Ok or an error sentence,
//! never a panic, and a model that decodes keeps every node.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((graph, _)) = onnx_contract::engine::mapped::split(data, "fuzz.onnx") {
        // Decoded with the schema (not the text sniffing of the signature reader,
        // which only the first 512 bytes decide): the graph's nodes are all still there.
        let nodes = onnx_contract::edit::node_count(data);
        if nodes > 0 {
            assert_eq!(onnx_contract::edit::node_count(&graph), nodes, "the rewrite lost nodes");
        }
    }
});
