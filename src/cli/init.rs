//! `init`: a contract written from a known-good export, or one per file of
//! an export folder.

use super::fail::Fail;
use super::output::{display, emit};
use onnx_contract::exit;
use onnx_contract::model::reader::read_signature;
use onnx_contract::render::json;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub(crate) struct InitArgs {
    /// A known-good .onnx file, or an export folder.
    model: PathBuf,
    /// Where to write the YAML (default: stdout); a folder when MODEL is one.
    #[arg(short, long)]
    output: Option<PathBuf>,
}

pub(crate) fn run(args: InitArgs, json_out: bool) -> Result<i32, Fail> {
    let InitArgs { model, output } = args;
    if model.is_dir() {
        let all = onnx_contract::folder::init::init_all(&model)?;
        match output {
            Some(dir) => {
                let io = |e: std::io::Error| Fail {
                    code: exit::USAGE,
                    kind: "io",
                    message: format!("{}: cannot write: {e}", dir.display()),
                };
                std::fs::create_dir_all(&dir).map_err(io)?;
                let mut written = Vec::new();
                for (rel, text) in &all {
                    let stem = rel.trim_end_matches(".onnx").replace('/', "_");
                    let path = dir.join(format!("{stem}.yaml"));
                    std::fs::write(&path, text).map_err(io)?;
                    written.push(display(&path));
                }
                if json_out {
                    emit(&json::to_text(&serde_json::json!({ "written": written })));
                } else {
                    eprintln!("wrote {}", written.join(", "));
                }
            }
            None if json_out => {
                let docs: Vec<_> =
                    all.iter().map(|(rel, text)| serde_json::json!({ "model": rel, "contract": text })).collect();
                emit(&json::to_text(&serde_json::json!({ "folder": display(&model), "contracts": docs })))
            }
            None => {
                let docs: Vec<String> = all.iter().map(|(rel, text)| format!("# ── {rel}\n{text}")).collect();
                emit(&docs.join("---\n"));
            }
        }
        Ok(exit::OK)
    } else {
        let sig = read_signature(&model)?;
        let text = onnx_contract::contract::init::init(&sig, &display(&model));
        match output {
            Some(path) => {
                std::fs::write(&path, &text).map_err(|e| Fail {
                    code: exit::USAGE,
                    kind: "io",
                    message: format!("{}: cannot write: {e}", path.display()),
                })?;
                if json_out {
                    emit(&json::to_text(&serde_json::json!({ "written": display(&path) })));
                } else {
                    eprintln!("wrote {}", path.display());
                }
            }
            None if json_out => {
                emit(&json::to_text(&serde_json::json!({ "model": display(&model), "contract": text })))
            }
            None => emit(&text),
        }
        Ok(exit::OK)
    }
}
