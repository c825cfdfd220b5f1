//! The helper functions an emitted Rust program carries, by what the
//! export needs: float or float16 caches, a buffer the caller keeps, an
//! embedding model, audio features read from a `.npy` file.

/// The buffer after a call whose presents are only the new rows.
pub(super) const KEPT: &str = r#"/// The buffer after a call: the new rows (the present) written at `at`, or
/// appended after dropping as many of the oldest (`KEEP` is "roll").
fn keep_rows(buf: &DynValue, rows: &DynValue, at: usize) -> Result<DynValue, Box<dyn Error>> {
    let mut b = buf.try_extract_array::<f32>()?.to_owned();
    let r = rows.try_extract_array::<f32>()?;
    let (len, n) = (b.shape()[SEQ_AXIS], r.shape()[SEQ_AXIS]);
    let at = if KEEP == "roll" {
        let older = b.slice_axis(Axis(SEQ_AXIS), ndarray::Slice::from(n..)).to_owned();
        b.slice_axis_mut(Axis(SEQ_AXIS), ndarray::Slice::from(..len - n)).assign(&older);
        len - n
    } else {
        at
    };
    b.slice_axis_mut(Axis(SEQ_AXIS), ndarray::Slice::from(at..at + n)).assign(&r);
    Ok(Tensor::from_array(b)?.into_dyn())
}

"#;

pub(super) const FLOAT_HELPERS: &str = r#"fn element(_dtype: &str) -> TensorElementType {
    TensorElementType::Float32
}

fn zeros(_dtype: &str, shape: &[usize]) -> Result<DynValue, Box<dyn Error>> {
    Ok(Tensor::from_array(ArrayD::<f32>::zeros(IxDyn(shape)))?.into_dyn())
}

/// The rows of a float tensor at `origin` (a beam's cache follows its origin).
fn rows(v: &DynValue, origin: &[usize]) -> Result<DynValue, Box<dyn Error>> {
    Ok(Tensor::from_array(v.try_extract_array::<f32>()?.select(Axis(0), origin))?.into_dyn())
}

/// The logits of every row at the last position.
fn last_rows(v: &DynValue) -> Result<Vec<Vec<f64>>, Box<dyn Error>> {
    let a = v.try_extract_array::<f32>()?;
    let last = a.shape()[1] - 1;
    Ok(a.outer_iter().map(|r| r.index_axis(Axis(0), last).iter().map(|&x| f64::from(x)).collect()).collect())
}

"#;

pub(super) const HALF_HELPERS: &str = r#"fn element(dtype: &str) -> TensorElementType {
    if dtype == "float16" { TensorElementType::Float16 } else { TensorElementType::Float32 }
}

fn zeros(dtype: &str, shape: &[usize]) -> Result<DynValue, Box<dyn Error>> {
    Ok(if dtype == "float16" {
        Tensor::from_array(ArrayD::from_elem(IxDyn(shape), half::f16::ZERO))?.into_dyn()
    } else {
        Tensor::from_array(ArrayD::<f32>::zeros(IxDyn(shape)))?.into_dyn()
    })
}

fn is_half(v: &DynValue) -> bool {
    v.dtype().tensor_type() == Some(TensorElementType::Float16)
}

/// The rows of a float tensor at `origin` (a beam's cache follows its origin).
fn rows(v: &DynValue, origin: &[usize]) -> Result<DynValue, Box<dyn Error>> {
    Ok(if is_half(v) {
        Tensor::from_array(v.try_extract_array::<half::f16>()?.select(Axis(0), origin))?.into_dyn()
    } else {
        Tensor::from_array(v.try_extract_array::<f32>()?.select(Axis(0), origin))?.into_dyn()
    })
}

/// The logits of every row at the last position.
fn last_rows(v: &DynValue) -> Result<Vec<Vec<f64>>, Box<dyn Error>> {
    let a: ArrayD<f64> = if is_half(v) {
        v.try_extract_array::<half::f16>()?.mapv(|x| f64::from(x.to_f32()))
    } else {
        v.try_extract_array::<f32>()?.mapv(f64::from)
    };
    let last = a.shape()[1] - 1;
    Ok(a.outer_iter().map(|r| r.index_axis(Axis(0), last).iter().copied().collect()).collect())
}

"#;

pub(super) const EMBED_HELPER: &str = r#"/// The embedding model's output for the tokens of a call.
fn embeds(embed: &mut Session, part: &[Vec<i64>]) -> Result<DynValue, Box<dyn Error>> {
    let input = embed.inputs()[0].name().to_string();
    let t = if embed.inputs()[0].dtype().tensor_type() == Some(TensorElementType::Int32) { "int32" } else { "int64" };
    let ids = ints(t, &[part.len(), part[0].len()], part.concat())?;
    let output = embed.outputs()[0].name().to_string();
    let mut out = embed.run(vec![(input, SessionInputValue::from(ids))])?;
    Ok(out.remove(&output).ok_or("no embeddings")?)
}

"#;

pub(super) const NPY_HELPER: &str = r#"/// A float32 C-order .npy file (as np.save writes it), a batch axis added when it has none.
fn npy(path: &PathBuf, rank: usize) -> Result<DynValue, Box<dyn Error>> {
    let bytes = std::fs::read(path)?;
    let hlen = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let header = std::str::from_utf8(&bytes[10..10 + hlen])?;
    let shape_text = header.split("'shape': (").nth(1).and_then(|s| s.split(')').next()).ok_or("no shape")?;
    let mut shape: Vec<usize> = shape_text.split(',').filter(|s| !s.trim().is_empty()).map(|s| s.trim().parse()).collect::<Result<_, _>>()?;
    if shape.len() + 1 == rank {
        shape.insert(0, 1);
    }
    let data: Vec<f32> = bytes[10 + hlen..].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    Ok(Tensor::from_array(ArrayD::from_shape_vec(IxDyn(&shape), data)?)?.into_dyn())
}

"#;
