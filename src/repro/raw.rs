//! Tensors as their bytes: what a reproduction captures from the real run
//! and writes to its `.npz`, kept in the model's own element type (a float16
//! value that overflows must stay the float16 it was, not a widened f32).

use crate::engine::feeds::{Feed, Values};
use crate::model::signature::ElemType;
use half::{bf16, f16};
use ort::session::Session;
use ort::value::{DynValue, Tensor};

/// A tensor's name, element type, shape and little-endian bytes.
#[derive(Clone, Debug)]
pub(crate) struct Raw {
    pub(crate) name: String,
    pub(crate) dtype: ElemType,
    pub(crate) shape: Vec<i64>,
    pub(crate) data: Vec<u8>,
}

macro_rules! each_type {
    ($m:ident) => {
        $m!(f32, "float32");
        $m!(f16, "float16");
        $m!(bf16, "bfloat16");
        $m!(f64, "float64");
        $m!(i64, "int64");
        $m!(i32, "int32");
        $m!(i16, "int16");
        $m!(i8, "int8");
        $m!(u8, "uint8");
        $m!(u16, "uint16");
        $m!(u32, "uint32");
        $m!(u64, "uint64");
    };
}

impl Raw {
    /// A feed as the element type the model declares for it.
    pub(crate) fn of_feed(f: &Feed) -> Raw {
        let shape = f.shape();
        let data: Vec<u8> = match (&f.values, f.elem) {
            (Values::Float(a), e) if e == ElemType::F16 => {
                a.iter().flat_map(|v| f16::from_f32(*v).to_le_bytes()).collect()
            }
            (Values::Float(a), e) if e == ElemType::BF16 => {
                a.iter().flat_map(|v| bf16::from_f32(*v).to_le_bytes()).collect()
            }
            (Values::Float(a), e) if e == ElemType::F64 => a.iter().flat_map(|v| f64::from(*v).to_le_bytes()).collect(),
            (Values::Float(a), _) => a.iter().flat_map(|v| v.to_le_bytes()).collect(),
            (Values::Int(a), e) if e == ElemType::I32 => a.iter().flat_map(|v| (*v as i32).to_le_bytes()).collect(),
            (Values::Int(a), _) => a.iter().flat_map(|v| v.to_le_bytes()).collect(),
            (Values::Bool(a), _) => a.iter().map(|v| u8::from(*v)).collect(),
        };
        Raw { name: f.name.clone(), dtype: f.elem, shape, data }
    }

    /// The value ONNX Runtime reads.
    pub(crate) fn value(&self) -> Result<DynValue, String> {
        let shape: Vec<i64> = self.shape.clone();
        macro_rules! build {
            ($t:ty, $name:literal) => {
                if self.dtype == ElemType::Known($name) {
                    let n = std::mem::size_of::<$t>();
                    let v: Vec<$t> = self
                        .data
                        .chunks_exact(n)
                        .map(|c| <$t>::from_le_bytes(c.try_into().expect("chunk of the type's size")))
                        .collect();
                    return Tensor::from_array((shape, v)).map(|t| t.into_dyn()).map_err(|e| e.to_string());
                }
            };
        }
        each_type!(build);
        if self.dtype == ElemType::BOOL {
            let v: Vec<bool> = self.data.iter().map(|b| *b != 0).collect();
            return Tensor::from_array((shape, v)).map(|t| t.into_dyn()).map_err(|e| e.to_string());
        }
        Err(format!("`{}`: {} tensors cannot be fed here", self.name, self.dtype))
    }

    /// The tensor ONNX Runtime returned, in its own type.
    pub(crate) fn of_value(name: &str, v: &DynValue) -> Result<Raw, String> {
        macro_rules! take {
            ($t:ty, $name:literal) => {
                if let Ok((shape, data)) = v.try_extract_tensor::<$t>() {
                    return Ok(Raw {
                        name: name.to_string(),
                        dtype: ElemType::Known($name),
                        shape: shape.iter().copied().collect(),
                        data: data.iter().flat_map(|x| x.to_le_bytes()).collect(),
                    });
                }
            };
        }
        each_type!(take);
        if let Ok((shape, data)) = v.try_extract_tensor::<bool>() {
            return Ok(Raw {
                name: name.to_string(),
                dtype: ElemType::BOOL,
                shape: shape.iter().copied().collect(),
                data: data.iter().map(|b| u8::from(*b)).collect(),
            });
        }
        Err(format!("`{name}`: an output of a type this tool does not read"))
    }

    /// Every element widened to f64 (`None` for non-float types).
    pub(crate) fn floats(&self) -> Option<Vec<f64>> {
        let d = &self.data;
        Some(match self.dtype {
            e if e == ElemType::F32 => {
                d.chunks_exact(4).map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect()
            }
            e if e == ElemType::F16 => d.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]]).to_f64()).collect(),
            e if e == ElemType::BF16 => d.chunks_exact(2).map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f64()).collect(),
            e if e == ElemType::F64 => {
                d.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes"))).collect()
            }
            _ => return None,
        })
    }
}

/// Runs `session` on `feeds`, every output returned as its bytes.
pub(crate) fn run(session: &mut Session, feeds: &[Raw]) -> Result<Vec<Raw>, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut inputs: Vec<(String, DynValue)> = Vec::with_capacity(feeds.len());
        for f in feeds {
            inputs.push((f.name.clone(), f.value()?));
        }
        let outputs = session.run(inputs).map_err(|e| e.to_string())?;
        outputs.iter().map(|(name, v)| Raw::of_value(name, &v)).collect()
    }))
    .unwrap_or_else(|_| Err("ONNX Runtime returned something the ort crate could not read".into()))
}
