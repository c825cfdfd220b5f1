//! Snapshot tests of the command line: tests/cmd/*.toml hold args, expected
//! stdout/stderr and exit code. Regenerate with `TRYCMD=overwrite cargo test`.

#[test]
fn cli_snapshots() {
    trycmd::TestCases::new()
        // The consumers' own generation is tested in tests/consumers.rs.
        .env("ONNX_CONTRACT_NO_CONSUMER_RUN", "1")
        .register_bin("onnx-contract", std::path::Path::new(env!("CARGO_BIN_EXE_onnx-contract")))
        .case("tests/cmd/*.toml");
}
