//! The consumers an export folder is made for — onnxruntime-genai,
//! transformers.js, optimum's ORTModel — and their loading rules. A folder
//! that passes every graph check can still fail the moment its consumer
//! opens it: a file its config names is not there, an id its config holds
//! lies outside the vocabulary, a dtype variant has no file. Each consumer is
//! a file of pure rules from the folder as read ([`View`]) to findings; every
//! rule cites the consumer's source it encodes.
//!
//! A room above `folder` (it reads the folder's files and configs as
//! `folder` classified them) and below everything that runs a model.

pub mod genai;
pub mod optimum;
pub mod transformers_js;
mod view;

pub use view::{ModelFile, View};

use crate::finding::Finding;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A program that loads an export folder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Consumer {
    /// onnxruntime-genai's `og.Model` (`genai_config.json`).
    Genai,
    /// transformers.js' `from_pretrained` (`onnx/` with dtype-suffixed files).
    #[serde(rename = "transformers.js")]
    TransformersJs,
    /// optimum's `ORTModelFor*.from_pretrained` (optimum's flat file names).
    Optimum,
}

impl Consumer {
    /// Every consumer, in the order reports list them.
    pub const ALL: &'static [Consumer] = &[Consumer::Genai, Consumer::TransformersJs, Consumer::Optimum];

    /// `genai`, `transformers.js`, `optimum`: the `--consumer` names.
    pub fn as_str(self) -> &'static str {
        match self {
            Consumer::Genai => "genai",
            Consumer::TransformersJs => "transformers.js",
            Consumer::Optimum => "optimum",
        }
    }

    /// The release whose rules apply when no version is asked for.
    pub fn current_version(self) -> u32 {
        match self {
            Consumer::Genai => 0,
            Consumer::TransformersJs => 3,
            Consumer::Optimum => 2,
        }
    }

    /// The release the rules were read from, in words.
    pub fn rules_from(self, major: u32) -> String {
        match (self, major) {
            (Consumer::Genai, _) => "onnxruntime-genai 0.18".into(),
            (Consumer::TransformersJs, 2) => "transformers.js 2.x (@xenova/transformers)".into(),
            (Consumer::TransformersJs, _) => "transformers.js 3.x/4.x".into(),
            (Consumer::Optimum, _) => "optimum 2.x ORTModel".into(),
        }
    }
}

impl fmt::Display for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The consumer a folder is checked for: which, the major version whose
/// rules apply, and why (what in the folder says so, or `--consumer`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct Target {
    /// The consumer.
    pub consumer: Consumer,
    /// The major version whose loading rules apply (transformers.js 2 vs 3+).
    pub major: u32,
    /// What told it: `genai_config.json`, `onnx/ with dtype variants`, `--consumer`.
    pub because: String,
}

impl Target {
    /// `consumer`'s rules at `major`, told by `because`.
    pub fn new(consumer: Consumer, major: u32, because: impl Into<String>) -> Target {
        Target { consumer, major, because: because.into() }
    }

    /// `transformers.js 3.x/4.x, told by ONNX files in onnx/`: the report header's words.
    pub fn describe(&self) -> String {
        format!("{}, told by {}", self.consumer.rules_from(self.major), self.because)
    }
}

/// What `--consumer` asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Tell from the folder (the default).
    Infer,
    /// No consumer's rules: the graphs and configs only.
    None,
    /// This consumer, at this major version (`None`: the current release).
    Some(Consumer, Option<u32>),
}

impl std::str::FromStr for Choice {
    type Err = String;
    /// `genai`, `transformers.js`, `transformers.js@2`, `optimum`, `none`, `auto`.
    fn from_str(s: &str) -> Result<Choice, String> {
        let (name, version) = match s.split_once('@') {
            Some((n, v)) => {
                let major = v.split('.').next().and_then(|m| m.parse::<u32>().ok());
                (n, Some(major.ok_or_else(|| format!("`{v}` is not a version (transformers.js@2, …)"))?))
            }
            None => (s, None),
        };
        let consumer = match name.to_ascii_lowercase().as_str() {
            "auto" if version.is_none() => return Ok(Choice::Infer),
            "none" if version.is_none() => return Ok(Choice::None),
            "genai" | "onnxruntime-genai" => Consumer::Genai,
            "transformers.js" | "transformersjs" | "tjs" => Consumer::TransformersJs,
            "optimum" => Consumer::Optimum,
            _ => {
                return Err(format!(
                    "unknown consumer `{s}`: one of genai, transformers.js, transformers.js@2, optimum, none, auto"
                ))
            }
        };
        if consumer == Consumer::TransformersJs && version.is_some_and(|v| !(2..=4).contains(&v)) {
            return Err(format!("`{s}`: the rules known are those of transformers.js 2, 3 and 4"));
        }
        Ok(Choice::Some(consumer, version))
    }
}

/// The consumers `view`'s folder is laid out for, or those `choice` names.
pub fn targets(view: &View<'_>, choice: &Choice) -> Vec<Target> {
    match choice {
        Choice::None => Vec::new(),
        Choice::Some(c, v) => {
            vec![Target { consumer: *c, major: v.unwrap_or_else(|| c.current_version()), because: "--consumer".into() }]
        }
        Choice::Infer => {
            let mut out = Vec::new();
            for c in Consumer::ALL {
                let because = match c {
                    Consumer::Genai => genai::laid_out_for(view),
                    Consumer::TransformersJs => transformers_js::laid_out_for(view),
                    Consumer::Optimum => optimum::laid_out_for(view),
                };
                if let Some(because) = because {
                    out.push(Target { consumer: *c, major: c.current_version(), because });
                }
            }
            out
        }
    }
}

/// Every loading rule of every target, run on `view`.
pub fn check(view: &View<'_>, targets: &[Target]) -> Vec<Finding> {
    let mut out = Vec::new();
    for t in targets {
        out.extend(match t.consumer {
            Consumer::Genai => genai::check(view),
            Consumer::TransformersJs => transformers_js::check(view, t.major),
            Consumer::Optimum => optimum::check(view),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumer_names_parse_with_versions() {
        assert_eq!("genai".parse::<Choice>(), Ok(Choice::Some(Consumer::Genai, None)));
        assert_eq!("transformers.js@2".parse::<Choice>(), Ok(Choice::Some(Consumer::TransformersJs, Some(2))));
        assert_eq!("none".parse::<Choice>(), Ok(Choice::None));
        assert!("transformers.js@9".parse::<Choice>().unwrap_err().contains("2, 3 and 4"));
        assert!("onnxruntime".parse::<Choice>().unwrap_err().contains("unknown consumer"));
    }
}
