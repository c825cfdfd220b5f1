//! `protocol`: the table for every committed folder, against what `check`
//! feeds and what the emitted Python program feeds under the recorder; that
//! program's cached loop gives the same ids and top-5 logits as the tool's
//! own generation without a cache. (The Rust and JavaScript programs and the
//! beam searches: tests/emitted.rs.)

mod common;
#[path = "common/emit_cases.rs"]
mod emit_cases;
use common::*;
use emit_cases::*;
use serde_json::Value;
use std::process::Command;

#[test]
fn protocol_prints_every_step_within_100_columns_and_as_json() {
    for (dir, form, _, _) in CASES {
        let target = format!("models/{dir}");
        let out = bin().args(["protocol", &target]).env_remove("COLUMNS").output().unwrap();
        assert!(out.status.success(), "{dir}: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout);
        let widest = text.lines().map(|l| l.chars().count()).max().unwrap();
        assert!(widest <= 100, "{dir}: {widest} columns");
        let steps = if *form == "encoder-alone" {
            text.contains("the one call")
        } else {
            text.contains("step 0 (prompt)") && text.contains("step k ≥ 1")
        };
        assert!(steps && text.contains(form), "{dir}:\n{text}");
        let (code, v) = json(&["protocol", "--format", "json", &target]);
        assert_eq!(code, 0);
        let forms: Vec<&str> = v["loops"].as_array().unwrap().iter().map(|l| l["form"].as_str().unwrap()).collect();
        assert!(forms.contains(form), "{dir}: {forms:?}");
    }
}

/// Issue 33: every fixture's emitted Python program, run under the project's
/// recorder (python/onnx_contract_trace.py), generates what the tool's own
/// uncached generation does; it feeds exactly the names, element types and
/// batch-1 shapes the table shows for steps 0–2; and `replay` of its
/// recording says "both fine".
#[test]
fn emitted_python_programs_match_the_reference_the_table_and_replay() {
    let tmp = std::env::temp_dir().join(format!("onnx-contract-emit-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let feats = features(&tmp);
    for (dir, form, input, tol) in CASES {
        let case = format!("{dir} ({form})");
        let program = tmp.join("gen.py");
        std::fs::write(&program, emitted(dir, form, "python")).unwrap();
        let trace = tmp.join("trace.jsonl");
        let _ = std::fs::remove_file(&trace);
        let ran = Command::new("python3")
            .arg(root().join("python/onnx_contract_trace.py"))
            .arg(&trace)
            .arg(&program)
            .args(program_args(dir, input, &feats, None))
            .output()
            .unwrap();
        assert!(ran.status.success(), "{case}: {}", String::from_utf8_lossy(&ran.stderr));
        let got: Value = serde_json::from_slice(&ran.stdout).unwrap();
        compare(&case, &got, &reference(dir, form, &input_args(input, &feats), None), *tol);
        if *form == "encoder-alone" {
            continue;
        }
        // The table's examples are for a prompt of 4 tokens (a seq2seq decoder starts from one).
        let sized = input.split(',').count() == 4 || !input.contains(',');
        the_trace_feeds_what_the_table_shows(&case, dir, form, &trace, sized);
        let target = format!("models/{dir}");
        let model = if dir.ends_with(".onnx") { target.clone() } else { target };
        let r = run(&["replay", path_str(&trace), "--model", &model]);
        let text = String::from_utf8_lossy(&r.stdout);
        assert_eq!(
            r.status.code(),
            Some(0),
            "{case}: replay of the emitted program:\n{text}{}",
            String::from_utf8_lossy(&r.stderr)
        );
        assert!(text.contains("both fine"), "{case}:\n{text}");
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

/// The decoder calls of a recorded emitted program against the table: every
/// call feeds the inputs the table lists for its step (step 0's for the
/// prompt's calls), with its element type; the first three steps' shapes are
/// the table's batch-1 examples (encoder-sized ones aside).
fn the_trace_feeds_what_the_table_shows(case: &str, dir: &str, form: &str, trace: &std::path::Path, sized: bool) {
    let (_, p) = json(&["protocol", "--format", "json", &format!("models/{dir}")]);
    let lp = p["loops"].as_array().unwrap().iter().find(|l| l["form"] == *form).unwrap();
    let files = [lp["step0_file"].as_str().unwrap(), lp["later_file"].as_str().unwrap()];
    let text = std::fs::read_to_string(trace).unwrap();
    let calls: Vec<Value> = text
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|c| files.iter().any(|f| f.ends_with(c["model"].as_str().unwrap())))
        .collect();
    assert!(calls.len() >= 3, "{case}: {} decoder calls recorded", calls.len());
    // A static export takes the prompt a few tokens per call: those calls are step 0's.
    let per_call = lp["steps"][0]["feeds"][0]["source"].as_str().unwrap_or_default().contains("per call");
    let prompt_calls = if per_call { 4 } else { 1 };
    let mut compared = 0;
    for (i, call) in calls.iter().enumerate() {
        let (kind, step) = if i < prompt_calls { (0, 0) } else { (1, i + 1 - prompt_calls) };
        let table = &lp["steps"][kind];
        let feeds = call["feeds"].as_object().unwrap();
        for row in table["feeds"].as_array().unwrap() {
            let label = row["name"].as_str().unwrap();
            let example = table["examples"].as_array().unwrap().iter().find(|e| e[0] == label).unwrap()[1]
                .get(step.min(2))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            for name in row["names"].as_array().unwrap() {
                let name = name.as_str().unwrap();
                let fed = feeds
                    .get(name)
                    .unwrap_or_else(|| panic!("{case}: call {i} does not feed `{name}` the table shows"));
                assert_eq!(fed["dtype"], row["dtype"], "{case}: `{name}` at call {i}");
                let shape: Vec<String> = fed["shape"].as_array().unwrap().iter().map(|d| d.to_string()).collect();
                let shape = format!("[{}]", shape.join(", "));
                let encoder_sized = row["shape"].as_str().unwrap().contains("enc_len");
                let seq2seq = !lp["decoder_start"].is_null();
                if !per_call && step <= 2 && !encoder_sized && (sized || seq2seq) {
                    assert_eq!(shape, example, "{case}: `{name}` at step {step}");
                }
                compared += 1;
            }
        }
        for name in feeds.keys() {
            let shown = table["feeds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|row| row["names"].as_array().unwrap().iter().any(|n| n == name));
            assert!(shown, "{case}: call {i} feeds `{name}`, the table does not show it");
        }
    }
    assert!(compared > 0, "{case}: nothing compared");
}

/// Issue 33: the table and the driver are views of one plan. For every
/// fixture form, the batch-1 shapes and element types the `protocol` table
/// shows for steps 0–2 are those `check` fed when it drove the same file
/// (the encoder's length aside: the table shows an example source of 7).
#[test]
fn the_table_shows_what_the_driver_feeds() {
    for (dir, form, _, _) in CASES {
        let (code, p) = json(&["protocol", "--format", "json", &format!("models/{dir}")]);
        assert_eq!(code, 0, "{dir}");
        let lp = p["loops"].as_array().unwrap().iter().find(|l| l["form"] == *form).unwrap();
        let (_, r) = json(&["check", "--format", "json", "--no-fetch", &format!("models/{dir}")]);
        let file = lp["later_file"].as_str().unwrap();
        // A single-file target reports the file itself; a folder lists its files.
        let report = match r["files"].as_array() {
            Some(files) => files.iter().find(|f| f["path"] == file).unwrap_or_else(|| panic!("{dir}: {file}")).clone(),
            None => r.clone(),
        };
        let steps = report["runtimes"][0]["steps"].as_array().unwrap_or_else(|| panic!("{dir}: no run"));
        let mut compared = 0;
        for (k, kind) in [(0usize, 0usize), (1, 1), (2, 1)] {
            let table = &lp["steps"][kind];
            let Some(fed) = steps.iter().find(|s| s["step"] == k && s["step0_past_len"] == steps[0]["step0_past_len"])
            else {
                continue;
            };
            for row in table["feeds"].as_array().unwrap() {
                let label = row["name"].as_str().unwrap();
                let example = table["examples"].as_array().unwrap().iter().find(|e| e[0] == label).unwrap()[1][k]
                    .as_str()
                    .unwrap()
                    .to_string();
                for name in row["names"].as_array().unwrap() {
                    let Some(f) = fed["feeds"].as_array().unwrap().iter().find(|f| f["name"] == *name) else {
                        panic!("{dir} {form}: the table shows `{name}` at step {k}, the driver does not feed it");
                    };
                    assert_eq!(f["dtype"], row["dtype"], "{dir} {form}: `{name}` at step {k}");
                    let shape: Vec<String> =
                        f["shape"].as_array().unwrap().iter().map(|d| d.as_i64().unwrap().to_string()).collect();
                    let shape = format!("[{}]", shape.join(", "));
                    let encoder_sized = row["shape"].as_str().unwrap().contains("enc_len");
                    if !encoder_sized {
                        assert_eq!(shape, example, "{dir} {form}: `{name}` at step {k}");
                    }
                    compared += 1;
                }
            }
            // And nothing the driver feeds is missing from the table.
            for f in fed["feeds"].as_array().unwrap() {
                let shown = table["feeds"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|row| row["names"].as_array().unwrap().contains(&f["name"]));
                assert!(
                    shown,
                    "{dir} {form}: the driver feeds `{}` at step {k}, the table does not show it",
                    f["name"]
                );
            }
        }
        assert!(compared > 0, "{dir} {form}: nothing compared");
    }
}

/// Issue 30: with a vision encoder beside a decoder of 3-D positions, the
/// protocol says what an image call needs, from the vision encoder's own signature.
#[test]
fn an_image_call_is_described_from_the_vision_encoder() {
    let (code, p) = json(&["protocol", "--format", "json", "models/qwen2vl-tiny"]);
    assert_eq!(code, 0);
    let rules: Vec<&str> = p["loops"][0]["rules"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
    let image = rules.iter().find(|r| r.starts_with("An image call")).unwrap_or_else(|| panic!("{rules:#?}"));
    assert!(image.contains("onnx/vision_encoder.onnx on `pixel_values` float32 [num_patches, 24]"), "{image}");
    assert!(image.contains("`image_features` replaces the embeddings") && image.contains("rows differ"), "{image}");
}
