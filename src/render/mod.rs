//! Turns reports, signatures and diffs into text. Nothing here prints: the
//! binary decides where the text goes. Each check-report format is a
//! [`Renderer`], a function of the [`Report`] alone.

#[cfg(feature = "cli")]
pub mod github;
#[cfg(feature = "cli")]
pub mod html;
pub mod json;
#[cfg(feature = "cli")]
pub mod junit;
#[cfg(feature = "cli")]
pub mod sarif;
#[cfg(feature = "cli")]
pub mod table;
pub mod targets;

use crate::checker::report::{FolderReport, Report};

/// One output format of a check report.
pub trait Renderer {
    /// The whole document for one file's `report`.
    fn render(&self, report: &Report) -> String;
    /// The whole document for a folder's `report`.
    fn render_folder(&self, report: &FolderReport) -> String;
}

/// One JSON document: `serde_json` of the [`Report`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Json;

impl Renderer for Json {
    fn render(&self, report: &Report) -> String {
        json::to_text(report)
    }
    fn render_folder(&self, report: &FolderReport) -> String {
        json::to_text(report)
    }
}

/// Text for people (needs the `cli` feature): one screen for a pass, the
/// cause first for a fail; `verbose` adds every signature, finding and step table.
#[cfg(feature = "cli")]
#[derive(Clone, Copy, Debug, Default)]
pub struct Human {
    /// Every file's full report, passing ones too.
    pub verbose: bool,
}

#[cfg(feature = "cli")]
impl Renderer for Human {
    fn render(&self, report: &Report) -> String {
        if self.verbose {
            table::check(report)
        } else {
            table::file_brief(report)
        }
    }
    fn render_folder(&self, report: &FolderReport) -> String {
        if self.verbose {
            table::folder_check(report)
        } else {
            table::folder_brief(report)
        }
    }
}

/// One self-contained HTML page with inline SVG plots (needs the `cli` feature).
#[cfg(feature = "cli")]
#[derive(Clone, Copy, Debug, Default)]
pub struct Html;

#[cfg(feature = "cli")]
impl Renderer for Html {
    fn render(&self, report: &Report) -> String {
        html::file(report)
    }
    fn render_folder(&self, report: &FolderReport) -> String {
        html::folder(report)
    }
}

/// SARIF 2.1.0 (needs the `cli` feature).
#[cfg(feature = "cli")]
#[derive(Clone, Copy, Debug, Default)]
pub struct Sarif;

#[cfg(feature = "cli")]
impl Renderer for Sarif {
    fn render(&self, report: &Report) -> String {
        sarif::render(&targets::Targets::file(report))
    }
    fn render_folder(&self, report: &FolderReport) -> String {
        sarif::render(&targets::Targets::folder(report))
    }
}

/// GitHub Actions workflow commands (needs the `cli` feature).
#[cfg(feature = "cli")]
#[derive(Clone, Copy, Debug, Default)]
pub struct Github;

#[cfg(feature = "cli")]
impl Renderer for Github {
    fn render(&self, report: &Report) -> String {
        github::render(&targets::Targets::file(report))
    }
    fn render_folder(&self, report: &FolderReport) -> String {
        github::render(&targets::Targets::folder(report))
    }
}

/// JUnit XML (needs the `cli` feature).
#[cfg(feature = "cli")]
#[derive(Clone, Copy, Debug, Default)]
pub struct Junit;

#[cfg(feature = "cli")]
impl Renderer for Junit {
    fn render(&self, report: &Report) -> String {
        junit::render(&targets::Targets::file(report))
    }
    fn render_folder(&self, report: &FolderReport) -> String {
        junit::render(&targets::Targets::folder(report))
    }
}

/// `958.8 KiB`, `1.52 GiB`.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}
