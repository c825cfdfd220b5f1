//! The Rust program (ort 2 + ndarray; `half` too for float16 models).

use super::spec::Spec;
use crate::plan::CacheTensor;
use std::fmt::Write;

fn ort_type(t: &str) -> &'static str {
    match t {
        "float16" => "Float16",
        "bfloat16" => "Bfloat16",
        "float64" => "Float64",
        _ => "Float32",
    }
}

fn cache(list: &[CacheTensor]) -> String {
    let mut s = String::from("&[\n");
    for c in list {
        let dims: Vec<String> = c.shape.iter().skip(1).map(|d| d.to_string()).collect();
        let _ = writeln!(s, "    ({:?}, {:?}, &[{}]),", c.past, c.present, dims.join(", "));
    }
    s.push(']');
    s
}

/// An int tensor of `dtype` from `Vec<i64>` values, as Rust source.
fn ints(dtype: &str, shape: &str, values: &str) -> String {
    if dtype == "int32" {
        format!("Tensor::from_array(Array2::from_shape_vec({shape}, {values}.iter().map(|&v| v as i32).collect::<Vec<i32>>())?)?.into_dyn()")
    } else {
        format!("Tensor::from_array(Array2::from_shape_vec({shape}, {values})?)?.into_dyn()")
    }
}

pub(crate) fn rust(s: &Spec<'_>) -> String {
    let (l, p) = (s.l, s.plan);
    let float16 = p.self_past.first().is_some_and(|c| c.dtype.to_string() == "float16");
    let logits16 = float16 || s.states_dtype() == "float16";
    let mut o = String::new();
    let _ = writeln!(
        o,
        "//! Greedy decoding with the KV cache ({}), written by `onnx-contract protocol --emit rust`",
        l.form
    );
    let _ = writeln!(o, "//! from the plan its runtime check drives the model with.\n//!");
    let _ = writeln!(o, "//! Cargo.toml:\n//!   [dependencies]");
    let _ = writeln!(o, "//!   ort = {{ version = \"=2.0.0-rc.15\", default-features = false, features = [\"std\", \"ndarray\", \"load-dynamic\", \"api-17\"{}] }}", if logits16 { ", \"half\"" } else { "" });
    let _ = writeln!(o, "//!   ndarray = \"0.17\"");
    if logits16 {
        let _ = writeln!(o, "//!   half = \"2\"  # this model's logits are float16");
    }
    let input = if s.audio() { "--features input.npy" } else { "--ids 5,17,42" };
    let _ = writeln!(
        o,
        "//! Run (ONNX Runtime is loaded from ORT_DYLIB_PATH, e.g. Python's onnxruntime/capi/libonnxruntime.so.*):"
    );
    let _ = writeln!(o, "//!   ORT_DYLIB_PATH=... cargo run --release -- --model-dir DIR {input} --max-new-tokens 16");
    let _ = writeln!(o, "//! prints {{\"ids\": [new token ids], \"top5\": [[[id, logit], ... 5 per new token]]}}.\n");
    let arrays = if p.branch_flag.is_some() { "{Array1, Array2}" } else { "Array2" };
    let _ = writeln!(o, "use ndarray::{arrays};\nuse ort::session::{{Session, SessionInputValue}};\nuse ort::value::{{DynTensor, DynValue, Tensor, TensorElementType}};\nuse std::path::PathBuf;\n");
    if let Some(e) = &l.encoder {
        let _ = writeln!(o, "const ENCODER: &str = {e:?};");
    }
    let _ = writeln!(o, "const STEP0: &str = {:?}; // the file run at step 0", l.step0_file);
    let _ = writeln!(o, "const DECODER: &str = {:?}; // the file run at every later step", l.later_file);
    if s.seq2seq {
        let _ = writeln!(o, "const DECODER_START: i64 = {};", l.decoder_start.unwrap_or(0));
    }
    let _ = writeln!(o, "const EOS: Option<i64> = {};", l.eos.map_or("None".into(), |v| format!("Some({v})")));
    let _ = writeln!(o, "/// (past input, present output, shape after batch; the past axis is empty)");
    let _ = writeln!(
        o,
        "const SELF_PAST: &[(&str, &str, &[i64])] = {}; // refreshed from the present every step",
        cache(&p.self_past)
    );
    let _ = writeln!(
        o,
        "const CROSS_PAST: &[(&str, &str, &[i64])] = {}; // taken from step 0's present, then kept",
        cache(&p.cross_past)
    );
    let cache_type = p.self_past.first().map_or("float32".to_string(), |c| c.dtype.to_string());
    let _ = writeln!(o, "const CACHE_TYPE: TensorElementType = TensorElementType::{};\n", ort_type(&cache_type));
    let _ = writeln!(
        o,
        r#"struct Args {{
    model_dir: PathBuf,
    ids: Vec<i64>,
    features: Option<PathBuf>,
    max_new_tokens: usize,
    ignore_eos: bool,
}}

fn args() -> Result<Args, String> {{
    let mut a = Args {{ model_dir: PathBuf::new(), ids: Vec::new(), features: None, max_new_tokens: 16, ignore_eos: false }};
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {{
        let mut value = || it.next().ok_or(format!("{{flag}} needs a value"));
        match flag.as_str() {{
            "--model-dir" => a.model_dir = PathBuf::from(value()?),
            "--ids" => a.ids = value()?.split(',').map(|t| t.trim().parse().map_err(|_| format!("bad id `{{t}}`"))).collect::<Result<_, _>>()?,
            "--features" => a.features = Some(PathBuf::from(value()?)),
            "--max-new-tokens" => a.max_new_tokens = value()?.parse().map_err(|_| "bad --max-new-tokens")?,
            "--ignore-eos" => a.ignore_eos = true,
            other => return Err(format!("unknown argument `{{other}}`")),
        }}
    }}
    Ok(a)
}}

/// A past of length 0 on the past axis (not 1: a zero slot would be attended to).
fn empty(session: &Session, dims: &[i64]) -> ort::Result<DynValue> {{
    let mut shape = vec![1i64];
    shape.extend_from_slice(dims);
    Ok(DynTensor::new(session.allocator(), CACHE_TYPE, shape)?.into_dyn())
}}
"#
    );
    if s.audio() {
        let _ = writeln!(
            o,
            r#"/// A float32 C-order .npy file (as np.save writes it), with a batch axis added.
fn npy(path: &PathBuf) -> Result<DynValue, Box<dyn std::error::Error>> {{
    let bytes = std::fs::read(path)?;
    let hlen = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let header = std::str::from_utf8(&bytes[10..10 + hlen])?;
    let shape_text = header.split("'shape': (").nth(1).and_then(|s| s.split(')').next()).ok_or("no shape")?;
    let mut shape: Vec<usize> = shape_text.split(',').filter(|s| !s.trim().is_empty()).map(|s| s.trim().parse()).collect::<Result<_, _>>()?;
    if shape.len() == 2 {{
        shape.insert(0, 1);
    }}
    let data: Vec<f32> = bytes[10 + hlen..].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    Ok(Tensor::from_array(ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&shape), data)?)?.into_dyn())
}}
"#
        );
    }
    let _ = writeln!(o, "fn main() -> Result<(), Box<dyn std::error::Error>> {{");
    let _ = writeln!(o, "    let a = args()?;");
    let _ = writeln!(o, "    let lib = std::env::var(\"ORT_DYLIB_PATH\").map_err(|_| \"set ORT_DYLIB_PATH to an ONNX Runtime library\")?;");
    let _ = writeln!(o, "    let env = ort::init_from(lib)?.build()?;");
    let _ = writeln!(o, "    let open = |file: &str| Session::builder(&env).and_then(|mut b| b.commit_from_file(a.model_dir.join(file)));");
    let ids_t = p.input_ids_dtype.to_string();
    if l.encoder.is_some() {
        let _ = writeln!(o, "\n    // The encoder, once.");
        let _ = writeln!(o, "    let mut encoder = open(ENCODER)?;");
        let _ = writeln!(o, "    let mut enc_feeds: Vec<(String, SessionInputValue)> = Vec::new();");
        for (n, t, _) in s.encoder_inputs {
            let v = if t.starts_with("float") {
                "npy(a.features.as_ref().ok_or(\"--features is required\")?)?".to_string()
            } else if n.contains("mask") {
                ints(t, "(1, a.ids.len())", "vec![1i64; a.ids.len()]")
            } else {
                ints(t, "(1, a.ids.len())", "a.ids.clone()")
            };
            let _ = writeln!(o, "    enc_feeds.push(({n:?}.to_string(), {v}.into()));");
        }
        let _ = writeln!(o, "    let states_name = encoder.outputs()[0].name().to_string();");
        let _ = writeln!(
            o,
            "    let states: DynValue = encoder.run(enc_feeds)?.remove(&states_name).ok_or(\"no encoder output\")?;"
        );
        if p.encoder_attention_mask.is_some() {
            let _ = writeln!(o, "    let enc_len = states.shape()[1] as usize;");
        }
    }
    let _ = writeln!(o, "\n    let mut sessions = vec![open(STEP0)?];");
    let _ = writeln!(o, "    if DECODER != STEP0 {{\n        sessions.push(open(DECODER)?);\n    }}");
    let _ = writeln!(o, "    let mut past: Vec<DynValue> = SELF_PAST.iter().map(|(_, _, d)| empty(&sessions[0], d)).collect::<Result<_, _>>()?;");
    let _ = writeln!(o, "    let mut cross: Vec<DynValue> = CROSS_PAST.iter().map(|(_, _, d)| empty(&sessions[0], d)).collect::<Result<_, _>>()?;");
    if s.seq2seq {
        let _ = writeln!(o, "    let mut fed: Vec<i64> = vec![DECODER_START]; // step 0: the decoder start token");
    } else {
        let _ = writeln!(o, "    let mut fed: Vec<i64> = a.ids.clone(); // step 0: the whole prompt");
    }
    let tracks_past = p.attention_mask.is_some() || p.position_ids.is_some();
    if tracks_past {
        let _ = writeln!(o, "    let mut past_len = 0usize;");
    }
    let _ = writeln!(o, "    let (mut new, mut top5) = (Vec::<i64>::new(), Vec::<Vec<(usize, f64)>>::new());");
    let _ = writeln!(o, "    for step in 0..a.max_new_tokens {{");
    let _ = writeln!(o, "        let n = fed.len();");
    let _ = writeln!(o, "        let mut feeds: Vec<(String, SessionInputValue)> = Vec::new();");
    let _ = writeln!(
        o,
        "        feeds.push(({:?}.to_string(), {}.into()));",
        p.input_ids,
        ints(&ids_t, "(1, n)", "fed.clone()")
    );
    if let Some(f) = &p.branch_flag {
        let _ = writeln!(o, "        // The no-cache branch at step 0, the cached one after.");
        let _ = writeln!(
            o,
            "        feeds.push(({f:?}.to_string(), Tensor::from_array(Array1::from_vec(vec![step > 0]))?.into()));"
        );
    }
    if let Some(name) = s.states_name() {
        let _ = writeln!(o, "        feeds.push(({name:?}.to_string(), (&states).into()));");
    }
    if let Some(m) = &p.encoder_attention_mask {
        let _ = writeln!(
            o,
            "        feeds.push(({m:?}.to_string(), {}.into()));",
            ints(&p.dtype_of(m).to_string(), "(1, enc_len)", "vec![1i64; enc_len]")
        );
    }
    if let Some(m) = &p.attention_mask {
        let _ = writeln!(o, "        // The mask covers the past AND the new tokens.");
        let _ = writeln!(
            o,
            "        feeds.push(({m:?}.to_string(), {}.into()));",
            ints(&p.dtype_of(m).to_string(), "(1, past_len + n)", "vec![1i64; past_len + n]")
        );
    }
    if let Some(m) = &p.position_ids {
        let _ = writeln!(o, "        // Positions continue the past.");
        let _ = writeln!(
            o,
            "        feeds.push(({m:?}.to_string(), {}.into()));",
            ints(
                &p.dtype_of(m).to_string(),
                "(1, n)",
                "(past_len as i64..(past_len + n) as i64).collect::<Vec<i64>>()"
            )
        );
    }
    let _ = writeln!(
        o,
        "        for ((name, _, _), value) in SELF_PAST.iter().zip(&past).chain(CROSS_PAST.iter().zip(&cross)) {{"
    );
    let _ = writeln!(o, "            feeds.push((name.to_string(), value.into()));\n        }}");
    let _ = writeln!(o, "        let later = sessions.len() - 1;");
    let _ = writeln!(o, "        let session = &mut sessions[if step == 0 {{ 0 }} else {{ later }}];");
    let _ = writeln!(o, "        // Each file gets the inputs it declares (a split pair's step 0 takes no past).");
    let _ = writeln!(
        o,
        "        let declared: Vec<String> = session.inputs().iter().map(|i| i.name().to_string()).collect();"
    );
    let _ = writeln!(o, "        feeds.retain(|(k, _)| declared.contains(k));");
    let _ = writeln!(o, "        let mut out = session.run(feeds)?;");
    if logits16 {
        let _ = writeln!(o, "        let logits = out[{:?}].try_extract_array::<half::f16>()?;", p.logits);
        let _ = writeln!(o, "        let last: Vec<f64> = logits.index_axis(ndarray::Axis(0), 0).index_axis(ndarray::Axis(0), n - 1).iter().map(|v| f64::from(v.to_f32())).collect();");
    } else {
        let _ = writeln!(o, "        let logits = out[{:?}].try_extract_array::<f32>()?;", p.logits);
        let _ = writeln!(o, "        let last: Vec<f64> = logits.index_axis(ndarray::Axis(0), 0).index_axis(ndarray::Axis(0), n - 1).iter().map(|v| f64::from(*v)).collect();");
    }
    let _ = writeln!(o, "        let mut order: Vec<usize> = (0..last.len()).collect();");
    let _ = writeln!(o, "        order.sort_by(|&x, &y| last[y].partial_cmp(&last[x]).unwrap_or(std::cmp::Ordering::Equal).then(x.cmp(&y)));");
    let _ = writeln!(o, "        let token = order[0] as i64;");
    let _ = writeln!(o, "        new.push(token);");
    let _ = writeln!(o, "        top5.push(order.iter().take(5).map(|&i| (i, last[i])).collect());");
    let _ = writeln!(
        o,
        "        // The present becomes the past; the cross-attention past is step 0's (later ones are dummies)."
    );
    let _ = writeln!(o, "        past = SELF_PAST.iter().map(|(_, q, _)| out.remove(*q).ok_or(format!(\"no {{q}}\"))).collect::<Result<_, _>>()?;");
    let _ = writeln!(o, "        if step == 0 {{");
    let _ = writeln!(o, "            cross = CROSS_PAST.iter().map(|(_, q, _)| out.remove(*q).ok_or(format!(\"no {{q}}\"))).collect::<Result<_, _>>()?;\n        }}");
    if tracks_past {
        let _ = writeln!(o, "        past_len += n;");
    }
    let _ = writeln!(o, "        fed = vec![token];");
    let _ = writeln!(o, "        if Some(token) == EOS && !a.ignore_eos {{\n            break;\n        }}\n    }}");
    let _ = writeln!(o, "    let tops: Vec<String> = top5.iter().map(|t| {{");
    let _ =
        writeln!(o, "        let pairs: Vec<String> = t.iter().map(|(i, v)| format!(\"[{{i}}, {{v}}]\")).collect();");
    let _ = writeln!(o, "        format!(\"[{{}}]\", pairs.join(\", \"))\n    }}).collect();");
    let _ = writeln!(o, "    let ids: Vec<String> = new.iter().map(|t| t.to_string()).collect();");
    let _ = writeln!(
        o,
        "    println!(\"{{{{\\\"ids\\\": [{{}}], \\\"top5\\\": [{{}}]}}}}\", ids.join(\", \"), tops.join(\", \"));"
    );
    let _ = writeln!(o, "    Ok(())\n}}");
    o
}
