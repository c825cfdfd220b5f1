//! The trace format: JSON Lines, one object per inference call the
//! application made, in call order:
//!
//! `{"call": 0, "model": "decoder_model_merged.onnx", "feeds": {"input_ids": {"dtype": "int64", "shape": [1, 1], "digest": "sha1:…", "value": [999]}, …}, "outputs": {…}, "error": "…", "time_ms": 1.2}`
//!
//! `digest` (optional) is any string equal exactly when dtype, shape and bytes
//! are equal; `value` (optional) the flat values of a small int/bool tensor;
//! `outputs` and `error` are optional.
//!
//! Format 2 starts with the header line `{"onnx_contract_trace": 2}` and adds
//! `rows` to tensors of rank 2 and more: one digest per index along the batch
//! axis, so a past whose rows are rows of an earlier present (a beam reorder,
//! a batch row dropped) is traced row by row. A trace without the header is
//! format 1 and reads as before. `python/onnx_contract_trace.py`
//! records it for onnxruntime users; [`Recorder`] for `ort` users.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// One tensor of a call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TensorRecord {
    /// Element type, numpy-style (`float32`, `int64`, `bool`).
    pub dtype: String,
    /// Shape.
    pub shape: Vec<i64>,
    /// Equal exactly when dtype, shape and bytes are equal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Format 2: one digest per row along axis 0 (rank 2 and more), each
    /// equal exactly when the rows' dtype, shape and bytes are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<Vec<String>>,
    /// Flat values of a small integer or bool tensor (flags, ids).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Vec<i64>>,
    /// A buffer the caller keeps, as a re-run showed it (never in a trace file).
    #[serde(skip)]
    pub kept: Option<Kept>,
}

/// What a re-run showed of a buffer the caller keeps itself (the model's
/// presents hold only the new rows), by hashing each update of it.
#[derive(Clone, Debug, PartialEq)]
pub enum Kept {
    /// The update a correct caller makes, in words.
    Right(String),
    /// Another update, or other values where a correct one's digest is known: in words.
    Wrong(String),
}

/// The trace format this library writes and the newest it reads.
pub const FORMAT: u32 = 2;

/// The first line of a format-2 trace.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    onnx_contract_trace: u32,
}

/// One inference call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Call {
    /// 0-based over the whole trace.
    pub call: usize,
    /// The model file's name as the application loaded it.
    pub model: String,
    /// What was fed.
    pub feeds: BTreeMap<String, TensorRecord>,
    /// What came back, when the run succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<BTreeMap<String, TensorRecord>>,
    /// ONNX Runtime's error, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Wall time of the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_ms: Option<f64>,
}

pub use crate::error::TraceError;

/// The longest line a trace may have: a call's JSON with small values is a
/// few KiB; a longer line is not a recorder's, and is not read into memory.
pub const MAX_LINE: usize = 16 << 20;

/// Every call of the trace at `path`; blank lines are skipped. Read line by
/// line, never more than [`MAX_LINE`] bytes of one line: a truncated,
/// binary or hostile file gets an error naming the line, not a hang.
pub fn read(path: &Path) -> Result<Vec<Call>, TraceError> {
    let err = |message: String| TraceError { path: path.to_path_buf(), line: None, message };
    let file = std::fs::File::open(path).map_err(|e| err(format!("cannot read: {e}")))?;
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        return Err(err("is a directory, not a trace file".into()));
    }
    parse(std::io::BufReader::new(file)).map_err(|(line, message)| TraceError {
        path: path.to_path_buf(),
        line,
        message,
    })
}

/// Every call of a trace read from `reader`; an error is the 1-based line
/// (when one is to blame) and what is wrong with it.
pub fn parse(mut reader: impl std::io::BufRead) -> Result<Vec<Call>, (Option<usize>, String)> {
    use std::io::{BufRead, Read};
    let mut calls = Vec::new();
    let mut buf = Vec::new();
    for number in 1.. {
        buf.clear();
        let read = reader
            .by_ref()
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|e| (Some(number), format!("cannot read: {e}")))?;
        if read == 0 {
            break;
        }
        if buf.len() > MAX_LINE {
            return Err((Some(number), format!("longer than {} MiB: not a trace line", MAX_LINE >> 20)));
        }
        let text = std::str::from_utf8(&buf)
            .map_err(|e| (Some(number), format!("not UTF-8 text (byte {})", e.valid_up_to())))?;
        if text.trim().is_empty() {
            continue;
        }
        if calls.is_empty() && text.trim_start().starts_with("{\"onnx_contract_trace\"") {
            let h: Header =
                serde_json::from_str(text).map_err(|e| (Some(number), format!("not a trace header: {e}")))?;
            if h.onnx_contract_trace == 0 || h.onnx_contract_trace > FORMAT {
                return Err((
                    Some(number),
                    format!(
                        "trace format {} (this onnx-contract reads formats 1 to {FORMAT}: a newer recorder wrote it)",
                        h.onnx_contract_trace
                    ),
                ));
            }
            continue;
        }
        let call: Call = serde_json::from_str(text).map_err(|e| (Some(number), format!("not a trace line: {e}")))?;
        let tensors = call.feeds.iter().chain(call.outputs.iter().flatten());
        for (name, t) in tensors {
            if t.shape.iter().any(|&d| d < 0) {
                return Err((Some(number), format!("`{name}` has shape {:?}: a negative size", t.shape)));
            }
            if let Some(rows) = &t.rows {
                if t.shape.len() < 2 {
                    return Err((
                        Some(number),
                        format!("`{name}` has row digests but rank {}: rows are recorded from rank 2", t.shape.len()),
                    ));
                }
                if rows.len() as i64 != t.shape[0] {
                    return Err((
                        Some(number),
                        format!(
                            "`{name}` has {} row digests for a batch of {} (shape {:?})",
                            rows.len(),
                            t.shape[0],
                            t.shape
                        ),
                    ));
                }
            }
        }
        calls.push(call);
    }
    if calls.is_empty() {
        return Err((None, "no calls in the trace".into()));
    }
    Ok(calls)
}

/// Records an `ort` application's calls as a trace (one line per call, flushed).
#[cfg(feature = "runtime")]
pub struct Recorder {
    out: std::io::BufWriter<std::fs::File>,
    next: usize,
}

#[cfg(feature = "runtime")]
impl Recorder {
    /// A new trace at `path` (truncated), in format [`FORMAT`].
    pub fn create(path: &Path) -> std::io::Result<Recorder> {
        use std::io::Write;
        let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
        writeln!(out, "{{\"onnx_contract_trace\": {FORMAT}}}")?;
        Ok(Recorder { out, next: 0 })
    }

    /// One call: the feeds, and the outputs or the error.
    pub fn record(
        &mut self,
        model: &str,
        feeds: &[(&str, &ort::value::DynValue)],
        result: Result<&ort::session::SessionOutputs<'_>, &ort::Error>,
    ) -> std::io::Result<()> {
        use std::io::Write;
        let mut call = Call {
            call: self.next,
            model: model.to_string(),
            feeds: feeds.iter().map(|(n, v)| (n.to_string(), describe(v))).collect(),
            outputs: None,
            error: None,
            time_ms: None,
        };
        match result {
            Ok(out) => call.outputs = Some(out.iter().map(|(n, v)| (n.to_string(), describe(&v))).collect()),
            Err(e) => call.error = Some(e.to_string()),
        }
        self.next += 1;
        writeln!(self.out, "{}", serde_json::to_string(&call).map_err(std::io::Error::other)?)?;
        self.out.flush()
    }
}

/// dtype, shape, digest (and small values) of a runtime value.
#[cfg(feature = "runtime")]
pub fn describe(v: &ort::value::DynValue) -> TensorRecord {
    use ort::value::ValueType;
    let (dtype, shape) = match v.dtype() {
        ValueType::Tensor { ty, shape, .. } => (ty.to_string(), shape.iter().copied().collect::<Vec<i64>>()),
        other => (other.to_string(), Vec::new()),
    };
    let dtype = match dtype.as_str() {
        "f32" => "float32",
        "f16" => "float16",
        "f64" => "float64",
        "i64" => "int64",
        "i32" => "int32",
        "bool" => "bool",
        other => other,
    }
    .to_string();
    use crate::engine::rows::digest_bytes;
    // The little-endian bytes (and small values) of the element types callers feed.
    let mut value = None;
    let bytes: Vec<u8> = if let Ok((_, data)) = v.try_extract_tensor::<f32>() {
        data.iter().flat_map(|x| x.to_le_bytes()).collect()
    } else if let Ok((_, data)) = v.try_extract_tensor::<i64>() {
        value = (data.len() <= SMALL).then(|| data.to_vec());
        data.iter().flat_map(|x| x.to_le_bytes()).collect()
    } else if let Ok((_, data)) = v.try_extract_tensor::<i32>() {
        value = (data.len() <= SMALL).then(|| data.iter().map(|&x| i64::from(x)).collect());
        data.iter().flat_map(|x| x.to_le_bytes()).collect()
    } else if let Ok((_, data)) = v.try_extract_tensor::<bool>() {
        value = (data.len() <= SMALL).then(|| data.iter().map(|&x| i64::from(x)).collect());
        data.iter().map(|x| u8::from(*x)).collect()
    } else if let Ok((_, data)) = v.try_extract_tensor::<half::f16>() {
        data.iter().flat_map(|x| x.to_le_bytes()).collect()
    } else {
        Vec::new()
    };
    let digest = digest_bytes(&dtype, &shape, &bytes);
    let rows = (shape.len() >= 2).then(|| {
        let n = usize::try_from(shape[0]).unwrap_or(0);
        let row_shape = &shape[1..];
        let per_row = bytes.len().checked_div(n).unwrap_or(0);
        (0..n).map(|i| digest_bytes(&dtype, row_shape, &bytes[i * per_row..(i + 1) * per_row])).collect()
    });
    TensorRecord { dtype, shape, digest: Some(digest), rows, value, kept: None }
}

/// Integer and bool tensors up to this many elements keep their values in
/// format 2 (the Python and JavaScript recorders' rule): token ids, masks and
/// positions of a prompt expanded per beam, for a re-run to reproduce.
#[cfg(feature = "runtime")]
const SMALL: usize = 4096;

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn committed_traces_read_and_bad_lines_name_file_and_line() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/traces");
        let calls = read(&dir.join("marian-correct.jsonl")).unwrap();
        assert_eq!(calls[0].model, "encoder_model.onnx");
        assert_eq!(calls[1].feeds["use_cache_branch"].value, Some(vec![0]));
        let tmp = std::env::temp_dir().join(format!("onnx-contract-trace-{}.jsonl", std::process::id()));
        std::fs::write(&tmp, "{\"call\": 0, \"model\": \"m.onnx\", \"feeds\": {}}\n{\"call\": 1,\n").unwrap();
        let e = read(&tmp).unwrap_err().to_string();
        assert!(e.contains(":2: not a trace line"), "{e}");
        std::fs::write(&tmp, "\n").unwrap();
        assert!(read(&tmp).unwrap_err().to_string().contains("no calls"));
        let _ = std::fs::remove_file(&tmp);
    }
}
