//! Token ids into embeddings, for decoders that take `inputs_embeds`
//! (transformers.js' image-text-to-text layout: `embed_tokens.onnx` is run
//! before every decoder call). Every feed builder stays in token ids; this
//! turns the `input_ids` feed into the decoder's embeddings just before a
//! run, so the cache run, the reference, the batch and the chunk checks all
//! go through the embedding model exactly as transformers.js does.

use crate::engine::feeds::{Feed, Rng, Values};
use crate::engine::session::{declared_inputs, run};
use crate::model::signature::ElemType;
use crate::plan::Plan;
use ndarray::{ArrayD, Axis, IxDyn};
use ort::session::Session;

/// Where embeddings come from.
pub(crate) enum Embedder {
    /// The folder's embedding model: its id input and its one output, and
    /// an image's feature rows spliced in at the image token.
    Model { session: Session, ids: String, ids_elem: ElemType, image: Option<Box<Spliced>> },
    /// No embedding model in the folder: a seeded vector per token id (the
    /// same id always gets the same vector, so the cached and the uncached
    /// runs are fed alike and parity stays a fair measure).
    Seeded { width: usize },
}

/// An image's features and the token whose places they take: a row's k-th
/// image token becomes feature row k, as transformers' `masked_scatter` and
/// transformers.js' `default_merge_input_ids_with_image_features` do. An
/// image token past the features (one the model generated) keeps its own
/// embedding: transformers.js merges only on its prompt call.
pub(crate) struct Spliced {
    pub(crate) token: i64,
    /// `[rows, width]`.
    pub(crate) features: ArrayD<f32>,
}

impl Spliced {
    fn apply(&self, ids: &ArrayD<i64>, v: &mut ArrayD<f32>) {
        let (rows, width) = (self.features.shape()[0], self.features.shape()[1]);
        let seq = ids.shape().last().copied().unwrap_or(0);
        if v.shape().last() != Some(&width) || seq == 0 {
            return;
        }
        let (Some(ids), Some(flat)) = (ids.as_slice(), self.features.as_slice()) else { return };
        let Some(out) = v.as_slice_mut() else { return };
        for (r, row) in ids.chunks(seq).enumerate() {
            let mut k = 0;
            for (j, id) in row.iter().enumerate() {
                if *id == self.token && k < rows {
                    let at = (r * seq + j) * width;
                    out[at..at + width].copy_from_slice(&flat[k * width..(k + 1) * width]);
                    k += 1;
                }
            }
        }
    }
}

impl Embedder {
    /// The embedder of a session on the folder's embedding model.
    pub(crate) fn model(session: Session) -> Result<Embedder, String> {
        let (ids, ids_elem, _) = declared_inputs(&session)
            .into_iter()
            .find(|(_, e, _)| *e == ElemType::I64 || *e == ElemType::I32)
            .ok_or("the embedding model has no integer token-id input")?;
        Ok(Embedder::Model { session, ids, ids_elem, image: None })
    }

    /// This embedder with `image` spliced into every prompt it embeds.
    pub(crate) fn with_image(mut self, spliced: Spliced) -> Embedder {
        if let Embedder::Model { image, .. } = &mut self {
            *image = Some(Box::new(spliced));
        }
        self
    }

    fn vectors(&mut self, ids: &ArrayD<i64>) -> Result<ArrayD<f32>, String> {
        match self {
            Embedder::Model { session, ids: name, ids_elem, image } => {
                let feed = Feed { name: name.clone(), elem: *ids_elem, values: Values::Int(ids.clone()) };
                let out = run(session, &[feed]).map_err(|e| format!("the embedding model failed: {e}"))?;
                let first = out.infos.first().map(|i| i.name.clone()).ok_or("the embedding model gave no output")?;
                let mut v = out
                    .floats
                    .get(&first)
                    .cloned()
                    .ok_or_else(|| format!("the embedding model's `{first}` is not float"))?;
                if let Some(image) = image {
                    image.apply(ids, &mut v);
                }
                Ok(v)
            }
            Embedder::Seeded { width } => {
                let mut shape = ids.shape().to_vec();
                shape.push(*width);
                let mut data = Vec::with_capacity(ids.len() * *width);
                for &id in ids.iter() {
                    let mut rng = Rng::seeded(0xe3bd ^ id as u64);
                    data.extend((0..*width).map(|_| rng.normal()));
                }
                Ok(ArrayD::from_shape_vec(IxDyn(&shape), data).expect("shape"))
            }
        }
    }

    /// `feeds` with the token-id feed replaced by the decoder's embeddings.
    pub(crate) fn embed(&mut self, plan: &Plan, feeds: Vec<Feed>) -> Result<Vec<Feed>, String> {
        let Some(target) = &plan.inputs_embeds else { return Ok(feeds) };
        feeds
            .into_iter()
            .map(|f| match &f.values {
                Values::Int(ids) if f.name == plan.input_ids => {
                    let v = self.vectors(ids)?;
                    // Rows of a 1-D id list stay rows: [batch, seq, width].
                    let v = if v.ndim() == 2 { v.insert_axis(Axis(0)) } else { v };
                    Ok(Feed { name: target.clone(), elem: plan.dtype_of(target), values: Values::Float(v) })
                }
                _ => Ok(f),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Spliced;
    use ndarray::{ArrayD, IxDyn};

    #[test]
    fn image_rows_take_the_image_tokens_places_in_order_and_no_more() {
        let features = ArrayD::from_shape_vec(IxDyn(&[2, 2]), vec![10.0, 11.0, 20.0, 21.0]).unwrap();
        let image = Spliced { token: 9, features };
        // Two rows: [1, 9, 9, 9] (a third image token past the 2 feature rows) and [9, 2, 9, 3].
        let ids = ArrayD::from_shape_vec(IxDyn(&[2, 4]), vec![1, 9, 9, 9, 9, 2, 9, 3]).unwrap();
        let mut v = ArrayD::from_elem(IxDyn(&[2, 4, 2]), 0.0f32);
        image.apply(&ids, &mut v);
        let row = |r: usize, j: usize| (v[[r, j, 0]], v[[r, j, 1]]);
        assert_eq!([row(0, 0), row(0, 1), row(0, 2), row(0, 3)], [(0.0, 0.0), (10.0, 11.0), (20.0, 21.0), (0.0, 0.0)]);
        assert_eq!([row(1, 0), row(1, 1), row(1, 2), row(1, 3)], [(10.0, 11.0), (0.0, 0.0), (20.0, 21.0), (0.0, 0.0)]);
    }
}
