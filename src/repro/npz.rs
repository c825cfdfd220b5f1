//! NumPy's `.npz`: a zip of `.npy` files, stored uncompressed, as
//! `np.savez` writes it; `np.load` reads it back with its dtypes and shapes.

use crate::model::signature::ElemType;
use crate::repro::raw::Raw;
use std::io::Write;
use std::path::Path;

/// NumPy's `descr` for an element type (bfloat16 has none).
fn descr(t: ElemType) -> Option<&'static str> {
    let ElemType::Known(name) = t else { return None };
    Some(match name {
        "float32" => "<f4",
        "float16" => "<f2",
        "float64" => "<f8",
        "int64" => "<i8",
        "int32" => "<i4",
        "int16" => "<i2",
        "int8" => "|i1",
        "uint8" => "|u1",
        "uint16" => "<u2",
        "uint32" => "<u4",
        "uint64" => "<u8",
        "bool" => "|b1",
        _ => return None,
    })
}

/// One `.npy` file (format 1.0; the header padded so the data is 64-byte aligned).
pub(crate) fn npy(t: &Raw) -> Result<Vec<u8>, String> {
    let d = descr(t.dtype).ok_or_else(|| format!("`{}`: NumPy has no {} type", t.name, t.dtype))?;
    let shape: Vec<usize> = t.shape.iter().map(|&d| usize::try_from(d).unwrap_or(0)).collect();
    Ok(crate::engine::npy::encode(d, &shape, &t.data))
}

/// Writes `tensors` to `path` as `input_0.npy`, `input_1.npy`, … in order
/// (tensor names hold `/` and `:`, which are not file names; the script maps
/// them back by the model's input order).
pub(crate) fn write(path: &Path, tensors: &[Raw]) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let file = std::fs::File::create(path).map_err(|e| err(&e))?;
    let mut zip = zip::ZipWriter::new(file);
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .large_file(tensors.iter().map(|t| t.data.len()).sum::<usize>() > u32::MAX as usize / 2);
    for (k, t) in tensors.iter().enumerate() {
        zip.start_file(format!("input_{k}.npy"), opts).map_err(|e| err(&e))?;
        zip.write_all(&npy(t)?).map_err(|e| err(&e))?;
    }
    zip.finish().map_err(|e| err(&e))?;
    Ok(())
}
