//! An application using onnx-contract as a library: refuses a wrong model
//! before feeding it. `library-app MODEL SPEC [NAME=VALUE ...] [--steps N]`
//! prints the report as JSON and exits 0 (pass) or 2 (fail).

use onnx_contract::{Checker, Contract, Verdict};
use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    // With the runtime feature the check's child process is this binary.
    #[cfg(feature = "runtime")]
    onnx_contract::init_child();

    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(model), Some(spec)) = (args.first(), args.get(1)) else {
        eprintln!("usage: library-app MODEL SPEC [NAME=VALUE ...] [--steps N]");
        return ExitCode::from(64);
    };
    let mut params = Vec::new();
    let mut steps = None;
    let mut rest = args[2..].iter();
    while let Some(a) = rest.next() {
        if a == "--steps" {
            steps = rest.next().and_then(|n| n.parse::<usize>().ok());
        } else if let Some((k, v)) = a.split_once('=') {
            params.push((k.to_string(), v.parse::<i64>().unwrap_or(0)));
        }
    }
    let contract = match Contract::load(Path::new(spec), &params) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(78);
        }
    };
    let checker = Checker::new().contract(contract);
    let checker = match steps {
        Some(n) => checker.steps(n),
        None => checker.static_only(true),
    };
    match checker.run(Path::new(model)) {
        Ok(report) => {
            println!("{}", serde_json::to_string(&report).expect("a report serialises"));
            ExitCode::from(if report.verdict == Verdict::Pass { 0 } else { 2 })
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
    }
}
