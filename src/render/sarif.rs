//! `--format sarif`: SARIF 2.1.0 for code scanning (GitHub, Azure DevOps).
//! Rules are the finding codes with their documentation; each result is at
//! the model file, with the contract line as a related location.

use super::targets::{full_message, Targets};
use crate::finding::{Code, Finding, Severity};
use serde_sarif::sarif::{
    ArtifactLocation, Location, Message, MultiformatMessageString, PhysicalLocation, PropertyBag, Region,
    ReportingDescriptor, Result as SarifResult, ResultLevel, Run, Sarif, Tool, ToolComponent, SCHEMA_URL,
};
use std::collections::BTreeMap;

fn rules() -> Vec<ReportingDescriptor> {
    Code::ALL
        .iter()
        .map(|c| {
            ReportingDescriptor::builder()
                .id(c.as_str())
                .name(c.as_str())
                .short_description(MultiformatMessageString::builder().text(c.doc()).build())
                .help(MultiformatMessageString::builder().text(format!("{}: {}", c.as_str(), c.doc())).build())
                .help_uri("https://github.com/onnx-contract/onnx-contract#finding-codes")
                .build()
        })
        .collect()
}

fn location(uri: &str, line: Option<u64>, text: Option<&str>) -> Location {
    let artifact = ArtifactLocation::builder().uri(uri.replace('\\', "/")).build();
    let physical = match line {
        Some(l) => PhysicalLocation::builder()
            .artifact_location(artifact)
            .region(Region::builder().start_line(l as i64).build())
            .build(),
        None => PhysicalLocation::builder().artifact_location(artifact).build(),
    };
    match text {
        Some(t) => Location::builder().physical_location(physical).message(Message::builder().text(t).build()).build(),
        None => Location::builder().physical_location(physical).build(),
    }
}

fn result(f: &Finding, file: &str, contract: Option<&str>) -> SarifResult {
    let level = match f.severity {
        Severity::Error => ResultLevel::Error,
        Severity::Warning => ResultLevel::Warning,
        _ => ResultLevel::Note,
    };
    let mut props: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    for (k, v) in [
        ("tensor", f.tensor.as_ref().map(|t| serde_json::json!(t))),
        ("step", f.step.map(|s| serde_json::json!(s))),
        ("step0_past_len", f.step0_past_len.map(|s| serde_json::json!(s))),
        ("node", f.node.as_ref().map(|n| serde_json::json!(n))),
        ("runtime", f.runtime.as_ref().map(|r| serde_json::json!(r))),
    ] {
        if let Some(v) = v {
            props.insert(k.to_string(), v);
        }
    }
    let code = f.code.as_str();
    let rule_index = Code::ALL.iter().position(|c| *c == f.code).unwrap_or(0) as i64;
    let base = SarifResult::builder()
        .rule_id(code)
        .rule_index(rule_index)
        .level(level)
        .message(Message::builder().text(full_message(f)).build())
        .locations(vec![location(file, None, None)])
        .properties(PropertyBag::builder().additional_properties(props).build());
    match (contract, f.contract_line) {
        (Some(c), Some(line)) => base
            .related_locations(vec![location(c, Some(line), Some("the contract entry that asked for this check"))])
            .build(),
        _ => base.build(),
    }
}

/// The SARIF log of a check.
pub fn render(t: &Targets<'_>) -> String {
    let mut results = Vec::new();
    for file in &t.files {
        let contract = file.report.contract.as_ref().map(|c| c.path.as_str());
        for f in &file.report.findings {
            results.push(result(f, &file.path, contract));
        }
    }
    if let Some((dir, findings)) = t.folder {
        for f in findings {
            results.push(result(f, dir, None));
        }
    }
    let driver = ToolComponent::builder()
        .name("onnx-contract")
        .version(env!("CARGO_PKG_VERSION"))
        .semantic_version(env!("CARGO_PKG_VERSION"))
        .information_uri("https://github.com/onnx-contract/onnx-contract")
        .rules(rules())
        .build();
    let run = Run::builder().tool(Tool::builder().driver(driver).build()).results(results).build();
    let log = Sarif::builder().schema(SCHEMA_URL).version(serde_json::json!("2.1.0")).runs(vec![run]).build();
    super::json::to_text(&log)
}
