//! The config audit beyond rope (issue 40): the multipliers config.json says
//! the model applies and the ALiBi slopes of its head count, read off the
//! graph's own constants, on optimum exports verified against PyTorch by
//! models/generate_semantics.py (models/semantics-expected.json says which
//! are broken and how). Each broken folder fails naming the field, the
//! graph's value and the config's; each good one passes with no such finding.

mod common;
use common::*;
use serde_json::Value;

/// Every finding of the report, the folder's and each file's.
fn all_findings(r: &Value) -> Vec<&Value> {
    let mut out: Vec<&Value> = r["findings"].as_array().unwrap().iter().collect();
    for f in r["files"].as_array().unwrap() {
        out.extend(f["findings"].as_array().unwrap());
    }
    out
}

const AUDIT_CODES: [&str; 3] = ["config-scale", "alibi", "config-unaudited"];

#[test]
fn every_semantics_fixture_gets_its_verdict_at_zero_flags() {
    let expected: Value =
        serde_json::from_slice(&std::fs::read(root().join("models/semantics-expected.json")).unwrap()).unwrap();
    for (folder, what) in expected.as_object().unwrap() {
        let (code, r) = check_folder(folder);
        let said: Vec<&Value> =
            all_findings(&r).into_iter().filter(|f| AUDIT_CODES.contains(&f["code"].as_str().unwrap())).collect();
        if what["kind"] == "good" {
            assert_eq!(code, 0, "{folder}: verified against PyTorch\n{r:#}");
            assert!(said.is_empty(), "{folder}: {said:#?}");
            // A consumer's own limitation on the correct export (optimum's
            // mis-sized first past for gemma2) is a flag about the consumer, not the export.
            let theirs = |f: &Value| {
                let m = f["message"].as_str().unwrap_or("");
                m.contains("although the export is right") || m.contains("optimum's limitation, not the export's")
            };
            let flags: Vec<&Value> =
                all_findings(&r).into_iter().filter(|f| f["severity"] != "info" && !theirs(f)).collect();
            assert!(flags.is_empty(), "{folder}: a correct export gets no flag: {flags:#?}");
            continue;
        }
        assert_eq!(code, 2, "{folder}: {r:#}");
        let field = what["field"].as_str().unwrap().split(' ').next().unwrap();
        let named = said.iter().find(|f| f["severity"] == "error").unwrap_or_else(|| panic!("{folder}: {r:#}"));
        let message = named["message"].as_str().unwrap();
        assert!(message.contains(field), "{folder}: `{field}` not named: {message}");
        // The config's value and the graph's, both said.
        let config_value = what["config_value"].as_f64();
        if let Some(v) = config_value.filter(|_| named["code"] == "config-scale") {
            assert!(message.contains(&format!("{v}")) || message.contains(&format!("{v:.6}")), "{folder}: {message}");
        }
    }
}

#[test]
fn logits_scaling_dropped_is_named_with_the_ratio_and_what_it_changes() {
    let (_, r) = check_folder("granite-logits-scaling-dropped");
    let f = all_findings(&r).into_iter().find(|f| f["code"] == "config-scale").cloned().unwrap();
    let m = f["message"].as_str().unwrap();
    assert!(m.contains("MatMul `/lm_head/MatMul` → Div ÷ 1"), "{m}");
    assert!(m.contains("config.json: logits_scaling 8"), "{m}");
    assert!(m.contains("8.0000× the config's"), "{m}");
    assert!(m.contains("sampling"), "{m}");
}

#[test]
fn alibi_slopes_of_another_head_count_are_recognised() {
    let (_, r) = check_folder("bloom-alibi-doubled");
    let f = all_findings(&r).into_iter().find(|f| f["code"] == "alibi").cloned().unwrap();
    let m = f["message"].as_str().unwrap();
    assert!(m.contains("config.json: n_head 6 (BLOOM's build_alibi_tensor)"), "{m}");
    assert!(m.contains("they are the first 6 slopes of a model with 8 to 15 heads"), "{m}");
}
