//! What a runtime host process runs (`engine::host` is the parent side):
//! each job read from stdin, in a thread of its own, its events written to
//! stdout tagged with the job; every job shares the process's ONNX Runtime
//! and its companion sessions (`engine::shared`).

use crate::engine::host::{Reply, Request};
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};

/// Reads jobs until stdin closes, then waits for the running ones. A panic
/// of any job ends the host at once: the parent then runs each of its
/// unfinished jobs again alone, where the panic is named at its own job.
pub(crate) fn host_main() -> i32 {
    let said = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        said(info);
        std::process::exit(101);
    }));
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
        running.push(std::thread::spawn(move || {
            crate::checks::job::drive(&job, &mut |ev| {
                let event = Some(crate::engine::wire::finite(ev));
                write(&out, &Reply { id, event, ended: false });
            });
            write(&out, &Reply { id, event: None, ended: true });
        }));
    }
    // A panicking job ended the process in the hook above, before this.
    if running.into_iter().any(|job| job.join().is_err()) {
        return 101;
    }
    0
}
