//! Several folders (`check DIR…`, `merge`): one line per folder, its verdict,
//! its path and its first error (or what passed), the folders that could not
//! be checked, and a count.

use super::{fit, paint, plural, style};
use crate::checker::many::ManyReport;
use crate::checker::report::Verdict;
use std::fmt::Write;

/// One line per folder, then the total.
pub fn many(r: &ManyReport) -> String {
    let width = style().width.map(usize::from);
    let clip = |s: String| super::brief::clip(&s, width);
    let mut out = String::new();
    for f in &r.folders {
        let what = match f.errors().next() {
            Some(e) => {
                let file = f
                    .files
                    .iter()
                    .find(|x| x.report.errors().any(|y| std::ptr::eq(y, e)))
                    .map(|x| format!("{}: ", x.path));
                format!("first error: {}{}: {}", file.unwrap_or_default(), e.code, e.message)
            }
            None => format!(
                "{} of {} ({})",
                plural(f.files.len(), "file"),
                f.model_type.as_deref().unwrap_or("unknown model_type"),
                f.family_contract
            ),
        };
        let verdict = paint(&f.verdict.as_str().to_uppercase());
        let _ = writeln!(out, "{}", clip(format!("{verdict}  {}  {what}", f.path)));
    }
    for u in &r.unchecked {
        let _ = writeln!(out, "{}", clip(format!("{}  {}  (exit {}) {}", paint("ERROR"), u.path, u.code, u.message)));
    }
    let failing = r.folders.iter().filter(|f| f.verdict == Verdict::Fail).count();
    let _ = writeln!(
        out,
        "{}: {} checked, {} failing{}",
        paint(&r.verdict.as_str().to_uppercase()),
        plural(r.folders.len() + r.unchecked.len(), "folder"),
        failing,
        if r.unchecked.is_empty() { String::new() } else { format!(", {} not checked", r.unchecked.len()) }
    );
    fit(out)
}
