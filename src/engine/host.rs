//! A runtime host: one child process that runs a folder check's jobs, each
//! as a thread, so a companion file every decoder needs (the encoder) gets
//! one session for the whole check (`engine::shared`), and ONNX Runtime is
//! loaded once rather than per job.
//!
//! Crash isolation is kept: when the host dies (a segfault, an abort, our
//! own panic) or is killed, every job it was running is handed back
//! unfinished, and the caller runs each again in a child of its own
//! (`engine::child`), where a crash is named at its own job and file.
//!
//! The wire: the parent writes one [`Request`] per line on the host's
//! stdin; the host answers with [`Reply`] lines on its stdout, every event
//! tagged with its job, then one `ended` per job. Closing stdin ends the
//! host once its jobs are done. This is the parent side.

use crate::engine::child::CHILD_ENV;
use crate::engine::events::Event;
use crate::engine::options::Job;
use crate::engine::runtime_report::{End, RuntimeReport};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// [`CHILD_ENV`]'s value that makes the child a host.
pub(crate) const HOST: &str = "host";

/// One job for the host.
#[derive(Serialize, Deserialize)]
pub(crate) struct Request {
    pub(crate) id: u64,
    pub(crate) job: Job,
}

/// One line from the host: an event of job `id`, or its end.
#[derive(Serialize, Deserialize)]
pub(crate) struct Reply {
    pub(crate) id: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) event: Option<Event>,
    #[serde(default)]
    pub(crate) ended: bool,
}

enum Message {
    Event(Box<Event>),
    Ended,
    /// The host died (or was killed) before the job ended.
    Died,
}

/// Where each running job's lines go; `None` once the host is gone.
type Routes = Arc<Mutex<Option<HashMap<u64, mpsc::Sender<Message>>>>>;

struct Running {
    child: Arc<Mutex<Child>>,
    stdin: ChildStdin,
    routes: Routes,
}

/// The hosts of one check, one per runtime library (a process loads one).
/// Dropped with the check: each host's stdin closes, and it ends once its
/// jobs are done (all are by then); its reader thread reaps it.
#[derive(Default)]
pub(crate) struct Hosts {
    exe: PathBuf,
    running: Mutex<HashMap<PathBuf, Running>>,
    next: std::sync::atomic::AtomicU64,
}

impl Hosts {
    /// Hosts run by `exe` (this executable), started when a job first needs one.
    pub(crate) fn new(exe: &Path) -> Hosts {
        Hosts { exe: exe.to_path_buf(), ..Hosts::default() }
    }

    /// Runs `job` on its runtime's host; `None` when the host died or
    /// could not take it: the caller runs it again in a child of its own.
    pub(crate) fn run(
        &self,
        job: &Job,
        source: &str,
        timeout: Duration,
        progress: &(dyn Fn(&str) + Sync),
    ) -> Option<RuntimeReport> {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let (tx, rx) = mpsc::channel();
        let child = {
            let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
            let alive = running.get(&job.ort_lib).is_some_and(|r| r.routes.lock().is_ok_and(|m| m.is_some()));
            if !alive {
                running.insert(job.ort_lib.clone(), self.start()?);
            }
            let host = running.get_mut(&job.ort_lib)?;
            host.routes.lock().ok()?.as_mut()?.insert(id, tx);
            let line = serde_json::to_string(&Request { id, job: job.clone() }).ok()?;
            if writeln!(host.stdin, "{line}").and_then(|_| host.stdin.flush()).is_err() {
                return None;
            }
            host.child.clone()
        };
        let file = job.model.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let mut report = RuntimeReport::new(&job.ort_lib, source);
        let deadline = Instant::now() + timeout;
        loop {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(Message::Event(ev)) => {
                    crate::engine::child::tell(&file, job, &ev, progress);
                    report.absorb(*ev);
                }
                Ok(Message::Ended) => {
                    report.finish(End::InProcess);
                    return Some(report);
                }
                Ok(Message::Died) | Err(mpsc::RecvTimeoutError::Disconnected) => return None,
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() > deadline => {
                    // The host is killed with this job; its other jobs run again alone.
                    let _ = child.lock().map(|mut c| c.kill());
                    let stderr = String::new();
                    report.finish(End::Child { status: None, timed_out: true, timeout, stderr });
                    return Some(report);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
        }
    }

    /// A new host process, its stdout read into the routes by a thread that,
    /// at the end, tells every job still running that the host died.
    fn start(&self) -> Option<Running> {
        let mut child = Command::new(&self.exe)
            .env(CHILD_ENV, HOST)
            .env("ORT_LOG", "fatal")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            // Its messages are the crash's, and a crash is run again alone, where they are read.
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let (stdin, stdout) = (child.stdin.take()?, child.stdout.take()?);
        let routes: Routes = Arc::new(Mutex::new(Some(HashMap::new())));
        let child = Arc::new(Mutex::new(child));
        let (r, c) = (routes.clone(), child.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let Ok(reply) = serde_json::from_str::<Reply>(&line) else { continue };
                let Ok(mut map) = r.lock() else { break };
                let Some(routes) = map.as_mut() else { break };
                let Some(tx) = routes.get(&reply.id) else { continue };
                let _ = match reply.event {
                    Some(ev) => tx.send(Message::Event(Box::new(ev))),
                    None => tx.send(Message::Ended),
                };
                if reply.ended {
                    routes.remove(&reply.id);
                }
            }
            if let Ok(mut map) = r.lock() {
                for tx in map.take().unwrap_or_default().into_values() {
                    let _ = tx.send(Message::Died);
                }
            }
            let _ = c.lock().map(|mut c| c.wait());
        });
        Some(Running { child, stdin, routes })
    }
}
