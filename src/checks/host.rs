//! What a runtime host process runs (`engine::host` is the parent side):
//! each job read from stdin, in a thread of its own, its events written to
//! stdout tagged with the job; every job shares the process's ONNX Runtime
//! and its companion sessions (`engine::shared`).

use crate::engine::host::{Reply, Request};
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};

/// A job thread's stack: the main thread's 8 MiB, as a job run alone in a
/// child of its own has (a deep graph's diagnosis recurses).
const JOB_STACK: usize = 8 << 20;

/// Reads jobs until stdin closes, then waits for the running ones. A panic
/// a job does not catch itself ends the host at once: the parent then runs
/// each of its unfinished jobs again alone, where the panic is named at its
/// own job. (Panics the code catches on purpose — a session's, a
/// reproduction's — stay inside their job.)
pub(crate) fn host_main() -> i32 {
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let write = |out: &Mutex<std::io::Stdout>, reply: &Reply| {
        let line = serde_json::to_string(reply).unwrap_or_default();
        let mut out = out.lock().unwrap_or_else(|p| p.into_inner());
        // Flushed per line: the parent must see the feeds before a crash.
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    };
    let mut running = Vec::new();
    for line in std::io::stdin().lock().lines().map_while(Result::ok) {
        let Request { id, job } = match serde_json::from_str::<Request>(&line) {
            Ok(r) => r,
            // A line the parent did not write: nothing to answer it with.
            Err(_) => return 64,
        };
        let out = out.clone();
        let spawned = std::thread::Builder::new().stack_size(JOB_STACK).spawn(move || {
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                crate::checks::job::drive(&job, &mut |ev| {
                    let event = Some(crate::engine::wire::finite(ev));
                    write(&out, &Reply { id, event, ended: false });
                })
            }));
            if ran.is_err() {
                // Its events so far are with the parent; every unfinished job runs again alone.
                std::process::exit(101);
            }
            write(&out, &Reply { id, event: None, ended: true });
        });
        match spawned {
            Ok(job) => running.push(job),
            // No thread for it: the parent runs the jobs this host did not end alone.
            Err(_) => return 71,
        }
    }
    if running.into_iter().any(|job| job.join().is_err()) {
        return 101;
    }
    0
}
