//! The audits at real shapes (issue 40): exports with real head dims (64,
//! 128), 22–24 layers and every weight in external data, generated on the
//! fly by tests/real_shape.py (torch + optimum, never committed) and checked
//! from a working directory that is not the model's folder. Each good folder
//! passes with nothing flagged and says what its audits read; each twin's
//! config contradicts its graph and is named.

mod common;
use common::*;
use serde_json::Value;

/// Every "… audit: …" line a file's run reports (what the audits read).
fn audits(r: &Value) -> Vec<String> {
    let probes = &r["files"][0]["runtime"]["probes"];
    probes.as_array().map_or(Vec::new(), |p| p.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
}

#[test]
fn audits_run_at_real_head_dims_with_external_data_from_another_directory() {
    let out = std::env::temp_dir().join(format!("onnx-contract-real-shape-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let made = std::process::Command::new("python3")
        .args(["tests/real_shape.py", path_str(&out)])
        .current_dir(root())
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let check = |name: &str| -> (i32, Value) {
        let dir = out.join(name);
        // Run from `/`: the external data is found from the model's folder, not the working directory.
        let o = bin().current_dir("/").args(["check", path_str(&dir), "--format", "json"]).output().unwrap();
        let r: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{name}: {e}: {o:?}"));
        (o.status.code().unwrap_or(-1), r)
    };
    let flagged = |r: &Value| -> Vec<(String, String)> {
        r["files"][0]["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["severity"] != "info")
            .map(|f| (f["code"].as_str().unwrap().to_string(), f["message"].as_str().unwrap().to_string()))
            .collect()
    };
    for (good, freqs) in [("qwen2-hd64", 32), ("llama-hd128", 64), ("granite-hd128", 64)] {
        let (code, r) = check(good);
        assert_eq!(code, 0, "{good}: {:#?}", flagged(&r));
        assert!(flagged(&r).is_empty(), "{good}: {:#?}", flagged(&r));
        let read = audits(&r);
        assert!(
            read.iter().any(|a| a.starts_with(&format!("rotary audit: {freqs} frequencies"))),
            "{good}: the rotary audit did not run: {read:#?}"
        );
        if good == "granite-hd128" {
            let config = read.iter().find(|a| a.starts_with("config audit:")).expect("config audit");
            for field in [
                "embedding_multiplier 12",
                "logits_scaling 8",
                "attention_multiplier 0.0078125",
                "residual_multiplier 0.22",
            ] {
                assert!(config.contains(field), "{field}: {config}");
            }
            assert!(config.contains("all 24 layers"), "{config}");
        }
    }
    for (twin, code_name, words) in [
        ("qwen2-hd64-theta", "rotary", "rope_theta 1000000 where config.json says 10000"),
        ("llama-hd128-theta", "rotary", "rope_theta 10000 where config.json says 500000"),
        ("granite-hd128-logits", "config-scale", "logits_scaling 1"),
    ] {
        let (code, r) = check(twin);
        assert_eq!(code, 2, "{twin}: {r:#}");
        let f = flagged(&r);
        assert!(f.iter().any(|(c, m)| c == code_name && m.contains(words)), "{twin}: {f:#?}");
    }
    let _ = std::fs::remove_dir_all(&out);
}
