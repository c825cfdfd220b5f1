//! The one feed builder: given the plan, the step and the state of the
//! cache, every feed of a cached step and of the uncached recompute, with the
//! element type the model declares. Pure (no ONNX Runtime), so it is
//! unit-tested on its own; `session` turns feeds into runtime values.

use crate::engine::events::TensorInfo;
use crate::model::signature::ElemType;
use crate::plan::{CacheTensor, Family, Plan};
use ndarray::{ArrayD, Axis, IxDyn, Slice};
use std::collections::HashMap;

/// A feed's values in the precision we compute in; converted to `elem`
/// (the model's declared type) only when run.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Values {
    Float(ArrayD<f32>),
    Int(ArrayD<i64>),
    Bool(ArrayD<bool>),
}

/// One named input with its declared element type.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Feed {
    pub(crate) name: String,
    pub(crate) elem: ElemType,
    pub(crate) values: Values,
}

impl Feed {
    pub(crate) fn shape(&self) -> Vec<i64> {
        let s = match &self.values {
            Values::Float(a) => a.shape(),
            Values::Int(a) => a.shape(),
            Values::Bool(a) => a.shape(),
        };
        s.iter().map(|&d| d as i64).collect()
    }

    pub(crate) fn info(&self) -> TensorInfo {
        TensorInfo { name: self.name.clone(), dtype: self.elem, shape: Some(self.shape()) }
    }

    fn ints(name: &str, elem: ElemType, shape: &[usize], values: Vec<i64>) -> Feed {
        let a = ArrayD::from_shape_vec(IxDyn(shape), values).expect("shape matches values");
        Feed { name: name.to_string(), elem, values: Values::Int(a) }
    }

    fn float(name: &str, elem: ElemType, a: ArrayD<f32>) -> Feed {
        Feed { name: name.to_string(), elem, values: Values::Float(a) }
    }

    fn flag(name: &str, value: bool) -> Feed {
        Feed {
            name: name.to_string(),
            elem: ElemType::BOOL,
            values: Values::Bool(ArrayD::from_elem(IxDyn(&[1]), value)),
        }
    }
}

/// The outputs of one run, floats widened to f32.
#[derive(Clone)]
pub(crate) struct Outputs {
    pub(crate) floats: HashMap<String, ArrayD<f32>>,
    pub(crate) infos: Vec<TensorInfo>,
}

impl Outputs {
    pub(crate) fn shape(&self, name: &str) -> Option<Vec<i64>> {
        self.infos.iter().find(|i| i.name == name).and_then(|i| i.shape.clone())
    }
}

/// The KV cache between steps: self-attention pasts grow, cross-attention
/// pasts are taken once from step 0.
#[derive(Clone, Debug)]
pub(crate) struct Cache {
    pub(crate) self_past: Vec<ArrayD<f32>>,
    pub(crate) cross_past: Vec<ArrayD<f32>>,
    /// Length of the self-attention past on the sequence axis.
    pub(crate) past_len: i64,
    /// The self pasts are presents fed back: fed as the presents' own
    /// element type, as a caller does (never converted to the past's).
    pub(crate) from_presents: bool,
}

fn zeros(shape: &[i64], axis: usize, len: i64) -> ArrayD<f32> {
    let mut s: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
    if let Some(slot) = s.get_mut(axis) {
        *slot = len.max(0) as usize;
    }
    ArrayD::zeros(IxDyn(&s))
}

/// Zeros of a cache tensor with `rows` on the batch axis (a batch or a probe
/// of its own, not the plan's) and `len` positions on the sequence axis.
pub(crate) fn past_zeros(shape: &[i64], seq_axis: usize, rows: usize, len: usize) -> ArrayD<f32> {
    let mut s = shape.to_vec();
    if let Some(b) = s.first_mut() {
        *b = rows as i64;
    }
    zeros(&s, seq_axis, len as i64)
}

/// Zeros of a cache tensor: `len` positions on the sequence axis, or its
/// whole fixed shape for a fixed-size state; `rows` on the batch axis when given.
pub(crate) fn cache_zeros(c: &CacheTensor, seq_axis: usize, rows: Option<usize>, len: i64) -> ArrayD<f32> {
    let mut s = c.shape.clone();
    if let (Some(b), Some(rows)) = (s.first_mut(), rows) {
        *b = rows as i64;
    }
    if c.fixed {
        return ArrayD::zeros(IxDyn(&s.iter().map(|&d| d.max(0) as usize).collect::<Vec<_>>()));
    }
    zeros(&s, seq_axis, len)
}

impl Cache {
    /// A with-past decoder driven alone has no step 0 to take its
    /// cross-attention past from: seeded values of the encoder length stand
    /// in, the same in the cached and the uncached run (so parity stays fair).
    pub(crate) fn seed_cross(&mut self, plan: &Plan, enc_len: usize, rng: &mut Rng) {
        for (c, slot) in plan.cross_past.iter().zip(self.cross_past.iter_mut()) {
            // A cross past of a fixed encoder length keeps it.
            let len = c.shape.get(plan.seq_axis).copied().filter(|&n| n > 0).unwrap_or(enc_len as i64);
            let mut a = zeros(&c.shape, plan.seq_axis, len);
            a.mapv_inplace(|_| rng.normal());
            *slot = a;
        }
    }

    /// The dummy past fed at step 0: zeros of length `len` on the sequence axis.
    pub(crate) fn empty(plan: &Plan, len: i64) -> Cache {
        Cache {
            self_past: plan.self_past.iter().map(|c| cache_zeros(c, plan.seq_axis, None, len)).collect(),
            cross_past: plan.cross_past.iter().map(|c| zeros(&c.shape, plan.seq_axis, len)).collect(),
            past_len: len,
            from_presents: false,
        }
    }

    /// After a step: the self past becomes the presents; the cross past is
    /// taken from step 0 only (later steps of optimum merged decoders return
    /// `[0, heads, 1, head_dim]` dummies that must not be fed back).
    pub(crate) fn advance(&mut self, plan: &Plan, out: &Outputs, step: usize, new_len: i64) {
        for (c, slot) in plan.self_past.iter().zip(self.self_past.iter_mut()) {
            if let Some(p) = out.floats.get(&c.present) {
                *slot = carried(plan, c, slot, p, new_len);
            }
        }
        if step == 0 {
            for (c, slot) in plan.cross_past.iter().zip(self.cross_past.iter_mut()) {
                if let Some(p) = out.floats.get(&c.present) {
                    *slot = p.clone();
                }
            }
        }
        self.past_len = new_len;
        self.from_presents = true;
    }
}

/// The next past of `c` after a call whose present is `present` and which
/// leaves `new_len` tokens: the present itself, or — where the caller keeps
/// the buffer and the present holds only the new rows — the buffer `slot`
/// with those rows written at the slots they fill (`new_len − n …`) or
/// appended after dropping as many of the oldest.
pub(crate) fn carried(
    plan: &Plan,
    c: &CacheTensor,
    slot: &ArrayD<f32>,
    present: &ArrayD<f32>,
    new_len: i64,
) -> ArrayD<f32> {
    use crate::plan::roles::CacheForm;
    let axis = plan.seq_axis;
    let form = plan.caller_kept().filter(|_| c.buffer && axis < slot.ndim() && present.ndim() == slot.ndim());
    let Some(form) = form else { return present.clone() };
    let (len, n) = (slot.shape()[axis], present.shape()[axis]);
    if n > len || (0..slot.ndim()).any(|a| a != axis && slot.shape()[a] != present.shape()[a]) {
        return present.clone();
    }
    match form {
        CacheForm::CallerRolled => rolled_in(slot, present, axis),
        _ => written_in(slot, present, axis, (new_len.max(0) as usize).saturating_sub(n).min(len - n)),
    }
}

/// `buffer` with `rows` written at `at` on `axis` (a caller-written buffer).
pub(crate) fn written_in(buffer: &ArrayD<f32>, rows: &ArrayD<f32>, axis: usize, at: usize) -> ArrayD<f32> {
    let mut next = buffer.clone();
    let n = rows.shape()[axis];
    next.slice_axis_mut(Axis(axis), Slice::from(at..at + n)).assign(rows);
    next
}

/// `buffer` with as many of its oldest rows dropped as `rows` has, and
/// `rows` appended on `axis` (a caller-rolled window).
pub(crate) fn rolled_in(buffer: &ArrayD<f32>, rows: &ArrayD<f32>, axis: usize) -> ArrayD<f32> {
    let (len, n) = (buffer.shape()[axis], rows.shape()[axis]);
    let mut next = buffer.clone();
    next.slice_axis_mut(Axis(axis), Slice::from(..len - n)).assign(&buffer.slice_axis(Axis(axis), Slice::from(n..)));
    next.slice_axis_mut(Axis(axis), Slice::from(len - n..)).assign(rows);
    next
}

/// What a step feeds besides the cache.
pub(crate) struct StepInput<'a> {
    pub(crate) step: usize,
    /// Tokens fed at this step, one row per batch entry.
    pub(crate) new_tokens: &'a [Vec<i64>],
    /// Encoder states for seq2seq decoders, `[batch, enc_len, hidden]`.
    pub(crate) encoder_states: Option<&'a ArrayD<f32>>,
    pub(crate) enc_len: usize,
}

impl StepInput<'_> {
    /// Whether this step runs on the cache: after step 0, or always for a
    /// model without a branch flag.
    pub(crate) fn cached(&self, plan: &Plan) -> bool {
        self.step > 0 || plan.branch_flag.is_none()
    }
}

fn batch_and_len(rows: &[Vec<i64>]) -> (usize, usize) {
    (rows.len(), rows.first().map_or(0, Vec::len))
}

/// Encoder states and the encoder mask, shared by both kinds of feeds. A
/// with-past decoder takes no states, but the no-past decoder beside it does
/// (under optimum's name); a separate model keeps only what it declares.
fn encoder_feeds(
    plan: &Plan,
    states: Option<&ArrayD<f32>>,
    b: usize,
    enc_len: usize,
    separate: bool,
    feeds: &mut Vec<Feed>,
) {
    if let Some(states) = states.filter(|_| separate || plan.encoder_hidden_states.is_some()) {
        let name = plan.encoder_hidden_states.as_deref().unwrap_or("encoder_hidden_states");
        let elem = if plan.encoder_hidden_states.is_some() {
            plan.dtype_of(name)
        } else {
            plan.self_past.first().map_or(ElemType::F32, |c| c.dtype)
        };
        feeds.push(Feed::float(name, elem, states.clone()));
    }
    if let Some(name) = &plan.encoder_attention_mask {
        // The encoder's rows: the batch, also where token rows are batch × codebooks.
        let b = states.map_or(b / plan.codebooks.unwrap_or(1).max(1) as usize, |s| s.shape()[0]).max(1);
        feeds.push(Feed::ints(name, plan.dtype_of(name), &[b, enc_len], vec![1; b * enc_len]));
    }
}

/// The feeds that place a call's tokens: the attention mask (`mask`, a row
/// of past + new per batch row, widened with zeros to the whole buffer when
/// the model's mask spans it), positions (`pos`, `n` per row),
/// `cache_position` (the slots written, past..past + n) and
/// `num_logits_to_keep` (0: logits for every position).
pub(crate) fn placement(
    plan: &Plan,
    b: usize,
    n: usize,
    past: usize,
    mask: Vec<i64>,
    pos: Vec<i64>,
    feeds: &mut Vec<Feed>,
) {
    let total = past + n;
    if let Some(name) = &plan.attention_mask {
        match plan.buffer.as_ref().filter(|bf| bf.mask_over_buffer) {
            Some(bf) => {
                let len = (bf.len.max(0) as usize).max(total);
                // A rolled buffer holds the newest tokens at its end: the mask is right-aligned.
                let right = bf.form == crate::plan::roles::CacheForm::CallerRolled;
                let mut m = Vec::with_capacity(b * len);
                for row in mask.chunks(total.max(1)) {
                    if right {
                        m.extend(std::iter::repeat_n(0, len - row.len()));
                        m.extend(row);
                    } else {
                        m.extend(row);
                        m.extend(std::iter::repeat_n(0, len - row.len()));
                    }
                }
                feeds.push(Feed::ints(name, plan.dtype_of(name), &[b, len], m));
            }
            None => feeds.push(Feed::ints(name, plan.dtype_of(name), &[b, total], mask)),
        }
    }
    match (&plan.position_ids, plan.position_rows) {
        // Text tokens under multimodal rotary: the same positions in every section's row.
        (Some(name), Some(k)) => {
            let rows: Vec<i64> = (0..k).flat_map(|_| pos.iter().copied()).collect();
            feeds.push(Feed::ints(name, plan.dtype_of(name), &[k, b, n], rows));
        }
        (Some(name), None) => feeds.push(Feed::ints(name, plan.dtype_of(name), &[b, n], pos)),
        (None, _) => {}
    }
    if let Some(name) = &plan.cache_position {
        feeds.push(Feed::ints(name, plan.dtype_of(name), &[n], (past..total).map(|i| i as i64).collect()));
    }
    if let Some(name) = &plan.logits_to_keep {
        feeds.push(Feed::ints(name, plan.dtype_of(name), &[], vec![0]));
    }
    // A merged decoder's branch flag in every run that places tokens (steps,
    // batches, chunks, variants, levels): the cached branch exactly when there
    // is a past. A caller that set it already (step 0's dummy past) keeps its own.
    if let Some(flag) = plan.branch_flag.as_ref().filter(|f| !feeds.iter().any(|x| &x.name == *f)) {
        feeds.push(Feed::flag(flag, past > 0));
    }
}

/// Fills every slot from `written` on of the fixed buffers among `feeds`
/// with seeded noise: slots a correct mask never reads, so the logits must
/// not move (the reference of a fixed-shape export, which has no uncached form).
pub(crate) fn noise_unwritten(plan: &Plan, feeds: &mut [Feed], written: usize) {
    let mut rng = Rng::seeded(0x5eed);
    for c in plan.self_past.iter().filter(|c| c.buffer) {
        let Some(Feed { values: Values::Float(a), .. }) = feeds.iter_mut().find(|f| f.name == c.past) else { continue };
        if plan.seq_axis >= a.ndim() {
            continue;
        }
        // A rolled buffer's written slots are its last ones.
        let len = a.shape()[plan.seq_axis];
        let rolled = plan.caller_kept() == Some(crate::plan::roles::CacheForm::CallerRolled);
        for (slot, mut lane) in a.axis_iter_mut(ndarray::Axis(plan.seq_axis)).enumerate() {
            let unwritten = if rolled { slot + written < len } else { slot >= written };
            if unwritten {
                lane.mapv_inplace(|_| rng.normal());
            }
        }
    }
}

/// Every feed of one step driven through the cache.
pub(crate) fn cached_step(plan: &Plan, input: &StepInput<'_>, cache: &Cache) -> Vec<Feed> {
    let (b, n_new) = batch_and_len(input.new_tokens);
    let mut feeds = vec![Feed::ints(&plan.input_ids, plan.input_ids_dtype, &[b, n_new], input.new_tokens.concat())];
    if let Some(flag) = &plan.branch_flag {
        feeds.push(Feed::flag(flag, input.step > 0));
    }
    encoder_feeds(plan, input.encoder_states, b, input.enc_len, false, &mut feeds);
    // Decoder-only: the mask covers past + new; positions continue the past.
    let attended = if input.cached(plan) { cache.past_len } else { 0 };
    let total = attended as usize + n_new;
    let pos = (0..b).flat_map(|_| (0..n_new as i64).map(|i| attended + i)).collect();
    placement(plan, b, n_new, attended as usize, vec![1; b * total], pos, &mut feeds);
    for (c, a) in plan.self_past.iter().zip(&cache.self_past) {
        let elem = if cache.from_presents { c.present_dtype.unwrap_or(c.dtype) } else { c.dtype };
        feeds.push(Feed::float(&c.past, elem, a.clone()));
    }
    for (c, a) in plan.cross_past.iter().zip(&cache.cross_past) {
        feeds.push(Feed::float(&c.past, c.dtype, a.clone()));
    }
    feeds
}

/// Where the uncached logits come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Uncached {
    /// The same model with an empty past (the merged decoder's no-cache
    /// branch; `dummy` is the step-0 past length its flag-false branch expects).
    SameModel { dummy: i64 },
    /// A separate decoder without past inputs (`decoder_model.onnx`).
    SeparateModel,
}

/// Every feed of the recompute: the whole prefix `tokens` at once, no cache.
/// For a separate model the caller keeps only the inputs that model declares.
pub(crate) fn uncached(
    plan: &Plan,
    tokens: &[Vec<i64>],
    encoder_states: Option<&ArrayD<f32>>,
    enc_len: usize,
    how: Uncached,
    cache: &Cache,
) -> Vec<Feed> {
    let (b, n) = batch_and_len(tokens);
    let mut feeds = vec![Feed::ints(&plan.input_ids, plan.input_ids_dtype, &[b, n], tokens.concat())];
    encoder_feeds(plan, encoder_states, b, enc_len, how == Uncached::SeparateModel, &mut feeds);
    placement(plan, b, n, 0, vec![1; b * n], (0..b).flat_map(|_| 0..n as i64).collect(), &mut feeds);
    let Uncached::SameModel { dummy } = how else {
        // A separate no-past decoder has no branch flag.
        feeds.retain(|f| Some(&f.name) != plan.branch_flag.as_ref());
        return feeds;
    };
    match &plan.branch_flag {
        // A flag-false branch ignores its past: the step-0 dummy.
        Some(flag) => {
            // `placement` fed it false already (no past).
            if !feeds.iter().any(|f| &f.name == flag) {
                feeds.push(Feed::flag(flag, false));
            }
            for c in plan.self_past.iter().chain(&plan.cross_past) {
                feeds.push(Feed::float(&c.past, c.dtype, cache_zeros(c, plan.seq_axis, None, dummy)));
            }
        }
        // Without a flag: an empty self past, and the cross past the cached run used.
        None => {
            for c in &plan.self_past {
                feeds.push(Feed::float(&c.past, c.dtype, cache_zeros(c, plan.seq_axis, None, 0)));
            }
            for (c, a) in plan.cross_past.iter().zip(&cache.cross_past) {
                feeds.push(Feed::float(&c.past, c.dtype, a.clone()));
            }
        }
    }
    feeds
}

/// The first tokens: `[[start]]` per row for seq2seq decoders, a seeded
/// prompt for decoder-only models.
pub(crate) fn prompt(plan: &Plan, batch: usize, prompt_len: usize, start: i64, rng: &mut Rng) -> Vec<Vec<i64>> {
    // A multi-codebook decoder takes one token row per codebook of each batch item.
    let rows = batch * plan.codebooks.unwrap_or(1).max(1) as usize;
    (0..rows)
        .map(|_| match plan.family {
            Family::Seq2Seq => vec![start],
            Family::DecoderOnly | Family::EncoderOnly => {
                (0..prompt_len.max(1)).map(|_| rng.below(plan.vocab)).collect()
            }
        })
        .collect()
}

/// xorshift64*: reproducible inputs without a dependency.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn seeded(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407) | 1)
    }
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub(crate) fn below(&mut self, n: i64) -> i64 {
        (self.next() % n.max(1) as u64) as i64
    }
    /// Standard normal (Box-Muller).
    pub(crate) fn normal(&mut self) -> f32 {
        let u1 = ((self.next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        let u2 = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
    }
}

#[cfg(test)]
#[path = "feeds_tests.rs"]
mod tests;
