//! Where text goes and how it is laid out: stdout (a closed pipe is fine),
//! the terminal's width and colors, and the progress spinner on stderr.

use onnx_contract::render::table;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

/// A spinner on stderr with the current stage, shown only on a terminal, for
/// people's output (`human`: never beside JSON, SARIF, …), and only once the
/// check has taken more than a second (quick checks stay quiet).
pub(crate) fn progress_line(for_people: bool) -> impl Fn(&str) + Send + Sync + 'static {
    use std::io::IsTerminal;
    let start = std::time::Instant::now();
    let tty = for_people && std::io::stderr().is_terminal();
    let bar = std::sync::Mutex::new(None::<indicatif::ProgressBar>);
    move |text: &str| {
        if !tty || start.elapsed() < Duration::from_secs(1) {
            return;
        }
        if let Ok(mut slot) = bar.lock() {
            let b = slot.get_or_insert_with(|| {
                let b = indicatif::ProgressBar::new_spinner().with_finish(indicatif::ProgressFinish::AndClear);
                b.enable_steady_tick(Duration::from_millis(120));
                b
            });
            b.set_message(text.to_string());
        }
    }
}

/// Human output sized to the terminal: `COLUMNS` when set, else the width of
/// stdout when it is a terminal, else [`PIPE_WIDTH`] (a CI log, `| tee`: a
/// line nobody can read whole is no use there either). Colors only on a
/// terminal, and never with `NO_COLOR` set.
pub(crate) const PIPE_WIDTH: u16 = 100;

pub(crate) fn terminal_style() -> table::Style {
    use std::io::IsTerminal;
    let tty = std::io::stdout().is_terminal();
    let width = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<u16>().ok())
        .filter(|w| *w >= 40)
        .or_else(|| if tty { terminal_size::terminal_size().map(|(w, _)| w.0) } else { Some(PIPE_WIDTH) });
    let color = tty && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    table::Style { width, color }
}

/// Writes to stdout; a closed pipe (`| head`) is not an error worth a panic.
pub(crate) fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    if out.write_all(text.as_bytes()).and_then(|_| out.flush()).is_err() {
        // The reader went away; nothing more to say.
    }
}

pub(crate) fn display(p: &Path) -> String {
    p.display().to_string()
}
