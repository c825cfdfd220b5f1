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
    /// The folder's embedding model: its id input and its one output.
    Model { session: Session, ids: String, ids_elem: ElemType },
    /// No embedding model in the folder: a seeded vector per token id (the
    /// same id always gets the same vector, so the cached and the uncached
    /// runs are fed alike and parity stays a fair measure).
    Seeded { width: usize },
}

impl Embedder {
    /// The embedder of a session on the folder's embedding model.
    pub(crate) fn model(session: Session) -> Result<Embedder, String> {
        let (ids, ids_elem, _) = declared_inputs(&session)
            .into_iter()
            .find(|(_, e, _)| *e == ElemType::I64 || *e == ElemType::I32)
            .ok_or("the embedding model has no integer token-id input")?;
        Ok(Embedder::Model { session, ids, ids_elem })
    }

    fn vectors(&mut self, ids: &ArrayD<i64>) -> Result<ArrayD<f32>, String> {
        match self {
            Embedder::Model { session, ids: name, ids_elem } => {
                let feed = Feed { name: name.clone(), elem: *ids_elem, values: Values::Int(ids.clone()) };
                let out = run(session, &[feed]).map_err(|e| format!("the embedding model failed: {e}"))?;
                let first = out.infos.first().map(|i| i.name.clone()).ok_or("the embedding model gave no output")?;
                out.floats.get(&first).cloned().ok_or_else(|| format!("the embedding model's `{first}` is not float"))
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
