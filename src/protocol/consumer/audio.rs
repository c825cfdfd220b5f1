//! An audio encoder-decoder's input, made once and fed alike to every
//! consumer's own program and to the tool's reference: seeded features in
//! a `.npy` in the system's temporary folder (never the export's), so the
//! tokens each consumer generates are compared on the same sound.

use crate::consumer::View;
use crate::folder::Role;
use crate::model::signature::Dim;
use std::path::PathBuf;

/// Samples fed to an encoder that reads raw audio (`[batch, samples]`,
/// Moonshine): one second at 16 kHz, the rate of every speech model in
/// transformers that reads samples.
const RAW_SAMPLES: i64 = 16_000;

/// The encoder's audio input: its name and the shape fed, `[1, …]`.
/// Log-mel frames (`[batch, bins, frames]`, Whisper) are fed at the sizes
/// the graph fixes (Whisper's encoder refuses other frame counts); raw
/// samples at [`RAW_SAMPLES`]. None when the folder has no such encoder.
pub(super) fn input(view: &View<'_>) -> Option<(String, Vec<usize>)> {
    let encoder = view.models.iter().find(|m| m.role == Role::Encoder)?;
    let floats: Vec<_> =
        encoder.sig.inputs.iter().filter(|p| p.ty.tensor_parts().is_some_and(|(e, _)| e.is_float())).collect();
    // One float input: an encoder fed images beside text, or several streams, is not this.
    let [input] = floats.as_slice() else { return None };
    let (_, dims) = input.ty.tensor_parts()?;
    let dims = dims?;
    let fixed = |d: &Dim| if let Dim::Fixed(v) = d { usize::try_from(*v).ok().filter(|v| *v > 0) } else { None };
    let shape: Vec<usize> = match dims.len() {
        3 => std::iter::once(Some(1)).chain(dims.iter().skip(1).map(fixed)).collect::<Option<_>>()?,
        2 => vec![1, fixed(&dims[1]).unwrap_or(RAW_SAMPLES as usize)],
        _ => return None,
    };
    Some((input.name.clone(), shape))
}

/// Seeded standard-normal features of `shape`, written to a new `.npy` in
/// the system's temporary folder: its path (the caller removes it).
pub(super) fn write(shape: &[usize]) -> Result<PathBuf, String> {
    let path = std::env::temp_dir().join(format!("onnx-contract-audio-{}-{}.npy", std::process::id(), super::seq()));
    let mut rng = crate::engine::feeds::Rng::seeded(0);
    let values: Vec<f32> = (0..shape.iter().product::<usize>()).map(|_| rng.normal()).collect();
    crate::engine::npy::write_f32(&path, shape, &values)?;
    Ok(path)
}
