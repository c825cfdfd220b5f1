//! Checks across the files of one folder: the encoder feeds what the
//! decoders take, and every decoder form agrees on the cache's sizes.

use super::roles::Role;
use super::sizes::from_model;
use crate::finding::{Code, Finding};
use crate::model::signature::{Dim, Signature};

/// One file as the cross-file checks see it.
pub struct Member<'a> {
    /// Path relative to the folder.
    pub rel: &'a str,
    /// Its variant suffix.
    pub variant: Option<&'a str>,
    /// Its role.
    pub role: Role,
    /// Its signature.
    pub sig: &'a Signature,
}

fn is_decoder(role: Role) -> bool {
    matches!(
        role,
        Role::Decoder | Role::DecoderWithPast | Role::MergedDecoder | Role::DecoderOnly | Role::DecoderOnlyNoCache
    )
}

fn last_dim(sig: &Signature, name: &str, output: bool) -> Option<(String, Option<i64>)> {
    let port = if output { sig.output(name) } else { sig.input(name) }?;
    let (elem, dims) = port.ty.tensor_parts()?;
    let width = match dims.and_then(|d| d.last()) {
        Some(Dim::Fixed(v)) => Some(*v),
        _ => None,
    };
    Some((elem.to_string(), width))
}

/// Every disagreement between files of the folder.
pub fn check(members: &[Member<'_>]) -> Vec<Finding> {
    let mut out = Vec::new();
    // The encoder of each variant (or the base one) feeds its decoders' encoder_hidden_states.
    for d in members.iter().filter(|m| is_decoder(m.role)) {
        let Some((want_dtype, want_width)) = last_dim(d.sig, "encoder_hidden_states", false) else { continue };
        let enc = members
            .iter()
            .filter(|m| m.role == Role::Encoder)
            .find(|m| m.variant == d.variant)
            .or_else(|| members.iter().find(|m| m.role == Role::Encoder && m.variant.is_none()));
        let Some(enc) = enc else { continue };
        let Some(out_name) = enc.sig.outputs.first().map(|p| p.name.clone()) else { continue };
        let Some((dtype, width)) = last_dim(enc.sig, &out_name, true) else { continue };
        if dtype != want_dtype || (width.is_some() && want_width.is_some() && width != want_width) {
            out.push(Finding::error(
                Code::CrossFile,
                format!(
                    "{} produces `{out_name}` {dtype} of width {}, but {} takes `encoder_hidden_states` {want_dtype} of width {}",
                    enc.rel,
                    width.map_or("?".into(), |w| w.to_string()),
                    d.rel,
                    want_width.map_or("?".into(), |w| w.to_string()),
                ),
            ));
        }
    }
    // Every decoder form agrees on layers, KV heads, head size and vocabulary.
    type Sized<'m> = (&'m Member<'m>, Vec<(&'static str, i64, &'static str)>);
    let decoders: Vec<Sized<'_>> =
        members.iter().filter(|m| is_decoder(m.role)).map(|m| (m, from_model(m.sig))).collect();
    if let Some((first, first_sizes)) = decoders.first() {
        for (other, sizes) in &decoders[1..] {
            for (name, v, _) in sizes {
                if *name == "hidden" {
                    continue;
                }
                if let Some((_, w, _)) = first_sizes.iter().find(|(n, _, _)| n == name) {
                    if w != v {
                        out.push(Finding::error(
                            Code::CrossFile,
                            format!("{} has {name} {w}, but {} has {name} {v}", first.rel, other.rel),
                        ));
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::folder::roles::role_of;
    use std::path::PathBuf;

    fn sigs(folder: &str) -> Vec<(String, Signature)> {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models").join(folder);
        crate::folder::discover(&dir)
            .unwrap()
            .into_iter()
            .map(|f| (f.rel.clone(), crate::model::reader::read_signature(&f.path).unwrap()))
            .collect()
    }

    fn members(s: &[(String, Signature)]) -> Vec<Member<'_>> {
        s.iter().map(|(rel, sig)| Member { rel, variant: None, role: role_of(sig), sig }).collect()
    }

    #[test]
    fn good_folders_agree_and_a_mismatched_encoder_is_named() {
        for folder in ["marian-tiny", "bart-tjs", "whisper-tiny", "t5-tiny"] {
            let s = sigs(folder);
            assert!(check(&members(&s)).is_empty(), "{folder}: {:#?}", check(&members(&s)));
        }
        // bart-tjs's encoder (width 48) beside bart-tiny's decoders (width 32), and
        // a 2-layer decoder beside a 3-layer one.
        let mut s = sigs("bart-tiny");
        s.retain(|(rel, _)| rel != "encoder_model.onnx");
        s.extend(
            sigs("bart-tjs")
                .into_iter()
                .filter(|(rel, _)| rel == "onnx/encoder_model.onnx" || rel == "onnx/decoder_model_merged.onnx"),
        );
        let found = check(&members(&s));
        assert!(found.iter().any(|f| f.message.contains("onnx/encoder_model.onnx produces `last_hidden_state` float32 of width 48, but decoder_model.onnx takes `encoder_hidden_states` float32 of width 32")), "{found:#?}");
        assert!(
            found.iter().any(|f| f.message.contains("has layers 2, but onnx/decoder_model_merged.onnx has layers 3")),
            "{found:#?}"
        );
    }
}
