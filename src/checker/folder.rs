//! Folder mode: every file of an export folder, each judged against its
//! family's contract for its role and driven as real callers drive that form
//! (merged with the folder's encoder; the split pair as older optimum and
//! transformers.js run it; decoder-only alone), then the checks across files.

use super::{Checker, Setup};
use crate::finding::{Code, Finding, Severity};
use crate::folder::config::{ModelConfig, Size};
use crate::folder::genai::GenaiConfig;
use crate::folder::{consistency, contracts, discover, roles::role_of, sizes, FoundFile, Role};
use crate::report::{FileReport, FolderReport, Report};
use crate::signature::Signature;
use crate::summary::ModelSummary;
use crate::Error;
use std::collections::BTreeMap;
use std::path::Path;

/// A file of the folder, read and classified.
struct Entry {
    file: FoundFile,
    sig: Signature,
    role: Role,
}

/// What every file of one folder shares.
struct Folder {
    entries: Vec<Entry>,
    config: Option<ModelConfig>,
    /// onnxruntime-genai's own contract for its decoder file.
    genai: Option<GenaiConfig>,
    family: &'static str,
    sizes: BTreeMap<String, Size>,
}

/// The file whose signature sizes the folder when config.json is silent:
/// a merged decoder first, then the other decoder forms; fp32 before variants.
fn primary(entries: &[Entry]) -> Option<&Entry> {
    let rank = |r: Role| match r {
        Role::MergedDecoder => 0,
        Role::DecoderWithPast => 1,
        Role::DecoderOnly => 2,
        Role::Decoder => 3,
        _ => 9,
    };
    entries.iter().filter(|e| rank(e.role) < 9).min_by_key(|e| (e.file.variant.is_some(), rank(e.role)))
}

/// The family contract: the one asked for, else by `model_type`, else by signature.
fn family_of(checker: &Checker, model_type: Option<&str>, seq2seq: bool) -> &'static str {
    if let Some((name, _)) = checker.family.as_deref().and_then(crate::contract::builtin::text) {
        return name;
    }
    contracts::family(model_type, seq2seq)
}

fn read_folder(checker: &Checker, dir: &Path, only: Option<&Path>) -> Result<Folder, Error> {
    let mut entries = Vec::new();
    for file in discover(dir)? {
        let sig = crate::read_usable_signature(&file.path)?;
        let role = role_of(&sig);
        entries.push(Entry { file, sig, role });
    }
    if let Some(only) = only {
        // A single file checked on its own still sees its siblings (encoder, pair).
        if !entries.iter().any(|e| e.file.path == only) {
            let sig = crate::read_usable_signature(only)?;
            let name = only.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let stem = name.strip_suffix(".onnx").unwrap_or(&name);
            let (base, variant) = crate::folder::discover::split_variant(stem);
            let role = role_of(&sig);
            entries.push(Entry { file: FoundFile { path: only.to_path_buf(), rel: name, base, variant }, sig, role });
        }
    }
    let config = ModelConfig::read(dir)?;
    let genai = GenaiConfig::read(dir)?;
    let main = primary(&entries);
    let seq2seq = main.is_some_and(|e| contracts::is_seq2seq(&e.sig));
    let model_type = config.as_ref().and_then(|c| c.model_type.as_deref());
    let family = family_of(checker, model_type.or(genai.as_ref().and_then(|g| g.model_type.as_deref())), seq2seq);
    let sizes = sizes::resolve(&stated(config.as_ref(), genai.as_ref()), main.map(|e| (e.file.rel.as_str(), &e.sig)));
    Ok(Folder { entries, config, genai, family, sizes })
}

/// Sizes the config files state; genai_config.json (written with the ONNX
/// file by its exporter) wins over config.json where both state one.
fn stated(config: Option<&ModelConfig>, genai: Option<&GenaiConfig>) -> ModelConfig {
    let mut c = config.cloned().unwrap_or_default();
    if let Some(g) = genai {
        c.sizes.extend(g.config.sizes.clone());
        c.model_type = c.model_type.or(g.model_type.clone());
    }
    c
}

/// The sibling of `of` with `role`, same variant first, else the plain one.
fn sibling<'a>(folder: &'a Folder, of: &Entry, role: Role) -> Option<&'a Entry> {
    let same_dir = |e: &&Entry| e.file.path.parent() == of.file.path.parent();
    let with = |v: Option<&String>| {
        folder.entries.iter().filter(same_dir).find(|e| e.role == role && e.file.variant.as_ref() == v)
    };
    with(of.file.variant.as_ref()).or_else(|| with(None))
}

/// How `e` is driven, and in words.
fn setup_for(folder: &Folder, e: &Entry) -> (Setup, String) {
    let start_token = folder.sizes.get("decoder_start").map(|s| s.value);
    let encoder = sibling(folder, e, Role::Encoder);
    let with_encoder = |what: &str| match encoder {
        Some(enc) => format!("{what}, encoder states from {}", enc.file.rel),
        None => format!("{what}, seeded encoder states (no encoder in the folder)"),
    };
    let mut setup = Setup { encoder: encoder.map(|x| x.file.path.clone()), start_token, ..Setup::default() };
    let text = match e.role {
        Role::MergedDecoder => with_encoder("merged decoder: no-cache branch at step 0, cache branch after"),
        Role::DecoderOnly => "decoder-only: prompt at step 0, one token per step after".into(),
        Role::DecoderWithPast => match sibling(folder, e, Role::Decoder) {
            Some(d) => {
                setup.step0_model = Some(d.file.path.clone());
                setup.no_cache_model = Some(d.file.path.clone());
                with_encoder(&format!(
                    "split pair: {} at step 0 seeds the cache, this file after; parity against it",
                    d.file.rel
                ))
            }
            None => with_encoder(
                "with-past decoder alone: empty self past, seeded cross past (the folder has no no-past decoder)",
            ),
        },
        Role::Decoder => {
            let pair = sibling(folder, e, Role::DecoderWithPast);
            let why = match pair {
                Some(p) => format!("static only here: driven at step 0 of the split pair with {}", p.file.rel),
                None => "static only: a decoder without past is not a cache to drive".into(),
            };
            setup.static_only = Some(why.clone());
            why
        }
        Role::Encoder => {
            let why = "static only here: run to produce every decoder's encoder states".to_string();
            setup.static_only = Some(why.clone());
            why
        }
        Role::DecoderOnlyNoCache | Role::Unknown => {
            setup.static_only = Some("not driven".into());
            "not driven".into()
        }
    };
    (setup, text)
}

fn check_entry(checker: &Checker, folder: &Folder, e: &Entry) -> Result<FileReport, Error> {
    let (setup, mut driven_as) = setup_for(folder, e);
    if checker.static_only && setup.static_only.is_none() {
        driven_as = format!("static check only (a run would drive it as: {driven_as})");
    }
    let shown = e.file.rel.clone();
    let genai = folder.genai.as_ref().filter(|g| {
        matches!(e.role, Role::DecoderOnly | Role::MergedDecoder)
            && g.filename.as_deref().is_none_or(|f| e.file.rel.ends_with(f) && e.file.variant.is_none())
    });
    let contract = match genai {
        Some(g) => Some(g.contract(&folder.sizes)),
        None => contracts::for_role(e.role, folder.family, &folder.sizes),
    };
    let report = match contract {
        None => {
            let f = Finding::new(
                Code::RoleUnknown,
                Severity::Warning,
                format!("{shown}: neither an encoder nor a decoder this tool knows (no logits, no encoder output): listed, not checked"),
            );
            Report::new(&shown, None, ModelSummary::of(&shown, &e.sig, Vec::new()), vec![f], Vec::new())
        }
        Some(contract) => {
            let contract = contract?;
            let mut pre = match &folder.config {
                Some(c) if e.role != Role::Encoder => sizes::mismatches(c, &shown, &e.sig),
                _ => Vec::new(),
            };
            if let Some(g) = genai {
                pre.extend(sizes::mismatches(&g.config, &shown, &e.sig));
            }
            checker.check_file(&e.file.path, &shown, &e.sig, &contract, &setup, pre)?
        }
    };
    Ok(FileReport { path: shown, role: e.role, variant: e.file.variant.clone(), driven_as, report })
}

/// Every file's check, in file order. Each runtime job is its own child
/// process, mostly creating sessions (single-threaded work): run up to one
/// per core at once. In-process runs share one ONNX Runtime: one at a time.
fn check_entries(checker: &Checker, folder: &Folder) -> Result<Vec<FileReport>, Error> {
    let workers = match checker.isolation {
        super::Isolation::InProcess => 1,
        _ => std::thread::available_parallelism().map_or(1, |n| n.get()).min(folder.entries.len()).max(1),
    };
    if workers == 1 {
        return folder.entries.iter().map(|e| check_entry(checker, folder, e)).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let slots: Vec<std::sync::Mutex<Option<Result<FileReport, Error>>>> =
        folder.entries.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Some(e) = folder.entries.get(i) else { break };
                let r = check_entry(checker, folder, e);
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

pub(super) fn run_folder(checker: &Checker, dir: &Path) -> Result<FolderReport, Error> {
    let folder = read_folder(checker, dir, None)?;
    let files = check_entries(checker, &folder)?;
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
    let findings = consistency::check(&members);
    let model_type = folder.config.as_ref().and_then(|c| c.model_type.clone());
    Ok(FolderReport::new(&dir.display().to_string(), model_type, folder.family, folder.sizes.clone(), findings, files))
}

/// One file without a contract: its folder's family contract for its role,
/// sized from the config.json beside it (or the model), driven with its siblings.
pub(super) fn run_file(checker: &Checker, model: &Path) -> Result<Report, Error> {
    let dir = model.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let folder = match read_folder(checker, dir, Some(model)) {
        Ok(f) => f,
        // The folder around the file may hold broken neighbours: judge the file alone.
        Err(Error::Model(_) | Error::ExternalData { .. }) => {
            let sig = crate::read_usable_signature(model)?;
            let role = role_of(&sig);
            let file = FoundFile {
                path: model.to_path_buf(),
                rel: model.display().to_string(),
                base: String::new(),
                variant: None,
            };
            let config = ModelConfig::read(dir)?;
            let genai = GenaiConfig::read(dir)?;
            let seq2seq = contracts::is_seq2seq(&sig);
            let family = family_of(checker, config.as_ref().and_then(|c| c.model_type.as_deref()), seq2seq);
            let sizes = sizes::resolve(&stated(config.as_ref(), genai.as_ref()), Some((&file.rel, &sig)));
            Folder { entries: vec![Entry { file, sig, role }], config, genai, family, sizes }
        }
        Err(e) => return Err(e),
    };
    let e = folder
        .entries
        .iter()
        .find(|e| e.file.path == model)
        .ok_or_else(|| Error::Internal("file not found in its folder".into()))?;
    let mut r = check_entry(checker, &folder, e)?.report;
    r.model = model.display().to_string();
    Ok(r)
}
