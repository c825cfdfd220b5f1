//! Turns reports, signatures and diffs into text. Nothing here prints: the
//! binary decides where the text goes. Each check-report format is a
//! [`Renderer`], a function of the [`Report`] alone.

pub mod json;
#[cfg(feature = "cli")]
pub mod table;

use crate::report::{FolderReport, Report};

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

/// Tables for people (needs the `cli` feature).
#[cfg(feature = "cli")]
#[derive(Clone, Copy, Debug, Default)]
pub struct Human;

#[cfg(feature = "cli")]
impl Renderer for Human {
    fn render(&self, report: &Report) -> String {
        table::check(report)
    }
    fn render_folder(&self, report: &FolderReport) -> String {
        table::folder_check(report)
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
