//! Feeds and outputs as owned arrays, and one run of a session with them.

use super::events::TensorInfo;
use ndarray::{ArrayD, IxDyn};
use ort::session::Session;
use ort::value::{DynValue, Tensor};
use std::collections::HashMap;

#[derive(Clone)]
pub(crate) enum Feed {
    F32(ArrayD<f32>),
    I64(ArrayD<i64>),
    I32(ArrayD<i32>),
    Bool(ArrayD<bool>),
}

impl Feed {
    pub(crate) fn info(&self, name: &str) -> TensorInfo {
        let (dtype, shape) = match self {
            Feed::F32(a) => ("float32", a.shape()),
            Feed::I64(a) => ("int64", a.shape()),
            Feed::I32(a) => ("int32", a.shape()),
            Feed::Bool(a) => ("bool", a.shape()),
        };
        TensorInfo {
            name: name.to_string(),
            dtype: dtype.into(),
            shape: Some(shape.iter().map(|&d| d as i64).collect()),
        }
    }

    pub(crate) fn value(&self) -> ort::Result<DynValue> {
        Ok(match self {
            Feed::F32(a) => Tensor::from_array(a.clone())?.into_dyn(),
            Feed::I64(a) => Tensor::from_array(a.clone())?.into_dyn(),
            Feed::I32(a) => Tensor::from_array(a.clone())?.into_dyn(),
            Feed::Bool(a) => Tensor::from_array(a.clone())?.into_dyn(),
        })
    }

    /// Integer inputs follow the model's declared dtype.
    pub(crate) fn ints(values: Vec<i64>, shape: &[usize], dtype: &str) -> Feed {
        let a = ArrayD::from_shape_vec(IxDyn(shape), values).expect("shape matches values");
        if dtype == "int32" {
            Feed::I32(a.mapv(|v| v as i32))
        } else {
            Feed::I64(a)
        }
    }
}

/// xorshift64*: reproducible inputs without a dependency.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub(crate) fn below(&mut self, n: i64) -> i64 {
        (self.next() % n.max(1) as u64) as i64
    }
    /// Standard normal (Box-Muller).
    pub(crate) fn normal(&mut self) -> f32 {
        let u1 = ((self.next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        let u2 = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
    }
}

/// Outputs of one run, copied out of the runtime.
pub(crate) struct Outputs {
    pub(crate) f32s: HashMap<String, ArrayD<f32>>,
    pub(crate) infos: Vec<TensorInfo>,
}

/// Our dtype names (`float32`), not ort's short ones (`f32`).
fn dtype_name(v: &DynValue) -> String {
    match v.dtype() {
        ort::value::ValueType::Tensor { ty, .. } => {
            let short = format!("{ty}");
            match short.as_str() {
                "f32" => "float32",
                "f16" => "float16",
                "bf16" => "bfloat16",
                "f64" => "float64",
                "i64" => "int64",
                "i32" => "int32",
                "i16" => "int16",
                "i8" => "int8",
                "u64" => "uint64",
                "u32" => "uint32",
                "u16" => "uint16",
                "u8" => "uint8",
                _ => return short,
            }
            .to_string()
        }
        other => format!("{other}"),
    }
}

pub(crate) fn run(session: &mut Session, feeds: &[(String, Feed)]) -> Result<Outputs, String> {
    let mut inputs: Vec<(String, DynValue)> = Vec::with_capacity(feeds.len());
    for (name, f) in feeds {
        inputs.push((name.clone(), f.value().map_err(|e| format!("cannot build `{name}`: {e}"))?));
    }
    let outputs = session.run(inputs).map_err(|e| e.to_string())?;
    let mut f32s = HashMap::new();
    let mut infos = Vec::new();
    for (name, value) in outputs {
        let shape = match value.dtype() {
            ort::value::ValueType::Tensor { shape, .. } => Some(shape.iter().copied().collect::<Vec<i64>>()),
            _ => None,
        };
        infos.push(TensorInfo { name: name.to_string(), dtype: dtype_name(&value), shape });
        if let Ok(a) = value.try_extract_array::<f32>() {
            f32s.insert(name.to_string(), a.to_owned());
        }
    }
    Ok(Outputs { f32s, infos })
}

pub(crate) fn with_threads(
    builder: ort::Result<ort::session::builder::SessionBuilder>,
    threads: usize,
) -> ort::Result<ort::session::builder::SessionBuilder> {
    match threads {
        0 => builder,
        n => builder.and_then(|b| Ok(b.with_intra_threads(n)?)),
    }
}
