//! Rotary tables precomputed into the graph (onnxruntime-genai's
//! `cos_cache` / `sin_cache`, read by GroupQueryAttention or RotaryEmbedding):
//! row p holds cos and sin of p × inv_freq (times the attention scale), so
//! the frequencies are read off row 1 (atan2 of sin over cos) and the scale
//! off row 0. Only those two initializers are decoded, never the weights.

use crate::diagnose::graph_edit::{self as ge, FlatNode};
use prost::Message;

/// The few fields of a TensorProto a table needs.
#[derive(Clone, PartialEq, Message)]
struct Table {
    #[prost(int64, repeated, tag = "1")]
    dims: Vec<i64>,
    #[prost(int32, optional, tag = "2")]
    data_type: Option<i32>,
    #[prost(float, repeated, tag = "4")]
    float_data: Vec<f32>,
    #[prost(bytes = "vec", optional, tag = "9")]
    raw_data: Option<Vec<u8>>,
}

const FLOAT: i32 = 1;
const FLOAT16: i32 = 10;

/// `[rows, width]` values of initializer `name`, when it is a float table stored in the file.
fn table(model: &[u8], dir: &std::path::Path, name: &str) -> Option<(usize, Vec<f32>)> {
    let fields = ge::fields(model).ok()?;
    let graph = &model[fields.iter().find(|f| f.number == ge::MODEL_GRAPH)?.payload.clone()];
    for f in ge::fields(graph).ok()?.into_iter().filter(|f| f.number == ge::GRAPH_INITIALIZER) {
        let bytes = &graph[f.payload.clone()];
        if !crate::edit::tensor_name_and_type(bytes).is_ok_and(|(n, _)| n == name) {
            continue;
        }
        // Stored beside the graph (genai writes its tables to model.onnx.data): read from there.
        let inlined = crate::edit::inline_external(bytes, dir).ok()?;
        let t = Table::decode(inlined.as_slice()).ok()?;
        let [_, width] = t.dims[..] else { return None };
        let values: Vec<f32> = match (t.data_type?, t.raw_data) {
            (FLOAT, Some(raw)) => raw.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            (FLOAT, None) => t.float_data,
            (FLOAT16, Some(raw)) => {
                raw.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect()
            }
            _ => return None,
        };
        return Some((width.max(0) as usize, values));
    }
    None
}

/// The (cos, sin) tables the graph's rotary operators read, as initializer names.
fn table_names(nodes: &[FlatNode]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for n in nodes {
        let Some(at) = crate::model::reader::rotary_table_inputs(&n.op_type, &n.domain) else { continue };
        if let (Some(c), Some(s)) = (n.inputs.get(at.0), n.inputs.get(at.1)) {
            let pair = (c.clone(), s.clone());
            if !c.is_empty() && !s.is_empty() && !out.contains(&pair) {
                out.push(pair);
            }
        }
    }
    out
}

/// Each table pair's frequencies (row 1) and scale (row 0), with the pair's names.
pub(crate) fn measured(model: &[u8], dir: &std::path::Path, nodes: &[FlatNode]) -> Vec<(String, Vec<f64>, f64)> {
    let mut out = Vec::new();
    for (c, s) in table_names(nodes) {
        let (Some((w, cos)), Some((w2, sin))) = (table(model, dir, &c), table(model, dir, &s)) else { continue };
        if w == 0 || w != w2 || cos.len() < 2 * w || sin.len() < 2 * w {
            continue;
        }
        let freqs = (0..w).map(|i| f64::from(sin[w + i]).atan2(f64::from(cos[w + i]))).collect();
        out.push((format!("`{c}` / `{s}`"), freqs, f64::from(cos[0])));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn genai_tables_give_their_frequencies() {
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/llama-genai/model.onnx");
        let bytes = std::fs::read(&path).unwrap();
        let (_, nodes) = crate::diagnose::graph_edit::flatten(&bytes, &|_| Some(false)).unwrap();
        assert!(!super::table_names(&nodes).is_empty(), "no GroupQueryAttention tables");
        let found = super::measured(&bytes, path.parent().unwrap(), &nodes);
        assert_eq!(found.len(), 1, "{:?}", found.iter().map(|f| &f.0).collect::<Vec<_>>());
        let (_, freqs, scale) = &found[0];
        // theta 10000, 16 rotated dims: inv_freq[1] = 10000^(-2/16).
        assert!((freqs[1] - 10000f64.powf(-0.125)).abs() < 1e-6, "{freqs:?}");
        assert!((scale - 1.0).abs() < 1e-6);
    }
}
