//! Batched translation as applications run it: two sources of different
//! lengths in one batch, the shorter padded on the right with the encoder
//! mask zero over its padding, decoded for a few teacher-forced cached steps;
//! each row is compared with the same source run alone. A decoder (or an
//! encoder) that ignores the encoder mask lets the padding into
//! cross-attention: batch 1 is right, the padded row is not.

use crate::checks::batch::{against_alone, all_three, bound, not_run};
use crate::engine::context::Ctx;
use crate::engine::encoder::{samples_for, states_in};
use crate::engine::events::{Event, StepIssue};
use crate::engine::feeds::{past_zeros, Cache, Feed, StepInput, Values};
use crate::engine::session::run;
use crate::finding::Code;
use ndarray::{s, ArrayD, IxDyn};

/// Source lengths: the long row and the padded one.
const LONG: usize = 7;
const SHORT: usize = 4;
/// Teacher-forced cached steps after step 0.
const FORCED: usize = 3;

/// Encoder states `[rows, LONG, hidden]` and the encoder mask of a batch
/// (`short` rows padded on the right), and the short row's states alone.
struct Sources {
    batch: ArrayD<f32>,
    mask: Vec<i64>,
    long_alone: ArrayD<f32>,
    short_alone: ArrayD<f32>,
    /// Encoder positions of the long and the short source.
    lens: (usize, usize),
    /// Raw audio: how far the short row's encoder states (over its real
    /// frames) move when it is batched padded, relative to their scale.
    encoder_gap: Option<f64>,
}

/// Two seeded clips of raw samples (as many as the encoder needs for `LONG`
/// and `SHORT` frames), the shorter padded with zeros and the mask zero over
/// the padding, as transformers' feature extractor batches audio; encoded
/// together and alone. The decoder's encoder mask then covers the short
/// row's real frames.
fn audio_sources(ctx: &mut Ctx<'_>) -> Result<Option<Sources>, String> {
    let Some(path) = ctx.job.options.encoder.clone() else { return Ok(None) };
    let (n_long, n_short) = (samples_for(&path, LONG), samples_for(&path, SHORT));
    let clip =
        |n: usize, rng: &mut crate::engine::feeds::Rng| -> Vec<f32> { (0..n).map(|_| 0.1 * rng.normal()).collect() };
    let (long, short) = (clip(n_long, &mut ctx.rng), clip(n_short, &mut ctx.rng));
    let Some(enc) = ctx.encoder.clone() else { return Ok(None) };
    let declared = enc.declared_inputs();
    let encode = |rows: &[&Vec<f32>]| -> Result<ArrayD<f32>, String> {
        let (b, n) = (rows.len(), rows.iter().map(|r| r.len()).max().unwrap_or(0));
        let values: Vec<f32> =
            rows.iter().flat_map(|r| r.iter().copied().chain(std::iter::repeat_n(0.0, n - r.len()))).collect();
        let mask: Vec<i64> = rows.iter().flat_map(|r| (0..n).map(|i| i64::from(i < r.len()))).collect();
        let feeds: Vec<Feed> = declared
            .iter()
            .map(|(name, elem, _)| Feed {
                name: name.clone(),
                elem: *elem,
                values: if elem.is_float() {
                    Values::Float(ArrayD::from_shape_vec(IxDyn(&[b, n]), values.clone()).expect("shape"))
                } else {
                    Values::Int(ArrayD::from_shape_vec(IxDyn(&[b, n]), mask.clone()).expect("shape"))
                },
            })
            .collect();
        states_in(&enc.run(&feeds)?).ok_or_else(|| "the encoder returned no [batch, length, hidden] tensor".into())
    };
    let batch = encode(&[&long, &short])?;
    let long_alone = encode(&[&long])?;
    let short_alone = encode(&[&short])?;
    let (fl, fs) = (long_alone.shape()[1], short_alone.shape()[1]);
    let mask: Vec<i64> = (0..2 * fl).map(|i| i64::from(i < fl || i - fl < fs)).collect();
    // The short row's real frames, batched against alone.
    let batched = batch.slice(s![1..2, 0..fs.min(batch.shape()[1]), ..]).to_owned().into_dyn();
    let scale = short_alone.iter().fold(0.0_f64, |m, v| m.max(f64::from(*v).abs())).max(f64::MIN_POSITIVE);
    let encoder_gap =
        Some(batched.iter().zip(short_alone.iter()).fold(0.0_f64, |m, (a, b)| m.max(f64::from(*a - *b).abs())) / scale);
    Ok(Some(Sources { batch, mask, long_alone, short_alone, lens: (fl, fs), encoder_gap }))
}

/// From the folder's text encoder when there is one (ids padded with the pad
/// token, the mask zero over the padding), else seeded states whose padded
/// positions hold noise, as an encoder's padding outputs do.
fn sources(ctx: &mut Ctx<'_>) -> Result<Option<Sources>, String> {
    let plan = &ctx.job.plan;
    let mask: Vec<i64> = (0..2 * LONG).map(|i| i64::from(i < LONG || i - LONG < SHORT)).collect();
    let long: Vec<i64> = (0..LONG).map(|_| ctx.rng.below(plan.vocab - 1)).collect();
    let short: Vec<i64> = (0..SHORT).map(|_| ctx.rng.below(plan.vocab - 1)).collect();
    let Some(enc) = ctx.encoder.clone() else {
        let Some(hidden) = plan.hidden else { return Ok(None) };
        let h = hidden as usize;
        let batch = ArrayD::from_shape_vec(IxDyn(&[2, LONG, h]), (0..2 * LONG * h).map(|_| ctx.rng.normal()).collect())
            .expect("shape");
        let long_alone = batch.slice(s![0..1, .., ..]).to_owned().into_dyn();
        let short_alone = batch.slice(s![1..2, 0..SHORT, ..]).to_owned().into_dyn();
        return Ok(Some(Sources { batch, mask, long_alone, short_alone, lens: (LONG, SHORT), encoder_gap: None }));
    };
    let declared = enc.declared_inputs();
    // Raw audio with a padding mask is batched as its feature extractor pads it;
    // log-mel encoders take no mask (Whisper pads the features itself).
    if declared.iter().any(|(_, elem, _)| elem.is_float()) {
        let raw = declared.iter().any(|(_, e, d)| e.is_float() && d.len() == 2);
        let masked = declared.iter().any(|(n, e, _)| !e.is_float() && n.contains("mask"));
        return if raw && masked { audio_sources(ctx) } else { Ok(None) };
    }
    let pad = plan.vocab - 1;
    let encode = |rows: &[&Vec<i64>], mask: &[i64]| -> Result<ArrayD<f32>, String> {
        let (b, n) = (rows.len(), rows.iter().map(|r| r.len()).max().unwrap_or(0));
        let ids: Vec<i64> =
            rows.iter().flat_map(|r| r.iter().copied().chain(std::iter::repeat_n(pad, n - r.len()))).collect();
        let feeds: Vec<Feed> = declared
            .iter()
            .map(|(name, elem, _)| {
                let v = if name.contains("mask") { mask.to_vec() } else { ids.clone() };
                Feed {
                    name: name.clone(),
                    elem: *elem,
                    values: Values::Int(ArrayD::from_shape_vec(IxDyn(&[b, n]), v).expect("shape")),
                }
            })
            .collect();
        states_in(&enc.run(&feeds)?).ok_or_else(|| "the encoder returned no [batch, length, hidden] tensor".into())
    };
    let batch = encode(&[&long, &short], &mask)?;
    let long_alone = encode(&[&long], &[1; LONG])?;
    let short_alone = encode(&[&short], &[1; SHORT])?;
    Ok(Some(Sources { batch, mask, long_alone, short_alone, lens: (LONG, SHORT), encoder_gap: None }))
}

/// Step 0 and `forced` cached steps of one batch; the logits of every step.
fn decode(ctx: &mut Ctx<'_>, states: &ArrayD<f32>, mask: &[i64], forced: &[i64]) -> Result<Vec<ArrayD<f32>>, String> {
    let plan = &ctx.job.plan;
    let (b, enc_len) = (states.shape()[0], states.shape()[1]);
    let dummy = plan.step0_past_lengths.first().copied().unwrap_or(0).max(0) as usize;
    let zeros = |cs: &[crate::plan::CacheTensor]| -> Vec<ArrayD<f32>> {
        cs.iter().map(|c| past_zeros(&c.shape, plan.seq_axis, b, dummy)).collect()
    };
    let mut cache = Cache {
        self_past: zeros(&plan.self_past),
        cross_past: zeros(&plan.cross_past),
        past_len: dummy as i64,
        from_presents: false,
    };
    let has_step0 = ctx.has_step0();
    let mut new: Vec<Vec<i64>> = vec![ctx.prompt[0].clone(); b];
    let mut out = Vec::new();
    for step in 0..=forced.len() {
        let input = StepInput { step, new_tokens: &new, encoder_states: Some(states), enc_len };
        let pair_step0 = step == 0 && has_step0;
        let (mut feeds, session, _) = ctx.step(&input, &cache)?;
        // The padded row's encoder mask: zeros over its padding.
        for f in feeds.iter_mut().filter(|f| Some(&f.name) == plan.encoder_attention_mask.as_ref()) {
            f.values = Values::Int(ArrayD::from_shape_vec(IxDyn(&[b, enc_len]), mask.to_vec()).expect("shape"));
        }
        let o = run(session, &feeds)?;
        out.push(o.floats.get(&plan.logits).cloned().ok_or("no logits")?);
        let cached = input.cached(plan) && !pair_step0;
        let n_new = new[0].len() as i64;
        cache.advance(plan, &o, step, if cached { cache.past_len + n_new } else { n_new });
        if let Some(&t) = forced.get(step) {
            new = vec![vec![t]; b];
        }
    }
    Ok(out)
}

/// The padded-source batch check of a seq2seq decoder.
pub(crate) fn check(ctx: &mut Ctx<'_>, emit: &mut dyn FnMut(Event)) {
    if ctx.job.plan.encoder_attention_mask.is_none() {
        return;
    }
    const WHAT: &str = "a batch of 2 sources (one padded)";
    let src = match sources(ctx) {
        Ok(Some(s)) => s,
        Ok(None) => return,
        Err(e) => return emit(not_run(WHAT, &e)),
    };
    let forced: Vec<i64> = (0..FORCED).map(|_| ctx.rng.below(ctx.job.plan.vocab)).collect();
    let (long, short) = src.lens;
    let runs = [
        decode(ctx, &src.batch, &src.mask, &forced),
        decode(ctx, &src.long_alone, &vec![1; long], &forced),
        decode(ctx, &src.short_alone, &vec![1; short], &forced),
    ];
    let [both, alone0, alone1] = match all_three(runs) {
        Ok(r) => r,
        Err(e) => return emit(not_run(WHAT, &e)),
    };
    let tolerance = &bound(&ctx.job.plan);
    let rows = against_alone(&both, [&alone0, &alone1]);
    let mut issues = Vec::new();
    if let Some(&(r, step, abs, rel, _)) = rows.iter().find(|g| tolerance.exceeded(g.2, g.3)) {
        let mut i = StepIssue::error(
            Code::BatchPadding,
            format!(
                "row {r} of a batch of 2 sources ({long} and {short} encoder positions, the shorter padded to {long} with the encoder mask zero over its padding) departs from the same source run alone at step {step}: max |Δ| {abs:.3e} (relative {rel:.2e}) > tolerance {}",
                tolerance.describe()
            ),
            Some(&ctx.job.plan.logits),
        );
        // Raw audio whose encoder states already move under padding: the
        // encoder normalises over the whole padded axis, as in the family's own runtime.
        let normalised = src.encoder_gap.filter(|&g| g > 1e-3 && r == 1);
        if let Some(g) = normalised {
            i.severity = crate::finding::Severity::Warning;
            i.cause = Some(format!("the padded clip's encoder states already differ by {g:.2e} (relative) over its real frames: the encoder normalises over the whole padded audio axis (a group or instance normalisation after its first convolution), as in transformers, which pads clips with zeros and this mask the same way (a random tiny Moonshine in PyTorch moves by 0.20 relative); not an export bug: batch clips of similar length, or one at a time"));
            issues.push(i);
            return emit(Event::Batch { rows, issues });
        }
        i.cause = Some(match r {
            1 => "the encoder attention mask is not honoured: the padded source positions reach cross-attention (or the encoder's self-attention), so every padded row of a batched translation is wrong while batch 1 is right".into(),
            _ => "a row without padding changes when batched: the rows are not independent inside the graph".into(),
        });
        issues.push(i);
    }
    emit(Event::Batch { rows, issues });
}
