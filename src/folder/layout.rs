//! An export folder read once: every file with its signature and role, the
//! config files, the family contract and the sizes, and the relations
//! between files (the encoder of a decoder, the two halves of a pair). The
//! checker drives from it; `protocol` describes from it.

use super::config::{ModelConfig, Size};
use super::genai::GenaiConfig;
use super::{contracts, roles::role_of, sizes, FoundFile, Role};
use crate::contract::{Contract, ContractError};
use crate::error::Error;
use crate::finding::Finding;
use crate::model::signature::Signature;
use crate::plan::infer::Hints;
use std::collections::BTreeMap;
use std::path::Path;

/// A file of the folder, read and classified.
pub struct Entry {
    /// Where it is.
    pub file: FoundFile,
    /// What it declares.
    pub sig: Signature,
    /// Its role, from the signature.
    pub role: Role,
}

/// What every file of one folder shares.
pub struct Layout {
    /// Every file, sorted by path.
    pub entries: Vec<Entry>,
    /// config.json (+ generation_config.json), when there is one.
    pub config: Option<ModelConfig>,
    /// onnxruntime-genai's own contract for its decoder file.
    pub genai: Option<GenaiConfig>,
    /// The built-in family contract the files are judged against.
    pub family: &'static str,
    /// Every size, with where it came from.
    pub sizes: BTreeMap<String, Size>,
    /// `.onnx` entries that are not readable model files (dangling or looping links, directories).
    pub odd: Vec<crate::folder::discover::OddFile>,
    /// The rotary embedding config.json states, or what is malformed in it.
    pub rope: Option<Result<crate::folder::rope::Rope, String>>,
    /// config.json's `final_logit_softcapping`.
    pub softcap: Option<f64>,
    /// The multipliers and ALiBi slopes config.json states beyond rope.
    pub scales: Option<crate::folder::scales::Scales>,
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
fn family_of(forced: Option<&str>, model_type: Option<&str>, seq2seq: bool) -> &'static str {
    if let Some((name, _)) = forced.and_then(crate::contract::builtin::text) {
        return name;
    }
    contracts::family(model_type, seq2seq)
}

impl Layout {
    /// Reads `dir` (and `only`, a file of it that discovery would not list);
    /// `forced` names a built-in family contract to use instead of config.json's.
    pub fn read(dir: &Path, only: Option<&Path>, forced: Option<&str>) -> Result<Layout, Error> {
        let mut entries = Vec::new();
        let (files, mut odd) = crate::folder::discover::discover_all(dir)?;
        for file in files {
            let sig = match crate::model::reader::read_usable_signature(&file.path) {
                // Weights missing beside one file: that file fails, named; the rest is checked.
                Err(Error::ExternalData { problems, .. }) if only.is_none() => {
                    // One line per missing file, not per tensor (`tensor `x`: external data file `f` is missing`).
                    let mut files: Vec<&str> = Vec::new();
                    let all: Vec<&str> = problems.split("; ").collect();
                    for p in &all {
                        let what = p.split_once("`: ").map_or(*p, |(_, w)| w);
                        if !files.contains(&what) {
                            files.push(what);
                        }
                    }
                    let problem = format!(
                        "a model whose weights are missing, so no runtime can load it ({} tensors): {}",
                        all.len(),
                        files.join("; ")
                    );
                    odd.push(crate::folder::discover::OddFile { rel: file.rel.clone(), problem, breaks: true });
                    continue;
                }
                r => r?,
            };
            let role = role_of(&sig);
            entries.push(Entry { file, sig, role });
        }
        if let Some(only) = only {
            // A single file checked on its own still sees its siblings (encoder, pair).
            if !entries.iter().any(|e| e.file.path == only) {
                let sig = crate::model::reader::read_usable_signature(only)?;
                let name = only.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                let stem = name.strip_suffix(".onnx").unwrap_or(&name);
                let (base, variant) = crate::folder::discover::split_variant(stem);
                let role = role_of(&sig);
                entries.push(Entry {
                    file: FoundFile { path: only.to_path_buf(), rel: name, base, variant },
                    sig,
                    role,
                });
            }
        }
        let config = ModelConfig::read(dir)?;
        let genai = GenaiConfig::read(dir)?;
        let main = primary(&entries);
        let seq2seq = main.is_some_and(|e| contracts::is_seq2seq(&e.sig));
        let model_type = config.as_ref().and_then(|c| c.model_type.as_deref());
        let family = family_of(forced, model_type.or(genai.as_ref().and_then(|g| g.model_type.as_deref())), seq2seq);
        let sizes =
            sizes::resolve(&stated(config.as_ref(), genai.as_ref()), main.map(|e| (e.file.rel.as_str(), &e.sig)));
        let (rope, softcap) = (crate::folder::rope::read(dir), crate::folder::rope::logit_softcap(dir));
        let scales = crate::folder::scales::read(dir);
        Ok(Layout { entries, config, genai, family, sizes, odd, rope, softcap, scales })
    }

    /// One file judged alone (its folder holds broken neighbours).
    pub fn single(model: &Path, forced: Option<&str>) -> Result<Layout, Error> {
        let dir = model.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let sig = crate::model::reader::read_usable_signature(model)?;
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
        let family = family_of(forced, config.as_ref().and_then(|c| c.model_type.as_deref()), seq2seq);
        let sizes = sizes::resolve(&stated(config.as_ref(), genai.as_ref()), Some((&file.rel, &sig)));
        let (rope, softcap) = (crate::folder::rope::read(dir), crate::folder::rope::logit_softcap(dir));
        let scales = crate::folder::scales::read(dir);
        let entries = vec![Entry { file, sig, role }];
        Ok(Layout { entries, config, genai, family, sizes, odd: Vec::new(), rope, softcap, scales })
    }

    /// Whether the folder's encoder computes every cross-attention past of `e`
    /// itself (onnxruntime-genai's Whisper: `present_key_cross_N` for `past_key_cross_N`).
    pub fn cross_from_encoder(&self, e: &Entry) -> bool {
        let Some(enc) = self.sibling(e, Role::Encoder) else { return false };
        let cross = || e.sig.inputs.iter().filter(|p| crate::model::names::is_cross_name(&p.name));
        cross().next().is_some() && cross().all(|p| enc.sig.output(&p.name.replacen("past", "present", 1)).is_some())
    }

    /// The sibling of `of` with `role`, same variant first, else the plain one.
    pub fn sibling(&self, of: &Entry, role: Role) -> Option<&Entry> {
        let same_dir = |e: &&Entry| e.file.path.parent() == of.file.path.parent();
        let with = |v: Option<&String>| {
            self.entries.iter().filter(same_dir).find(|e| e.role == role && e.file.variant.as_ref() == v)
        };
        with(of.file.variant.as_ref()).or_else(|| with(None))
    }

    /// optimum's legacy decoder-only pair: the no-past file beside the
    /// with-past decoder `e` that returns presents (the prompt half, whose
    /// presents start the cache).
    pub fn prompt_half(&self, e: &Entry) -> Option<&Entry> {
        self.sibling(e, Role::DecoderOnlyNoCache).filter(|d| d.sig.outputs.iter().any(|o| o.name.contains("present")))
    }

    /// genai_config.json, when it describes this file.
    pub fn genai_for(&self, e: &Entry) -> Option<&GenaiConfig> {
        self.genai.as_ref().filter(|g| {
            matches!(e.role, Role::DecoderOnly | Role::MergedDecoder)
                && g.filename.as_deref().is_none_or(|f| e.file.rel.ends_with(f) && e.file.variant.is_none())
        })
    }

    /// The contract `e` is judged against; `None` for a file of unknown role.
    pub fn contract_for(&self, e: &Entry) -> Option<Result<Contract, ContractError>> {
        // genai_config.json lists a hybrid's layers itself; a family contract
        // keeps KV only on the layers config.json gives attention.
        let (contract, hybrid) = match self.genai_for(e) {
            Some(g) => (Some(g.contract(&self.sizes)), None),
            None => (
                contracts::for_role(e.role, self.family, &self.sizes),
                self.config.as_ref().and_then(|c| c.attention_layers.clone()),
            ),
        };
        contract.map(|c| {
            c.map(|mut c| {
                if let Some(h) = &hybrid {
                    contracts::keep_layers(&mut c, &h.layers);
                }
                if let (Some(k), Some(v)) = (self.sizes.get("key_dim"), self.sizes.get("value_dim")) {
                    contracts::split_head_dims(&mut c, k.value, v.value);
                }
                contracts::rename_cache(&mut c, &e.sig);
                contracts::fit_positions(&mut c, &e.sig);
                contracts::fit_codebooks(&mut c, &e.sig);
                // genai's encoder names its states itself (Whisper's `hidden_states`).
                let states = self.genai.as_ref().and_then(|g| g.encoder_outputs.get("encoder_hidden_states"));
                if let (Role::Encoder, Some(name)) = (e.role, states) {
                    for r in c.outputs.iter_mut().filter(|r| r.name == "last_hidden_state") {
                        r.name = name.clone();
                        r.template = name.clone();
                    }
                    // ...and computes the decoder's cross-attention caches (`present_key_cross_%d`).
                    let layers = self.sizes.get("layers").map_or(0, |s| s.value);
                    let templates = self.genai.iter().flat_map(|g| &g.encoder_outputs);
                    let cross: Vec<&String> =
                        templates.filter(|(k, _)| k.starts_with("cross_present")).map(|(_, v)| v).collect();
                    if let Some(model) = c.outputs.first().cloned() {
                        for t in cross {
                            for i in 0..layers {
                                let n = t.replace("%d", &i.to_string());
                                c.outputs.push(crate::contract::TensorRule {
                                    name: n.clone(),
                                    template: t.clone(),
                                    shape: None,
                                    ..model.clone()
                                });
                            }
                        }
                    }
                }
                if self.genai_for(e).is_none() {
                    contracts::fit_protocol(&mut c, &e.sig);
                }
                c
            })
        })
    }

    /// What config.json and genai_config.json say that a graph cannot: the
    /// protocol inference's hints.
    pub fn hints(&self) -> Hints {
        Hints {
            vocab: self.sizes.get("vocab").map(|s| s.value),
            share_buffer: self.genai.as_ref().and_then(|g| g.share_buffer),
            max_length: self.genai.as_ref().and_then(|g| g.max_length),
            codebooks: self.sizes.get("codebooks").map(|s| s.value),
        }
    }

    /// The decoding plan of `e` (`None` for a file of unknown role), built
    /// once here from its contract and the folder's hints, so that the
    /// check, `protocol`, `replay` and the guard all drive the same protocol.
    pub fn plan_for(&self, e: &Entry, batch: i64) -> Option<Result<crate::plan::Plan, String>> {
        let contract = self.contract_for(e)?;
        Some(
            contract.map_err(|c| c.to_string()).and_then(|c| crate::plan::build_with(&e.sig, &c, batch, &self.hints())),
        )
    }

    /// What config.json and genai_config.json state that `e` contradicts.
    pub fn mismatches(&self, e: &Entry) -> Vec<Finding> {
        let mut out = match &self.config {
            Some(c) if e.role != Role::Encoder => sizes::mismatches(c, &e.file.rel, &e.sig),
            _ => Vec::new(),
        };
        if let Some(g) = self.genai_for(e) {
            out.extend(sizes::mismatches(&g.config, &e.file.rel, &e.sig));
        }
        let window = self.config.as_ref().and_then(|c| c.sliding_window.as_ref());
        if let Some(w) = window.filter(|_| matches!(e.role, Role::DecoderOnly | Role::DecoderOnlyNoCache)) {
            out.extend(super::window::check(w, &e.file.rel, &e.sig));
        }
        out
    }
}

/// Sizes the config files state; genai_config.json (written with the ONNX
/// file by its exporter) wins over config.json where both state one.
fn stated(config: Option<&ModelConfig>, genai: Option<&GenaiConfig>) -> ModelConfig {
    let mut c = config.cloned().unwrap_or_default();
    if let Some(g) = genai {
        c.sizes.extend(g.config.sizes.clone());
        c.model_type = c.model_type.or(g.model_type.clone());
        c.attention_layers = c.attention_layers.or(g.config.attention_layers.clone());
    }
    c
}
