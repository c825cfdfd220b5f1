//! The only place feeds meet ONNX Runtime: a feed becomes a value of the
//! model's declared element type, a run's outputs come back widened to f32.

use crate::engine::events::TensorInfo;
use crate::engine::feeds::{Feed, Outputs, Values};
use crate::model::signature::ElemType;
use half::{bf16, f16};
use ndarray::ArrayD;
use ort::session::Session;
use ort::value::{DynValue, Tensor, TensorElementType, ValueType};
use std::collections::HashMap;

fn value(feed: &Feed) -> Result<DynValue, String> {
    let bad = |what: &str| format!("`{}` is declared {} but fed {what}", feed.name, feed.elem);
    let v = match (&feed.values, feed.elem) {
        (Values::Float(a), e) if e == ElemType::F32 => Tensor::from_array(a.clone()).map(|t| t.into_dyn()),
        (Values::Float(a), e) if e == ElemType::F16 => Tensor::from_array(a.mapv(f16::from_f32)).map(|t| t.into_dyn()),
        (Values::Float(a), e) if e == ElemType::BF16 => {
            Tensor::from_array(a.mapv(bf16::from_f32)).map(|t| t.into_dyn())
        }
        (Values::Float(a), e) if e == ElemType::F64 => Tensor::from_array(a.mapv(f64::from)).map(|t| t.into_dyn()),
        (Values::Float(_), _) => return Err(bad("floats")),
        (Values::Int(a), e) if e == ElemType::I64 => Tensor::from_array(a.clone()).map(|t| t.into_dyn()),
        (Values::Int(a), e) if e == ElemType::I32 => Tensor::from_array(a.mapv(|v| v as i32)).map(|t| t.into_dyn()),
        (Values::Int(_), _) => return Err(bad("integers")),
        (Values::Bool(a), e) if e == ElemType::BOOL => Tensor::from_array(a.clone()).map(|t| t.into_dyn()),
        (Values::Bool(_), _) => return Err(bad("a bool")),
    };
    v.map_err(|e| format!("cannot build `{}`: {e}", feed.name))
}

/// Our element type for ort's.
fn elem(ty: &TensorElementType) -> ElemType {
    match ty {
        TensorElementType::Float32 => ElemType::F32,
        TensorElementType::Float16 => ElemType::F16,
        TensorElementType::Bfloat16 => ElemType::BF16,
        TensorElementType::Float64 => ElemType::F64,
        TensorElementType::Int64 => ElemType::I64,
        TensorElementType::Int32 => ElemType::I32,
        TensorElementType::Int16 => ElemType::Known("int16"),
        TensorElementType::Int8 => ElemType::Known("int8"),
        TensorElementType::Uint64 => ElemType::Known("uint64"),
        TensorElementType::Uint32 => ElemType::Known("uint32"),
        TensorElementType::Uint16 => ElemType::Known("uint16"),
        TensorElementType::Uint8 => ElemType::Known("uint8"),
        TensorElementType::Bool => ElemType::BOOL,
        TensorElementType::String => ElemType::Known("string"),
        _ => ElemType::Undefined,
    }
}

/// Any float output as f32 (parity and argmax are computed wider later).
fn widened(v: &DynValue) -> Option<ArrayD<f32>> {
    if let Ok(a) = v.try_extract_array::<f32>() {
        return Some(a.to_owned());
    }
    if let Ok(a) = v.try_extract_array::<f16>() {
        return Some(a.mapv(f16::to_f32));
    }
    if let Ok(a) = v.try_extract_array::<bf16>() {
        return Some(a.mapv(bf16::to_f32));
    }
    if let Ok(a) = v.try_extract_array::<f64>() {
        return Some(a.mapv(|x| x as f32));
    }
    None
}

/// One run with `feeds`; every output's type and shape, floats copied out.
/// A panic inside `ort` (a value it cannot read) is an error of this run,
/// not the end of the whole check.
pub(crate) fn run(session: &mut Session, feeds: &[Feed]) -> Result<Outputs, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_unguarded(session, feeds))).unwrap_or_else(|p| {
        let what = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(format!("ONNX Runtime returned something the ort crate could not read ({what})"))
    })
}

fn run_unguarded(session: &mut Session, feeds: &[Feed]) -> Result<Outputs, String> {
    let mut inputs: Vec<(String, DynValue)> = Vec::with_capacity(feeds.len());
    for f in feeds {
        inputs.push((f.name.clone(), value(f)?));
    }
    let outputs = session.run(inputs).map_err(|e| e.to_string())?;
    let mut floats = HashMap::new();
    let mut infos = Vec::new();
    for (name, value) in outputs {
        let (dtype, shape) = match value.dtype() {
            ValueType::Tensor { ty, shape, .. } => (elem(ty), Some(shape.iter().copied().collect::<Vec<i64>>())),
            _ => (ElemType::Undefined, None),
        };
        infos.push(TensorInfo { name: name.to_string(), dtype, shape });
        if let Some(a) = widened(&value) {
            floats.insert(name.to_string(), a);
        }
    }
    Ok(Outputs { floats, infos })
}

/// A session builder with `threads` intra-op threads (0: ONNX Runtime's default).
pub(crate) fn with_threads(
    builder: ort::Result<ort::session::builder::SessionBuilder>,
    threads: usize,
) -> ort::Result<ort::session::builder::SessionBuilder> {
    match threads {
        0 => builder,
        n => builder.and_then(|b| Ok(b.with_intra_threads(n)?)),
    }
}

/// `bytes`, an edited copy of the model file `model`, committed with its
/// external data resolved from the model's own folder: ONNX Runtime resolves
/// the locations of a model loaded from memory against the working
/// directory, and refuses them there ("escapes working directory").
pub(crate) fn commit_edited(
    builder: ort::Result<ort::session::builder::SessionBuilder>,
    bytes: &[u8],
    model: &std::path::Path,
) -> ort::Result<Session> {
    let dir = model.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    builder
        .and_then(|b| {
            Ok(b.with_config_entry("session.model_external_initializers_file_folder_path", dir.to_string_lossy())?)
        })
        .and_then(|mut b| b.commit_from_memory(bytes))
}

/// The declared inputs of a session: name and element type.
pub(crate) fn declared_inputs(session: &Session) -> Vec<(String, ElemType, Vec<i64>)> {
    session
        .inputs()
        .iter()
        .map(|i| match i.dtype() {
            ValueType::Tensor { ty, shape, .. } => (i.name().to_string(), elem(ty), shape.iter().copied().collect()),
            _ => (i.name().to_string(), ElemType::Undefined, Vec::new()),
        })
        .collect()
}
