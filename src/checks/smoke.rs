//! A file whose role the inference could not place (a codec decoder, a
//! delay-pattern helper, something new): still loaded, and run once on
//! inputs built from its signature wherever its dims can be bound, so the
//! report says "loads and runs" (or what stopped it) instead of nothing.
//! Arbitrary values may be invalid for the graph: a failed run is said, not
//! judged; a file ONNX Runtime cannot load is.

use crate::engine::events::Event;
use crate::engine::feeds::{Feed, Rng, Values};
use crate::engine::session::run;
use crate::model::signature::{Dim, ElemType};
use ndarray::{ArrayD, IxDyn};
use ort::session::Session;
use std::collections::HashMap;
use std::path::Path;

/// Sizes for a symbolic axis: a batch of 1 (times the codebooks on a
/// batch × codebooks axis), anything else 4; one symbol, one size.
fn size_of(symbol: &str, sizes: &mut HashMap<String, usize>, codebooks: usize) -> usize {
    let s = symbol.to_ascii_lowercase();
    let guess = if s.contains("codebooks") {
        codebooks
    } else if s.contains("batch") {
        1
    } else {
        4
    };
    *sizes.entry(symbol.to_string()).or_insert(guess)
}

/// Feeds for every input of `model`: masks of ones, other integers zero,
/// booleans false, floats seeded small values.
fn feeds(model: &Path, codebooks: usize) -> Result<Vec<Feed>, String> {
    let sig = crate::model::reader::read_signature(model).map_err(|e| e.to_string())?;
    let mut sizes = HashMap::new();
    let mut rng = Rng::seeded(0x5a0e);
    let mut out = Vec::new();
    for p in &sig.inputs {
        let Some((elem, dims)) = p.ty.tensor_parts() else {
            return Err(format!("`{}` is not a tensor", p.name));
        };
        let shape: Vec<usize> = dims
            .unwrap_or_default()
            .iter()
            .map(|d| match d {
                Dim::Fixed(v) => (*v).max(0) as usize,
                Dim::Symbolic(s) => size_of(s, &mut sizes, codebooks),
                Dim::Unknown => 1,
            })
            .collect();
        let n: usize = shape.iter().product();
        let values = if elem.is_float() {
            Values::Float(
                ArrayD::from_shape_vec(IxDyn(&shape), (0..n).map(|_| 0.1 * rng.normal()).collect()).expect("shape"),
            )
        } else if elem == ElemType::BOOL {
            Values::Bool(ArrayD::from_elem(IxDyn(&shape), false))
        } else {
            // A length input (`max_length`) gets room beyond every axis fed; masks are ones.
            let value = if p.name.contains("length") { 64 } else { i64::from(p.name.contains("mask")) };
            Values::Int(ArrayD::from_elem(IxDyn(&shape), value))
        };
        out.push(Feed { name: p.name.clone(), elem, values });
    }
    Ok(out)
}

/// One run of `session` on inputs built from the signature of `model`.
pub(crate) fn run_once(session: &mut Session, model: &Path, codebooks: usize, emit: &mut dyn FnMut(Event)) {
    let what = match feeds(model, codebooks).and_then(|f| {
        let shown: Vec<String> = f.iter().map(|x| format!("{} {:?}", x.name, x.shape())).collect::<Vec<_>>();
        run(session, &f).map(|out| (shown, out))
    }) {
        Ok((fed, out)) => {
            let made: Vec<String> = out.infos.iter().map(|i| format!("{} {:?}", i.name, i.shape)).collect();
            format!("loads and runs on inputs built from its signature ({}): {}", fed.join(", "), made.join(", "))
        }
        Err(e) => format!(
            "loads; one run on inputs built from its signature stopped (arbitrary values may not suit it): {}",
            crate::diagnose::cause::first_line(&e)
        ),
    };
    emit(Event::Probe { what, issues: Vec::new() });
}
