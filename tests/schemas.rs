//! The committed JSON Schemas (`schemas/`) are the ones the types generate
//! (`UPDATE_SCHEMAS=1 cargo test --test schemas` rewrites them), and real
//! documents validate against them (Python's jsonschema, independent of us).

mod common;
use common::*;
use std::process::Command;

#[test]
fn committed_schemas_are_the_generated_ones() {
    let dir = root().join("schemas");
    for (name, schema) in onnx_contract::schema::all() {
        let text = format!("{}\n", serde_json::to_string_pretty(&schema).unwrap());
        let path = dir.join(name);
        if std::env::var_os("UPDATE_SCHEMAS").is_some() {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &text).unwrap();
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(committed, text, "{name} is stale: UPDATE_SCHEMAS=1 cargo test --test schemas");
    }
}

const VALIDATE: &str = r#"
import json, sys, yaml, jsonschema
schema = json.load(open(sys.argv[1]))
for path in sys.argv[2:]:
    doc = yaml.safe_load(open(path)) if path.endswith(".yaml") else json.load(open(path))
    jsonschema.validate(doc, schema)
print("ok", len(sys.argv) - 2)
"#;

fn validate(schema: &str, docs: &[String]) {
    let out = Command::new("python3")
        .args(["-c", VALIDATE, &format!("schemas/{schema}")])
        .args(docs)
        .current_dir(root())
        .output()
        .unwrap();
    assert!(out.status.success(), "{schema}: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("ok {}", docs.len()));
}

#[test]
fn real_documents_validate_against_the_schemas() {
    let tmp = std::env::temp_dir().join(format!("onnx-contract-schemas-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let save = |name: &str, args: &[&str]| -> String {
        let out = run(args);
        let path = tmp.join(name);
        std::fs::write(&path, &out.stdout).unwrap();
        path.display().to_string()
    };
    let reports = vec![
        save(
            "baked.json",
            &["check", "--format", "json", "models/marian-baked-past/decoder_model_merged.onnx", "--no-fetch"],
        ),
        save("gpt2.json", &["check", "--format", "json", "models/gpt2-tiny/model.onnx", "--no-fetch"]),
    ];
    validate("report.schema.json", &reports);
    let folders = vec![
        save("pair.json", &["check", "--format", "json", "models/marian-pair-baked-past", "--no-fetch"]),
        save("int8.json", &["check", "--format", "json", "models/gpt2-int8", "--no-fetch"]),
    ];
    validate("folder-report.schema.json", &folders);
    let many = save(
        "many.json",
        &["check", "--format", "json", "models/marian-pair-baked-past", "models/gpt2-tiny", "tests/bad", "--no-fetch"],
    );
    validate("many-report.schema.json", &[many]);
    validate(
        "signature.schema.json",
        &[save("sig.json", &["sig", "--format", "json", "models/whisper-tiny/encoder_model.onnx"])],
    );
    validate("folder-summary.schema.json", &[save("sigdir.json", &["sig", "--format", "json", "models/bart-tjs"])]);
    validate("protocol.schema.json", &[save("protocol.json", &["protocol", "--format", "json", "models/marian-tiny"])]);
    validate(
        "replay.schema.json",
        &[save(
            "replay.json",
            &[
                "replay",
                "--format",
                "json",
                "tests/traces/incident2-dummy-encoder-present.jsonl",
                "--model",
                "models/marian-tiny",
            ],
        )],
    );
    validate("error.schema.json", &[save("err.json", &["check", "--format", "json", "nope.onnx", "--no-fetch"])]);
    let specs: Vec<String> =
        std::fs::read_dir(root().join("specs")).unwrap().map(|e| e.unwrap().path().display().to_string()).collect();
    assert!(specs.len() >= 10);
    validate("contract.schema.json", &specs);
    let _ = std::fs::remove_dir_all(&tmp);
}
