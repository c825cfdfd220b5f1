//! Runs the driver in a child process (the binary re-invoking itself), so a
//! segfault or abort inside ONNX Runtime becomes a finding, not a dead tool.

use super::driver::{self, Job};
use super::events::Event;
use super::report::RuntimeReport;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The hidden subcommand the binary answers to in the child.
pub const CHILD_ARG: &str = "__drive-child";

/// Child side: reads a [`Job`] as JSON on stdin, writes [`Event`]s as JSON lines.
pub fn child_main() -> i32 {
    let mut input = String::new();
    if std::io::stdin().read_to_string(&mut input).is_err() {
        return 64;
    }
    let job: Job = match serde_json::from_str(&input) {
        Ok(j) => j,
        Err(e) => {
            let ev = Event::Fatal { stage: "child".into(), message: format!("bad job: {e}"), cause: None };
            let _ = writeln!(std::io::stdout(), "{}", serde_json::to_string(&ev).unwrap_or_default());
            return 64;
        }
    };
    let mut out = std::io::stdout().lock();
    driver::drive(&job, &mut |ev| {
        // Flushed per line: the parent must see the feeds before a crash.
        let _ = writeln!(out, "{}", serde_json::to_string(&ev).unwrap_or_default());
        let _ = out.flush();
    });
    0
}

/// Parent side: runs `job` in `exe CHILD_ARG`, with a time limit.
pub fn run(exe: &Path, job: &Job, source: &str, timeout: Duration) -> RuntimeReport {
    let mut report = RuntimeReport::new(&job.ort_lib, source);
    let mut child = match Command::new(exe)
        .arg(CHILD_ARG)
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
                stage: "child".into(),
                message: format!("cannot start {}: {e}", exe.display()),
                cause: None,
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
    let reader = std::thread::spawn(move || {
        if let Some(out) = stdout {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(ev) = serde_json::from_str::<Event>(&line) {
                    if tx.send(ev).is_err() {
                        break;
                    }
                }
            }
        }
    });
    let deadline = std::time::Instant::now() + timeout;
    let mut timed_out = false;
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(ev) => report.absorb(ev),
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
    let _ = reader.join();
    while let Ok(ev) = rx.try_recv() {
        report.absorb(ev);
    }
    let status = child.wait();
    let stderr_text = stderr_thread.join().unwrap_or_default();
    report.finish(status.ok(), timed_out, timeout, &stderr_text);
    report
}
