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
/// child never blocks on a full pipe, and a waiter that owns the process:
/// it kills it at the deadline or when stopped, and gives back its memory
/// lease the moment it ends (not when its answer is read, after the check).
pub(crate) struct Started {
    waiter: JoinHandle<Result<(), String>>,
    stop: Arc<AtomicBool>,
    out: JoinHandle<String>,
    err: JoinHandle<String>,
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

/// Starts `cmd`; its answer is due within `timeout` from now; `lease` is
/// held while it runs.
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
    let deadline = Instant::now() + timeout;
    let waiter = std::thread::spawn(move || {
        let _lease = lease;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => return Ok(()),
                Ok(None) if stopped.load(Ordering::SeqCst) || Instant::now() > deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err("no answer within its time limit (--timeout)".into());
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => return Err(e.to_string()),
            }
        }
    });
    Ok(Started { waiter, stop, out, err })
}

impl Started {
    /// The program's answer, or why there is none (killed at the deadline).
    pub(crate) fn answer<T: DeserializeOwned>(self) -> Result<T, String> {
        self.waiter.join().map_err(|_| "its waiter failed".to_string())??;
        let (out, err) = (self.out.join().unwrap_or_default(), self.err.join().unwrap_or_default());
        let line = out.lines().rev().find(|l| l.trim_start().starts_with('{'));
        line.and_then(|l| serde_json::from_str(l).ok()).ok_or_else(|| {
            let said = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("nothing");
            format!("it printed no result (stderr: {said})")
        })
    }

    /// Not needed after all: stopped.
    pub(super) fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.waiter.join();
    }
}
