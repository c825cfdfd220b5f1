//! Generation the way applications run it: a left-padded batch of two
//! prompts against each row run alone; the first non-finite node lives in
//! tests/numeric.rs, cache names beyond optimum in tests/folders.rs.

mod common;
use common::*;
use serde_json::Value;

fn check_dir(dir: &str) -> (i32, Value) {
    json(&["check", "--format", "json", &format!("models/{dir}"), "--no-fetch"])
}

fn row1_max(r: &Value) -> f64 {
    r["files"][0]["runtime"]["batch"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x[0] == 1)
        .map(|x| x[2].as_f64().unwrap())
        .fold(0.0, f64::max)
}

#[test]
fn a_model_without_position_ids_shifts_left_padded_rows() {
    let (code, r) = check_dir("gpt2-no-position-ids");
    assert_eq!(code, 2, "{r:#}");
    let f = &r["files"][0]["findings"];
    let err = f
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["code"] == "batch-padding" && x["severity"] == "error")
        .expect("batch-padding error");
    assert!(err["message"].as_str().unwrap().starts_with("row 1 of a batch of 2 (left-padded by 2)"), "{err:#}");
    assert!(err["cause"].as_str().unwrap().contains("takes no position_ids"), "{err:#}");
    assert!(
        f.as_array().unwrap().iter().any(|x| x["code"] == "batch-padding" && x["severity"] == "warning"),
        "the static warning"
    );
    assert!(row1_max(&r) > 0.1, "{}", row1_max(&r));
}

#[test]
fn models_that_place_padded_rows_right_pass_the_batch_check() {
    // Learned positions fed cumsum(mask) - 1, and rotary models.
    for dir in ["gpt2-with-position-ids", "llama-tiny", "qwen2-tiny"] {
        let (code, r) = check_dir(dir);
        assert_eq!(code, 0, "{dir}: {r:#}");
        let rows = r["files"][0]["runtime"]["batch"].as_array().unwrap().len();
        assert_eq!(rows, 8, "{dir}: 2 rows x (prompt + 3 steps)");
        assert!(row1_max(&r) < 1e-4, "{dir}: {}", row1_max(&r));
    }
}
