//! Which IR version and opset an ONNX Runtime release accepts, so a model
//! that needs a newer runtime is named before anything runs.

use crate::finding::{Code, Finding};
use crate::model::signature::Signature;

/// How a row of [`TABLE`] is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Loaded models of each IR version and opset into that runtime here
    /// (toy decoder, `--ort-lib` on the PyPI wheel's library).
    Measured,
    /// From the ONNX release the runtime bundles, as its release notes state.
    Documented,
}

/// (minor version of ONNX Runtime 1.x, max IR version, max ai.onnx opset, source).
pub const TABLE: &[(u32, i64, i64, Source)] = &[
    (14, 8, 18, Source::Documented),
    (15, 9, 19, Source::Documented),
    (16, 9, 19, Source::Documented),
    (17, 9, 20, Source::Documented),
    (18, 10, 21, Source::Documented),
    (19, 10, 21, Source::Documented),
    (20, 10, 21, Source::Measured),
    (21, 10, 22, Source::Documented),
    (22, 10, 22, Source::Measured),
    // Accepted opset 26 here as well; 25 is the highest onnx 1.23 defines.
    (31, 13, 25, Source::Measured),
];

/// `1.16`, `1.16.3` → 16.
pub fn minor(version: &str) -> Option<u32> {
    let mut parts = version.trim().split('.');
    (parts.next()? == "1").then_some(())?;
    parts.next()?.parse().ok()
}

/// The row of [`TABLE`] for `version` (max IR, max opset, source), if any.
fn limits(version: &str) -> Option<(i64, i64, Source)> {
    let m = minor(version)?;
    TABLE.iter().find(|r| r.0 == m).map(|r| (r.1, r.2, r.3))
}

/// Findings for running `sig` on ONNX Runtime `version` (`--target-ort`),
/// decided statically; a version without data is itself a warning.
pub fn check_target(sig: &Signature, version: &str) -> Vec<Finding> {
    if minor(version).is_none() {
        return vec![Finding::error(Code::Compat, format!("--target-ort {version}: not a 1.x version"))];
    }
    match limits(version) {
        Some(l) => {
            let found = against(sig, version, l);
            if !found.is_empty() {
                return found;
            }
            // Say so when it fits: silence would read as "not checked".
            let how = if l.2 == Source::Measured { "measured" } else { "documented" };
            vec![Finding::new(
                Code::Compat,
                crate::finding::Severity::Info,
                format!(
                    "compatible with ONNX Runtime {version}: IR {} ≤ {}, ai.onnx opset {} ≤ {} ({how})",
                    sig.ir_version.map_or("?".into(), |v| v.to_string()),
                    l.0,
                    sig.onnx_opset().map_or("?".into(), |v| v.to_string()),
                    l.1
                ),
            )]
        }
        None => {
            let known: Vec<String> = TABLE.iter().map(|r| format!("1.{}", r.0)).collect();
            vec![Finding::warning(
                Code::Compat,
                format!(
                    "no IR/opset data for ONNX Runtime {version} (known: {}); check against the runtime itself with --ort-lib",
                    known.join(", ")
                ),
            )]
        }
    }
}

/// The same for a runtime that was found and is about to run: silent when
/// the table has no data (the run itself will tell), tagged with the version.
pub fn check_found(sig: &Signature, version: &str) -> Vec<Finding> {
    let Some(l) = limits(version) else { return Vec::new() };
    against(sig, version, l).into_iter().map(|f| Finding { runtime: Some(version.to_string()), ..f }).collect()
}

fn against(sig: &Signature, version: &str, (max_ir, max_opset, source): (i64, i64, Source)) -> Vec<Finding> {
    let how = match source {
        Source::Measured => "measured",
        Source::Documented => "documented",
    };
    let mut out = Vec::new();
    if let Some(ir) = sig.ir_version.filter(|ir| *ir > max_ir) {
        out.push(
            Finding::error(
                Code::Compat,
                format!("the model has IR version {ir}; ONNX Runtime {version} accepts at most IR {max_ir} ({how})"),
            )
            .cause(Some("re-save the model with an older IR version (onnx.save after setting ir_version), or deploy a newer runtime".into())),
        );
    }
    if let Some(op) = sig.onnx_opset().filter(|op| *op > max_opset) {
        out.push(
            Finding::error(
                Code::Compat,
                format!("the model imports ai.onnx opset {op}; ONNX Runtime {version} implements at most opset {max_opset} ({how})"),
            )
            .cause(Some("export with a lower opset, or deploy a newer runtime".into())),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_to_their_minor() {
        assert_eq!(minor("1.16"), Some(16));
        assert_eq!(minor("1.31.1"), Some(31));
        assert_eq!(minor("2.0"), None);
    }

    #[test]
    fn table_is_sorted_and_monotonic() {
        for w in TABLE.windows(2) {
            assert!(w[0].0 < w[1].0 && w[0].1 <= w[1].1 && w[0].2 <= w[1].2, "{w:?}");
        }
    }
}
