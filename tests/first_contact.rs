//! A new user's first contact: README's test command is the one CI runs, and
//! its set-up script says what to install when it cannot; the first check on
//! a machine without ONNX Runtime fetches it once, quietly, even when two
//! checks start at once.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The command in README's "Run the tests" block.
fn readme_test_command() -> String {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let after = &readme[readme.find("Run the tests").expect("README: Run the tests")..];
    let block = &after[after.find("```sh\n").expect("a sh block") + 6..];
    block[..block.find("```").unwrap()].trim().to_string()
}

#[test]
fn ci_runs_readme_test_command_verbatim() {
    let command = readme_test_command();
    assert!(command.starts_with("tests/setup.sh && cargo test"), "{command}");
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(ci.lines().any(|l| l.trim().starts_with(&command)), ".ci/run does not run `{command}`:\n{ci}");
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("onnx-contract-first-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn which(tool: &str) -> PathBuf {
    // The interpreter itself, not a version manager's shim that needs its own PATH.
    let probe = if tool == "python3" {
        "python3 -c 'import sys; print(sys.executable)'".to_string()
    } else {
        format!("command -v {tool}")
    };
    let out = Command::new("sh").args(["-c", &probe]).output().unwrap();
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

#[test]
fn setup_names_what_to_install_when_it_cannot_install_chromium() {
    // A machine with Python, Node and npm but no Chromium, as a user who is
    // not root and has no sudo: the script stops and names the package.
    let bin = scratch("setup-bin");
    for tool in ["python3", "dirname", "cmp", "cp", "node", "npm", "cat"] {
        std::os::unix::fs::symlink(which(tool), bin.join(tool)).unwrap();
    }
    std::fs::write(bin.join("id"), "#!/bin/sh\necho 1000\n").unwrap();
    let mut perms = std::fs::metadata(bin.join("id")).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(bin.join("id"), perms).unwrap();
    let out = Command::new("/bin/bash").arg(root().join("tests/setup.sh")).env("PATH", &bin).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}{}", String::from_utf8_lossy(&out.stdout));
    assert!(err.contains("Chromium is missing") && err.contains("apt-get install chromium"), "{err}");
    let _ = std::fs::remove_dir_all(&bin);
}

/// A `python3` with pip but no onnxruntime first on PATH: nothing to find.
fn python_without_onnxruntime(dir: &Path) -> PathBuf {
    let venv = dir.join("venv");
    let made = Command::new("python3").args(["-m", "venv"]).arg(&venv).output().unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    venv.join("bin")
}

#[test]
fn two_first_runs_at_once_fetch_the_runtime_once_quietly() {
    let dir = scratch("fetch");
    let venv_bin = python_without_onnxruntime(&dir);
    let cache = dir.join("cache");
    let path = format!("{}:{}", venv_bin.display(), std::env::var("PATH").unwrap());
    let start = |folder: &str| {
        bin()
            .args(["check", folder])
            .env("PATH", &path)
            .env("ONNX_CONTRACT_CACHE", &cache)
            .env_remove("ORT_DYLIB_PATH")
            .env_remove("ONNX_CONTRACT_NO_FETCH")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    // marian-tiny drives its merged decoder and its split pair in parallel jobs: three first runs.
    let (a, b) = (start("models/marian-tiny"), start("models/gpt2-tiny"));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let err = format!("{}{}", String::from_utf8_lossy(&a.stderr), String::from_utf8_lossy(&b.stderr));
    assert_eq!((a.status.code(), b.status.code()), (Some(0), Some(0)), "{err}");
    assert_eq!(err.matches("fetching onnxruntime==").count(), 1, "one announcement:\n{err}");
    assert_eq!(err.lines().count(), 1, "nothing but the announcement on stderr:\n{err}");
    assert!(!err.contains("WARNING"), "{err}");
    let entries: Vec<String> =
        std::fs::read_dir(&cache).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    let installs: Vec<&String> = entries.iter().filter(|n| n.starts_with("ort-") || n.contains("partial")).collect();
    assert_eq!(installs, vec!["ort-1.31.1"], "one complete install, no scratch folder left: {entries:?}");
    // Both reports ran on the fetched runtime, and say so.
    for out in [&a, &b] {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(": PASS"), "{text}");
    }
    let (code, r) = {
        let out = bin()
            .args(["check", "--format", "json", "models/gpt2-tiny"])
            .env("PATH", &path)
            .env("ONNX_CONTRACT_CACHE", &cache)
            .env_remove("ORT_DYLIB_PATH")
            .output()
            .unwrap();
        assert!(out.stderr.is_empty(), "a second run fetches nothing: {}", String::from_utf8_lossy(&out.stderr));
        (out.status.code(), serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap())
    };
    assert_eq!(code, Some(0));
    let lib = r["files"][0]["runtimes"][0]["ort_path"].as_str().unwrap_or_default().to_string();
    assert!(lib.starts_with(cache.join("ort-1.31.1").to_str().unwrap()), "{lib}: {r:#}");
    let _ = std::fs::remove_dir_all(&dir);
}
