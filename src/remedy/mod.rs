//! Remedies, each stated only after it was run: the change a finding's
//! [`Repair`] names is applied to a copy of the folder (a float16 node kept
//! in float32 behind Casts, a quantized node taken back from fp32, a config
//! key set to the graph's value) and the folder is checked again. A change
//! that makes the file pass is a remedy, with the converter option that
//! makes it at export time; one that does not is reported as tried, never
//! suggested. When a re-check names the next node of the same kind (a chain
//! of overflowing nodes, the next diverging layer), it joins the change and
//! the check runs again, a few rounds at most.
//!
//! The check itself is passed in (`recheck`), so this room does not import
//! the checker that reports to it.

mod workspace;

pub use workspace::{outside, Edits};

use crate::checker::report::{measured, FileReport, FolderReport, Verdict};
use crate::edit::cache_float32::hand_out_float32;
use crate::edit::float32::{keep_in_float32, CAST_BACK};
use crate::edit::unquantize::take_from_reference;
use crate::finding::{Code, Finding, Remedy, Repair, Severity};
use std::collections::BTreeSet;
use std::path::Path;
use workspace::Workspace;

/// Every remedy tried, and the changes of those that work (for `--fix-out`).
#[derive(Clone, Debug, Default)]
pub struct Remedies {
    /// In file order.
    pub tried: Vec<Remedy>,
    /// The working remedies' changed files.
    pub edits: Edits,
}

/// Rounds of "the re-check names the next node" before a change is called
/// not working: a float32 island grows node by node along the overflowing
/// values; excluding layers one by one stops early (then every node of the
/// kind is tried at once).
fn rounds(r: &Repair) -> usize {
    match r {
        Repair::KeepFloat32 { .. } => 12,
        Repair::Unquantize { .. } => 2,
        Repair::SetConfig { .. } => 6,
    }
}

/// Tries a remedy for each failing file of `report` whose first repairable
/// error names a [`Repair`], re-checking a copy of `folder` with `recheck`.
pub fn try_all(
    report: &FolderReport,
    folder: &Path,
    recheck: &dyn Fn(&Path) -> Result<FolderReport, crate::error::Error>,
) -> Result<Remedies, String> {
    let mut out = Remedies::default();
    let failing: Vec<&FileReport> = report.files.iter().filter(|f| f.report.verdict == Verdict::Fail).collect();
    if failing.iter().all(|f| first_repair(&f.report.findings).is_none()) {
        return Ok(out);
    }
    let mut ws = Workspace::new(folder)?;
    for f in failing {
        let Some((code, first)) = first_repair(&f.report.findings) else { continue };
        // A config is set from the graph in one change: every size it states wrong at once.
        let repairs = match first {
            Repair::SetConfig { .. } => every_config_repair(&f.report.findings),
            _ => vec![first.clone()],
        };
        let mut trial =
            Trial { folder, file: &f.path, code, repairs, rechecks: 0, rounds: 0, every: None, widened: Vec::new() };
        let (remedy, edits) = trial.run(&mut ws, &out.edits, recheck)?;
        if remedy.works {
            out.edits.extend(edits);
        }
        out.tried.push(remedy);
    }
    Ok(out)
}

/// Writes `folder` with the working remedies' changes to `out` (copies),
/// never into `folder`.
pub fn write_fixed(folder: &Path, remedies: &Remedies, out: &Path) -> Result<(), String> {
    outside(out, folder)?;
    workspace::write_folder(folder, &remedies.edits, out)
}

/// The first error finding carrying a repair.
fn first_repair(findings: &[Finding]) -> Option<(Code, &Repair)> {
    findings.iter().filter(|f| f.severity == Severity::Error).find_map(|f| f.repair.as_ref().map(|r| (f.code, r)))
}

/// Every config key the errors ask to set, once each.
fn every_config_repair(findings: &[Finding]) -> Vec<Repair> {
    let mut out: Vec<Repair> = Vec::new();
    for r in findings.iter().filter(|f| f.severity == Severity::Error).filter_map(|f| f.repair.as_ref()) {
        if matches!(r, Repair::SetConfig { .. }) && !out.iter().any(|x| key(x) == key(r)) {
            out.push(r.clone());
        }
    }
    out
}

/// A change being tried on one file, grown round by round.
struct Trial<'a> {
    folder: &'a Path,
    file: &'a str,
    code: Code,
    repairs: Vec<Repair>,
    rechecks: usize,
    /// Rounds in which the change grew.
    rounds: usize,
    /// The variant's op when every node of it was taken back at once.
    every: Option<String>,
    /// `(past, present)` pairs the float32 island hands out in float32.
    widened: Vec<(String, String)>,
}

fn same_kind(a: &Repair, b: &Repair) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

/// What makes two repairs the same change (the float16 names a run saw may differ).
fn key(r: &Repair) -> (&str, &str) {
    match r {
        Repair::KeepFloat32 { node, .. } => (node, ""),
        Repair::Unquantize { tensor, .. } => (tensor, ""),
        Repair::SetConfig { file, key, .. } => (file, key),
    }
}

impl Trial<'_> {
    fn read(&self, rel: &str) -> Result<Vec<u8>, String> {
        let p = self.folder.join(rel);
        std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))
    }

    /// The changed files for the repairs so far, and the change in words.
    fn edits(&self) -> Result<(Edits, String, String), String> {
        let mut edits = Edits::new();
        match &self.repairs[0] {
            Repair::KeepFloat32 { .. } => {
                let mut nodes = Vec::new();
                let mut half = BTreeSet::new();
                for r in &self.repairs {
                    if let Repair::KeepFloat32 { node, float16 } = r {
                        nodes.push(node.clone());
                        half.extend(float16.iter().cloned());
                    }
                }
                let mut bytes = keep_in_float32(&self.read(self.file)?, &nodes, &|t| half.contains(t), true)?;
                if !self.widened.is_empty() {
                    bytes = hand_out_float32(&bytes, &self.widened)?;
                }
                edits.insert(self.file.to_string(), bytes);
                let list = quoted(&nodes);
                let (cache, keep) = match self.widened.as_slice() {
                    [] => (String::new(), String::new()),
                    w => {
                        let outs: Vec<String> = w.iter().map(|(_, q)| q.clone()).collect();
                        let ins: Vec<String> = w.iter().map(|(p, _)| p.clone()).collect();
                        (
                            format!(
                                "; and {} handed out in float32 with {} taken in float32 — this changes the interface: the caller feeds float32 pasts for those layers (their values exceed float16's range)",
                                quoted(&outs),
                                quoted(&ins)
                            ),
                            format!(", and declare {} and {} float32", quoted(&outs), quoted(&ins)),
                        )
                    }
                };
                Ok((
                    edits,
                    format!("kept in float32 behind Casts: {list}{cache}"),
                    format!(
                        "convert with onnxconverter-common's `float16.convert_float_to_float16(model, node_block_list=[{list}])` (keep the rest as it is){keep}"
                    ),
                ))
            }
            Repair::Unquantize { reference, .. } => {
                let mut swaps = Vec::new();
                for r in &self.repairs {
                    if let Repair::Unquantize { tensor, node, .. } = r {
                        swaps.push((tensor.clone(), node.clone()));
                    }
                }
                let reference_rel = relative(self.folder, reference);
                let bytes = take_from_reference(&self.read(self.file)?, &self.read(&reference_rel)?, &swaps)?;
                edits.insert(self.file.to_string(), bytes);
                let nodes: Vec<String> = swaps.iter().map(|s| s.1.clone()).collect();
                let list = quoted(&nodes);
                let which = match &self.every {
                    Some(op) => format!(
                        "every {op} ({}; one layer at a time was not enough: the quantizer is wrong on every node of this kind, a recipe or scale-layout bug, not one sensitive layer)",
                        plural_nodes(nodes.len())
                    ),
                    None => plural_nodes(nodes.len()),
                };
                Ok((
                    edits,
                    format!("{which} taken back from {reference_rel} (fp32): {list}"),
                    format!(
                        "quantize again with `nodes_to_exclude=[{list}]` (onnxruntime.quantization: quantize_dynamic, MatMulNBitsQuantizer)"
                    ),
                ))
            }
            Repair::SetConfig { file, .. } => {
                let text = self.read(file)?;
                let mut json: serde_json::Value =
                    serde_json::from_slice(&text).map_err(|e| format!("{file}: not JSON: {e}"))?;
                let mut said = Vec::new();
                for r in &self.repairs {
                    if let Repair::SetConfig { file: f, key, value } = r {
                        if f == file {
                            let old = set_key(&mut json, key, value.clone())?;
                            said.push(format!("`{key}` {old} → {value}"));
                        }
                    }
                }
                let mut bytes = serde_json::to_vec_pretty(&json).map_err(|e| e.to_string())?;
                bytes.push(b'\n');
                edits.insert(file.clone(), bytes);
                Ok((
                    edits,
                    format!("{file}: {}", said.join(", ")),
                    format!("set {} in {file} (the values the graph was exported with)", said.join(", ")),
                ))
            }
        }
    }

    fn run(
        &mut self,
        ws: &mut Workspace,
        kept: &Edits,
        recheck: &dyn Fn(&Path) -> Result<FolderReport, crate::error::Error>,
    ) -> Result<(Remedy, Edits), String> {
        let mut escalated = false;
        loop {
            let (edits, change, option) = match self.edits() {
                Ok(e) => e,
                Err(why) => {
                    return Ok((self.remedy(format!("not applied: {why}"), String::new(), false, why), Edits::new()))
                }
            };
            let mut all = kept.clone();
            all.extend(edits.clone());
            ws.apply(&all)?;
            self.rechecks += 1;
            let report = recheck(&ws.dir).map_err(|e| format!("re-checking the repaired copy: {e}"))?;
            let Some(fr) = report.files.iter().find(|f| f.path == self.file) else {
                return Ok((self.remedy(change, option, false, "the repaired file was not checked".into()), edits));
            };
            if fr.report.verdict == Verdict::Pass {
                let how = fr.report.runtime.as_ref().and_then(measured).unwrap_or_else(|| "passes".into());
                let result = format!("re-checked on a repaired copy: {} passes ({how})", self.file);
                return Ok((self.remedy(change, option, true, result), edits));
            }
            let next = fr.report.findings.iter().filter(|f| f.severity == Severity::Error).find_map(|f| {
                f.repair
                    .as_ref()
                    .filter(|r| same_kind(r, &self.repairs[0]) && !self.repairs.iter().any(|x| key(x) == key(r)))
            });
            let still = fr.report.findings.iter().find(|f| f.severity == Severity::Error);
            let mut why =
                still.map_or("still fails".to_string(), |f| format!("still fails: {}: {}", f.code, f.message));
            let next: Vec<Repair> = match next {
                // The island's own Cast back overflows: the value is still out
                // of float16's range there, so the island grows to its readers.
                Some(Repair::KeepFloat32 { node, .. }) if node.contains(CAST_BACK) => {
                    let island = node.split(CAST_BACK).next().unwrap_or_default();
                    let readers = self.readers(island)?;
                    // Out of range where the graph hands it out: a cache output is
                    // handed out in float32 (with its past), once; anything else stops here.
                    let cache = if readers.is_empty() { self.cache_pairs(island)? } else { Vec::new() };
                    if readers.is_empty() && cache.is_empty() {
                        why.push_str(&format!(
                            " (`{island}`'s output is beyond float16's range where the graph hands it out as float16)"
                        ));
                    }
                    if !cache.is_empty() && self.rounds < rounds(&self.repairs[0]) {
                        self.rounds += 1;
                        self.widened.extend(cache);
                        continue;
                    }
                    readers
                }
                Some(r) => vec![r.clone()],
                None => Vec::new(),
            };
            match next {
                next if !next.is_empty() && self.rounds < rounds(&self.repairs[0]) => {
                    self.rounds += 1;
                    self.repairs.extend(next);
                }
                _ if !escalated && matches!(self.repairs[0], Repair::Unquantize { .. }) => {
                    // One bad layer is excluded; a converter that is wrong on
                    // every node of the kind fails round after round: try them all.
                    escalated = true;
                    match self.every_node_of_the_kind() {
                        Some((op, all)) if all.len() > self.repairs.len() => {
                            self.repairs = all;
                            self.every = Some(op);
                        }
                        _ => return Ok((self.remedy(change, option, false, why), edits)),
                    }
                }
                _ => return Ok((self.remedy(change, option, false, why), edits)),
            }
        }
    }

    /// The main-graph nodes reading `node`'s outputs that are not in the island yet.
    fn readers(&self, node: &str) -> Result<Vec<Repair>, String> {
        use prost::Message;
        let bytes = self.read(self.file)?;
        let m = crate::model::onnx_proto::ModelProto::decode(bytes.as_slice()).map_err(|e| e.to_string())?;
        let nodes = m.graph.map(|g| g.node).unwrap_or_default();
        let outputs: Vec<String> = nodes
            .iter()
            .find(|n| n.name.as_deref() == Some(node))
            .map(|n| n.output.iter().filter(|o| !o.is_empty()).cloned().collect())
            .unwrap_or_default();
        let mut out = Vec::new();
        // A shape read carries no value that could overflow.
        let carries =
            |n: &&crate::model::onnx_proto::NodeProto| !matches!(n.op_type.as_deref(), Some("Shape" | "Size"));
        for n in nodes.iter().filter(|n| n.input.iter().any(|i| outputs.contains(i))).filter(carries) {
            let r = Repair::KeepFloat32 { node: n.name.clone().unwrap_or_default(), float16: Vec::new() };
            if !self.repairs.iter().chain(&out).any(|x| key(x) == key(&r)) {
                out.push(r);
            }
        }
        Ok(out)
    }

    /// The `(past, present)` pairs among `node`'s outputs, not handed out in float32 yet.
    fn cache_pairs(&self, node: &str) -> Result<Vec<(String, String)>, String> {
        use prost::Message;
        let bytes = self.read(self.file)?;
        let m = crate::model::onnx_proto::ModelProto::decode(bytes.as_slice()).map_err(|e| e.to_string())?;
        let outputs: Vec<String> = m
            .graph
            .map(|g| g.node)
            .unwrap_or_default()
            .into_iter()
            .find(|n| n.name.as_deref() == Some(node))
            .map(|n| n.output)
            .unwrap_or_default();
        let sig = crate::model::reader::signature_from_bytes(&bytes)?;
        let inferred = crate::plan::infer::infer(&sig, &crate::plan::infer::Hints::default());
        Ok(inferred
            .pairs
            .into_iter()
            .filter(|p| outputs.contains(&p.present) && !self.widened.iter().any(|(_, q)| *q == p.present))
            .map(|p| (p.past, p.present))
            .collect())
    }

    fn remedy(&self, change: String, option: String, works: bool, result: String) -> Remedy {
        Remedy { file: self.file.to_string(), code: self.code, change, option, works, result, rechecks: self.rechecks }
    }

    /// Every tensor both files write where the variant's writer has the op
    /// of the first diverging one and fp32's the op of its fp32 node.
    fn every_node_of_the_kind(&self) -> Option<(String, Vec<Repair>)> {
        let Repair::Unquantize { tensor, node, reference } = &self.repairs[0] else { return None };
        let variant = self.read(self.file).ok()?;
        let fp32 = self.read(&relative(self.folder, reference)).ok()?;
        let ops = |bytes: &[u8]| -> Option<Vec<(String, String, Vec<String>)>> {
            use prost::Message;
            let m = crate::model::onnx_proto::ModelProto::decode(bytes).ok()?;
            Some(
                m.graph?
                    .node
                    .into_iter()
                    .map(|n| (n.name.unwrap_or_default(), n.op_type.unwrap_or_default(), n.output))
                    .collect(),
            )
        };
        let (v, r) = (ops(&variant)?, ops(&fp32)?);
        let v_op = v.iter().find(|n| n.2.contains(tensor))?.1.clone();
        let r_op = r.iter().find(|n| &n.0 == node)?.1.clone();
        let mut all = Vec::new();
        for (name, _, outputs) in r.iter().filter(|n| n.1 == r_op) {
            for o in outputs {
                if v.iter().any(|w| w.1 == v_op && w.2.contains(o)) {
                    all.push(Repair::Unquantize {
                        tensor: o.clone(),
                        node: name.clone(),
                        reference: reference.clone(),
                    });
                }
            }
        }
        Some((v_op, all))
    }
}

/// A path the child reported (as the check was given it) relative to the folder.
fn relative(folder: &Path, path: &str) -> String {
    let p = Path::new(path);
    let rel = p
        .strip_prefix(folder)
        .ok()
        .map(Path::to_path_buf)
        .or_else(|| {
            let (f, p) = (std::fs::canonicalize(folder).ok()?, std::fs::canonicalize(p).ok()?);
            p.strip_prefix(f).ok().map(Path::to_path_buf)
        })
        .unwrap_or_else(|| p.to_path_buf());
    rel.to_string_lossy().replace('\\', "/")
}

fn quoted(names: &[String]) -> String {
    names.iter().map(|n| serde_json::to_string(n).unwrap_or_default()).collect::<Vec<_>>().join(", ")
}

fn plural_nodes(n: usize) -> String {
    if n == 1 {
        "1 node".into()
    } else {
        format!("{n} nodes")
    }
}

/// Sets a dotted key (`text_config.num_hidden_layers`) and returns the old value.
fn set_key(json: &mut serde_json::Value, key: &str, value: serde_json::Value) -> Result<serde_json::Value, String> {
    let mut at = json;
    let parts: Vec<&str> = key.split('.').collect();
    for p in &parts[..parts.len() - 1] {
        at = at.get_mut(*p).ok_or_else(|| format!("no `{p}` on the way to `{key}`"))?;
    }
    let last = parts[parts.len() - 1];
    let slot = at.as_object_mut().ok_or_else(|| format!("`{key}`: not inside an object"))?;
    Ok(slot.insert(last.to_string(), value).unwrap_or(serde_json::Value::Null))
}
