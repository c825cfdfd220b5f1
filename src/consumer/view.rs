//! The folder as a consumer sees it: the files present (any kind, not only
//! `.onnx`: external data, configs), the ONNX files with their signatures and
//! roles, and the JSON configs as written. Read once; the rules are pure
//! functions of it.

use crate::folder::layout::Layout;
use crate::folder::Role;
use crate::model::signature::Signature;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

/// One ONNX file of the folder.
#[derive(Clone, Copy, Debug)]
pub struct ModelFile<'a> {
    /// Relative to the folder, `/`-separated (`onnx/model_fp16.onnx`).
    pub rel: &'a str,
    /// Its stem without the variant suffix (`model`, `decoder_model_merged`).
    pub base: &'a str,
    /// Its variant suffix (`fp16`, `q4`, `quantized`, …).
    pub variant: Option<&'a str>,
    /// Its role, from the signature.
    pub role: Role,
    /// What it declares.
    pub sig: &'a Signature,
}

/// An export folder, as its consumers open it.
#[derive(Clone, Debug, Default)]
pub struct View<'a> {
    /// Every regular file (or file link to one) of the folder and of its
    /// `onnx/` subfolder, relative and `/`-separated.
    pub files: BTreeSet<String>,
    /// The ONNX files that could be read.
    pub models: Vec<ModelFile<'a>>,
    /// `config.json`, when it is a JSON object.
    pub config: Option<Value>,
    /// `generation_config.json`, when it is a JSON object.
    pub generation: Option<Value>,
    /// `genai_config.json`, when it is a JSON object.
    pub genai: Option<Value>,
}

/// The regular files of `dir` (and of `dir/onnx/` when that is a directory,
/// not a link to one: a directory link out of the folder is never walked).
fn listing(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut add = |d: &Path, prefix: &str| {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            // `metadata` follows a file link (hub caches are made of them); a
            // dangling link is no file a consumer could open.
            if std::fs::metadata(e.path()).is_ok_and(|m| m.is_file()) {
                out.insert(format!("{prefix}{}", e.file_name().to_string_lossy()));
            }
        }
    };
    add(dir, "");
    let sub = dir.join("onnx");
    if std::fs::symlink_metadata(&sub).is_ok_and(|m| m.is_dir()) {
        add(&sub, "onnx/");
    }
    out
}

/// `dir/name` as a JSON object; a missing or malformed file is none here
/// (the folder's own config reader names what is wrong with it).
fn json(dir: &Path, name: &str) -> Option<Value> {
    let path = dir.join(name);
    if !std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.len() <= 16 << 20) {
        return None;
    }
    crate::folder::config::read_json(&path).ok()
}

impl<'a> View<'a> {
    /// `dir` as `layout` read it.
    pub fn read(dir: &Path, layout: &'a Layout) -> View<'a> {
        View {
            files: listing(dir),
            models: layout
                .entries
                .iter()
                .map(|e| ModelFile {
                    rel: &e.file.rel,
                    base: &e.file.base,
                    variant: e.file.variant.as_deref(),
                    role: e.role,
                    sig: &e.sig,
                })
                .collect(),
            config: json(dir, "config.json"),
            generation: json(dir, "generation_config.json"),
            genai: json(dir, "genai_config.json"),
        }
    }

    /// Whether `rel` is a file of the folder.
    pub fn has(&self, rel: &str) -> bool {
        self.files.contains(rel)
    }

    /// The ONNX file at `rel`.
    pub fn model(&self, rel: &str) -> Option<&ModelFile<'a>> {
        self.models.iter().find(|m| m.rel == rel)
    }

    /// `config.json`'s `key`.
    pub fn config_value(&self, key: &str) -> Option<&Value> {
        self.config.as_ref().and_then(|c| c.get(key))
    }

    /// `key` from generation_config.json, else config.json (transformers'
    /// order: the generation config wins where both state it).
    pub fn generation_value(&self, key: &str) -> Option<(&'static str, &Value)> {
        let g = self.generation.as_ref().and_then(|g| g.get(key)).filter(|v| !v.is_null());
        let c = self.config_value(key).filter(|v| !v.is_null());
        g.map(|v| ("generation_config.json", v)).or_else(|| c.map(|v| ("config.json", v)))
    }

    /// The logits' width of the first decoder that fixes it.
    pub fn logits_width(&self) -> Option<i64> {
        self.models.iter().filter(|m| m.role.is_decoder()).find_map(|m| {
            let (_, dims) = m.sig.output("logits")?.ty.tensor_parts()?;
            match dims?.last()? {
                crate::model::signature::Dim::Fixed(v) => Some(*v),
                _ => None,
            }
        })
    }

    /// Whether every ONNX file is a text decoder without an encoder side or
    /// an embeddings input: the folders a consumer's causal-LM class
    /// generates from with token ids alone.
    pub fn text_decoder_only(&self) -> bool {
        let text = |m: &ModelFile<'_>| {
            let names = || m.sig.inputs.iter().map(|i| i.name.as_str());
            names().any(|n| n == "input_ids") && !names().any(|n| n.contains("encoder") || n.contains("inputs_embeds"))
        };
        !self.models.is_empty()
            && self.models.iter().all(|m| {
                matches!(m.role, Role::DecoderOnly | Role::DecoderOnlyNoCache | Role::MergedDecoder) && text(m)
            })
    }
}

impl View<'_> {
    /// Whether the folder is an image-text decoder a text prompt can drive
    /// alone: decoder-only files (fed ids, or the embeddings its
    /// `embed_tokens` file makes), one embeddings file, and vision encoders
    /// whose features an application splices in only with an image.
    pub fn image_text_decoder(&self) -> bool {
        let role = |r: Role| self.models.iter().filter(|m| m.role == r).count();
        role(Role::VisionEncoder) > 0
            && role(Role::EmbedTokens) <= 1
            && self.models.iter().any(|m| matches!(m.role, Role::DecoderOnly | Role::MergedDecoder))
            && self.models.iter().all(|m| {
                matches!(
                    m.role,
                    Role::DecoderOnly
                        | Role::DecoderOnlyNoCache
                        | Role::MergedDecoder
                        | Role::EmbedTokens
                        | Role::VisionEncoder
                ) && !m.sig.inputs.iter().any(|i| i.name.contains("encoder_hidden_states"))
            })
    }

    /// Whether the folder is a text encoder-decoder: an encoder fed token
    /// ids and decoders fed its states, nothing else (no audio or vision
    /// input, no embeddings): the folders a consumer's seq2seq class
    /// generates from with source ids alone.
    pub fn text_encoder_decoder(&self) -> bool {
        let names = |m: &ModelFile<'_>| m.sig.inputs.iter().map(|i| i.name.clone()).collect::<Vec<_>>();
        let encoder = self.models.iter().filter(|m| m.role == Role::Encoder).collect::<Vec<_>>();
        let text_encoder = !encoder.is_empty()
            && encoder.iter().all(|m| {
                let n = names(m);
                n.iter().any(|x| x == "input_ids") && !n.iter().any(|x| x.contains("features") || x.contains("pixel"))
            });
        text_encoder
            && self.models.iter().any(|m| m.role.is_decoder())
            && self.models.iter().all(|m| {
                (m.role == Role::Encoder || m.role.is_decoder())
                    && !names(m).iter().any(|x| x.contains("inputs_embeds"))
            })
    }
}

/// Every integer in `v` (a number or a list of numbers).
pub(crate) fn ids(v: &Value) -> Vec<i64> {
    match v {
        Value::Array(a) => a.iter().filter_map(Value::as_i64).collect(),
        v => v.as_i64().into_iter().collect(),
    }
}
