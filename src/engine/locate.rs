//! Finds an ONNX Runtime shared library to load, in a documented order.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The ONNX Runtime version this tool is tested against, fetched through pip
/// when nothing else is found.
pub const PINNED_ORT: &str = "1.31.1";

/// Where a library came from, for the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Given explicitly (`--ort-lib`, `Checker::runtimes`).
    Flag,
    /// `ORT_DYLIB_PATH`.
    EnvVar,
    /// The Python `onnxruntime` package.
    PythonPackage,
    /// Our cache (a pinned wheel fetched earlier).
    Cache,
    /// The system's library paths.
    System,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Source::Flag => "--ort-lib",
            Source::EnvVar => "ORT_DYLIB_PATH",
            Source::PythonPackage => "python onnxruntime package",
            Source::Cache => "onnx-contract cache",
            Source::System => "system library path",
        })
    }
}

/// A library found, and where.
#[derive(Clone, Debug)]
pub struct Located {
    /// The shared library.
    pub path: PathBuf,
    /// How it was found.
    pub source: Source,
}

/// Nothing was found; `tried` lists every place looked at, for the message.
#[derive(Debug, thiserror::Error)]
#[error(
    "no ONNX Runtime library found (looked in: {}).\n  Install one with `pip install onnxruntime=={PINNED_ORT}`, or point to a \
     libonnxruntime.so with --ort-lib PATH or ORT_DYLIB_PATH.",
    tried.join("; ")
)]
pub struct NotFound {
    /// Every place looked at.
    pub tried: Vec<String>,
}

/// `cache_dir/ort-<version>/onnxruntime/capi/libonnxruntime.so.<version>` after a fetch.
pub fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("ONNX_CONTRACT_CACHE") {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("onnx-contract")
}

fn cache_dir() -> PathBuf {
    cache_root().join(format!("ort-{PINNED_ORT}"))
}

/// The first library found: an explicit path, `ORT_DYLIB_PATH`, the Python
/// `onnxruntime` package, our own cache, then the system's library paths.
pub fn locate(flag: Option<&Path>) -> Result<Located, NotFound> {
    let mut tried = Vec::new();
    if let Some(p) = flag {
        // An explicit path is used as given: a wrong one must fail loudly, not fall through.
        return Ok(Located { path: p.to_path_buf(), source: Source::Flag });
    }
    if let Some(p) = std::env::var_os("ORT_DYLIB_PATH").filter(|p| !p.is_empty()) {
        return Ok(Located { path: PathBuf::from(p), source: Source::EnvVar });
    }
    tried.push("ORT_DYLIB_PATH (unset)".into());
    match python_package_dir() {
        Some(dir) => {
            if let Some(lib) = find_lib_in(&dir.join("capi")) {
                return Ok(Located { path: lib, source: Source::PythonPackage });
            }
            tried.push(format!("{} (no libonnxruntime)", dir.join("capi").display()));
        }
        None => tried.push("python3 -c 'import onnxruntime' (not installed)".into()),
    }
    let cached = cache_dir().join("onnxruntime").join("capi");
    if let Some(lib) = find_lib_in(&cached) {
        return Ok(Located { path: lib, source: Source::Cache });
    }
    tried.push(cached.display().to_string());
    for dir in system_dirs() {
        if let Some(lib) = find_lib_in(&dir) {
            return Ok(Located { path: lib, source: Source::System });
        }
    }
    tried.push("LD_LIBRARY_PATH, /usr/local/lib, /usr/lib".into());
    Err(NotFound { tried })
}

/// Installs the pinned wheel into our cache with pip (the only network this
/// tool ever uses, and only when asked) and returns the library path.
///
/// Once per machine: concurrent first runs (the folder check's parallel jobs,
/// two checks started at once) queue on a file lock; the first installs and
/// `announce`s one line, the others wait and use what it installed. pip
/// writes into a scratch folder renamed into place only when complete, so a
/// killed fetch never leaves a half runtime behind, and its output (warnings
/// included) goes to a log file, named when the fetch fails.
pub fn fetch_pinned(announce: &dyn Fn(&str)) -> Result<PathBuf, String> {
    let root = cache_root();
    let dir = cache_dir();
    std::fs::create_dir_all(&root).map_err(|e| format!("cannot create the cache {}: {e}", root.display()))?;
    let lock_path = root.join(format!(".ort-{PINNED_ORT}.lock"));
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| format!("cannot open the lock {}: {e}", lock_path.display()))?;
    lock.lock().map_err(|e| format!("cannot lock {}: {e}", lock_path.display()))?;
    // Whoever held the lock before us may have installed it.
    if let Some(lib) = find_lib_in(&dir.join("onnxruntime").join("capi")) {
        return Ok(lib);
    }
    announce(&format!(
        "no ONNX Runtime installed; fetching onnxruntime=={PINNED_ORT} with pip into {} (once)",
        dir.display()
    ));
    // Scratch folders of fetches that were killed: nobody else holds the lock.
    let partial_prefix = format!(".ort-{PINNED_ORT}.partial-");
    for entry in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        if entry.file_name().to_string_lossy().starts_with(&partial_prefix) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let partial = root.join(format!("{partial_prefix}{}", std::process::id()));
    let log_path = root.join(format!("fetch-ort-{PINNED_ORT}.log"));
    let log = std::fs::File::create(&log_path).map_err(|e| format!("cannot write {}: {e}", log_path.display()))?;
    let log_err = log.try_clone().map_err(|e| format!("cannot write {}: {e}", log_path.display()))?;
    let status = Command::new("python3")
        .args(["-m", "pip", "install", "--no-input", "--disable-pip-version-check", "--no-deps", "--target"])
        .arg(&partial)
        .arg(format!("onnxruntime=={PINNED_ORT}"))
        .env("PIP_ROOT_USER_ACTION", "ignore")
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .status()
        .map_err(|e| format!("cannot run python3 -m pip: {e}"))?;
    let fail = |what: String| {
        let _ = std::fs::remove_dir_all(&partial);
        format!("{what}; pip's output is in {}", log_path.display())
    };
    if !status.success() {
        return Err(fail(format!("pip install onnxruntime=={PINNED_ORT} failed ({status})")));
    }
    if find_lib_in(&partial.join("onnxruntime").join("capi")).is_none() {
        return Err(fail(format!("pip installed onnxruntime=={PINNED_ORT} but it holds no {}", lib_name())));
    }
    // A folder without the library (an older, interrupted install) is replaced.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&partial, &dir)
        .map_err(|e| fail(format!("cannot move the install into {}: {e}", dir.display())))?;
    find_lib_in(&dir.join("onnxruntime").join("capi"))
        .ok_or_else(|| format!("onnxruntime was installed into {} but no {} is there", dir.display(), lib_name()))
}

/// The Python that owns this executable first (a wheel installs us into a
/// virtualenv's `bin/` beside its `python3`, whose onnxruntime we want even
/// when the venv is not activated), then `python3` on PATH.
fn python_candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(dir) = std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf)) {
        for name in ["python3", "python", "python.exe"] {
            let p = dir.join(name);
            if p.is_file() {
                out.push(p);
            }
        }
    }
    out.push(PathBuf::from("python3"));
    out
}

fn python_package_dir() -> Option<PathBuf> {
    python_candidates().into_iter().find_map(|py| package_dir_of(&py))
}

fn package_dir_of(python: &Path) -> Option<PathBuf> {
    // `find_spec` locates the package without importing it (importing loads numpy).
    let out = Command::new(python)
        .args([
            "-c",
            "import importlib.util as u, os; s = u.find_spec('onnxruntime'); print(os.path.dirname(s.origin) if s and s.origin else '')",
        ])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let dir = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!dir.is_empty()).then(|| PathBuf::from(dir))
}

fn system_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> =
        std::env::var_os("LD_LIBRARY_PATH").map(|v| std::env::split_paths(&v).collect()).unwrap_or_default();
    dirs.extend(
        ["/usr/local/lib", "/usr/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu"].map(PathBuf::from),
    );
    dirs
}

/// `libonnxruntime.so`, or the highest `libonnxruntime.so.<version>` (wheels
/// ship only the versioned name).
pub fn find_lib_in(dir: &Path) -> Option<PathBuf> {
    let plain = dir.join(lib_name());
    if plain.is_file() {
        return Some(plain);
    }
    let mut versioned: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let rest = name.strip_prefix(&format!("{}.", lib_name()))?;
            let version: Vec<u32> = rest.split('.').map(|p| p.parse().ok()).collect::<Option<_>>()?;
            Some((version, e.path()))
        })
        .collect();
    versioned.sort();
    versioned.pop().map(|(_, p)| p)
}

fn lib_name() -> &'static str {
    if cfg!(target_os = "macos") {
        "libonnxruntime.dylib"
    } else if cfg!(windows) {
        "onnxruntime.dll"
    } else {
        "libonnxruntime.so"
    }
}

/// `1.31.1` from `libonnxruntime.so.1.31.1`, when the name says it.
pub fn version_from_name(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_string_lossy().into_owned();
    let rest = name.strip_prefix(&format!("{}.", lib_name()))?;
    rest.split('.').all(|p| p.parse::<u32>().is_ok()).then(|| rest.to_string())
}
