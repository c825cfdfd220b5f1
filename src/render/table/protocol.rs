//! The built-in contracts, a model's protocol for its caller, and a replay
//! of a caller's trace, as text.

use super::{fit, new_table, paint, set_style, style, Style};
use crate::plan::roles::{CacheForm, InputRole};
use std::fmt::Write;

/// `specs`: every built-in contract, the model types that choose it, its defaults.
pub fn builtin_specs(list: &[crate::contract::builtin::Listed]) -> String {
    let mut t = new_table(&["contract", "chosen for model_type", "params (defaults)"]);
    for l in list {
        let params: Vec<String> = l.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let types = if l.model_types.is_empty() { "(by signature)".to_string() } else { l.model_types.join(", ") };
        t.add_row(vec![l.name.to_string(), types, params.join(" ")]);
    }
    format!("{t}\n`onnx-contract specs NAME` prints one; `check --contract NAME` uses one.\n")
}

/// `protocol`: per decoder form, the files, the feeds of step 0 and of every
/// later step with their shapes at steps 0–2, and the rules. At most 100
/// columns when the terminal says nothing (it is read, and pasted).
pub fn protocol(p: &crate::protocol::Protocol) -> String {
    let outer = style();
    set_style(Style { width: Some(outer.width.unwrap_or(100)), ..outer });
    let mut out = format!("{}: how to call it", p.path);
    if let Some(t) = &p.model_type {
        let _ = write!(out, " (model_type {t})");
    }
    out.push('\n');
    let mut files = new_table(&["file", "role"]);
    for (f, r) in &p.files {
        files.add_row(vec![f.clone(), r.clone()]);
    }
    let _ = writeln!(out, "{files}");
    if p.loops.is_empty() {
        out.push_str("no decoder with a KV cache to drive here\n");
    }
    for l in &p.loops {
        let _ = writeln!(out, "\n━━ {} ━━", l.form);
        let mut order = Vec::new();
        if let Some(e) = &l.encoder {
            order.push(format!("{e} once on the source"));
        }
        if l.form == "encoder-alone" {
            order.push(format!("{} once per batch of texts", l.later_file));
        } else if l.step0_file == l.later_file {
            order.push(format!("{} at every step", l.later_file));
        } else {
            order.push(format!("{} at step 0", l.step0_file));
            order.push(format!("{} at every later step", l.later_file));
        }
        let _ = writeln!(out, "run: {}", order.join(", then "));
        if let Some(s) = l.decoder_start {
            let _ = write!(out, "decoder start token {s}");
            if let Some(e) = l.eos {
                let _ = write!(out, ", stop at {e}");
            }
            out.push('\n');
        } else if let Some(e) = l.eos {
            let _ = writeln!(out, "stop at token {e}");
        }
        if !l.encoder_feeds.is_empty() {
            let mut t = new_table(&["encoder input", "dtype", "shape", "value"]);
            for r in &l.encoder_feeds {
                t.add_row(vec![r.name.clone(), r.dtype.clone(), r.shape.clone(), r.source.clone()]);
            }
            let _ = writeln!(out, "{t}");
        }
        for s in &l.steps {
            let _ = writeln!(out, "{} — {}:", s.step, s.file);
            let mut t = new_table(&["input", "dtype", "shape", "value"]);
            for r in &s.feeds {
                t.add_row(vec![r.name.clone(), r.dtype.clone(), r.shape.clone(), r.source.clone()]);
            }
            let _ = writeln!(out, "{t}");
        }
        let mut t = new_table(&["input", "step 0", "step 1", "step 2"]);
        let mut seen = Vec::new();
        for s in &l.steps {
            for (name, at) in &s.examples {
                match seen.iter().position(|(n, _): &(String, Vec<String>)| n == name) {
                    Some(i) => {
                        for (k, v) in at.iter().enumerate() {
                            if v != "—" {
                                seen[i].1[k] = v.clone();
                            }
                        }
                    }
                    None => seen.push((name.clone(), at.clone())),
                }
            }
        }
        for (name, at) in seen {
            let mut row = vec![name];
            row.extend(at);
            t.add_row(row);
        }
        let _ = writeln!(out, "shapes at batch 1:\n{t}");
        let _ = writeln!(out, "rules:");
        for r in &l.rules {
            let _ = writeln!(out, "- {r}");
        }
    }
    if !p.inferred.is_empty() {
        let _ = writeln!(out, "\ninputs, as inferred from each graph (and config):");
        let mut t = new_table(&["file", "input", "role", "evidence"]);
        for (file, inf) in &p.inferred {
            for i in &inf.inputs {
                t.add_row(vec![file.clone(), i.name.clone(), role_label(&i.role), i.evidence.clone()]);
            }
        }
        let _ = writeln!(out, "{t}");
        for (file, inf) in p.inferred.iter().filter(|(_, i)| !i.pairs.is_empty()) {
            let _ = writeln!(out, "{file}: {} cache ({})", form_label(inf.cache_form), inf.cache_form_evidence);
            for (symbol, why) in &inf.bindings {
                let _ = writeln!(out, "{file}: {symbol}: {why}");
            }
        }
    }
    let text = fit(out);
    set_style(outer);
    text
}

fn role_label(r: &InputRole) -> String {
    serde_json::to_value(r).ok().and_then(|v| v.as_str().map(|s| s.replace('_', " "))).unwrap_or_default()
}

fn form_label(f: CacheForm) -> String {
    serde_json::to_value(f).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

/// `replay`: the caller's first departures, the reproduction, the model's own
/// check with the correct protocol, and who is at fault.
pub fn replay(r: &crate::caller::replay::ReplayReport) -> String {
    let mut out = format!("{} against {} ({} calls)\n", r.trace, r.model, r.calls);
    if let Some(d) = &r.decoding {
        let _ = writeln!(out, "decoding: {d}");
    }
    if r.findings.is_empty() {
        out.push_str("every call follows the protocol\n");
    } else {
        let mut t = new_table(&["call", "code", "finding"]);
        for f in &r.findings {
            t.add_row(vec![
                f.call.map(|c| c.to_string()).unwrap_or_default(),
                f.code.as_str().to_string(),
                f.message.clone(),
            ]);
        }
        let _ = writeln!(out, "{t}");
    }
    if let Some(rep) = &r.reproduction {
        match &rep.failed {
            Some((call, error, node)) => {
                let _ = writeln!(out, "re-running the caller's calls on {}: call {call} fails: {error}", rep.model);
                if let Some(n) = node {
                    let _ = writeln!(out, "  node: {n}");
                }
            }
            None => {
                let _ = writeln!(
                    out,
                    "re-running the caller's calls on {}: calls {:?} run without an error",
                    rep.model, rep.calls
                );
            }
        }
        for line in &rep.fed {
            let _ = writeln!(out, "  fed {line}");
        }
        if let Some(r) = &rep.repro {
            out.push_str(&super::fixes::repro_lines(r));
        }
    }
    if let Some(fix) = &r.fix {
        let _ = writeln!(out, "the first wrong call, as fed and as the protocol feeds it (call {}):", fix.call);
        for line in &fix.fed {
            let _ = writeln!(out, "  fed  {line}");
        }
        let _ = writeln!(out, "  -    {}", fix.was);
        let _ = writeln!(out, "  +    {}", fix.instead);
        if let Some(v) = &fix.verified {
            let _ = writeln!(out, "  the protocol's sequence re-run on the same model: {v}");
        }
    }
    if let Some(c) = &r.model_check {
        let steps = c.runtime.as_ref().map_or(0, |rt| rt.steps.iter().filter(|s| s.ok).count());
        let _ = writeln!(
            out,
            "the correct protocol on {}: {} ({steps} steps ok)",
            c.model,
            paint(&c.verdict.as_str().to_uppercase())
        );
    }
    if let Some(cost) = &r.cost {
        let _ = writeln!(
            out,
            "cost of not using the cache, measured on this model: {} steps take {:.1} ms with the cache, {:.1} ms re-feeding the prefix ({:.1}x){}",
            cost.steps,
            cost.cached_ms,
            cost.uncached_ms,
            cost.uncached_ms / cost.cached_ms.max(1e-9),
            cost.trace_ms.map(|t| format!("; the trace's decoder calls took {t:.1} ms")).unwrap_or_default()
        );
    }
    let _ = writeln!(out, "\nverdict: {}", r.summary);
    fit(out)
}
