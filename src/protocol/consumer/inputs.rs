//! The non-text input a consumer's own generation and the tool's reference
//! are fed alike — an audio encoder-decoder's features, an image-text
//! model's pixels — made once, seeded, in a `.npy` in the system's
//! temporary folder (never the export's), so the tokens each consumer
//! generates are compared on the same sound or image.

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
pub(super) fn audio(view: &View<'_>) -> Option<(String, Vec<usize>)> {
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

/// The most values a seeded input holds (256 MB of float32): a minute of
/// 16 kHz audio, Whisper's 30 s of frames and a 4k image are far below it.
const MAX_VALUES: usize = 1 << 26;

/// Seeded standard-normal values of `shape` (`what`: audio, image), written
/// to a new `.npy` in the system's temporary folder: its path (the caller removes it).
pub(super) fn write(what: &str, shape: &[usize]) -> Result<PathBuf, String> {
    let path = std::env::temp_dir().join(format!("onnx-contract-{what}-{}-{}.npy", std::process::id(), super::seq()));
    // A graph or config states these sizes: an absurd one is refused, not allocated.
    let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).filter(|n| *n <= MAX_VALUES);
    let n = n.ok_or_else(|| format!("{what} input of shape {shape:?} is larger than {MAX_VALUES} values"))?;
    let mut rng = crate::engine::feeds::Rng::seeded(0);
    let values: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
    crate::engine::npy::write_f32(&path, shape, &values)?;
    Ok(path)
}

/// An image-text model's image as an application feeds it, when the
/// folder states enough to build one.
pub(super) struct ImageInput {
    /// The prompt: a first token, the image's tokens, three text tokens.
    pub(super) ids: Vec<i64>,
    /// The vision encoder (relative to the folder) and its pixel input.
    pub(super) encoder: String,
    pub(super) input: String,
    /// `[1, channels, height, width]`.
    pub(super) shape: Vec<usize>,
    pub(super) token: i64,
}

/// The image a Llava-style folder is fed: one vision encoder taking only
/// pixels (`[batch, channels, height, width]`, the sizes the graph fixes or
/// config.json's `vision_config`), a prompt holding `image_seq_length`
/// image tokens (`image_token_index`), positions of one row (a model whose
/// rotary positions come from the image's grid, Qwen2-VL, is not built here).
pub(super) fn image(view: &View<'_>, vocab: i64) -> Option<ImageInput> {
    let config = view.config.as_ref()?;
    let token = config.get("image_token_index").or_else(|| config.get("image_token_id"))?.as_i64()?;
    let rows = usize::try_from(config.get("image_seq_length")?.as_i64()?).ok().filter(|n| *n > 0 && *n <= 4096)?;
    let rank3_positions = view.models.iter().any(|m| {
        m.sig
            .inputs
            .iter()
            .any(|i| i.name == "position_ids" && i.ty.tensor_parts().and_then(|(_, d)| d).is_some_and(|d| d.len() == 3))
    });
    let encoder = view.models.iter().find(|m| m.role == Role::VisionEncoder)?;
    let [input] = encoder.sig.inputs.as_slice() else { return None };
    let dims = input.ty.tensor_parts().filter(|(e, _)| e.is_float())?.1?;
    if rank3_positions || dims.len() != 4 {
        return None;
    }
    let vision = config.get("vision_config");
    let stated = |k: &str| {
        vision.and_then(|v| v.get(k)).and_then(serde_json::Value::as_u64).and_then(|v| usize::try_from(v).ok())
    };
    let fixed = |d: &Dim| if let Dim::Fixed(v) = d { usize::try_from(*v).ok().filter(|v| *v > 0) } else { None };
    let shape = vec![
        1,
        fixed(&dims[1]).or_else(|| stated("num_channels")).unwrap_or(3),
        fixed(&dims[2]).or_else(|| stated("image_size"))?,
        fixed(&dims[3]).or_else(|| stated("image_size"))?,
    ];
    let text = |t: i64| t % vocab.max(1);
    let ids = [vec![text(1)], vec![token; rows], vec![text(3), text(14), text(15)]].concat();
    Some(ImageInput { ids, encoder: encoder.rel.to_string(), input: input.name.clone(), shape, token })
}

#[cfg(test)]
mod tests {
    #[test]
    fn seeded_inputs_are_written_once_read_alike_and_absurd_sizes_refused() {
        let path = super::write("test", &[1, 2, 3]).unwrap();
        let a = crate::engine::npy::read_f32(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(a.shape(), &[1, 2, 3]);
        let again = super::write("test", &[1, 2, 3]).unwrap();
        assert_eq!(crate::engine::npy::read_f32(&again).unwrap(), a, "seeded: the same values every time");
        std::fs::remove_file(&again).unwrap();
        for absurd in [vec![1, 3, 1 << 20, 1 << 20], vec![usize::MAX, 2]] {
            assert!(super::write("test", &absurd).unwrap_err().contains("is larger than"), "{absurd:?}");
        }
    }
}
