//! The tool's own greedy generation without a cache (every step recomputes
//! the whole prefix, on the model's no-cache path): what an emitted
//! program's cached loop must reproduce, token for token (and its beam
//! search, every beam's prefix recomputed).

use super::table::Protocol;
use crate::engine::locate;
use crate::engine::options::{Job, Options, Reference};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use crate::engine::events::Generated;

/// Generates `max_new_tokens` for the protocol's first form in `dir`, in a
/// child process of this executable (which must call [`crate::init_child`]).
pub fn generate(
    p: &Protocol,
    dir: &Path,
    ids: Vec<i64>,
    features: Option<PathBuf>,
    max_new_tokens: usize,
    ignore_eos: bool,
    beams: Option<usize>,
) -> Result<Generated, String> {
    let report = run(p, dir, &|l| Reference {
        ids: ids.clone(),
        features: features.clone(),
        max_new_tokens,
        ignore_eos,
        eos: l.eos,
        // The emitted programs' default.
        beams: beams.unwrap_or_else(|| usize::try_from(super::spec::default_beams(l)).unwrap_or(1).max(1)),
        length_penalty: l.beams.1,
        probe: None,
        image: None,
    })?;
    report.generated.ok_or_else(|| "the reference run produced nothing".into())
}

/// Greedy generation of `max_new_tokens` from `ids`, a prompt holding
/// `image`'s tokens (an image-text model's text path fed an image), in a child.
pub fn generate_with_image(
    p: &Protocol,
    dir: &Path,
    ids: Vec<i64>,
    image: crate::engine::options::Image,
    max_new_tokens: usize,
) -> Result<Generated, String> {
    let report = run(p, dir, &|l| Reference {
        ids: ids.clone(),
        features: None,
        max_new_tokens,
        ignore_eos: false,
        eos: l.eos,
        beams: 1,
        length_penalty: l.beams.1,
        probe: None,
        image: Some(image.clone()),
    })?;
    report.generated.ok_or_else(|| "the reference run produced nothing".into())
}

/// The values of `names` at the last position of the protocol's uncached
/// run of `ids` (the prompt, or an encoder-decoder's source) and then
/// `tokens`: row 0, as float32, by name (a name the run did not give as
/// floats is left out).
pub fn probe(
    p: &Protocol,
    dir: &Path,
    ids: Vec<i64>,
    tokens: Vec<i64>,
    names: Vec<String>,
) -> Result<Vec<(String, Vec<f32>)>, String> {
    let report = run(p, dir, &|l| Reference {
        ids: ids.clone(),
        features: None,
        max_new_tokens: 0,
        ignore_eos: true,
        eos: l.eos,
        beams: 1,
        length_penalty: l.beams.1,
        probe: Some(crate::engine::options::Probe { tokens: tokens.clone(), names: names.clone() }),
        image: None,
    })?;
    report.probed.ok_or_else(|| "the probe run produced nothing".into())
}

/// The protocol's first form in `dir` run in a child with the reference
/// `reference` makes from its loop.
fn run(
    p: &Protocol,
    dir: &Path,
    reference: &dyn Fn(&super::table::Loop) -> Reference,
) -> Result<crate::engine::runtime_report::RuntimeReport, String> {
    let l = p.loops.iter().find(|l| l.form != "with-past-alone").ok_or("no decoder form to generate with")?;
    let plan = l.plan.clone().ok_or("no plan")?;
    let file = |rel: &str| if dir.is_dir() { dir.join(rel) } else { dir.with_file_name(rel) };
    let lib = locate::locate(None).map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let options = Options {
        encoder: l.encoder.as_deref().map(file),
        embed_tokens: l.embed.as_deref().map(file),
        no_cache_model: (l.form == "split-pair").then(|| file(&l.step0_file)),
        start_token: l.decoder_start,
        reference: Some(reference(l)),
        ..Options::default()
    };
    let job = Job { model: file(&l.later_file), ort_lib: lib.path.clone(), plan, options };
    let report = crate::engine::child::run(&exe, &job, &lib.source.to_string(), Duration::from_secs(600), &|_| {});
    if let Some(f) = report.findings.iter().find(|f| f.severity == crate::finding::Severity::Error) {
        return Err(f.message.clone());
    }
    Ok(report)
}
