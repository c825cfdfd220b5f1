//! `--max-memory`: a check stays within its budget, summed over every
//! process it starts, by running one job after another where two do not
//! fit, and says so; a job larger than the whole budget is not started and
//! is named with what it needs. Memory is measured from outside, over the
//! check's whole process tree, as a CI runner's limit counts it.

mod common;
use common::*;
use std::collections::HashMap;
use std::time::Duration;

/// Resident memory of `root` and every descendant, in bytes (Linux /proc).
fn tree_rss(root: u32) -> u64 {
    let mut parent: HashMap<u32, Vec<u32>> = HashMap::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { continue };
        // The command name may hold spaces: the fields after its last ')'.
        let Some(ppid) = stat.rsplit(')').next().and_then(|r| r.split_whitespace().nth(1)?.parse::<u32>().ok()) else {
            continue;
        };
        parent.entry(ppid).or_default().push(pid);
    }
    let rss = |pid: u32| -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        s.lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024)
    };
    let (mut total, mut todo) = (0, vec![root]);
    while let Some(p) = todo.pop() {
        total += rss(p);
        todo.extend(parent.get(&p).into_iter().flatten());
    }
    total
}

/// Runs `check` with `args`, sampling the process tree every 5 ms: (exit code, JSON report, peak bytes).
fn check_measured(args: &[&str]) -> (i32, serde_json::Value, u64) {
    let mut cmd = bin();
    cmd.args(["check", "--format", "json", "--no-fetch"]).args(args);
    cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().unwrap();
    // Read on a thread of its own: a report larger than the pipe would block the check.
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut s).unwrap();
        s
    });
    let mut peak = 0;
    let status = loop {
        peak = peak.max(tree_rss(child.id()));
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let text = reader.join().unwrap();
    let report = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (status.code().unwrap(), report, peak)
}

fn findings_of<'a>(r: &'a serde_json::Value, code: &str) -> Vec<&'a serde_json::Value> {
    let mut all: Vec<&serde_json::Value> = r["findings"].as_array().into_iter().flatten().collect();
    for f in r["files"].as_array().into_iter().flatten() {
        all.extend(f["findings"].as_array().into_iter().flatten());
    }
    all.into_iter().filter(|f| f["code"] == code).collect()
}

const MIB: u64 = 1 << 20;

#[test]
fn a_budget_two_jobs_do_not_fit_in_runs_them_one_after_another_within_it_and_says_so() {
    // marian-tiny's two runtime jobs (the merged decoder with its encoder;
    // the split pair with it) need about 162 and 210 MiB by the estimate
    // (64 MiB for the runtime, 48 MiB per session, the weights); with the
    // check's own memory held, 300 MiB fits one, not both.
    let budget = 300 * MIB;
    let (code, r, peak) = check_measured(&["--max-memory", "300M", "models/marian-tiny"]);
    assert_eq!((code, r["verdict"].as_str()), (0, Some("pass")), "{r:#}");
    let waits = findings_of(&r, "memory-budget");
    // One worker per core: on one core the jobs never overlap, so none waits.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores == 1 {
        assert!(waits.is_empty(), "{r:#}");
        return;
    }
    assert_eq!(waits.len(), 1, "{r:#}");
    let said = waits[0]["message"].as_str().unwrap();
    assert_eq!(waits[0]["severity"], "info");
    assert!(said.contains("memory budget 300.0 MiB (--max-memory)") && said.contains("1 run(s) waited"), "{said}");
    // Both files were still driven.
    for f in ["decoder_model_merged.onnx", "decoder_with_past_model.onnx"] {
        assert!(file_report(&r, f)["runtimes"][0]["steps"].as_array().is_some_and(|s| !s.is_empty()), "{f}: {r:#}");
    }
    assert!(peak <= budget, "peak {} MiB over the process tree, budget {} MiB", peak / MIB, budget / MIB);
}

#[test]
fn the_machine_s_budget_holds_a_small_folder_s_jobs_without_a_wait() {
    let (code, r, _) = check_measured(&["models/marian-tiny"]);
    assert_eq!(code, 0, "{r:#}");
    assert!(findings_of(&r, "memory-budget").is_empty(), "{r:#}");
}

#[test]
fn a_job_larger_than_the_whole_budget_is_not_started_and_is_named_with_what_it_needs() {
    let (code, r, peak) = check_measured(&["--max-memory", "100M", "models/marian-tiny"]);
    let refused = findings_of(&r, "memory-budget");
    assert_eq!(refused.len(), 2, "{r:#}");
    for f in &refused {
        let said = f["message"].as_str().unwrap();
        assert_eq!(f["severity"], "error");
        assert!(
            said.starts_with("not run: its runtime job (decoder_")
                && said.contains("more than the memory budget of 100.0 MiB (--max-memory)"),
            "{said}"
        );
    }
    // Nothing ran: no child was started, the verdict is not a clean pass.
    assert!(file_report(&r, "decoder_model_merged.onnx")["runtimes"].as_array().is_none_or(Vec::is_empty), "{r:#}");
    assert_ne!(r["verdict"], "pass", "{r:#}");
    assert!(peak < 100 * MIB, "peak {} MiB", peak / MIB);
    // Nothing was found wrong with the model: the code of a run that cannot happen here.
    assert_eq!(code, 69);
}
