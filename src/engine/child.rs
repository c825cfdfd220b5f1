//! Runs a job in a child process (the host binary re-invoking itself, the
//! `procspawn` pattern), so a segfault or abort inside ONNX Runtime becomes a
//! finding, not a dead tool. The child is recognised by an environment
//! variable, not an argument, so any host binary can serve as one by calling
//! `init_child` first thing in `main`; what the child then runs is
//! `checks::job`. This is the parent side.

use crate::engine::events::{Event, Stage};
use crate::engine::options::Job;
use crate::engine::runtime_report::{End, RuntimeReport};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Set (to `1`) in the child's environment; [`crate::init_child`] looks for it.
pub const CHILD_ENV: &str = "ONNX_CONTRACT_CHILD";

/// Parent side: runs `job` in `exe` with [`CHILD_ENV`] set, with a time limit.
pub(crate) fn run(
    exe: &Path,
    job: &Job,
    source: &str,
    timeout: Duration,
    progress: &(dyn Fn(&str) + Sync),
) -> RuntimeReport {
    let file = job.model.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut report = RuntimeReport::new(&job.ort_lib, source);
    let mut child = match Command::new(exe)
        .env(CHILD_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // ONNX Runtime writes colored logs to stderr by itself; keep them out of our output.
        .env("ORT_LOG", "fatal")
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            report.absorb(Event::Fatal {
                stage: Stage::Child,
                message: format!("cannot start {}: {e}", exe.display()),
                cause: None,
                node: None,
            });
            return report;
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(serde_json::to_string(job).unwrap_or_default().as_bytes());
    }
    let stderr = child.stderr.take();
    let stderr_thread = std::thread::spawn(move || {
        let mut buf = String::new();
        if let Some(mut s) = stderr {
            let _ = s.read_to_string(&mut buf);
        }
        buf
    });
    let (tx, rx) = mpsc::channel::<Event>();
    let stdout = child.stdout.take();
    // A line that is not an event is kept, to be said, never dropped silently.
    let reader = std::thread::spawn(move || {
        let mut unread = Vec::new();
        if let Some(out) = stdout {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                match serde_json::from_str::<Event>(&line) {
                    Ok(ev) => {
                        if tx.send(ev).is_err() {
                            break;
                        }
                    }
                    Err(e) if !line.trim().is_empty() => {
                        unread.push(format!("{e}: {}", line.chars().take(160).collect::<String>()))
                    }
                    Err(_) => {}
                }
            }
        }
        unread
    });
    let deadline = std::time::Instant::now() + timeout;
    let mut timed_out = false;
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(ev) => {
                tell(&file, job, &ev, progress);
                report.absorb(ev)
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if std::time::Instant::now() > deadline {
                    timed_out = true;
                    let _ = child.kill();
                    break;
                }
            }
        }
    }
    let unread = reader.join().unwrap_or_default();
    while let Ok(ev) = rx.try_recv() {
        report.absorb(ev);
    }
    let status = child.wait();
    let stderr_text = stderr_thread.join().unwrap_or_default();
    report.finish(End::Child { status: status.ok(), timed_out, timeout, stderr: stderr_text });
    for line in unread {
        report.unreadable(line);
    }
    report
}

/// The progress line an event of `job` (on `file`) is worth, if any.
pub(crate) fn tell(file: &str, job: &Job, ev: &Event, progress: &(dyn Fn(&str) + Sync)) {
    match ev {
        Event::Session { seconds, .. } => progress(&format!("{file}: session created in {seconds:.1} s")),
        Event::Feeds { variant, step, .. } => {
            progress(&format!("{file}: step {step} of {} (step-0 past length {variant})", job.options.steps))
        }
        _ => {}
    }
}
