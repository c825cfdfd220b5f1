//! Reads a NumPy `.npy` file of float32 or float64 (C order): the audio
//! features a reference generation feeds an encoder, as `np.save` writes them.

use ndarray::{ArrayD, IxDyn};
use std::path::Path;

/// The array in `path`, as f32.
pub(crate) fn read_f32(path: &Path) -> Result<ArrayD<f32>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    parse(&bytes).map_err(|e| format!("{}: {e}", path.display()))
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
        assert!(super::parse(b"nope").unwrap_err().contains("magic"));
        assert!(super::parse(&bytes[..bytes.len() - 4]).unwrap_err().contains("truncated"));
    }
}
