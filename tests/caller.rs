//! Model or caller: real recorded traces (tests/callers/caller.py drove the
//! committed fixtures through Python onnxruntime with one mistake each)
//! replayed against the protocol; the feed guard in an `ort` application.

mod common;
use common::*;
use serde_json::Value;
use std::process::Command;

fn replay(trace: &str, model: &str) -> (i32, Value) {
    json(&["replay", "--format", "json", &format!("tests/traces/{trace}.jsonl"), "--model", model])
}

fn errors(r: &Value) -> Vec<(Option<u64>, String, String)> {
    r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] == "error")
        .map(|f| {
            (f["call"].as_u64(), f["code"].as_str().unwrap().to_string(), f["message"].as_str().unwrap().to_string())
        })
        .collect()
}

#[test]
fn correct_callers_pass() {
    for (trace, model) in [
        ("marian-correct", "models/marian-tiny"),
        ("marian-split-correct", "models/marian-tiny"),
        ("gpt2-correct", "models/gpt2-tiny"),
    ] {
        let (code, r) = replay(trace, model);
        assert_eq!((code, r["at_fault"].as_str()), (0, Some("both fine")), "{trace}: {:#?}", errors(&r));
    }
}

#[test]
fn incident_1_the_13_feeds_the_15_input_export_does_not_have() {
    let (code, r) = replay("incident1-28-feeds", "models/marian-15-inputs/decoder_model_merged.onnx");
    assert_eq!(code, 2);
    let e = errors(&r);
    assert_eq!(e[0].0, Some(1));
    assert_eq!(
        e[0].2,
        "you feed 13 inputs this model does not have: past_key_values.{0..5}.encoder.{key,value}, use_cache_branch"
    );
    // Re-running the caller's call reproduces ONNX Runtime's refusal.
    assert!(r["reproduction"]["failed"][1].as_str().unwrap().contains("Invalid input name"), "{:#}", r["reproduction"]);
}

#[test]
fn incident_2_the_workaround_engine_never_uses_the_cache_and_the_cost_is_measured() {
    // Also from a digest-only recorder (issue 42): no values, the branch flag
    // included; the prefix growing by one token a call is the no-cache path's.
    for trace in ["incident2-no-cache", "incident2-no-cache-digests"] {
        let (code, r) = replay(trace, "models/marian-tiny");
        assert_eq!(code, 2, "{trace}");
        assert_eq!(r["at_fault"], "caller", "{trace}");
        let e = errors(&r);
        assert!(
            e.iter().all(|(_, c, _)| c == "caller-no-cache")
                && e.iter().any(|(_, _, m)| m.starts_with("the cache is never used: 5 decoder calls")),
            "{trace}: {e:#?}"
        );
        let cost = &r["cost"];
        assert!(cost["cached_ms"].as_f64().unwrap() > 0.0 && cost["uncached_ms"].as_f64().unwrap() > 0.0, "{cost:#}");
        assert!(cost["trace_ms"].as_f64().unwrap() > 0.0);
        assert_eq!(r["model_check"]["verdict"], "pass");
    }
}

#[test]
fn incident_2_the_dummy_encoder_present_fed_back_at_step_2_is_the_caller() {
    let (code, r) = replay("incident2-dummy-encoder-present", "models/marian-tiny");
    assert_eq!(code, 2);
    assert_eq!(r["at_fault"], "caller");
    let e = errors(&r);
    assert_eq!(e[0].0, Some(3), "decoder step 2 is call 3 (call 0 is the encoder): {e:#?}");
    assert_eq!(e[0].1, "caller-cross-past");
    assert!(e[0].2.starts_with("past_key_values.{0..5}.encoder.{key,value} is [0, 8, 1, 4]"), "{}", e[0].2);
    // ONNX Runtime's own error, reproduced from the caller's shapes and flags…
    assert_eq!(r["reproduction"]["failed"][0], 3);
    assert!(r["reproduction"]["failed"][1].as_str().unwrap().contains("cannot broadcast"), "{:#}", r["reproduction"]);
    // …and the correct protocol passing on the same model.
    assert_eq!(r["model_check"]["verdict"], "pass");
    assert!(r["summary"].as_str().unwrap().starts_with("caller: call 3"));
}

#[test]
fn every_other_recorded_mistake_is_named_at_its_call() {
    let cases = [
        ("marian-fresh-zeros-past", "models/marian-tiny", 2, "caller-past"),
        ("marian-prefix-on-past", "models/marian-tiny", 2, "caller-prefix"),
        ("marian-flag-inconsistent", "models/marian-tiny", 1, "caller-flag"),
        ("marian-flag-false-with-past", "models/marian-tiny", 2, "caller-flag"),
        ("gpt2-mask-new-only", "models/gpt2-tiny", 1, "caller-mask"),
        ("gpt2-positions-restart", "models/gpt2-tiny", 1, "caller-positions"),
        ("gpt2-batch-mismatch", "models/gpt2-tiny", 1, "caller-signature"),
    ];
    for (trace, model, call, code) in cases {
        let (exit, r) = replay(trace, model);
        assert_eq!(exit, 2, "{trace}");
        let e = errors(&r);
        assert_eq!((e[0].0, e[0].1.as_str()), (Some(call), code), "{trace}: {e:#?}");
        assert_eq!(r["model_check"]["verdict"], "pass", "{trace}: the model is fine");
    }
}

#[test]
fn the_feed_guard_refuses_incident_1_before_any_run_and_the_rust_recorder_records_a_replayable_trace() {
    let example =
        std::path::Path::new(env!("CARGO_BIN_EXE_onnx-contract")).parent().unwrap().join("examples").join("feed_guard");
    let out = Command::new(&example)
        .arg(model("marian-15-inputs/decoder_model_merged.onnx"))
        .output()
        .expect("cargo test builds examples");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refused: [caller-signature] you feed 13 inputs this model does not have: past_key_values.{0..5}.encoder.{key,value}, use_cache_branch"), "{err}");
    // The same engine on the right model runs, and its recorded trace replays clean.
    let trace = std::env::temp_dir().join(format!("onnx-contract-rs-trace-{}.jsonl", std::process::id()));
    let out = Command::new(&example).arg(model(MARIAN_MERGED)).args(["--trace", path_str(&trace)]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, r) = json(&["replay", "--format", "json", path_str(&trace), "--model", path_str(&model(MARIAN_MERGED))]);
    assert_eq!((code, r["calls"].as_u64()), (0, Some(1)), "{r:#}");
    let _ = std::fs::remove_file(&trace);
}

#[test]
fn the_python_recorder_passes_its_own_tests() {
    let out = Command::new("python3").arg("tests/callers/test_recorder.py").current_dir(root()).output().unwrap();
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

#[test]
fn the_javascript_recorder_passes_its_own_tests() {
    // onnxruntime-node comes from tests/setup.sh (README's test command runs it first).
    let out = Command::new("node").args(["--test", "tests/callers/test_recorder.mjs"]).current_dir(root()).output();
    let out = out.expect("node (Node.js 20+; tests/setup.sh says how to install it)");
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_trace_with_a_refused_call_is_never_both_fine() {
    let all = [
        ("incident1-28-feeds", "models/marian-15-inputs/decoder_model_merged.onnx"),
        ("incident2-dummy-encoder-present", "models/marian-tiny/decoder_model_merged.onnx"),
        ("marian-fresh-zeros-past", "models/marian-tiny"),
        ("marian-prefix-on-past", "models/marian-tiny"),
        ("marian-flag-inconsistent", "models/marian-tiny"),
        ("marian-flag-false-with-past", "models/marian-tiny"),
        ("gpt2-mask-new-only", "models/gpt2-tiny"),
        ("gpt2-positions-restart", "models/gpt2-tiny"),
        ("gpt2-batch-mismatch", "models/gpt2-tiny"),
    ];
    let mut refused = 0;
    for (trace, model) in all {
        let text = std::fs::read_to_string(root().join(format!("tests/traces/{trace}.jsonl"))).unwrap();
        let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let Some(failed) = lines.iter().find(|l| l.get("error").is_some_and(|e| !e.is_null())) else { continue };
        refused += 1;
        let call = failed["call"].as_u64().unwrap();
        let (exit, r) = replay(trace, model);
        assert_eq!(exit, 2, "{trace}");
        assert_ne!(r["at_fault"], "both fine", "{trace}");
        assert_eq!(r["verdict"], "fail", "{trace}");
        // The refusal itself is an error finding at its call, whatever else was named.
        let e = errors(&r);
        assert!(e.iter().any(|(c, code, _)| *c == Some(call) && code == "caller-error"), "{trace}: {e:#?}");
    }
    assert!(refused >= 2, "the recorded traces hold refused calls");
}

#[test]
fn each_fed_past_is_traced_to_the_output_it_came_from() {
    // Recorded by tests/callers/caller.py driving gpt2-tiny with one mistake each.
    let cases = [
        ("gpt2-swapped-layers", 1, "`past_key_values.0.key` = `present.1.key` of call 0 (another layer's present: the layers are swapped); feed `present.0.key` of call 0"),
        ("gpt2-key-value-swapped", 1, "`past_key_values.0.key` = `present.0.value` of call 0 (the other half of the pair: key and value are swapped)"),
        ("gpt2-stale-past", 2, "`past_key_values.0.key` = `present.0.key` of call 0 (a present from 2 calls back: a stale cache); feed `present.0.key` of call 1"),
    ];
    for (trace, call, said) in cases {
        let (exit, r) = replay(trace, "models/gpt2-tiny");
        assert_eq!(exit, 2, "{trace}");
        assert_eq!(r["at_fault"], "caller", "{trace}");
        let e = errors(&r);
        assert_eq!((e[0].0, e[0].1.as_str()), (Some(call), "caller-past"), "{trace}: {e:#?}");
        assert!(e[0].2.contains(said), "{trace}: {}", e[0].2);
    }
    // The incident: the placeholder is named with the call that returned it, and the fix.
    let (_, r) = replay("incident2-dummy-encoder-present", "models/marian-tiny/decoder_model_merged.onnx");
    let e = errors(&r);
    assert!(
        e[0].2.contains("`past_key_values.0.encoder.key` = `present.0.encoder.key` of call 2, which the cache branch returns as a placeholder; feed call 1's encoder presents for every later call"),
        "{}",
        e[0].2
    );
}

/// A trace of 10,000 real recorded calls: a recorded generation repeated
/// (each repetition a new sequence from an empty past), judged call by call
/// without re-running, in under 2 s; the mistake of the stale-past caller is
/// found in every repetition and said once, with the first calls it recurs at.
#[test]
fn ten_thousand_calls_replay_without_re_running_in_under_two_seconds() {
    // A format-2 beam trace too: every past a gather of the previous present's rows.
    for (source, model, expect) in [
        ("gpt2-correct", "models/gpt2-tiny", None),
        ("gpt2-stale-past", "models/gpt2-tiny", Some("caller-past")),
        ("optimum-beam3", "models/llama-tiny", None),
    ] {
        let lines: Vec<Value> = std::fs::read_to_string(root().join(format!("tests/traces/{source}.jsonl")))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|l| l.get("call").is_some())
            .collect();
        let path = std::env::temp_dir().join(format!("onnx-contract-10k-{source}-{}.jsonl", std::process::id()));
        let mut text = String::new();
        for call in 0..10_000 {
            let mut l = lines[call % lines.len()].clone();
            l["call"] = call.into();
            text.push_str(&l.to_string());
            text.push('\n');
        }
        std::fs::write(&path, text).unwrap();
        let t = std::time::Instant::now();
        let (code, r) = json(&["replay", "--format", "json", "--static-only", path_str(&path), "--model", model]);
        let took = t.elapsed();
        let _ = std::fs::remove_file(&path);
        assert!(took < std::time::Duration::from_secs(2), "{source}: 10,000 calls took {took:?}");
        assert_eq!(r["calls"], 10_000);
        let e = errors(&r);
        match expect {
            None => assert_eq!((code, e.len(), r["at_fault"].as_str()), (0, 0, Some("undecided")), "{r:#}"),
            Some(c) => {
                assert_eq!((code, e.len(), e[0].1.as_str()), (2, 1, c), "{r:#}");
                assert!(e[0].2.contains("(again at calls 4, 7, 9, 12, 14, 17, 19, 22 and 3991 more)"), "{}", e[0].2);
            }
        }
    }
}

/// Real callers of every cache form beyond a growing optimum cache
/// (tests/callers/forms.py): a correct caller of each is both fine; each
/// mistake is named at its call with what to feed instead.
#[test]
fn every_cache_form_is_judged_from_the_plan_check_drives() {
    for (trace, model) in [
        ("static-cache-correct", "models/static-cache-llama"),
        ("genai-shared-buffer-correct", "models/llama-genai"),
        ("genai-hybrid-correct", "models/lfm2-genai"),
        ("embeds-chained-correct", "models/tjs-vlm"),
        ("gpt2-chunk-after-past", "models/gpt2-tiny"),
    ] {
        let (code, r) = replay(trace, model);
        assert_eq!((code, r["at_fault"].as_str()), (0, Some("both fine")), "{trace}: {r:#}");
        assert!(errors(&r).is_empty(), "{trace}: {:?}", errors(&r));
    }
    for (trace, model, call, code, says) in [
        (
            "static-cache-position-stuck",
            "models/static-cache-llama",
            1,
            "caller-positions",
            "`cache_position` is [0]; after 1 token the slots written are [1]",
        ),
        (
            "genai-hybrid-conv-reset",
            "models/lfm2-genai",
            2,
            "caller-past",
            "`past.0.conv` is fresh zeros [1, 64, 2] (a state is carried from call to call, never zeroed again); feed `present.0.conv` of call 1",
        ),
        (
            "gpt2-chunk-positions-restart",
            "models/gpt2-tiny",
            3,
            "caller-positions",
            "`position_ids` is [0, 1, 2]; after a past of 6 the positions are [6, 7, 8]",
        ),
        (
            "embeds-stale",
            "models/tjs-vlm",
            5,
            "caller-embeds",
            "`inputs_embeds` = `inputs_embeds` of call 2 (embed_tokens.onnx on ids [982]), not of call 4 on ids [675]",
        ),
    ] {
        let (exit, r) = replay(trace, model);
        let e = errors(&r);
        assert_eq!((exit, r["at_fault"].as_str()), (2, Some("caller")), "{trace}: {r:#}");
        assert_eq!((e[0].0, e[0].1.as_str()), (Some(call), code), "{trace}: {e:#?}");
        assert!(e[0].2.contains(says), "{trace}: {}", e[0].2);
        assert_eq!(r["model_check"]["verdict"], "pass", "{trace}: the model is fine");
    }
}

/// A JavaScript caller (tests/callers/caller.mjs, onnxruntime-node 1.30.0,
/// recorded by js/onnx-contract-trace.mjs): the correct GPT-2 loop is both
/// fine with every digest equal to the Python recording's, and the founding
/// incident written in JS is the caller at call 3, with the provenance and the fix.
#[test]
fn a_javascript_caller_is_judged_like_a_python_one() {
    let (code, r) = replay("js-gpt2-correct", "models/gpt2-tiny");
    assert_eq!((code, r["at_fault"].as_str()), (0, Some("both fine")), "{r:#}");
    let digests = |trace: &str| -> Vec<String> {
        std::fs::read_to_string(root().join(format!("tests/traces/{trace}.jsonl")))
            .unwrap()
            .lines()
            .flat_map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                let mut d: Vec<String> = ["feeds", "outputs"]
                    .iter()
                    .flat_map(|part| {
                        v[part]
                            .as_object()
                            .unwrap()
                            .iter()
                            .map(|(n, t)| format!("{n}={}", t["digest"]))
                            .collect::<Vec<_>>()
                    })
                    .collect();
                d.sort();
                d
            })
            .collect()
    };
    assert_eq!(digests("js-gpt2-correct"), digests("gpt2-correct"), "one tensor, one digest, in both recorders");
    let (code, r) = replay("js-marian-dummy-encoder-present", "models/marian-tiny/decoder_model_merged.onnx");
    assert_eq!((code, r["at_fault"].as_str()), (2, Some("caller")), "{r:#}");
    let e = errors(&r);
    assert_eq!((e[0].0, e[0].1.as_str()), (Some(3), "caller-cross-past"), "{e:#?}");
    assert!(e[0].2.contains("`past_key_values.0.encoder.key` = `present.0.encoder.key` of call 2, which the cache branch returns as a placeholder; feed call 1's encoder presents for every later call"), "{}", e[0].2);
}

/// Real clients (tests/callers/clients.py, tests/callers/tjs/clients.mjs;
/// trace format 2): each correct one "both fine" with its decoding strategy
/// inferred; each broken twin named at its first wrong call, with the beam
/// origins or the crop length in the text.
#[test]
fn real_clients_replay_with_their_strategy_and_their_broken_twins_are_named() {
    // (trace, model, at fault, the decoding line contains, first error: (code, call, text))
    type Case = (&'static str, &'static str, &'static str, &'static str, Option<(&'static str, u64, &'static str)>);
    let cases: &[Case] = &[
        (
            "optimum-beam3",
            "models/llama-tiny",
            "both fine",
            "beam search, 3 beams; cache reordered at calls 2, 3, 4, 5",
            None,
        ),
        (
            "optimum-beam3-no-reorder",
            "models/llama-tiny",
            "caller",
            "beam search, 3 beams; the cache NOT reordered",
            Some(("caller-beams", 2, "came from rows [0, 0, 0] of call 1")),
        ),
        // Two prompts of 20 and 23 tokens, left-padded, × 4 beams: rows = batch × beams.
        (
            "optimum-beam4-long",
            "models/llama-tiny",
            "both fine",
            "beam search, 4 beams × batch 2; cache reordered at calls 2, 3, 4, 5, 6, 7",
            None,
        ),
        (
            "optimum-beam4-long-no-reorder",
            "models/llama-tiny",
            "caller",
            "beam search, 4 beams × batch 2; the cache NOT reordered",
            Some(("caller-beams", 2, "with beam_idx [0, 1, 0, 1, 7, 7, 4, 4]")),
        ),
        // A hand-written beam loop that forgot to expand the encoder states: ONNX Runtime fails.
        (
            "optimum-seq2seq-beam2-no-expand",
            "models/marian-tiny",
            "caller",
            "",
            Some(("caller-beams", 1, "are not expanded per beam; repeat each source's rows 2 times")),
        ),
        // The same beam client as a format-1 recorder writes it (no rows: tests/callers/to_v1.py):
        // the rows come from the re-run, bit-exact with the caller's run.
        (
            "optimum-beam3-v1",
            "models/llama-tiny",
            "both fine",
            "beam search, 3 beams; cache reordered at calls 2, 3, 4, 5",
            None,
        ),
        (
            "optimum-beam3-no-reorder-v1",
            "models/llama-tiny",
            "caller",
            "beam search, 3 beams; the cache NOT reordered",
            Some(("caller-beams", 2, "is rows [0, 1, 2] (the present as returned, not reordered)")),
        ),
        // Two left-padded prompts × 4 beams as an application's own logger writes them (every
        // integer as values, floats as digests, no rows: to_v1.py --keep-ints): beams whose
        // origins the running scores do not predict are found by trying every gather's digest.
        // Layer 0's gathers are shown. Layer 1's re-run is bit-exact with the caller's on some
        // machines and not on others (ONNX Runtime's kernels differ by CPU): where it is, its
        // gathers are checked too ("both fine"); where not, its rows cannot be checked and that
        // is said, not settled by layer 0's ("cannot tell"). Never "caller".
        (
            "optimum-beam4-long-ints-v1",
            "models/llama-tiny",
            "both fine or cannot tell",
            "beam search, 4 beams × batch 2; cache reordered at calls 2, 3, 4, 5, 6, 7",
            None,
        ),
        // Layer 1 fed as it came out while layer 0 is reordered: every layer is reordered alike.
        (
            "optimum-beam4-long-layer1-not-reordered-ints-v1",
            "models/llama-tiny",
            "caller",
            "",
            Some(("caller-past", 2, "is call 1's present as it came out, while `past_key_values.0.key` is that call's present gathered by rows")),
        ),
        // A wrong layer-1 past where that layer's re-run is bit-exact: its gather's digest is known.
        (
            "optimum-beam3-layer1-garbage-v1",
            "models/llama-tiny",
            "caller",
            "",
            Some(("caller-past", 3, "is not call 2's present gathered by rows [1, 0, 0]")),
        ),
        (
            "optimum-beam4-long-no-reorder-ints-v1",
            "models/llama-tiny",
            "caller",
            "beam search, 4 beams × batch 2; the cache NOT reordered",
            Some(("caller-beams", 2, "with beam_idx [0, 1, 0, 1, 7, 7, 4, 4]")),
        ),
        (
            "optimum-seq2seq-beam2",
            "models/marian-tiny",
            "both fine",
            "beam search, 2 beams; cache reordered at calls 3, 4",
            None,
        ),
        // The seq2seq beam client as a format-1 recorder writes it: a reorder shown on one layer's
        // rows (the re-run's) settles the layers whose rows the trace cannot give.
        (
            "optimum-seq2seq-beam2-v1",
            "models/marian-tiny",
            "both fine",
            "beam search, 2 beams; cache reordered at calls 3, 4",
            None,
        ),
        (
            "optimum-seq2seq-beam2-no-reorder",
            "models/marian-tiny",
            "caller",
            "beam search, 2 beams; the cache NOT reordered",
            Some(("caller-beams", 3, "index_select on the batch axis with beam_idx [0, 0]")),
        ),
        (
            "optimum-greedy-padded",
            "models/gpt2-tiny",
            "both fine",
            "greedy (every next token its row's argmax), batch of 2 (left-padded)",
            None,
        ),
        (
            "optimum-greedy-padded-no-positions",
            "models/gpt2-tiny",
            "caller",
            "greedy",
            Some((
                "caller-positions",
                0,
                "row 1 is [0, 1, 2, 3, 4] where its mask [0, 0, 1, 1, 1] places its tokens at [_, _, 0, 1, 2]",
            )),
        ),
        ("optimum-sample-topk", "models/llama-tiny", "both fine", "sampling (5 of 5 tokens not the argmax", None),
        ("speculative-correct", "models/gpt2-tiny", "both fine", "several tokens per call at 3 calls", None),
        (
            "speculative-no-crop",
            "models/gpt2-tiny",
            "caller",
            "several tokens per call",
            Some(("caller-crop", 3, "crop every past to 10 on axis 2")),
        ),
        ("tjs-greedy", "models/tjs-variants", "both fine", "greedy (every next token its row's argmax)", None),
        (
            "tjs-greedy-no-past-update",
            "models/tjs-variants",
            "caller",
            "greedy",
            Some(("caller-past", 2, "a stale cache")),
        ),
        (
            "tjs-translation",
            "models/bart-tjs",
            "both fine",
            "greedy (every next token its row's argmax, but for token 2 passed over",
            None,
        ),
        (
            "tjs-translation-no-past-update",
            "models/bart-tjs",
            "caller",
            "greedy",
            Some(("caller-past", 3, "a stale cache")),
        ),
    ];
    for (trace, model, fault, decoding, first) in cases {
        let path = format!("tests/traces/{trace}.jsonl");
        let (code, r) = json(&["replay", "--format", "json", &path, "--model", model]);
        let at_fault = r["at_fault"].as_str().unwrap_or_default();
        assert!(fault.split(" or ").any(|f| f == at_fault), "{trace}: {}", r["summary"]);
        assert_eq!(code, if matches!(at_fault, "both fine" | "cannot tell") { 0 } else { 2 }, "{trace}");
        let line = r["decoding"].as_str().unwrap_or_default();
        assert!(line.contains(decoding), "{trace}: decoding {line:?}");
        let fed = r["reproduction"]["fed"].to_string();
        assert_eq!(
            trace.ends_with("-v1"),
            fed.contains("row digests the trace lacks: computed from the re-run"),
            "{trace}: {fed}"
        );
        let errors: Vec<&Value> =
            r["findings"].as_array().unwrap().iter().filter(|f| f["severity"] == "error").collect();
        match first {
            None => assert!(errors.is_empty(), "{trace}: {errors:#?}"),
            Some((code, call, text)) => {
                let e = errors.first().unwrap_or_else(|| panic!("{trace}: no error"));
                assert_eq!((e["code"].as_str(), e["call"].as_u64()), (Some(*code), Some(*call)), "{trace}: {e:#}");
                assert!(e["message"].as_str().unwrap().contains(text), "{trace}: {}", e["message"]);
                assert!(
                    r["summary"].as_str().unwrap().starts_with(&format!("caller: call {call}: ")),
                    "{trace}: {}",
                    r["summary"]
                );
            }
        }
    }
}

/// The seed incident as a foreign recorder writes it (no header, no encoder
/// call, no values, digests over raw bytes): the placeholder is named by its
/// shape alone, the branch flag of the re-run comes from the protocol, and the
/// re-run fails where the trace records the failure.
#[test]
fn the_seed_incident_from_a_digest_only_recorder_is_named_by_shape() {
    let (code, r) = json(&[
        "replay",
        "--format",
        "json",
        "tests/traces/incident2-raw-digests.jsonl",
        "--model",
        "models/marian-tiny",
    ]);
    assert_eq!((code, r["at_fault"].as_str()), (2, Some("caller")), "{r:#}");
    let first = r["findings"].as_array().unwrap().iter().find(|f| f["severity"] == "error").unwrap();
    assert_eq!((first["code"].as_str(), first["call"].as_u64()), (Some("caller-cross-past"), Some(2)), "{first:#}");
    assert!(first["message"].as_str().unwrap().contains("[0, 8, 1, 4]: the cached branch's dummy"), "{first:#}");
    let rep = &r["reproduction"];
    assert_eq!(rep["failed"][0].as_u64(), Some(2), "{rep:#}");
    let fed = rep["fed"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect::<Vec<_>>().join("\n");
    assert!(
        fed.contains("use_cache_branch")
            && !fed.lines().any(|l| l.starts_with("seeded") && l.contains("use_cache_branch")),
        "{fed}"
    );
    let summary = r["summary"].as_str().unwrap();
    assert!(!summary.contains("without an error"), "the trace records call 2's error: {summary}");
}

/// Correct real clients the tool was not built on (tests/traces/stress:
/// beams finishing early, several returned sequences, penalties, beam
/// sampling, several samples of one prompt, padded batches): each is "both
/// fine". Several samples of one prompt are expanded like beams; their
/// tokens are draws, not the best candidates, so they are independent rows.
#[test]
fn correct_real_clients_the_tool_was_not_built_on_are_both_fine() {
    let dir = root().join("tests/traces/stress");
    let mut traces: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    traces.sort();
    assert!(traces.len() >= 30, "{traces:?}");
    // Two at a time: the machine has two cores.
    let judge = |t: &std::path::PathBuf| {
        let name = t.file_name().unwrap().to_string_lossy().into_owned();
        let model = format!("models/{}-tiny", name.split('-').next().unwrap());
        let (code, r) = json(&["replay", "--format", "json", path_str(t), "--model", &model]);
        (name, code, r["at_fault"].as_str().unwrap_or("?").to_string(), r["decoding"].to_string())
    };
    let (a, b) = traces.split_at(traces.len() / 2);
    let results: Vec<_> = std::thread::scope(|s| {
        let h = s.spawn(|| a.iter().map(judge).collect::<Vec<_>>());
        let mut mine: Vec<_> = b.iter().map(judge).collect();
        let mut all = h.join().unwrap();
        all.append(&mut mine);
        all
    });
    for (name, code, fault, decoding) in &results {
        assert_eq!((*code, fault.as_str()), (0, "both fine"), "{name}: {decoding}");
        if name.contains("sample-ret") {
            assert!(decoding.contains("sampling"), "{name}: {decoding}");
        }
        if name.contains("-beam") && !name.contains("sample") {
            assert!(decoding.contains("beam search"), "{name}: {decoding}");
        }
    }
}
