//! A consumer's program in a child process: started at once (it imports its
//! framework while the check runs), answered later within a deadline. Its
//! last stdout line that is a JSON object is its answer.

use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::process::{Child, Command, Stdio};
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
/// child never blocks on a full pipe.
pub(crate) struct Started {
    child: Child,
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

/// Starts `cmd`; its answer is due within `timeout` from now.
pub(crate) fn start(mut cmd: Command, timeout: Duration) -> Result<Started, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start it: {e}"))?;
    let (out, err) = (drain(child.stdout.take()), drain(child.stderr.take()));
    Ok(Started { child, out, err, deadline: Instant::now() + timeout })
}

impl Started {
    /// The program's answer, or why there is none (killed at the deadline).
    pub(crate) fn answer<T: DeserializeOwned>(mut self) -> Result<T, String> {
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() > self.deadline => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return Err("no answer within its time limit (--timeout)".into());
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => return Err(e.to_string()),
            }
        }
        let (out, err) = (self.out.join().unwrap_or_default(), self.err.join().unwrap_or_default());
        let line = out.lines().rev().find(|l| l.trim_start().starts_with('{'));
        line.and_then(|l| serde_json::from_str(l).ok()).ok_or_else(|| {
            let said = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("nothing");
            format!("it printed no result (stderr: {said})")
        })
    }

    /// Not needed after all: stopped.
    pub(super) fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
