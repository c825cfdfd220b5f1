//! What every part of one runtime job shares: the sessions, the encoder
//! states, the prompt and the seeded generator. Its own module so that the
//! driver and the checks it runs after the cache steps (variants, batches,
//! deep runs) all read it without importing each other.

use crate::engine::feeds::{self, Cache, Feed, Rng, StepInput, Uncached};
pub(crate) use crate::engine::mapped::open;
use crate::engine::options::{Job, Options};
use crate::engine::session::declared_inputs;
use ndarray::ArrayD;
use ort::session::Session;
use std::path::{Path, PathBuf};

/// A second model and the inputs it declares (feeds are filtered to them).
pub(crate) struct Side {
    pub(crate) session: Session,
    inputs: Vec<String>,
    pub(crate) path: std::path::PathBuf,
}

impl Side {
    pub(crate) fn open(env: &ort::environment::Environment, path: &Path, opts: &Options) -> Result<Side, String> {
        let session = open(env, path, opts).map_err(|e| format!("{}: {e}", path.display()))?;
        let inputs = declared_inputs(&session).into_iter().map(|(n, _, _)| n).collect();
        Ok(Side { session, inputs, path: path.to_path_buf() })
    }

    pub(crate) fn keep(&self, feeds: Vec<Feed>) -> Vec<Feed> {
        feeds.into_iter().filter(|f| self.inputs.contains(&f.name)).collect()
    }
}

/// What every run of one job shares: the sessions and the encoder states.
pub(crate) struct Ctx<'a> {
    pub(crate) env: &'a ort::environment::Environment,
    pub(crate) job: &'a Job,
    pub(crate) session: Session,
    /// The no-past decoder recomputing uncached logits, if separate.
    pub(crate) no_cache: Option<Side>,
    /// The no-past decoder run at step 0 of a split pair, when it is not
    /// the `no_cache` one (usually it is, and one session serves both).
    pub(crate) step0: Option<Side>,
    /// Step 0 of the split pair runs on the `no_cache` session.
    pub(crate) step0_is_no_cache: bool,
    pub(crate) encoder_states: Option<ArrayD<f32>>,
    pub(crate) enc_len: usize,
    pub(crate) prompt: Vec<Vec<i64>>,
    pub(crate) rng: Rng,
    /// `--deep`: the first run's steps on the main session (step, feeds, logits), to re-run at another level.
    pub(crate) recorded: Vec<(usize, Vec<Feed>, ArrayD<f32>)>,
    /// The folder's encoder session, kept for later encoder runs (padded sources).
    pub(crate) encoder: Option<std::sync::Arc<crate::engine::shared::Shared>>,
    /// The cross-attention caches the encoder computed itself, in the plan's
    /// cross-past order (empty when it computes none).
    pub(crate) encoder_cross: Vec<ArrayD<f32>>,
    /// Token ids into embeddings, for a decoder fed `inputs_embeds`.
    pub(crate) embed: Option<crate::engine::embed::Embedder>,
}

impl Ctx<'_> {
    /// Whether step 0 runs on a split pair's no-past decoder.
    pub(crate) fn has_step0(&self) -> bool {
        self.step0.is_some() || self.step0_is_no_cache
    }

    /// The feeds of one step, the session that runs them and its model file:
    /// step 0 of a split pair on the no-past decoder (the uncached feeds it
    /// declares), every other step the driven model's cached step (its token
    /// ids embedded first when it takes embeddings). An error is the
    /// embedding model's.
    pub(crate) fn step(
        &mut self,
        input: &StepInput<'_>,
        cache: &Cache,
    ) -> Result<(Vec<Feed>, &mut Session, PathBuf), String> {
        let plan = &self.job.plan;
        let pair_step0 = input.step == 0 && self.has_step0();
        let side = if self.step0_is_no_cache { self.no_cache.as_mut() } else { self.step0.as_mut() };
        match side.filter(|_| pair_step0) {
            Some(side) => {
                let how = Uncached::SeparateModel;
                let all = feeds::uncached(plan, input.new_tokens, input.encoder_states, input.enc_len, how, cache);
                Ok((side.keep(all), &mut side.session, side.path.clone()))
            }
            None => {
                let feeds = embedded(&mut self.embed, plan, feeds::cached_step(plan, input, cache))?;
                Ok((feeds, &mut self.session, self.job.model.clone()))
            }
        }
    }

    /// `feeds` as the driven model takes them (token ids embedded when it takes embeddings).
    pub(crate) fn embedded(&mut self, feeds: Vec<Feed>) -> Result<Vec<Feed>, String> {
        embedded(&mut self.embed, &self.job.plan, feeds)
    }
}

fn embedded(
    embed: &mut Option<crate::engine::embed::Embedder>,
    plan: &crate::plan::Plan,
    feeds: Vec<Feed>,
) -> Result<Vec<Feed>, String> {
    match embed {
        Some(e) => e.embed(plan, feeds),
        None => Ok(feeds),
    }
}
