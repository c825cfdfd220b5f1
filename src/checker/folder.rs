//! Folder mode: every file of an export folder, each judged against its
//! family's contract for its role and driven as real callers drive that form
//! (merged with the folder's encoder; the split pair as older optimum and
//! transformers.js run it; decoder-only alone), then the checks across files.

use super::{Checker, Setup};
use crate::checker::report::{FileReport, FolderReport, Report};
use crate::error::Error;
use crate::finding::{Code, Finding, Severity};
use crate::folder::layout::{Entry, Layout as Folder};
use crate::folder::{consistency, Role};
use crate::model::summary::ModelSummary;
use std::path::{Path, PathBuf};

/// How `e` is driven, and in words.
fn setup_for(folder: &Folder, e: &Entry) -> (Setup, String) {
    let start_token = folder.sizes.get("decoder_start").map(|s| s.value);
    let encoder = folder.sibling(e, Role::Encoder);
    let with_encoder = |what: &str| match encoder {
        Some(enc) => format!("{what}, encoder states from {}", enc.file.rel),
        None => format!("{what}, seeded encoder states (no encoder in the folder)"),
    };
    let mut setup =
        Setup { encoder: encoder.map(|x| x.file.path.clone()), start_token, hints: folder.hints(), ..Setup::default() };
    // A numeric variant is also compared with its fp32 sibling, teacher-forced.
    if e.file.variant.is_some() && matches!(e.role, Role::MergedDecoder | Role::DecoderOnly) {
        let fp32 = folder.entries.iter().find(|x| {
            x.role == e.role
                && x.file.variant.is_none()
                && x.file.base == e.file.base
                && x.file.path.parent() == e.file.path.parent()
        });
        if let Some(f) = fp32 {
            let plan = folder.plan_for(f, 1).and_then(Result::ok);
            setup.compare_to = plan.map(|p| (f.file.path.clone(), p));
            setup.compare_encoder = folder.sibling(f, Role::Encoder).map(|x| x.file.path.clone());
        }
    }
    // A decoder fed embeddings gets them from the folder's embedding model, every call.
    let embeds = e.sig.inputs.iter().any(|p| p.name.contains("inputs_embeds"));
    let embed = folder.sibling(e, Role::EmbedTokens).filter(|_| embeds);
    setup.embed_tokens = embed.map(|x| x.file.path.clone());
    let through = |what: String| match embed {
        Some(x) => format!("{what}, token ids through {} every call", x.file.rel),
        None if embeds => format!("{what}, seeded embeddings per token id (the folder has no embedding model)"),
        None => what,
    };
    if matches!(e.role, Role::MergedDecoder | Role::DecoderOnly | Role::DecoderWithPast | Role::DecoderOnlyNoCache) {
        setup.rope = folder.rope.clone().and_then(Result::ok);
        setup.softcap = folder.softcap;
        setup.scales = folder.scales.clone();
    }
    let text = match e.role {
        // optimum's `merge_decoders` of a decoder-only pair: no encoder at all.
        Role::MergedDecoder if !crate::folder::contracts::is_seq2seq(&e.sig) => {
            through("merged decoder-only: the prompt on the no-cache branch, one token per step on the cache branch after; the branch flag in every run".into())
        }
        Role::MergedDecoder => with_encoder("merged decoder: no-cache branch at step 0, cache branch after"),
        Role::DecoderOnly => {
            setup.window = folder.config.as_ref().and_then(|c| c.sliding_window.clone());
            match folder.prompt_half(e) {
                // optimum's legacy decoder-only pair: the prompt through the no-past
                // file, whose presents start the cache; this file after.
                Some(d) => {
                    setup.step0_model = Some(d.file.path.clone());
                    setup.no_cache_model = Some(d.file.path.clone());
                    through(format!(
                        "legacy split pair: the prompt through {} seeds the cache, one token per step through this file after; parity against it, a chunk onto the past through this file",
                        d.file.rel
                    ))
                }
                None => through("decoder-only: prompt at step 0, one token per step after".into()),
            }
        }
        Role::DecoderWithPast => match folder.sibling(e, Role::Decoder) {
            Some(d) => {
                setup.step0_model = Some(d.file.path.clone());
                setup.no_cache_model = Some(d.file.path.clone());
                with_encoder(&format!(
                    "split pair: {} at step 0 seeds the cache, this file after; parity against it",
                    d.file.rel
                ))
            }
            // onnxruntime-genai's Whisper: the encoder computes the cross caches itself.
            None if folder.cross_from_encoder(e) => {
                with_encoder("with-past decoder alone: empty self past, the cross past the encoder computes")
            }
            None => with_encoder(
                "with-past decoder alone: empty self past, seeded cross past (the folder has no no-past decoder)",
            ),
        },
        Role::Decoder => {
            let pair = folder.sibling(e, Role::DecoderWithPast);
            let why = match pair {
                Some(p) => format!("static only here: driven at step 0 of the split pair with {}", p.file.rel),
                None => "static only: a decoder without past is not a cache to drive".into(),
            };
            setup.static_only = Some(why.clone());
            why
        }
        // An encoder with no decoder anywhere in the folder is the product itself.
        Role::Encoder if !folder.entries.iter().any(|x| x.role.is_decoder()) => {
            setup.encoder_only = Some(folder.sizes.get("vocab").map_or(100, |s| s.value));
            setup.encoder = None;
            "encoder alone: token ids at batch 1, then a right-padded batch of 2 against each row alone".into()
        }
        Role::Encoder => {
            let why = "static only here: run to produce every decoder's encoder states".to_string();
            setup.static_only = Some(why.clone());
            why
        }
        Role::EmbedTokens => {
            let why = "static only here: run before every call of the decoder that takes its embeddings".to_string();
            setup.static_only = Some(why.clone());
            why
        }
        Role::VisionEncoder => {
            let why =
                "static only: the application writes its image features over the image tokens' embeddings".to_string();
            setup.static_only = Some(why.clone());
            why
        }
        Role::DecoderOnlyNoCache => match folder.sibling(e, Role::DecoderOnly) {
            // optimum's legacy pair: the with-past file is the one driven.
            Some(d) => {
                let why = format!("static only here: the prompt half of the split pair with {}", d.file.rel);
                setup.static_only = Some(why.clone());
                why
            }
            None => through("no cache: the whole prefix re-fed every call (no parity: there is no cached path); a left-padded batch against each row alone".into()),
        },
        Role::CodecDecoder => {
            setup.static_only = Some("a codec decoder".into());
            "codec decoder: the generated codes in, audio out, run once after generation".into()
        }
        Role::DelayPattern => {
            setup.static_only = Some("a delay-pattern helper".into());
            "delay-pattern helper: the codebook rows' pattern built once before generation".into()
        }
        Role::Unknown => {
            setup.static_only = Some("not driven".into());
            "not driven".into()
        }
    };
    (setup, text)
}

/// The companion files (encoders) that several of the folder's runs open,
/// with how many runs open each: one session serves them all.
fn shared_companions(checker: &Checker, folder: &Folder, setups: &[(Setup, String)]) -> Vec<(PathBuf, usize)> {
    let mut counts: Vec<(PathBuf, usize)> = Vec::new();
    // In-process runs keep nothing for later takers: an application's process outlives the check.
    if checker.static_only || checker.isolation == super::Isolation::InProcess {
        return counts;
    }
    for (e, (setup, _)) in folder.entries.iter().zip(setups) {
        if folder.contract_for(e).is_none() || setup.static_only.is_some() {
            continue;
        }
        // A run opens each file once: a variant compared on its own encoder takes it once.
        let compared = setup.compare_encoder.clone().filter(|c| setup.encoder.as_ref() != Some(c));
        for path in [setup.encoder.clone(), compared].into_iter().flatten() {
            match counts.iter_mut().find(|(p, _)| *p == path) {
                Some((_, n)) => *n += 1,
                None => counts.push((path, 1)),
            }
        }
    }
    counts.retain(|(_, n)| *n > 1);
    counts
}

fn check_entry(
    checker: &Checker,
    folder: &Folder,
    e: &Entry,
    (mut setup, mut driven_as): (Setup, String),
    shared: &[(PathBuf, usize)],
) -> Result<FileReport, Error> {
    setup.shared = shared.to_vec();
    if checker.static_only && setup.static_only.is_none() {
        driven_as = format!("static check only (a run would drive it as: {driven_as})");
    }
    let shown = e.file.rel.clone();
    let mut encoder_crash = None;
    let report = match folder.contract_for(e) {
        None => {
            // Still loaded, and run once where its dims can be bound.
            let codebooks = folder.sizes.get("codebooks").map(|s| s.value);
            let ran = (!checker.static_only).then(|| checker.smoke(&e.file.path, &e.sig, codebooks));
            let (said, mut findings, runtimes) = match ran {
                Some(Ok(r)) => {
                    let said = r.probes.first().cloned().unwrap_or_else(|| "did not run".into());
                    (said, r.findings.clone(), vec![r])
                }
                Some(Err(why)) => (format!("not run: {why}"), Vec::new(), Vec::new()),
                None => ("not run (--static-only)".into(), Vec::new(), Vec::new()),
            };
            if e.role == Role::Unknown {
                let f = Finding::new(
                    Code::RoleUnknown,
                    Severity::Warning,
                    format!(
                        "{shown}: neither an encoder nor a decoder this tool knows (no logits, no encoder output); {said}"
                    ),
                );
                findings.insert(0, f);
                driven_as = format!("role unknown; {said}");
            } else {
                // A recognised helper: its run is reported, a refusal with arbitrary inputs is not judged.
                driven_as = format!("{driven_as}; {said}");
            }
            Report::new(&shown, None, ModelSummary::of(&shown, &e.sig, Vec::new()), findings, runtimes)
        }
        Some(contract) => {
            let contract = contract?;
            let mut pre = folder.mismatches(e);
            if let (Some(Err(why)), true) = (&folder.rope, e.role.is_decoder()) {
                pre.push(Finding::warning(
                    Code::RotaryUnaudited,
                    format!("{why}: the rotary embedding is not audited"),
                ));
            }
            let mut setup = Setup { builtin_contract: folder.genai_for(e).is_none(), from_folder: true, ..setup };
            // The rotary width comes from the config's sizes: with sizes the graph contradicts, no audit.
            if setup.rope.is_some()
                && pre.iter().any(|f| f.code == Code::ConfigMismatch && f.severity == Severity::Error)
            {
                setup.rope = None;
                pre.push(Finding::new(Code::RotaryUnaudited, Severity::Info, "the rotary embedding is not audited: config.json's sizes disagree with the graph (the config-mismatch findings), and the rotated width is read from them"));
            }
            let report = checker.check_file(&e.file.path, &shown, &e.sig, &contract, &setup, pre.clone())?;
            // The encoder brought ONNX Runtime down: that is the encoder's finding,
            // and this decoder is still checked, on seeded encoder states.
            let crash = report.runtimes.iter().find_map(|r| {
                let model = r.crashed_in.clone()?;
                Some((model, r.findings.iter().find(|f| f.code == Code::Crash)?.clone()))
            });
            match crash {
                Some((model, finding)) => {
                    let enc = folder.entries.iter().find(|x| x.file.path.display().to_string() == model);
                    encoder_crash = enc.map(|x| (x.file.rel.clone(), finding));
                    driven_as = format!(
                        "{driven_as}; the encoder crashed ONNX Runtime, so driven again on seeded encoder states"
                    );
                    let setup = Setup { encoder: None, ..setup };
                    checker.check_file(&e.file.path, &shown, &e.sig, &contract, &setup, pre)?
                }
                None => report,
            }
        }
    };
    Ok(FileReport { path: shown, role: e.role, variant: e.file.variant.clone(), driven_as, report, encoder_crash })
}

/// `checker`, whose progress lines say which file they are about and how
/// many files are left (the spinner shows one line for the whole folder).
fn announcing(
    checker: &Checker,
    rel: &str,
    left: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    total: usize,
) -> Checker {
    let mut c = checker.clone();
    if let Some(inner) = checker.progress.clone() {
        let rel = rel.to_string();
        let name = rel.rsplit('/').next().unwrap_or(&rel).to_string();
        c.progress = Some(std::sync::Arc::new(move |text: &str| {
            let left = left.load(std::sync::atomic::Ordering::SeqCst);
            // The run's own lines already start with the file's name.
            let about = if text.starts_with(&name) { String::new() } else { format!("{rel}: ") };
            inner(&format!("{about}{text} ({left} of {total} files to go)"))
        }));
        c.progress("static check");
    }
    c
}

/// Every file's check, in file order: up to one per core at once, their
/// runtime jobs threads of one host process (`engine::host`) that shares
/// each companion session among them. In-process runs share the caller's
/// ONNX Runtime: one at a time.
fn check_entries(checker: &Checker, folder: &Folder) -> Result<Vec<FileReport>, Error> {
    let total = folder.entries.len();
    let left = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(total));
    // Each file's setup once: the companions' counts are read off the same setups the runs get.
    let setups: Vec<(Setup, String)> = folder.entries.iter().map(|e| setup_for(folder, e)).collect();
    let shared = shared_companions(checker, folder, &setups);
    let check_entry = |checker: &Checker, folder: &Folder, i: usize| {
        let (e, setup) = (&folder.entries[i], setups[i].clone());
        let r = check_entry(&announcing(checker, &e.file.rel, left.clone(), total), folder, e, setup, &shared);
        left.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        r
    };
    let workers = match checker.isolation {
        super::Isolation::InProcess => 1,
        _ => std::thread::available_parallelism().map_or(1, |n| n.get()).min(folder.entries.len()).max(1),
    };
    if workers == 1 {
        return (0..total).map(|i| check_entry(checker, folder, i)).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let slots: Vec<std::sync::Mutex<Option<Result<FileReport, Error>>>> =
        folder.entries.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if i >= total {
                    break;
                }
                let r = check_entry(checker, folder, i);
                if let Ok(mut slot) = slots[i].lock() {
                    *slot = Some(r);
                }
            });
        }
    });
    slots
        .into_iter()
        .map(|m| {
            m.into_inner().ok().flatten().unwrap_or_else(|| Err(Error::Internal("a file check did not finish".into())))
        })
        .collect()
}

/// A decoder's run that died inside the folder's encoder (producing its
/// states) is the encoder's crash: a finding on the encoder's file too, so
/// the table names the file that brought ONNX Runtime down.
fn blame_encoder_crashes(files: &mut [FileReport]) {
    let mut blamed: Vec<(String, Finding)> = Vec::new();
    for f in files.iter() {
        let Some((enc, what)) = &f.encoder_crash else { continue };
        let mut finding = Finding::error(
            Code::Crash,
            format!("ONNX Runtime died running this encoder to produce {}'s encoder states: {}", f.path, what.message),
        );
        finding.cause = what.cause.clone();
        finding.node = what.node.clone();
        blamed.push((enc.clone(), finding));
    }
    for (rel, finding) in blamed {
        if let Some(f) = files.iter_mut().find(|f| f.path == rel) {
            if !f.report.findings.iter().any(|x| x.code == Code::Crash) {
                f.report.findings.insert(0, finding);
                f.report.verdict = crate::checker::report::Verdict::of(&f.report.findings);
            }
        }
    }
}

pub(super) fn run_folder(checker: &Checker, dir: &Path) -> Result<FolderReport, Error> {
    let folder = Folder::read(dir, None, checker.family.as_deref())?;
    // The folder's runs share one host process (its encoder's session with them), ended with the folder.
    let checker = &checker.hosted()?;
    // The consumers' loading rules: what their own loaders refuse.
    let view = crate::consumer::View::read(dir, &folder);
    let consumers = crate::consumer::targets(&view, &checker.consumer);
    if let Some(known) = &checker.consumers_known {
        known(dir, &view, &consumers);
    }
    let mut files = check_entries(checker, &folder)?;
    blame_encoder_crashes(&mut files);
    super::settle::settle_pair_halves(&mut files);
    let members: Vec<consistency::Member<'_>> = folder
        .entries
        .iter()
        .map(|e| consistency::Member {
            rel: &e.file.rel,
            variant: e.file.variant.as_deref(),
            role: e.role,
            sig: &e.sig,
        })
        .collect();
    let mut findings = consistency::check(&members);
    // Entries named `.onnx` that are no readable model file: named, the rest checked.
    for o in &folder.odd {
        let severity = if o.breaks { Severity::Error } else { Severity::Warning };
        findings.push(Finding::new(Code::OddFile, severity, format!("{} is {}", o.rel, o.problem)).tensor(&o.rel));
    }
    findings.extend(crate::consumer::check(&view, &consumers));
    findings.extend(checker.memory_waits(dir));
    let model_type = folder.config.as_ref().and_then(|c| c.model_type.clone());
    let mut report =
        FolderReport::new(&dir.display().to_string(), model_type, folder.family, folder.sizes.clone(), findings, files);
    report.consumers = consumers;
    Ok(report)
}

/// One file without a contract: its folder's family contract for its role,
/// sized from the config.json beside it (or the model), driven with its siblings.
pub(super) fn run_file(checker: &Checker, model: &Path) -> Result<Report, Error> {
    let dir = model.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let folder = match Folder::read(dir, Some(model), checker.family.as_deref()) {
        Ok(f) => f,
        // The folder around the file may hold broken neighbours: judge the file alone.
        Err(Error::Model(_) | Error::ExternalData { .. }) => Folder::single(model, checker.family.as_deref())?,
        Err(e) => return Err(e),
    };
    let e = folder
        .entries
        .iter()
        .find(|e| e.file.path == model)
        .ok_or_else(|| Error::Internal("file not found in its folder".into()))?;
    let mut r = check_entry(checker, &folder, e, setup_for(&folder, e), &[])?.report;
    r.model = model.display().to_string();
    Ok(r)
}
