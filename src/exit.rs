//! Process exit codes. Stable: scripts and CI gates depend on them.
//! They never collide: a failed check (2) is not an internal error (1), and
//! the sysexits-style codes say what kind of input was wrong.

/// The model honours the contract (or the command succeeded).
pub const OK: i32 = 0;
/// A bug in onnx-contract itself.
pub const INTERNAL: i32 = 1;
/// The contract is violated (or `diff` found differences).
pub const VIOLATED: i32 = 2;
/// Bad command line (EX_USAGE).
pub const USAGE: i32 = 64;
/// The model file cannot be read as ONNX, or a caller trace cannot be read (EX_DATAERR).
pub const BAD_MODEL: i32 = 65;
/// ONNX Runtime cannot be found or loaded, or a run needs more than the
/// memory budget (EX_UNAVAILABLE): nothing was found wrong with the model.
pub const NO_RUNTIME: i32 = 69;
/// The contract file is invalid (EX_CONFIG).
pub const BAD_CONTRACT: i32 = 78;

/// For `--help`, README and the JSON report.
pub const TABLE: &str = "\
Exit codes:
   0  contract honoured (diff: no differences)
   2  contract violated (diff: models differ)
  64  usage error
  65  unreadable model (not ONNX, truncated, missing external data) or trace
  69  ONNX Runtime not found or not loadable, or a run larger than --max-memory
  78  invalid contract (YAML syntax, unknown keys, bad values)
   1  internal error";
