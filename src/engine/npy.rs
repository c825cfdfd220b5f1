//! NumPy's `.npy` (C order): read as float32 or float64 — the audio
//! features a reference generation feeds an encoder, as `np.save` writes
//! them — and written, for the features every consumer and the reference
//! are fed alike and for a reproduction's captured inputs.

use ndarray::{ArrayD, IxDyn};
use std::path::Path;

/// The array in `path`, as f32.
pub(crate) fn read_f32(path: &Path) -> Result<ArrayD<f32>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    parse(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// One `.npy` file of `descr` (NumPy's type string, `<f4`) and `shape`
/// holding `data` (format 1.0; the header padded so the data is 64-byte aligned).
pub(crate) fn encode(descr: &str, shape: &[usize], data: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    out.extend(data);
    out
}

/// Writes `values` of `shape` to `path` as float32.
pub(crate) fn write_f32(path: &Path, shape: &[usize], values: &[f32]) -> Result<(), String> {
    let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(path, encode("<f4", shape, &data)).map_err(|e| format!("{}: cannot write: {e}", path.display()))
}

fn parse(bytes: &[u8]) -> Result<ArrayD<f32>, String> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err("not a .npy file (no \\x93NUMPY magic)".into());
    }
    let (header_len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12),
        v => return Err(format!("unsupported .npy version {v}")),
    };
    let header = bytes.get(start..start + header_len).ok_or("truncated .npy header")?;
    let header = std::str::from_utf8(header).map_err(|_| "the .npy header is not text")?;
    let field = |key: &str| header.split(&format!("'{key}':")).nth(1).map(str::trim);
    let descr = field("descr").and_then(|d| d.split('\'').nth(1)).ok_or("no descr in the .npy header")?;
    if field("fortran_order").is_some_and(|f| f.starts_with("True")) {
        return Err("Fortran-ordered arrays are not supported: save with np.ascontiguousarray".into());
    }
    let shape_text =
        field("shape").and_then(|s| s.strip_prefix('(')).and_then(|s| s.split(')').next()).ok_or("no shape")?;
    let shape: Vec<usize> = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| format!("bad dim `{s}`")))
        .collect::<Result<_, _>>()?;
    let data = &bytes[start + header_len..];
    let n: usize = shape.iter().product();
    let values: Vec<f32> = match descr {
        "<f4" if data.len() >= n * 4 => {
            data.chunks_exact(4).take(n).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
        }
        "<f8" if data.len() >= n * 8 => {
            data.chunks_exact(8).take(n).map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")) as f32).collect()
        }
        "<f4" | "<f8" => return Err(format!("truncated: {n} values declared")),
        other => return Err(format!("dtype `{other}` is not float32 or float64")),
    };
    ArrayD::from_shape_vec(IxDyn(&shape), values).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_what_numpy_writes_and_refuses_the_rest() {
        // np.save of np.arange(6, dtype=np.float32).reshape(2, 3)
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
        let padded = format!("{header:<117}\n");
        bytes.extend((padded.len() as u16).to_le_bytes());
        bytes.extend(padded.as_bytes());
        for v in 0..6 {
            bytes.extend((v as f32).to_le_bytes());
        }
        let a = super::parse(&bytes).unwrap();
        assert_eq!(a.shape(), &[2, 3]);
        assert_eq!(a[[1, 2]], 5.0);
        let written = super::encode("<f4", &[2, 3], &bytes[bytes.len() - 24..]);
        assert_eq!((written.len() - 24) % 64, 0, "data 64-byte aligned");
        assert_eq!(super::parse(&written).unwrap(), a);
        assert!(super::parse(b"nope").unwrap_err().contains("magic"));
        assert!(super::parse(&bytes[..bytes.len() - 4]).unwrap_err().contains("truncated"));
    }
}
