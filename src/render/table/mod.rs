//! Human-readable tables (comfy-table), one file per kind of document:
//! signatures and diffs (`signature`), check reports (`check`) and their
//! runtime section (`runtime`), the default one-screen report (`brief`),
//! protocols and replays (`protocol`). Here:
//! the layout every table shares (terminal width, colors, folding).

mod brief;
mod check;
mod fixes;
mod many;
mod protocol;
mod runtime;
mod signature;

pub use brief::{file_brief, folder_brief};
pub use check::{check, findings_table, folder_check, verdict_line};
pub use many::many;
pub use protocol::{builtin_specs, protocol, replay};
pub use runtime::runtime_section;
pub use signature::{diff, folder, model_header, signature};

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, ContentArrangement, Table};

/// The contract status of a row, given the tensor names behind it.
type StatusFn<'a> = &'a dyn Fn(&[&str]) -> String;

fn plural(n: usize, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

/// How human output is laid out: the terminal's width (long cells wrap,
/// long lines fold) and whether to color; `None` width means no limit (a pipe).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Style {
    /// Columns available.
    pub width: Option<u16>,
    /// ANSI colors for verdicts.
    pub color: bool,
}

thread_local! {
    static STYLE: std::cell::Cell<Style> = const { std::cell::Cell::new(Style { width: None, color: false }) };
}

/// Sets the layout for the tables rendered on this thread.
pub fn set_style(style: Style) {
    STYLE.with(|s| s.set(style));
}

fn style() -> Style {
    STYLE.with(|s| s.get())
}

fn new_table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(header.iter().map(Cell::new));
    match style().width {
        Some(w) => t.set_content_arrangement(ContentArrangement::Dynamic).set_width(w),
        None => t.set_content_arrangement(ContentArrangement::Disabled),
    };
    if style().color {
        t.enforce_styling();
    } else {
        t.force_no_tty();
    }
    t
}

/// Folds every line wider than the terminal that is not part of a table
/// (tables are sized by comfy-table), indenting the continuation.
fn fit(text: String) -> String {
    let Some(width) = style().width else { return text };
    let width = width as usize;
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let in_table = line.starts_with(['│', '┌', '└', '├', '╞', '┆']);
        if in_table || textwrap::core::display_width(line) <= width {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let opts = textwrap::Options::new(width).subsequent_indent("    ");
        for piece in textwrap::wrap(line, opts) {
            out.push_str(&piece);
            out.push('\n');
        }
    }
    out
}

/// `PASS` / `FAIL`, colored when colors are on.
fn paint(verdict: &str) -> String {
    if !style().color {
        return verdict.to_string();
    }
    let code = if verdict.starts_with("PASS") { "32" } else { "31" };
    format!("\x1b[1;{code}m{verdict}\x1b[0m")
}
