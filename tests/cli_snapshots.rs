//! Snapshot tests of the command line: tests/cmd/*.toml hold args, expected
//! stdout/stderr and exit code. Regenerate with `TRYCMD=overwrite cargo test`.

#[test]
fn cli_snapshots() {
    trycmd::TestCases::new()
        .register_bin("onnx-contract", std::path::Path::new(env!("CARGO_BIN_EXE_onnx-contract")))
        .case("tests/cmd/*.toml");
}
