//! Conformance with the Python `onnx` package on the ~2,000 models the onnx
//! wheel ships (backend test data and node test cases): every signature we
//! read must be identical to what `onnx` reads. Needs `pip install -r
//! tests/requirements.txt` (onnx==1.23.2).

use std::process::Command;

#[test]
fn signatures_match_python_onnx_on_its_own_test_corpus() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/conformance/compare.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_onnx-contract"))
        .output()
        .expect("python3 must be installed for the conformance test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("No module named 'onnx'") {
        panic!("the conformance test needs the onnx wheel: python3 -m pip install -r tests/requirements.txt");
    }
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("conformance:"))
        .unwrap_or_else(|| panic!("no summary:\n{stdout}\n{stderr}"));
    println!("{summary}");
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // The corpus must really be there: onnx 1.23.2 ships 140 backend models and 1,884 node cases.
    let compared: usize = summary.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap();
    assert!(compared >= 2000, "{summary}");
    assert!(summary.contains(" 0 differ"), "{summary}");
}
