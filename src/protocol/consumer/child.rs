//! A consumer's program in a child process: started at once (it imports its
//! framework while the check runs), answered later within a deadline. Its
//! last stdout line that is a JSON object is its answer.

use crate::memory::Lease;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What a consumer's program printed.
#[derive(Debug, Deserialize)]
pub(super) struct Ran {
    pub installed: bool,
    pub ok: bool,
    pub tokens: Vec<i64>,
    pub error: Option<String>,
    pub stage: Option<String>,
}

/// A started program, its pipes read by threads of their own so a chatty
/// child never blocks on a full pipe, and a waiter that owns the process: it
/// reaps it and gives back its memory lease the moment it ends (not when its
/// answer is read, after the check), and kills it when told to.
pub(crate) struct Started {
    waiter: JoinHandle<Result<std::process::ExitStatus, String>>,
    stop: Arc<AtomicBool>,
    out: JoinHandle<String>,
    err: JoinHandle<String>,
    deadline: Instant,
}

fn drain(pipe: Option<impl std::io::Read + Send + 'static>) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_string(&mut s);
        }
        s
    })
}

/// Starts `cmd`; its answer is due within `timeout` from now (checked when
/// the answer is asked for, as a program that ended in time is never lost
/// to a long check); `lease` is held while it runs.
pub(crate) fn start(mut cmd: Command, timeout: Duration, lease: Option<Lease>) -> Result<Started, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start it: {e}"))?;
    let (out, err) = (drain(child.stdout.take()), drain(child.stderr.take()));
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let waiter = std::thread::spawn(move || {
        let _lease = lease;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return Ok(status),
                Ok(None) if stopped.load(Ordering::SeqCst) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err("no answer within its time limit (--timeout)".into());
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => return Err(e.to_string()),
            }
        }
    });
    Ok(Started { waiter, stop, out, err, deadline: Instant::now() + timeout })
}

/// How [`Started::answer`] begins a process's death by a crash signal.
pub(crate) const DIED: &str = "its process was killed by signal";

/// The crash signal that killed a process: a segmentation fault, an abort,
/// … (the out-of-memory killer's or a stop request's say nothing of the folder).
#[cfg(unix)]
fn crashed(status: std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal().filter(|s| crate::engine::runtime_report::crash_signal(*s))
}

#[cfg(not(unix))]
fn crashed(_: std::process::ExitStatus) -> Option<i32> {
    None
}

impl Started {
    /// The program's answer, or why there is none (killed at the deadline).
    pub(crate) fn answer<T: DeserializeOwned>(self) -> Result<T, String> {
        while !self.waiter.is_finished() && Instant::now() <= self.deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.stop.store(true, Ordering::SeqCst);
        let status = self.waiter.join().map_err(|_| "its waiter failed".to_string())??;
        let (out, err) = (self.out.join().unwrap_or_default(), self.err.join().unwrap_or_default());
        let line = out.lines().rev().find(|l| l.trim_start().starts_with('{'));
        line.and_then(|l| serde_json::from_str(l).ok()).ok_or_else(|| {
            let said = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("nothing");
            // Killed by a crash signal: the consumer's process died on the folder (ONNX Runtime crashed in it).
            if let Some(signal) = crashed(status) {
                let name = crate::engine::runtime_report::signal_name(signal);
                return format!("{DIED} {signal}, {name}, before printing its result (stderr: {said})");
            }
            format!("it printed no result (stderr: {said})")
        })
    }

    /// Not needed after all: stopped.
    pub(super) fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.waiter.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Budget;
    use std::path::Path;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn a_program_s_lease_comes_back_when_it_ends_not_when_its_answer_is_read() {
        let budget = Budget::new(100, 0, true, "test");
        let lease = budget.take(Path::new("/f"), "program", 80).unwrap();
        let started =
            start(sh(r#"echo '{"installed":true,"ok":true,"tokens":[1,2]}'"#), Duration::from_secs(30), Some(lease))
                .unwrap();
        let t0 = Instant::now();
        while budget.try_take(80).is_none() {
            assert!(t0.elapsed() < Duration::from_secs(10), "the lease never came back");
            std::thread::sleep(Duration::from_millis(20));
        }
        let ran: Ran = started.answer().unwrap();
        assert_eq!(ran.tokens, vec![1, 2]);
    }

    #[test]
    fn a_program_past_its_deadline_is_killed_when_its_answer_is_asked_for() {
        let budget = Budget::new(100, 0, true, "test");
        let lease = budget.take(Path::new("/f"), "program", 80).unwrap();
        let started = start(sh("sleep 30"), Duration::from_millis(200), Some(lease)).unwrap();
        let t0 = Instant::now();
        let err = started.answer::<Ran>().unwrap_err();
        assert!(err.contains("time limit") && t0.elapsed() < Duration::from_secs(5), "{err}");
        assert!(budget.try_take(80).is_some(), "the killed program's lease is back");
    }
}
