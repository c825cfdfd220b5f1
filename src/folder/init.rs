//! `init DIR`: a contract for every ONNX file of a folder, written from the
//! file itself (so each passes its own model).

use super::discover::discover;
use crate::contract::init::init;
use std::path::Path;

/// `(relative path, contract text)` for every ONNX file of `dir`.
pub fn init_all(dir: &Path) -> Result<Vec<(String, String)>, crate::error::Error> {
    let mut out = Vec::new();
    for f in discover(dir)? {
        let sig = crate::model::reader::read_signature(&f.path)?;
        out.push((f.rel.clone(), init(&sig, &f.path.display().to_string())));
    }
    Ok(out)
}
