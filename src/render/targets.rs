//! What the CI formats report on: every checked file with its report, and the
//! folder's own findings, whether the check was of one file or a folder.

use crate::checker::report::{FolderReport, Report, Verdict};
use crate::finding::{Code, Finding};

/// One checked file: its path (as the CI should show it) and its report.
pub struct Target<'a> {
    /// The model file's path.
    pub path: String,
    /// Its report.
    pub report: &'a Report,
}

/// The files of a check and the findings about the whole folder.
pub struct Targets<'a> {
    /// Every file checked.
    pub files: Vec<Target<'a>>,
    /// Findings across files, located at the folder.
    pub folder: Option<(&'a str, &'a [Finding])>,
    /// The overall verdict.
    pub verdict: Verdict,
}

impl<'a> Targets<'a> {
    /// One file.
    pub fn file(r: &'a Report) -> Self {
        Targets { files: vec![Target { path: r.model.clone(), report: r }], folder: None, verdict: r.verdict }
    }

    /// Every file of a folder, with paths including the folder.
    pub fn folder(r: &'a FolderReport) -> Self {
        let base = r.path.trim_end_matches('/');
        Targets {
            files: r.files.iter().map(|f| Target { path: format!("{base}/{}", f.path), report: &f.report }).collect(),
            folder: Some((&r.path, &r.findings)),
            verdict: r.verdict,
        }
    }
}

/// Whether a finding comes from the static check (signature, contract, config).
pub fn is_static(f: &Finding) -> bool {
    f.step.is_none()
        && !matches!(
            f.code,
            Code::RuntimeLoad
                | Code::ModelLoad
                | Code::Compat
                | Code::Plan
                | Code::RunFailed
                | Code::Crash
                | Code::RuntimeSkipped
                | Code::StepOutput
                | Code::LogitsShape
                | Code::NonFinite
                | Code::CacheGrowth
                | Code::CrossCache
                | Code::Parity
        )
}

/// A finding's text with its node and cause, for formats with one message field.
pub fn full_message(f: &Finding) -> String {
    let mut text = f.message.clone();
    if let Some(node) = &f.node {
        text.push_str(&format!("\nnode: {node}"));
    }
    if let Some(cause) = &f.cause {
        text.push_str(&format!("\ncause: {cause}"));
    }
    text
}
