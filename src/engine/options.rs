//! What a runtime run is asked to do, and the job sent to the child process.
//! Its own module so that the driver and the diagnosis both read it without
//! importing each other.

use crate::plan::Plan;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// How many steps, which batch and seed, which helper models.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Options {
    /// Decoding steps per run.
    pub steps: usize,
    /// Rows fed at once.
    pub batch: i64,
    /// Seed for token ids and random encoder states.
    pub seed: u64,
    /// Encoder length for seq2seq models.
    pub encoder_len: i64,
    /// Prompt length at step 0 for decoder-only models.
    pub prompt_len: i64,
    /// Token fed at step 0 of a seq2seq decoder (default: vocab - 1, Marian's pad/start).
    pub start_token: Option<i64>,
    /// Produce encoder_hidden_states with this encoder instead of random values.
    pub encoder: Option<PathBuf>,
    /// The embedding model turning token ids into the decoder's
    /// `inputs_embeds`, run before every call (transformers.js' embed_tokens.onnx).
    #[serde(default)]
    pub embed_tokens: Option<PathBuf>,
    /// Recompute uncached logits with this model (e.g. decoder_model.onnx)
    /// instead of the merged decoder's no-cache branch.
    pub no_cache_model: Option<PathBuf>,
    /// The model run at step 0 instead of the driven one: the no-past
    /// decoder of optimum's split pair (`decoder_model.onnx`), whose presents
    /// seed the with-past decoder's cache.
    pub step0_model: Option<PathBuf>,
    /// Intra-op threads; 0 leaves ONNX Runtime's default (one per core).
    pub threads: usize,
    /// Instead of the cache check: greedy generation without any cache
    /// (every step recomputes the whole prefix), the reference emitted
    /// programs are compared with.
    #[serde(default)]
    pub reference: Option<Reference>,
    /// Instead of the cache check: re-run a caller's recorded calls (their
    /// dtypes, shapes and small values; seeded contents) until one fails.
    #[serde(default)]
    pub replay: Option<Vec<ReplayCall>>,
    /// A file of unknown role: loaded and run once on inputs built from its signature.
    #[serde(default)]
    pub smoke: bool,
    /// After the steps, a batch of 2 against each row alone: left-padded prompts (decoder-only) or a padded source (seq2seq).
    #[serde(default)]
    pub batch_check: bool,
    /// The model uses GroupQueryAttention (positions from seqlens, as onnxruntime-genai batches it).
    #[serde(default)]
    pub gqa: bool,
    /// A numeric variant: the folder's fp32 model and its plan, compared teacher-forced.
    #[serde(default)]
    pub compare_to: Option<(PathBuf, crate::plan::Plan)>,
    /// The fp32 encoder beside `compare_to`, when the variant has its own encoder.
    #[serde(default)]
    pub compare_encoder: Option<PathBuf>,
    /// Companion files (encoders) that several jobs of the check open, with
    /// how many take each: a runtime host keeps one session for all of them.
    #[serde(default)]
    pub shared: Vec<(PathBuf, usize)>,
    /// A sliding window the model's config asks for, probed on a past longer than it.
    #[serde(default)]
    pub window: Option<Window>,
    /// `--deep`: the first run's steps are re-run with graph optimizations disabled.
    #[serde(default)]
    pub deep: bool,
    /// The rotary embedding the folder's config states, audited against the graph's.
    #[serde(default)]
    pub rope: Option<crate::folder::rope::Rope>,
    /// A crash bisection: the encoder runs cut to these tensors (its graph
    /// kept only up to the nodes computing them), on the feeds the crashed run had.
    #[serde(default)]
    pub cut: Option<Vec<String>>,
    /// A decoder crash's bisection instead: the file run at this step (and
    /// step-0 past length) runs cut, after the steps before it ran whole.
    #[serde(default)]
    pub cut_step: Option<(usize, i64)>,
    /// A bisected crash's reproduction instead: this node's reduction at
    /// this depth written under `repro`, then run (dying proves it).
    #[serde(default)]
    pub crash_repro: Option<(String, usize)>,
    /// config.json's `final_logit_softcapping`: every logit of the run within ± it.
    #[serde(default)]
    pub softcap: Option<f64>,
    /// The multipliers and ALiBi slopes config.json states, audited against the graph's constants.
    #[serde(default)]
    pub scales: Option<crate::folder::scales::Scales>,
    /// Codebooks of a multi-codebook folder: the rows a helper's `…num_codebooks` axis holds per batch item.
    #[serde(default)]
    pub codebooks: Option<i64>,
    /// `--repro DIR`: write a minimal reproduction of each failing or
    /// diverging node there.
    #[serde(default)]
    pub repro: Option<ReproTo>,
}

/// Where reproductions go and the command line that found them (for their README).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReproTo {
    /// The folder, never the checked one.
    pub dir: PathBuf,
    /// The command as run.
    pub command: String,
}

/// A sliding attention window to probe: size, where it was stated, the windowed layers (all when `None`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Window {
    /// Positions a token attends to, itself included.
    pub size: usize,
    /// `config.json: sliding_window`.
    pub source: String,
    /// Windowed layer indices; every layer when `None`.
    pub layers: Option<Vec<usize>>,
}

/// One recorded feed to re-create.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReplayFeed {
    /// The input.
    pub name: String,
    /// numpy's dtype name.
    pub dtype: String,
    /// Its shape.
    pub shape: Vec<i64>,
    /// Its values, when the trace holds them (small integer tensors).
    pub value: Option<Vec<i64>>,
    /// Its digest: the output of an earlier call it equals is fed instead.
    pub digest: Option<String>,
    /// The digest is that of zeros: the caller fed fresh zeros.
    pub zeros: bool,
    /// Format-2 traces: one digest per row along the batch axis (a past
    /// whose rows are rows of an earlier output is those rows, gathered).
    #[serde(default)]
    pub rows: Option<Vec<String>>,
}

/// One recorded call to re-run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReplayCall {
    /// The call's index in the trace.
    pub call: usize,
    /// Its feeds.
    pub feeds: Vec<ReplayFeed>,
    /// Its outputs' names and recorded digests (what later feeds may equal).
    pub outputs: Vec<(String, String)>,
    /// Its outputs' recorded row digests (what later feeds' rows may equal).
    #[serde(default)]
    pub output_rows: Vec<(String, Vec<String>)>,
    /// Another file of the folder this call ran (an encoder whose states
    /// the decoder's calls are fed); `None`: the job's model.
    #[serde(default)]
    pub model: Option<PathBuf>,
    /// Token ids whose log-probabilities each row's last position is asked
    /// for (the next call's tokens: what the decoding strategy chose).
    #[serde(default)]
    pub watch: Vec<i64>,
}

/// A reference generation: what to feed and how long to go.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Reference {
    /// The prompt (decoder-only) or the encoder's source ids (seq2seq).
    pub ids: Vec<i64>,
    /// An audio encoder's input features (.npy, float32), instead of ids.
    pub features: Option<PathBuf>,
    /// New tokens to generate.
    pub max_new_tokens: usize,
    /// Keep going after the end token.
    pub ignore_eos: bool,
    /// The end token.
    pub eos: Option<i64>,
    /// Beams (1: greedy).
    #[serde(default = "one")]
    pub beams: usize,
    /// The beams' length penalty (generation_config.json's, default 1.0).
    #[serde(default = "unit")]
    pub length_penalty: f64,
    /// Instead of generating: the values of these tensors at the last
    /// position of an uncached run of the prompt and then these tokens.
    #[serde(default)]
    pub probe: Option<Probe>,
    /// An image the prompt holds (its image tokens), through the folder's vision encoder.
    #[serde(default)]
    pub image: Option<Image>,
}

/// An image fed as an image-text application feeds it: the pixels through
/// the folder's vision encoder, its feature rows taking the places of the
/// prompt's image tokens.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Image {
    /// The vision encoder.
    pub encoder: PathBuf,
    /// The pixels (.npy, float32), fed as the encoder's float input.
    pub pixels: PathBuf,
    /// The image token (config.json's `image_token_index` / `image_token_id`).
    pub token: i64,
}

/// Tensors read at one uncached step (`--source`'s layer search).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Probe {
    /// The tokens after the prompt (the step's prefix).
    pub tokens: Vec<i64>,
    /// The tensors, exposed as outputs of the file the uncached run uses.
    pub names: Vec<String>,
}

fn one() -> usize {
    1
}

fn unit() -> f64 {
    1.0
}

impl Default for Options {
    fn default() -> Self {
        Options {
            steps: 4,
            batch: 1,
            seed: 0,
            encoder_len: 7,
            prompt_len: 4,
            start_token: None,
            encoder: None,
            embed_tokens: None,
            no_cache_model: None,
            step0_model: None,
            threads: 0,
            reference: None,
            replay: None,
            smoke: false,
            batch_check: false,
            gqa: false,
            compare_to: None,
            compare_encoder: None,
            shared: Vec::new(),
            window: None,
            deep: false,
            rope: None,
            codebooks: None,
            cut: None,
            cut_step: None,
            crash_repro: None,
            softcap: None,
            scales: None,
            repro: None,
        }
    }
}

/// The job the parent sends to the child on stdin.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Job {
    /// The model driven.
    pub model: PathBuf,
    /// The ONNX Runtime library the child loads.
    pub ort_lib: PathBuf,
    /// What to feed at each step.
    pub plan: Plan,
    /// Steps, batch, seed, helper models.
    pub options: Options,
}
