//! The signature reader and the static contract check on the committed real
//! exports (models/, made by models/generate.py).

mod common;
use common::*;
use onnx_contract::contract::{self, check};
use onnx_contract::finding::{Code, Severity};
use onnx_contract::model::diff::{diff, Change};
use onnx_contract::model::reader::read_signature;
use onnx_contract::model::signature::{Dim, ElemType, ValueType};
use onnx_contract::Verdict;
use std::path::Path;

fn spec(name: &str) -> std::path::PathBuf {
    root().join("specs").join(name)
}

#[test]
fn reads_the_merged_marian_signature() {
    let sig = read_signature(&model(MARIAN_MERGED)).unwrap();
    assert_eq!(sig.inputs.len(), 28);
    assert_eq!(sig.outputs.len(), 25);
    assert_eq!(sig.ir_version, Some(9));
    assert_eq!(sig.onnx_opset(), Some(18));
    assert_eq!(sig.if_node_count, 1, "optimum's merged decoder is one If node");
    let past = sig.input("past_key_values.3.decoder.value").unwrap();
    assert_eq!(
        past.ty,
        ValueType::Tensor {
            elem: ElemType::Known("float32"),
            shape: Some(vec![
                Dim::Symbolic("batch_size".into()),
                Dim::Fixed(8),
                Dim::Symbolic("past_decoder_sequence_length".into()),
                Dim::Fixed(4)
            ])
        }
    );
    let flag = sig.input("use_cache_branch").unwrap();
    assert_eq!(flag.ty, ValueType::Tensor { elem: ElemType::Known("bool"), shape: Some(vec![Dim::Fixed(1)]) });
    let present = sig.output("present.0.decoder.key").unwrap();
    let (_, shape) = present.ty.tensor_parts().unwrap();
    assert_eq!(shape.unwrap()[2], Dim::Symbolic("past_decoder_sequence_length + decoder_sequence_length".into()));
}

#[test]
fn reads_the_broken_15_input_export() {
    let sig = read_signature(&model(MARIAN_15)).unwrap();
    assert_eq!(sig.inputs.len(), 15);
    assert_eq!(sig.outputs.len(), 25);
    assert_eq!(sig.ir_version, Some(7));
    assert_eq!(sig.onnx_opset(), Some(12));
    assert!(sig.input("use_cache_branch").is_none());
}

#[test]
fn reads_edge_case_types() {
    let sig = read_signature(&root().join("tests/fixtures/odd_types.onnx")).unwrap();
    // IR 3 lists the initializer `w` as an input; callers never feed it.
    assert!(sig.input("w").is_none());
    assert_eq!(sig.inputs.len(), 8);
    let (elem, shape) = sig.input("x_bf16").unwrap().ty.tensor_parts().unwrap();
    assert_eq!(elem, ElemType::Known("bfloat16"));
    // A symbol spelled "1" stays a symbol.
    assert_eq!(shape.unwrap(), &[Dim::Symbolic("batch".into()), Dim::Symbolic("1".into()), Dim::Fixed(4)]);
    let (_, shape) = sig.input("x_f16").unwrap().ty.tensor_parts().unwrap();
    assert_eq!(shape.unwrap()[0], Dim::Unknown);
    assert_eq!(sig.input("noshape").unwrap().ty.tensor_parts().unwrap().1, None);
    assert_eq!(sig.input("seq").unwrap().ty.to_string(), "sequence(tensor(float32))");
    assert_eq!(sig.input("map").unwrap().ty.to_string(), "map(int64, tensor(float32))");
    assert_eq!(sig.input("opt").unwrap().ty.to_string(), "optional(tensor(int32))");
    assert_eq!(sig.input("sparse").unwrap().ty.to_string(), "sparse_tensor(float32)");
    assert_eq!(sig.opsets.len(), 2);
}

#[test]
fn records_external_data_without_reading_it() {
    let sig = read_signature(&root().join("tests/fixtures/external/model.onnx")).unwrap();
    assert_eq!(sig.external_data.len(), 1);
    assert_eq!(sig.external_data[0].location, "model.onnx_data");
    assert_eq!(sig.external_data[0].length, Some(4096));
}

#[test]
fn the_15_input_model_fails_with_one_clear_verdict_first() {
    let c = contract::load(&spec("marian-decoder-merged.yaml"), &tiny_marian_params()).unwrap();
    let good = check(&read_signature(&model(MARIAN_MERGED)).unwrap(), &c);
    assert_eq!(Verdict::of(&good), Verdict::Pass, "{good:#?}");

    let bad = check(&read_signature(&model(MARIAN_15)).unwrap(), &c);
    assert_eq!(Verdict::of(&bad), Verdict::Fail);
    assert_eq!(bad[0].code, Code::InputCount);
    assert_eq!(bad[0].message, "expected 28 inputs, found 15: 13 missing");
    let missing: Vec<&str> =
        bad.iter().filter(|f| f.code == Code::InputMissing).map(|f| f.tensor.as_deref().unwrap()).collect();
    assert_eq!(missing, ["past_key_values.{0..5}.encoder.{key,value}", "use_cache_branch"]);
    let family = bad.iter().find(|f| f.code == Code::InputMissing).unwrap();
    assert_eq!(family.names.len(), 12);
    assert!(family.contract_line.is_some());
}

#[test]
fn real_sizes_are_the_default_and_tiny_sizes_are_reported_by_name() {
    let c = contract::load(&spec("marian-decoder-merged.yaml"), &[]).unwrap();
    let findings = check(&read_signature(&model(MARIAN_MERGED)).unwrap(), &c);
    let logits = findings.iter().find(|f| f.tensor.as_deref() == Some("logits")).unwrap();
    assert_eq!(logits.code, Code::DimValue);
    assert!(logits.message.contains("axis 2 is 1000, contract expects 65001 ($vocab)"), "{}", logits.message);
}

#[test]
fn init_then_check_round_trips_and_rejects_the_broken_model() {
    let sig = read_signature(&model(MARIAN_MERGED)).unwrap();
    let text = contract::init::init(&sig, "marian");
    assert!(text.contains("\"past_key_values.{layer}.decoder.{key,value}\""), "{text}");
    assert!(text.contains("layers: 6"));
    let c = contract::parse(Path::new("init.yaml"), &text, &[]).unwrap();
    assert_eq!(c.inputs.len(), 28);
    assert_eq!(c.outputs.len(), 25);
    let findings = check(&sig, &c);
    assert!(findings.is_empty(), "{findings:#?}");

    let bad = check(&read_signature(&model(MARIAN_15)).unwrap(), &c);
    assert_eq!(bad[0].message, "expected 28 inputs, found 15: 13 missing");
    // The exporter also renamed the present's decoder length: caught by name.
    assert!(bad.iter().any(|f| f.code == Code::DimName && f.message.contains("past_decoder_sequence_length + 1")));

    let sig = read_signature(&model(GPT2)).unwrap();
    let c = contract::parse(Path::new("init.yaml"), &contract::init::init(&sig, GPT2), &[]).unwrap();
    assert!(check(&sig, &c).is_empty());
}

#[test]
fn gpt2_spec_passes_and_detects_renamed_and_retyped_inputs() {
    let params = [("layers", 2), ("heads", 4), ("head_dim", 8), ("vocab", 1000)].map(|(k, v)| (k.to_string(), v));
    let c = contract::load(&spec("gpt2-decoder.yaml"), &params).unwrap();
    let mut sig = read_signature(&model(GPT2)).unwrap();
    assert!(check(&sig, &c).iter().all(|f| f.severity != Severity::Error));

    // Exporter-version drift: int32 mask, batch renamed on one tensor.
    if let ValueType::Tensor { elem, .. } = &mut sig.inputs.iter_mut().find(|p| p.name == "attention_mask").unwrap().ty
    {
        *elem = ElemType::Known("int32");
    }
    if let ValueType::Tensor { shape: Some(d), .. } = &mut sig.outputs[0].ty {
        d[0] = Dim::Symbolic("batch".into());
    }
    let f = check(&sig, &c);
    let dtype = f.iter().find(|f| f.code == Code::Dtype).unwrap();
    assert_eq!(dtype.message, "attention_mask: dtype is int32, contract expects int64");
    let bind = f.iter().find(|f| f.code == Code::DimBinding).unwrap();
    assert!(
        bind.message.contains("axis 0 is `batch`, but `batch` is `batch_size` in input_ids axis 0"),
        "{}",
        bind.message
    );
}

#[test]
fn diff_lists_what_the_caller_needed() {
    let a = read_signature(&model(MARIAN_MERGED)).unwrap();
    let b = read_signature(&model(MARIAN_15)).unwrap();
    let d = diff(&a, &b);
    let only_a: Vec<&str> = d.rows.iter().filter(|r| r.change == Change::OnlyInA).map(|r| r.label.as_str()).collect();
    assert_eq!(only_a, ["past_key_values.{0..5}.encoder.{key,value}", "use_cache_branch"]);
    assert!(!d.is_empty());
    assert!(diff(&a, &a).is_empty());
}

#[test]
fn contract_errors_carry_line_and_column() {
    let cases = [
        ("broken-syntax.yaml", 4, "did not find expected ',' or '}'"),
        ("unknown-key.yaml", 4, "unknown field `shap`"),
        ("bad-dtype.yaml", 3, "unknown dtype `int65`"),
        ("empty-template.yaml", 5, "expands to no tensor names"),
    ];
    for (file, line, text) in cases {
        let err = contract::load(&root().join("tests/contracts").join(file), &[]).unwrap_err();
        assert_eq!(err.line, Some(line), "{file}: {err}");
        assert!(err.column.is_some(), "{file}: {err}");
        assert!(err.message.contains(text), "{file}: {err}");
        assert!(err.to_string().starts_with(&format!("{}", root().join("tests/contracts").join(file).display())));
    }
}

#[test]
fn order_check_is_opt_in_and_names_the_first_swap() {
    let text = "params: {layers: 2}\norder: true\ninputs:\n  input_ids: {dtype: int64}\n  attention_mask: {dtype: int64}\n  past_key_values.{layer}.{key,value}: {dtype: float32}\n  position_ids: {dtype: int64}\noutputs:\n  logits: {dtype: float32}\n  present.{layer}.{key,value}: {dtype: float32}\n";
    let c = contract::parse(Path::new("o.yaml"), text, &[]).unwrap();
    let f = check(&read_signature(&model(GPT2)).unwrap(), &c);
    let order = f.iter().find(|f| f.code == Code::Order).expect("order finding");
    assert_eq!(order.message, "input #1 is `past_key_values.0.key`, contract expects `attention_mask` there");
    assert_eq!(order.contract_line, Some(5));
}

#[test]
fn json_reports_have_the_documented_shape() {
    let (code, sig) = json(&["sig", "--format", "json", "tests/fixtures/odd_types.onnx"]);
    assert_eq!(code, 0);
    assert_eq!(sig["ir_version"], 3);
    assert_eq!(sig["opsets"][0]["version"], 9);
    let x = &sig["inputs"][0];
    assert_eq!(x["name"], "x_bf16");
    assert_eq!(x["dtype"], "bfloat16");
    assert_eq!(x["shape"], serde_json::json!(["batch", "1", 4]));
    assert_eq!(sig["inputs"][1]["shape"][0], serde_json::Value::Null);

    let m15 = model(MARIAN_15);
    let (code, report) = json(&[
        "check",
        "--format",
        "json",
        path_str(&m15),
        "--contract",
        "specs/marian-decoder-merged.yaml",
        "--param",
        "hidden=32",
        "--param",
        "head_dim=4",
        "--param",
        "vocab=1000",
    ]);
    assert_eq!(code, 2);
    assert_eq!(report["verdict"], "fail");
    let f = &report["findings"][0];
    assert_eq!(f["code"], "input-count");
    assert_eq!(f["severity"], "error");
    assert_eq!(f["message"], "expected 28 inputs, found 15: 13 missing");
    assert_eq!(report["findings"][1]["tensor"], "past_key_values.{0..5}.encoder.{key,value}");
}

/// The finding-code table of docs/findings.md is `Code::ALL` written out (its
/// order, names and sentences): the text between the markers must equal it;
/// with `UPDATE_DOCS` set, the test rewrites it instead.
#[test]
fn the_finding_code_table_is_generated_from_the_code() {
    const BEGIN: &str = "<!-- finding codes: generated from src/finding.rs by tests/static_check.rs; \
                         UPDATE_DOCS=1 cargo test --test static_check rewrites it -->";
    const END: &str = "<!-- end of finding codes -->";
    let rows: String = Code::ALL.iter().map(|c| format!("| `{}` | {} |\n", c.as_str(), c.doc())).collect();
    let table = format!("\n\n| code | meaning |\n|---|---|\n{rows}\n");
    let path = root().join("docs").join("findings.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let start = text.find(BEGIN).expect("docs/findings.md has the start marker of the finding codes") + BEGIN.len();
    let end = start + text[start..].find(END).expect("docs/findings.md has the end marker of the finding codes");
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, format!("{}{table}{}", &text[..start], &text[end..])).unwrap();
        return;
    }
    assert!(
        text[start..end] == table,
        "docs/findings.md's finding-code table is not Code::ALL's: UPDATE_DOCS=1 cargo test --test static_check \
         rewrites it; it should read:{table}"
    );
}

#[test]
fn the_one_call_library_api_refuses_the_wrong_model() {
    let spec = spec("marian-decoder-merged.yaml");
    let params = tiny_marian_params();
    let good = onnx_contract::check_files(&model(MARIAN_MERGED), &spec, &params).unwrap();
    assert_eq!(Verdict::of(&good), Verdict::Pass);
    let bad = onnx_contract::check_files(&model(MARIAN_15), &spec, &params).unwrap();
    assert_eq!(bad[0].message, "expected 28 inputs, found 15: 13 missing");
    let err = onnx_contract::check_files(&root().join("tests/bad/empty.onnx"), &spec, &params).unwrap_err();
    assert!(err.to_string().contains("empty.onnx: empty file"), "{err}");
    let err = onnx_contract::check_files(&root().join("tests/bad/ext-missing/model.onnx"), &spec, &params).unwrap_err();
    assert!(err.to_string().contains("is missing"), "{err}");
}
