//! The protocol as data: for each way the folder's decoder can be driven
//! (merged decoder, split pair, decoder-only), which file runs at which step,
//! and one row per input with its dtype, its shape in terms of `batch`,
//! `prompt_len`, `past_len`, `enc_len`, the concrete shapes at steps 0–2 and
//! where its value comes from.

use crate::folder::layout::{Entry, Layout};
use crate::folder::Role;
use crate::model::fold::fold;
use crate::model::signature::Dim;
use crate::plan::infer::infer;
use crate::plan::roles::Inferred;
use crate::plan::{Family, Plan};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One input at one kind of step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FeedRow {
    /// The input, layer families folded (`past_key_values.{0..5}.decoder.{key,value}`).
    pub name: String,
    /// Every input name behind `name`.
    pub names: Vec<String>,
    /// Element type to feed.
    pub dtype: String,
    /// Shape in terms of batch, prompt_len, past_len, enc_len and fixed sizes.
    pub shape: String,
    /// Where the value comes from.
    pub source: String,
}

/// The feeds of one kind of step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StepFeeds {
    /// `step 0 (prompt)` or `step k ≥ 1`.
    pub step: String,
    /// The file run at this step.
    pub file: String,
    /// One row per input (folded).
    pub feeds: Vec<FeedRow>,
    /// The concrete shape of every folded input at steps 0, 1 and 2 (batch 1).
    pub examples: Vec<(String, Vec<String>)>,
}

/// One way to drive the folder's decoder.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Loop {
    /// `merged-decoder`, `split-pair`, `decoder-only`, `cross-from-encoder`
    /// (a with-past decoder whose encoder computes its cross caches:
    /// onnxruntime-genai's Whisper), `with-past-alone`.
    pub form: String,
    /// The encoder, run once before step 0 (seq2seq).
    pub encoder: Option<String>,
    /// The encoder's inputs and what to feed them.
    pub encoder_feeds: Vec<FeedRow>,
    /// The file run at step 0.
    pub step0_file: String,
    /// The file run at every later step.
    pub later_file: String,
    /// Token fed at step 0 of a seq2seq decoder.
    pub decoder_start: Option<i64>,
    /// Generation stops at this token.
    pub eos: Option<i64>,
    /// Step 0 and every later step.
    pub steps: Vec<StepFeeds>,
    /// What callers get wrong, where it applies here.
    pub rules: Vec<String>,
    /// The plan the runtime check drives this form with (the emitters read it).
    #[cfg_attr(feature = "schema", schemars(skip))]
    #[serde(skip)]
    pub plan: Option<Plan>,
    /// The files' relative paths: encoder, step 0, later steps.
    #[serde(skip)]
    pub paths: (Option<String>, String, String),
    /// The encoder's declared inputs (name, dtype, dims; -1 = symbolic).
    #[serde(skip)]
    pub encoder_inputs: Vec<(String, String, Vec<i64>)>,
    /// The embedding model run before every call, when the decoder takes
    /// `inputs_embeds` (transformers.js' `embed_tokens.onnx`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embed: Option<String>,
    /// The step-0 file's declared inputs (a split pair's no-past decoder).
    #[serde(skip)]
    pub step0_inputs: Vec<String>,
    /// generation_config.json's `num_beams` and `length_penalty` (the emitted programs' defaults).
    #[serde(skip)]
    pub beams: (Option<i64>, f64),
    /// The batch the graph fixes (a static export traced at batch 1), if any.
    #[serde(skip)]
    pub fixed_batch: Option<i64>,
}

/// How to call the models of a folder (or one file).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Protocol {
    /// [`crate::SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The folder (or file), as given.
    pub path: String,
    /// `model_type` from the config.
    pub model_type: Option<String>,
    /// Every file and its role.
    pub files: Vec<(String, String)>,
    /// Every way to drive the decoder.
    pub loops: Vec<Loop>,
    /// Every file's inputs as the protocol inference places them, from the
    /// graph and the configs alone, each with its evidence.
    pub inferred: Vec<(String, Inferred)>,
}

fn dims(e: &Entry, name: &str) -> Vec<i64> {
    e.sig
        .input(name)
        .and_then(|p| p.ty.tensor_parts())
        .and_then(|(_, d)| d.map(|d| d.iter().map(|x| if let Dim::Fixed(v) = x { *v } else { -1 }).collect()))
        .unwrap_or_default()
}

/// A past's shape with the sequence axis named.
fn past_shape(plan: &Plan, shape: &[i64], seq: &str) -> String {
    let parts: Vec<String> = shape
        .iter()
        .enumerate()
        .map(|(axis, v)| {
            if axis == 0 {
                "batch".into()
            } else if axis == plan.seq_axis {
                seq.into()
            } else {
                v.to_string()
            }
        })
        .collect();
    format!("[{}]", parts.join(", "))
}

/// The rows of one kind of step, from the plan.
fn rows(
    plan: &Plan,
    step0: bool,
    form: &str,
    encoder: Option<&str>,
    start: Option<i64>,
    step0_file: Option<&Entry>,
    embed: Option<&str>,
) -> Vec<FeedRow> {
    let seq2seq = plan.family == Family::Seq2Seq;
    let only: Option<Vec<String>> = step0_file.map(|e| e.sig.inputs.iter().map(|p| p.name.clone()).collect());
    let mut rows: Vec<(String, String, String, String)> = Vec::new();
    // A split pair's step 0 runs another file: its own declared types.
    let dtype = |name: &str| match step0_file.and_then(|e| e.sig.input(name)).and_then(|p| p.ty.tensor_parts()) {
        Some((t, _)) => t.to_string(),
        None => plan.dtype_of(name).to_string(),
    };
    let cacheless = plan.is_cacheless();
    let new = if cacheless && !step0 {
        "prefix_len"
    } else if step0 && !seq2seq {
        "prompt_len"
    } else {
        "1"
    };
    let ids_source = match (step0, seq2seq) {
        (true, true) => format!("[[decoder_start]]{}", start.map(|s| format!(" = [[{s}]]")).unwrap_or_default()),
        (true, false) => "the prompt's token ids".into(),
        _ if cacheless => "the whole prefix again, the greedy token appended (no cache)".into(),
        _ => "[[the greedy token of the previous step]]".into(),
    };
    rows.push((plan.input_ids.clone(), plan.input_ids_dtype.to_string(), format!("[batch, {new}]"), ids_source));
    if let Some(flag) = &plan.branch_flag {
        let v =
            if step0 { "[false] at step 0 (no-cache branch; the past is ignored)" } else { "[true] (cached branch)" };
        rows.push((flag.clone(), "bool".into(), "[1]".into(), v.into()));
    }
    let states_name = plan
        .encoder_hidden_states
        .clone()
        .or_else(|| (form == "split-pair" && step0 && seq2seq).then(|| "encoder_hidden_states".to_string()));
    if let Some(name) = states_name {
        let from = encoder
            .map(|e| format!("{e} → last_hidden_state (run once)"))
            .unwrap_or_else(|| "the encoder's output".into());
        let width = step0_file.and_then(|e| dims(e, &name).last().copied()).filter(|w| *w > 0);
        let hidden = plan.hidden.or(width).map_or("hidden".into(), |h| h.to_string());
        rows.push((name.clone(), dtype(&name), format!("[batch, enc_len, {hidden}]"), from));
    }
    if let Some(name) = &plan.encoder_attention_mask {
        rows.push((
            name.clone(),
            dtype(name),
            "[batch, enc_len]".into(),
            "ones(batch, enc_len): the encoder's attention_mask".into(),
        ));
    }
    if let Some(name) = &plan.attention_mask {
        let (shape, src) = if step0 {
            ("[batch, prompt_len]", "ones(batch, prompt_len)")
        } else if cacheless {
            ("[batch, prefix_len]", "ones(batch, prefix_len)")
        } else {
            ("[batch, past_len + 1]", "ones(batch, past_len + new): past AND new tokens, whatever the dim name says")
        };
        rows.push((name.clone(), dtype(name), shape.into(), src.into()));
    }
    if let Some(name) = &plan.position_ids {
        let (shape, src) = if step0 {
            ("[batch, prompt_len]", "arange(prompt_len)")
        } else if cacheless {
            ("[batch, prefix_len]", "arange(prefix_len): from 0 again")
        } else {
            ("[batch, 1]", "past_len + arange(new): continue the past")
        };
        rows.push((name.clone(), dtype(name), shape.into(), src.into()));
    }
    if !(form == "split-pair" && step0) {
        for c in &plan.self_past {
            let (shape, src) = if step0 {
                (past_shape(plan, &c.shape, "0"), "zeros: an empty past, length 0 on the past axis".to_string())
            } else {
                (past_shape(plan, &c.shape, "past_len"), format!("{} of the previous step", c.present))
            };
            rows.push((c.past.clone(), c.dtype.to_string(), shape, src));
        }
        for c in &plan.cross_past {
            let (shape, src) = if step0 && plan.branch_flag.is_some() {
                (past_shape(plan, &c.shape, "0"), "zeros (ignored on the no-cache branch)".to_string())
            } else {
                (past_shape(plan, &c.shape, "enc_len"), format!("{} of step 0, kept", c.present))
            };
            rows.push((c.past.clone(), c.dtype.to_string(), shape, src));
        }
    }
    super::forms::adjust(plan, step0, embed, &mut rows);
    if let Some(only) = &only {
        rows.retain(|r| only.contains(&r.0));
    }
    let keyed: Vec<(String, (String, String, String))> = rows
        .iter()
        .map(|(n, d, s, src)| {
            (n.clone(), (d.clone(), s.replace(n.as_str(), "\u{0}"), src.replace(n.as_str(), "\u{0}")))
        })
        .collect();
    let presents: Vec<(String, (String, String, String))> = keyed
        .iter()
        .map(|(n, (d, s, src))| {
            // Fold the present names in the source column along with the past names.
            let src = plan.self_past.iter().chain(&plan.cross_past).fold(src.clone(), |acc, c| {
                if &c.past == n {
                    acc.replace(&c.present, "\u{1}")
                } else {
                    acc
                }
            });
            (n.clone(), (d.clone(), s.clone(), src))
        })
        .collect();
    fold(&presents)
        .into_iter()
        .map(|g| {
            let (d, s, src) = presents[g.members[0]].1.clone();
            let names: Vec<String> = g.members.iter().map(|&i| presents[i].0.clone()).collect();
            let present_label = if src.contains('\u{1}') {
                let ps: Vec<String> = names
                    .iter()
                    .filter_map(|n| {
                        plan.self_past.iter().chain(&plan.cross_past).find(|c| &c.past == n).map(|c| c.present.clone())
                    })
                    .collect();
                crate::model::fold::fold_names(&ps).join(", ")
            } else {
                String::new()
            };
            FeedRow {
                name: g.label.clone(),
                dtype: d,
                shape: s.replace('\u{0}', &g.label),
                source: src.replace('\u{0}', &g.label).replace('\u{1}', &present_label),
                names,
            }
        })
        .collect()
}

/// Concrete shapes of `rows` at steps 0, 1, 2 for batch 1.
fn examples(rows: &[FeedRow], prompt_len: i64, enc_len: i64, step0: bool, seq2seq: bool) -> Vec<(String, Vec<String>)> {
    rows.iter()
        .map(|r| {
            let at = |step: i64| -> String {
                if step0 != (step == 0) {
                    return "—".into();
                }
                let past = if seq2seq {
                    step
                } else if step == 0 {
                    0
                } else {
                    prompt_len + step - 1
                };
                let s = r
                    .shape
                    .replace("batch", "1")
                    .replace("prompt_len", &prompt_len.to_string())
                    .replace("prefix_len", &(prompt_len + step).to_string())
                    .replace("past_len + 1", &(past + 1).to_string())
                    .replace("past_len", &past.to_string())
                    .replace("enc_len", &enc_len.to_string());
                super::forms::multiply(&s)
            };
            (r.name.clone(), vec![at(0), at(1), at(2)])
        })
        .collect()
}

const PROMPT_LEN: i64 = 4;
const ENC_LEN: i64 = 7;

fn plan_of(layout: &Layout, e: &Entry) -> Option<Plan> {
    layout.plan_for(e, 1)?.ok()
}

/// The one call of an encoder alone (an embeddings model): every input with
/// what to feed, the hidden states out; pooling is the application's.
fn encoder_alone(e: &Entry, plan: Plan) -> Loop {
    let rel = e.file.rel.clone();
    let feeds: Vec<FeedRow> = super::forms::encoder_rows(e, &plan)
        .into_iter()
        .map(|(name, dtype, shape, source)| FeedRow { names: vec![name.clone()], name, dtype, shape, source })
        .collect();
    let at1 = format!("[1, {}]", crate::plan::ENCODER_TOKENS);
    let examples = feeds.iter().map(|f| (f.name.clone(), vec![at1.clone(), "—".into(), "—".into()])).collect();
    Loop {
        form: "encoder-alone".into(),
        encoder: None,
        encoder_feeds: Vec::new(),
        step0_file: rel.clone(),
        later_file: rel.clone(),
        decoder_start: None,
        eos: None,
        steps: vec![StepFeeds { step: "the one call".into(), file: rel.clone(), feeds, examples }],
        rules: vec![super::rules::encoder_rule(&plan)],
        paths: (None, rel.clone(), rel),
        encoder_inputs: Vec::new(),
        step0_inputs: e.sig.inputs.iter().map(|p| p.name.clone()).collect(),
        embed: None,
        plan: Some(plan),
        beams: (None, 1.0),
        fixed_batch: None,
    }
}

/// The protocol of every drivable decoder form of the folder (or file) at `path`.
pub fn describe(path: &Path) -> Result<Protocol, crate::error::Error> {
    let layout = if path.is_dir() {
        Layout::read(path, None, None)?
    } else {
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        Layout::read(dir, Some(path), None).or_else(|_| Layout::single(path, None))?
    };
    let wanted = |e: &Entry| !path.is_file() || e.file.path == path;
    let start = layout.sizes.get("decoder_start").map(|s| s.value);
    let eos = layout.sizes.get("eos").map(|s| s.value);
    let beams = super::forms::beams(path);
    let mut loops = Vec::new();
    for e in layout.entries.iter().filter(|e| wanted(e)) {
        let (form, step0_entry) = match e.role {
            Role::MergedDecoder => ("merged-decoder", e),
            // optimum's legacy decoder-only pair: the prompt through the no-past file.
            Role::DecoderOnly => match layout.prompt_half(e) {
                Some(d) => ("split-pair", d),
                None => ("decoder-only", e),
            },
            // A decoder without past (not the prompt half of a legacy pair): the prefix every call.
            Role::DecoderOnlyNoCache if layout.sibling(e, Role::DecoderOnly).is_none() => ("no-cache", e),
            Role::DecoderWithPast => match layout.sibling(e, Role::Decoder) {
                Some(d) => ("split-pair", d),
                None if layout.cross_from_encoder(e) => ("cross-from-encoder", e),
                None => ("with-past-alone", e),
            },
            _ => continue,
        };
        let Some(plan) = plan_of(&layout, e) else { continue };
        let encoder = layout.sibling(e, Role::Encoder);
        let enc_rel = encoder.map(|x| x.file.rel.clone());
        let seq2seq = plan.family == Family::Seq2Seq;
        let enc_len = encoder
            .and_then(|x| x.sig.outputs.first())
            .and_then(|p| p.ty.tensor_parts())
            .and_then(|(_, d)| d.and_then(|d| d.get(1).cloned()))
            .and_then(|d| if let Dim::Fixed(v) = d { Some(v) } else { None })
            .unwrap_or(ENC_LEN);
        let prompt = if seq2seq { 1 } else { PROMPT_LEN };
        let step0_inputs: Vec<String> = step0_entry.sig.inputs.iter().map(|p| p.name.clone()).collect();
        let embed_rel =
            layout.sibling(e, Role::EmbedTokens).filter(|_| plan.inputs_embeds.is_some()).map(|x| x.file.rel.clone());
        let pair0 = (form == "split-pair").then_some(step0_entry);
        let mut r0 = rows(&plan, true, form, enc_rel.as_deref(), start, pair0, embed_rel.as_deref());
        let mut r1 = rows(&plan, false, form, enc_rel.as_deref(), start, None, embed_rel.as_deref());
        // A graph traced at a fixed batch (a static export) takes only that one.
        let fixed_batch = [plan.input_ids.as_str(), plan.inputs_embeds.as_deref().unwrap_or_default()]
            .iter()
            .chain(plan.self_past.first().map(|c| c.past.as_str()).as_slice())
            .find_map(|n| dims(e, n).first().copied())
            .filter(|&b| b > 0);
        if let Some(b) = fixed_batch {
            for r in r0.iter_mut().chain(r1.iter_mut()) {
                r.shape = super::forms::fix_batch(&r.shape, b);
            }
        }
        let encoder_inputs: Vec<(String, String, Vec<i64>)> = encoder
            .map(|x| {
                x.sig
                    .inputs
                    .iter()
                    .filter_map(|p| p.ty.tensor_parts().map(|(t, _)| (p.name.clone(), t.to_string(), dims(x, &p.name))))
                    .collect()
            })
            .unwrap_or_default();
        let encoder_feeds = super::forms::encoder_feeds(&encoder_inputs)
            .into_iter()
            .map(|(name, dtype, shape, source)| FeedRow { names: vec![name.clone()], name, dtype, shape, source })
            .collect();
        let steps = vec![
            StepFeeds {
                step: "step 0 (prompt)".into(),
                file: step0_entry.file.rel.clone(),
                examples: examples(&r0, prompt, enc_len, true, seq2seq),
                feeds: r0,
            },
            StepFeeds {
                step: "step k ≥ 1".into(),
                file: e.file.rel.clone(),
                examples: examples(&r1, prompt, enc_len, false, seq2seq),
                feeds: r1,
            },
        ];
        loops.push(Loop {
            form: form.into(),
            encoder: enc_rel.clone(),
            encoder_feeds,
            step0_file: step0_entry.file.rel.clone(),
            later_file: e.file.rel.clone(),
            decoder_start: if seq2seq { start } else { None },
            eos,
            steps,
            rules: {
                let mut r = super::rules::rules(&plan, form, e, beams.0);
                r.extend(layout.sibling(e, Role::VisionEncoder).map(|v| super::rules::image_call(&plan, v)));
                r
            },
            paths: (enc_rel, step0_entry.file.rel.clone(), e.file.rel.clone()),
            encoder_inputs,
            step0_inputs,
            embed: embed_rel,
            fixed_batch,
            plan: Some(plan),
            beams,
        });
    }
    // An encoder alone (an embeddings model): one call per text, no loop.
    if loops.is_empty() && !layout.entries.iter().any(|x| x.role.is_decoder()) {
        let vocab = layout.sizes.get("vocab").map_or(100, |s| s.value);
        for e in layout.entries.iter().filter(|e| wanted(e) && e.role == Role::Encoder) {
            if let Ok(plan) = Plan::for_encoder(&e.sig, vocab) {
                loops.push(encoder_alone(e, plan));
            }
        }
    }
    let hints = layout.hints();
    Ok(Protocol {
        schema_version: crate::checker::report::SCHEMA_VERSION,
        path: path.display().to_string(),
        model_type: layout
            .config
            .as_ref()
            .and_then(|c| c.model_type.clone())
            .or(layout.genai.as_ref().and_then(|g| g.model_type.clone())),
        files: layout.entries.iter().filter(|e| wanted(e)).map(|e| (e.file.rel.clone(), e.role.to_string())).collect(),
        loops,
        inferred: layout
            .entries
            .iter()
            .filter(|e| wanted(e))
            .map(|e| (e.file.rel.clone(), infer(&e.sig, &hints)))
            .collect(),
    })
}
