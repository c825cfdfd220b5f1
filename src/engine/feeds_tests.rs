//! The feed builder and the plan on every family fixture, without ONNX Runtime.

use super::*;
use crate::contract::Contract;
use crate::plan;
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The contract of `spec` with the `--param` line its header gives for the tiny fixture.
fn tiny_contract(spec: &str) -> Contract {
    let path = root().join("specs").join(spec);
    let text = std::fs::read_to_string(&path).unwrap();
    let params: Vec<(String, i64)> = text
        .lines()
        .take_while(|l| l.starts_with('#'))
        .flat_map(|l| l.split("--param ").skip(1))
        .map(|p| {
            let (k, v) = p.trim().split_once('=').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect();
    Contract::load(&path, &params).unwrap()
}

fn plan_for(model: &str, spec: &str) -> Plan {
    let sig = crate::model::reader::read_signature(&root().join("models").join(model)).unwrap();
    plan::build(&sig, &tiny_contract(spec), 1).unwrap_or_else(|e| panic!("{model}: {e}"))
}

fn by_name<'a>(feeds: &'a [Feed], name: &str) -> &'a Feed {
    feeds.iter().find(|f| f.name == name).unwrap_or_else(|| panic!("no feed {name}"))
}

fn ints(f: &Feed) -> Vec<i64> {
    match &f.values {
        Values::Int(a) => a.iter().copied().collect(),
        other => panic!("{} is not ints: {other:?}", f.name),
    }
}

fn flag(f: &Feed) -> bool {
    match &f.values {
        Values::Bool(a) => a[[0]],
        other => panic!("{} is not a flag: {other:?}", f.name),
    }
}

/// Outputs as a model honouring its contract would return them at `step`.
fn fake_outputs(plan: &Plan, present_len: i64, enc_len: i64, step: usize) -> Outputs {
    let mut floats = HashMap::new();
    let mut infos = Vec::new();
    let mut put = |name: &str, shape: Vec<i64>, fill: f32| {
        let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
        floats.insert(name.to_string(), ArrayD::from_elem(IxDyn(&dims), fill));
        infos.push(TensorInfo { name: name.to_string(), dtype: ElemType::F32, shape: Some(shape) });
    };
    for c in &plan.self_past {
        let mut s = c.shape.clone();
        s[plan.seq_axis] = present_len;
        put(&c.present, s, step as f32 + 1.0);
    }
    for c in &plan.cross_past {
        let mut s = c.shape.clone();
        // Cached steps of merged decoders return [0, heads, 1, head_dim] dummies.
        if step == 0 {
            s[plan.seq_axis] = enc_len;
        } else {
            s[0] = 0;
            s[plan.seq_axis] = 1;
        }
        put(&c.present, s, -1.0);
    }
    Outputs { floats, infos }
}

#[test]
fn plans_for_every_family_fixture() {
    let cases = [
        ("marian-tiny/decoder_model_merged.onnx", "marian-decoder-merged.yaml", Family::Seq2Seq, 12, 12, true),
        ("bart-tiny/decoder_model_merged.onnx", "bart-decoder-merged.yaml", Family::Seq2Seq, 4, 4, true),
        ("t5-tiny/decoder_model_merged.onnx", "t5-decoder-merged.yaml", Family::Seq2Seq, 4, 4, true),
        ("whisper-tiny/decoder_model_merged.onnx", "whisper-decoder-merged.yaml", Family::Seq2Seq, 4, 4, true),
        ("gpt2-tiny/model.onnx", "gpt2-decoder.yaml", Family::DecoderOnly, 4, 0, false),
        ("llama-tiny/model.onnx", "llama-decoder.yaml", Family::DecoderOnly, 4, 0, false),
        ("qwen2-tiny/model.onnx", "qwen2-decoder.yaml", Family::DecoderOnly, 4, 0, false),
    ];
    for (model, spec, family, n_self, n_cross, flag) in cases {
        let p = plan_for(model, spec);
        assert_eq!(p.family, family, "{model}");
        assert_eq!((p.self_past.len(), p.cross_past.len()), (n_self, n_cross), "{model}");
        assert_eq!(p.branch_flag.is_some(), flag, "{model}");
        assert!(p.unknown_inputs.is_empty(), "{model}: {:?}", p.unknown_inputs);
        assert_eq!(p.vocab, 1000, "{model}");
        for c in p.self_past.iter().chain(&p.cross_past) {
            assert_eq!(c.shape[p.seq_axis], 0, "{model}: {}", c.past);
            assert_eq!(c.dtype, ElemType::F32);
            assert!(c.present.starts_with("present."), "{}", c.present);
        }
        let want_lens: &[i64] = if family == Family::Seq2Seq { &[0, 1] } else { &[0] };
        assert_eq!(p.step0_past_lengths, want_lens, "{model}");
    }
    // Grouped-query attention: the past's head axis is the KV heads (2), not the 4 heads.
    assert_eq!(plan_for("llama-tiny/model.onnx", "llama-decoder.yaml").self_past[0].shape, [1, 2, 0, 8]);
}

#[test]
fn merged_seq2seq_feeds_for_steps_0_to_3() {
    let plan = plan_for("marian-tiny/decoder_model_merged.onnx", "marian-decoder-merged.yaml");
    let enc = ArrayD::from_elem(IxDyn(&[1, 7, 32]), 0.5f32);
    for dummy in [0, 1] {
        let mut cache = Cache::empty(&plan, dummy);
        let mut tokens = vec![vec![999i64]];
        let mut new = tokens.clone();
        for step in 0..4usize {
            let input = StepInput { step, new_tokens: &new, encoder_states: Some(&enc), enc_len: 7 };
            let feeds = cached_step(&plan, &input, &cache);
            assert_eq!(feeds.len(), 28, "every input of the merged decoder");
            assert_eq!(flag(by_name(&feeds, "use_cache_branch")), step > 0);
            assert_eq!(by_name(&feeds, "input_ids").shape(), [1, 1]);
            assert_eq!(by_name(&feeds, "encoder_hidden_states").shape(), [1, 7, 32]);
            assert_eq!(ints(by_name(&feeds, "encoder_attention_mask")), vec![1; 7]);
            // Self past: the dummy at step 0, then past + one token per step.
            let self_len = if step == 0 { dummy } else { step as i64 };
            assert_eq!(by_name(&feeds, "past_key_values.5.decoder.value").shape(), [1, 8, self_len, 4]);
            // Cross past: the dummy at step 0, then step 0's encoder present, never the later dummies.
            let cross = by_name(&feeds, "past_key_values.0.encoder.key");
            assert_eq!(cross.shape(), if step == 0 { vec![1, 8, dummy, 4] } else { vec![1, 8, 7, 4] });
            if step > 0 {
                assert_eq!(cross.values, Values::Float(ArrayD::from_elem(IxDyn(&[1, 8, 7, 4]), -1.0)));
            }
            // The uncached recompute: the whole prefix on the no-cache branch.
            let un = uncached(&plan, &tokens, Some(&enc), 7, Uncached::SameModel { dummy }, &cache);
            assert_eq!(un.len(), 28);
            assert!(!flag(by_name(&un, "use_cache_branch")));
            assert_eq!(by_name(&un, "input_ids").shape(), [1, step as i64 + 1]);
            assert_eq!(by_name(&un, "past_key_values.0.decoder.key").shape(), [1, 8, dummy, 4]);
            // A separate no-past decoder gets only the ids and the encoder side.
            let sep = uncached(&plan, &tokens, Some(&enc), 7, Uncached::SeparateModel, &cache);
            let names: Vec<&str> = sep.iter().map(|f| f.name.as_str()).collect();
            assert_eq!(names, ["input_ids", "encoder_hidden_states", "encoder_attention_mask"]);

            let present_len = if input.cached(&plan) { cache.past_len + 1 } else { 1 };
            cache.advance(&plan, &fake_outputs(&plan, present_len, 7, step), step, present_len);
            tokens[0].push(3 + step as i64);
            new = vec![vec![3 + step as i64]];
        }
    }
}

#[test]
fn decoder_only_feeds_mask_past_plus_new_and_positions_continue() {
    let plan = plan_for("gpt2-tiny/model.onnx", "gpt2-decoder.yaml");
    let mut cache = Cache::empty(&plan, 0);
    let prompt = vec![vec![5i64, 6, 7, 8]];
    let step0 =
        cached_step(&plan, &StepInput { step: 0, new_tokens: &prompt, encoder_states: None, enc_len: 0 }, &cache);
    assert_eq!(ints(by_name(&step0, "attention_mask")), [1, 1, 1, 1]);
    assert_eq!(ints(by_name(&step0, "position_ids")), [0, 1, 2, 3]);
    assert_eq!(by_name(&step0, "past_key_values.1.key").shape(), [1, 4, 0, 8]);
    cache.advance(&plan, &fake_outputs(&plan, 4, 0, 0), 0, 4);
    let one = vec![vec![9i64]];
    let step1 = cached_step(&plan, &StepInput { step: 1, new_tokens: &one, encoder_states: None, enc_len: 0 }, &cache);
    assert_eq!(by_name(&step1, "input_ids").shape(), [1, 1]);
    assert_eq!(ints(by_name(&step1, "attention_mask")), [1; 5], "the mask covers past + new");
    assert_eq!(ints(by_name(&step1, "position_ids")), [4], "positions continue the past");
    assert_eq!(by_name(&step1, "past_key_values.0.value").shape(), [1, 4, 4, 8]);
    let un = uncached(&plan, &[vec![5, 6, 7, 8, 9]], None, 0, Uncached::SameModel { dummy: 0 }, &cache);
    assert_eq!(ints(by_name(&un, "position_ids")), [0, 1, 2, 3, 4]);
    assert_eq!(by_name(&un, "past_key_values.0.value").shape(), [1, 4, 0, 8]);
}

#[test]
fn feeds_take_the_element_type_the_model_declares() {
    let mut plan = plan_for("gpt2-tiny/model.onnx", "gpt2-decoder.yaml");
    plan.input_ids_dtype = ElemType::I32;
    plan.self_past[0].dtype = ElemType::F16;
    plan.dtypes.retain(|(n, _)| n != "attention_mask");
    plan.dtypes.push(("attention_mask".into(), ElemType::I32));
    let cache = Cache::empty(&plan, 0);
    let ids = vec![vec![1i64, 2]];
    let feeds = cached_step(&plan, &StepInput { step: 0, new_tokens: &ids, encoder_states: None, enc_len: 0 }, &cache);
    assert_eq!(by_name(&feeds, "input_ids").elem, ElemType::I32);
    assert_eq!(by_name(&feeds, "attention_mask").elem, ElemType::I32);
    assert_eq!(by_name(&feeds, &plan.self_past[0].past).elem, ElemType::F16);
    assert_eq!(by_name(&feeds, &plan.self_past[1].past).elem, ElemType::F32);
    assert_eq!(by_name(&feeds, "input_ids").info().dtype, ElemType::I32);
}

#[test]
fn seeded_prompts_are_reproducible_and_in_vocabulary() {
    let plan = plan_for("gpt2-tiny/model.onnx", "gpt2-decoder.yaml");
    let a = prompt(&plan, 2, 4, 0, &mut Rng::seeded(7));
    assert_eq!(a, prompt(&plan, 2, 4, 0, &mut Rng::seeded(7)));
    assert_ne!(a, prompt(&plan, 2, 4, 0, &mut Rng::seeded(8)));
    assert!(a.iter().flatten().all(|&t| (0..1000).contains(&t)));
    let seq = plan_for("t5-tiny/decoder_model_merged.onnx", "t5-decoder-merged.yaml");
    assert_eq!(prompt(&seq, 2, 4, 0, &mut Rng::seeded(7)), [[0], [0]]);
}

#[test]
fn a_digest_only_call_is_re_fed_positions_that_continue_its_past_and_chained_pasts() {
    use crate::engine::options::{ReplayCall, ReplayFeed};
    use crate::engine::replay::{feeds, Chain, FeedSource};
    let plan = plan_for("gpt2-tiny/model.onnx", "gpt2-decoder.yaml");
    let feed = |n: &str, dtype: &str, shape: Vec<i64>, digest: Option<&str>| ReplayFeed {
        name: n.to_string(),
        dtype: dtype.to_string(),
        shape,
        value: None,
        digest: digest.map(str::to_string),
        zeros: false,
        rows: None,
    };
    let mut fed = vec![
        feed("input_ids", "int64", vec![1, 1], None),
        feed("attention_mask", "int64", vec![1, 6], None),
        feed("position_ids", "int64", vec![1, 1], None),
    ];
    for c in &plan.self_past {
        fed.push(feed(&c.past, "float32", vec![1, 4, 5, 8], Some("sha1:same")));
    }
    let call = ReplayCall {
        call: 3,
        feeds: fed,
        outputs: Vec::new(),
        output_rows: Vec::new(),
        model: None,
        watch: Vec::new(),
    };
    let got = feeds(&plan, &call, &mut Rng::seeded(0), &mut Chain::default());
    let ints = |name: &str| match &got.iter().find(|(f, _)| f.name == name).unwrap().0.values {
        Values::Int(a) => a.iter().copied().collect::<Vec<i64>>(),
        _ => panic!("{name} is not ints"),
    };
    let source = |name: &str| got.iter().find(|(f, _)| f.name == name).unwrap().1;
    // Not a value below the vocabulary (a position a small model has no row for): the past's length.
    assert_eq!(ints("position_ids"), [5]);
    assert_eq!(source("position_ids"), FeedSource::Protocol);
    assert_eq!(ints("attention_mask"), [1; 6]);
    assert!(ints("input_ids")[0] < 1000);
    assert_eq!(source("input_ids"), FeedSource::Seeded);
    // One digest, one tensor: every past with the digest gets the same seeded values.
    let floats: Vec<_> = plan
        .self_past
        .iter()
        .map(|c| match &got.iter().find(|(f, _)| f.name == c.past).unwrap().0.values {
            Values::Float(a) => a.clone(),
            _ => panic!("a past is float"),
        })
        .collect();
    assert!(floats.windows(2).all(|w| w[0] == w[1]));
}

/// The plan `check` infers for the only decoder of folder `models/<dir>`.
fn folder_plan(dir: &str) -> Plan {
    let layout = crate::folder::layout::Layout::read(&root().join("models").join(dir), None, None).unwrap();
    let e = layout.entries.first().unwrap();
    layout.plan_for(e, 1).unwrap().unwrap()
}

#[test]
fn a_caller_kept_buffer_takes_the_new_rows_where_its_form_puts_them() {
    use crate::plan::roles::CacheForm;
    let mut plan = folder_plan("static-cache-with-mask");
    let c = plan.self_past[0].clone();
    let buffer = ArrayD::from_shape_fn(IxDyn(&[1, 1, 4, 2]), |i| (i[2] * 10 + i[3]) as f32);
    let rows = ArrayD::from_elem(IxDyn(&[1, 1, 1, 2]), -1.0f32);
    let slot = |a: &ArrayD<f32>, s: usize| a.index_axis(ndarray::Axis(2), s).iter().copied().collect::<Vec<f32>>();
    // A static cache's present is the whole buffer: fed back as it came out.
    assert_eq!(carried(&plan, &c, &buffer, &buffer.mapv(|v| v + 1.0), 3), buffer.mapv(|v| v + 1.0));
    // Written by the caller: the new row at the slot its token fills (tokens so far − 1).
    plan.buffer.as_mut().unwrap().form = CacheForm::CallerWritten;
    let w = carried(&plan, &c, &buffer, &rows, 3);
    assert_eq!(slot(&w, 2), vec![-1.0, -1.0]);
    assert_eq!((slot(&w, 0), slot(&w, 1), slot(&w, 3)), (vec![0.0, 1.0], vec![10.0, 11.0], vec![30.0, 31.0]));
    // Rolled by the caller: the oldest row dropped, the new one at the end.
    plan.buffer.as_mut().unwrap().form = CacheForm::CallerRolled;
    let r = carried(&plan, &c, &buffer, &rows, 3);
    assert_eq!((slot(&r, 0), slot(&r, 2), slot(&r, 3)), (vec![10.0, 11.0], vec![30.0, 31.0], vec![-1.0, -1.0]));
    // The rolled form's mask is right-aligned: ones over the last past + new slots.
    let mut feeds = Vec::new();
    placement(&plan, 1, 1, 2, vec![1; 3], vec![2], &mut feeds);
    let mask = ints(by_name(&feeds, plan.attention_mask.as_deref().unwrap()));
    assert_eq!(&mask[..], &[&vec![0; 29][..], &[1, 1, 1]].concat()[..]);
}
