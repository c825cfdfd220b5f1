//! A model's embedded weights read by ONNX Runtime in place, from the
//! model file itself. Given the file, ONNX Runtime parses the whole
//! protobuf (a copy of every weight) and copies each initializer again into
//! buffers of its own: most of a session's creation, and memory of its own
//! in every process. Here it is given the graph alone, each large
//! initializer marked as external data at its own bytes' place in the same
//! file, which ONNX Runtime maps: no copy, and the pages are the file's,
//! shared by every child that opens it (the encoder both decoder jobs run).
//! On full-size Marian a decoder's session takes 0.06 s instead of 0.38 s,
//! outputs bit for bit the same.

use ort::session::builder::SessionBuilder;
use ort::session::Session;
use prost::encoding::{decode_key, decode_varint, encode_key, encode_varint, WireType};
use std::ops::Range;
use std::path::Path;

/// Smaller initializers stay in the graph: not worth a mapping of their own.
const MIN_BYTES: usize = 1024;

/// A session on `path` with the job's thread count, at ONNX Runtime's default optimization level.
/// Weights are not prepacked: a check runs each session a few dozen times,
/// and packing every MatMul's weights at creation costs more than it saves
/// (half of a 360 MB decoder's session creation; measured in bench/). A
/// replay packs them, as a caller's session does by default: packed and
/// unpacked MatMuls sum in other orders, and a re-run must be bit-exact with
/// the caller's to test hypotheses against its digests.
/// Embedded weights are read in place from the file (`engine::mapped`).
pub(crate) fn open(
    env: &ort::environment::Environment,
    path: &Path,
    opts: &crate::engine::options::Options,
) -> Result<Session, String> {
    let prepack = if opts.replay.is_some() { "0" } else { "1" };
    let make = || {
        crate::engine::session::with_threads(Session::builder(env), opts.threads)
            .and_then(|b| Ok(b.with_config_entry("session.disable_prepacking", prepack)?))
            .and_then(|b| Ok(b.with_config_entry("session.intra_op.allow_spinning", "0")?))
    };
    commit(&make, path).map_err(|e| e.to_string())
}

/// `path` committed with its embedded weights read in place; the plain
/// `commit_from_file` where that cannot be done (no large embedded weight,
/// a file that does not map or parse, ONNX Runtime refusing the rewritten
/// graph), so a model's own errors are always ONNX Runtime's own.
pub(crate) fn commit(make: &dyn Fn() -> ort::Result<SessionBuilder>, path: &Path) -> ort::Result<Session> {
    if let Some(session) = in_place(make, path) {
        return Ok(session);
    }
    make()?.commit_from_file(path)
}

fn in_place(make: &dyn Fn() -> ort::Result<SessionBuilder>, path: &Path) -> Option<Session> {
    let at = named_at(path)?;
    let location = at.file_name()?.to_str()?;
    let file = std::fs::File::open(&at).ok()?;
    // SAFETY: the map is only read, and only while the graph is cut out of it. ONNX
    // Runtime then maps the weights itself for the session's life; a model rewritten
    // or truncated during a check is outside what a check can promise (as with any
    // mapped external data).
    let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    // Protobuf's limit: ONNX Runtime refuses a file this large, and so must the check.
    if map.len() > i32::MAX as usize {
        return None;
    }
    let (graph, cut) = split(&map, location).ok()?;
    drop(map);
    if cut == 0 {
        return None;
    }
    crate::engine::session::commit_edited(make(), &graph, &at).ok()
}

/// The file the weights are named in: a hub cache's file is a symlink into
/// `blobs/`, and ONNX Runtime refuses a location that resolves outside the
/// model's folder, so its weights are named at the link's target — unless
/// the model names other external data, which is found beside the link.
fn named_at(path: &Path) -> Option<std::path::PathBuf> {
    if !std::fs::symlink_metadata(path).ok()?.file_type().is_symlink() {
        return Some(path.to_path_buf());
    }
    let own = crate::model::reader::read_signature(path).ok()?.external_data.is_empty();
    if own {
        std::fs::canonicalize(path).ok()
    } else {
        Some(path.to_path_buf())
    }
}

/// `TensorProto` fields read here.
const DIMS: u32 = 1;
const DATA_TYPE: u32 = 2;
const SEGMENT: u32 = 3;
const RAW_DATA: u32 = 9;
const EXTERNAL_DATA: u32 = 13;
const DATA_LOCATION: u32 = 14;
/// `ModelProto.graph` and `GraphProto.initializer`.
const MODEL_GRAPH: u32 = 7;
const GRAPH_INITIALIZER: u32 = 5;

/// Bytes per element of the element types cut out (others stay in the graph).
fn element_size(data_type: i32) -> Option<usize> {
    Some(match data_type {
        2 | 3 | 9 => 1,       // uint8, int8, bool
        4 | 5 | 10 | 16 => 2, // uint16, int16, float16, bfloat16
        1 | 6 | 12 => 4,      // float, int32, uint32
        7 | 11 | 13 => 8,     // int64, double, uint64
        _ => return None,
    })
}

/// One field of a message: its number, wire type, the whole field and a
/// length-delimited field's payload (offsets into the message).
struct Field {
    number: u32,
    wire: WireType,
    all: Range<usize>,
    payload: Range<usize>,
}

fn fields(msg: &[u8]) -> Result<Vec<Field>, String> {
    let mut out = Vec::new();
    let mut rest = msg;
    while !rest.is_empty() {
        let start = msg.len() - rest.len();
        let (number, wire) = decode_key(&mut rest).map_err(|e| e.to_string())?;
        let at = msg.len() - rest.len();
        let skip = match wire {
            WireType::Varint => {
                decode_varint(&mut rest).map_err(|e| e.to_string())?;
                0
            }
            WireType::SixtyFourBit => 8,
            WireType::ThirtyTwoBit => 4,
            WireType::LengthDelimited => {
                usize::try_from(decode_varint(&mut rest).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?
            }
            _ => return Err(format!("wire type {wire:?} at byte {start}")),
        };
        let from = msg.len() - rest.len();
        // An untrusted length: past the end (or past usize) is an error, never an overflow.
        let end = from.checked_add(skip).filter(|&e| e <= msg.len()).ok_or("a field past the end")?;
        let payload = if wire == WireType::LengthDelimited { from..end } else { at..end };
        rest = &msg[end..];
        out.push(Field { number, wire, all: start..end, payload });
    }
    Ok(out)
}

/// A model's bytes with every large embedded initializer of its main graph
/// marked as external data at its own bytes' place in the file named
/// `location` (the model itself), and how many were; everything else is
/// copied as it is.
pub fn split(model: &[u8], location: &str) -> Result<(Vec<u8>, usize), String> {
    let mut out = Vec::with_capacity(1 << 16);
    let mut cut = 0;
    for f in fields(model)? {
        if f.number == MODEL_GRAPH && f.wire == WireType::LengthDelimited {
            let graph = graph(&model[f.payload.clone()], f.payload.start, location, &mut cut)?;
            put(&mut out, MODEL_GRAPH, &graph);
        } else {
            out.extend_from_slice(&model[f.all]);
        }
    }
    Ok((out, cut))
}

/// A `GraphProto` at `at` in the file, its large initializers made external.
fn graph(msg: &[u8], at: usize, location: &str, cut: &mut usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(msg.len().min(1 << 20));
    for f in fields(msg)? {
        let external = (f.number == GRAPH_INITIALIZER && f.wire == WireType::LengthDelimited)
            .then(|| external(&msg[f.payload.clone()], at + f.payload.start, location))
            .flatten();
        match external {
            Some(tensor) => {
                put(&mut out, GRAPH_INITIALIZER, &tensor);
                *cut += 1;
            }
            None => out.extend_from_slice(&msg[f.all]),
        }
    }
    Ok(out)
}

/// A `TensorProto` at `offset` in the file, rewritten without its raw data
/// and marked external at the raw data's place, when it is large, embedded
/// and of a plain element type whose size its dims account for.
fn external(t: &[u8], offset: usize, location: &str) -> Option<Vec<u8>> {
    let (mut data_type, mut dims, mut raw) = (0i32, Vec::new(), None);
    let fs = fields(t).ok()?;
    for f in &fs {
        let mut v = &t[f.payload.clone()];
        match (f.number, f.wire) {
            // `DEFAULT` written out (onnx does, after taking external data back in) is embedded.
            (DATA_LOCATION, WireType::Varint) if decode_varint(&mut v).ok()? == 0 => {}
            (SEGMENT | EXTERNAL_DATA | DATA_LOCATION, _) => return None,
            (DATA_TYPE, WireType::Varint) => data_type = i32::try_from(decode_varint(&mut v).ok()?).ok()?,
            (DIMS, WireType::Varint) => dims.push(decode_varint(&mut v).ok()?),
            (DIMS, WireType::LengthDelimited) => {
                while !v.is_empty() {
                    dims.push(decode_varint(&mut v).ok()?);
                }
            }
            (RAW_DATA, WireType::LengthDelimited) => raw = Some(f.payload.clone()),
            _ => {}
        }
    }
    let raw = raw?;
    let count = dims.iter().try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?))?;
    if raw.len() < MIN_BYTES || count.checked_mul(element_size(data_type)?)? != raw.len() {
        return None;
    }
    let mut out = Vec::with_capacity(t.len() - raw.len() + 96);
    for f in fs.iter().filter(|f| f.number != RAW_DATA && f.number != DATA_LOCATION) {
        out.extend_from_slice(&t[f.all.clone()]);
    }
    let start = (offset + raw.start).to_string();
    for (key, value) in [("location", location), ("offset", &start), ("length", &raw.len().to_string())] {
        let mut entry = Vec::new();
        put(&mut entry, 1, key.as_bytes());
        put(&mut entry, 2, value.as_bytes());
        put(&mut out, EXTERNAL_DATA, &entry);
    }
    encode_key(DATA_LOCATION, WireType::Varint, &mut out);
    encode_varint(1, &mut out);
    Some(out)
}

/// A length-delimited field.
fn put(out: &mut Vec<u8>, number: u32, payload: &[u8]) {
    encode_key(number, WireType::LengthDelimited, out);
    encode_varint(payload.len() as u64, out);
    out.extend_from_slice(payload);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(number: u32, v: u64, out: &mut Vec<u8>) {
        encode_key(number, WireType::Varint, out);
        encode_varint(v, out);
    }

    fn tensor(name: &str, values: &[f32]) -> Vec<u8> {
        let mut t = Vec::new();
        varint(DIMS, values.len() as u64, &mut t);
        varint(DATA_TYPE, 1, &mut t);
        put(&mut t, 8, name.as_bytes());
        put(&mut t, RAW_DATA, &values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>());
        t
    }

    /// The payloads of a message's fields numbered `n`, with their offsets in it.
    fn payloads(msg: &[u8], n: u32) -> Vec<(usize, Vec<u8>)> {
        fields(msg)
            .unwrap()
            .into_iter()
            .filter(|f| f.number == n)
            .map(|f| (f.payload.start, msg[f.payload].to_vec()))
            .collect()
    }

    #[test]
    fn a_large_initializer_points_at_its_own_bytes_in_the_file() {
        let big: Vec<f32> = (0..1000).map(|i| i as f32 * 0.5).collect();
        let mut graph = Vec::new();
        put(&mut graph, GRAPH_INITIALIZER, &tensor("w", &big));
        put(&mut graph, GRAPH_INITIALIZER, &tensor("b", &[1.0, 2.0]));
        put(&mut graph, 2, b"g");
        let mut model = Vec::new();
        varint(1, 8, &mut model);
        put(&mut model, MODEL_GRAPH, &graph);

        let (out, cut) = split(&model, "m.onnx").unwrap();
        assert_eq!(cut, 1, "only the large initializer is made external");
        let (_, g) = payloads(&out, MODEL_GRAPH).remove(0);
        let inits = payloads(&g, GRAPH_INITIALIZER);
        assert_eq!(inits.len(), 2);
        let w = &inits[0].1;
        assert!(payloads(w, RAW_DATA).is_empty(), "the weight's bytes are not copied");
        let entries: Vec<(String, String)> = payloads(w, EXTERNAL_DATA)
            .into_iter()
            .map(|(_, e)| {
                let kv = payloads(&e, 1).remove(0).1;
                let v = payloads(&e, 2).remove(0).1;
                (String::from_utf8(kv).unwrap(), String::from_utf8(v).unwrap())
            })
            .collect();
        let get = |k: &str| entries.iter().find(|(key, _)| key == k).unwrap().1.clone();
        assert_eq!(get("location"), "m.onnx");
        let (offset, length): (usize, usize) = (get("offset").parse().unwrap(), get("length").parse().unwrap());
        let bytes: Vec<u8> = big.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(&model[offset..offset + length], bytes.as_slice(), "offset and length name the weight's own bytes");
        assert_eq!(payloads(&inits[1].1, RAW_DATA).len(), 1, "a small initializer stays embedded");
        // `data_location: DEFAULT` written out (as onnx does after taking external data back in) is still embedded data.
        let mut t = tensor("d", &big);
        varint(DATA_LOCATION, 0, &mut t);
        let mut g = Vec::new();
        put(&mut g, GRAPH_INITIALIZER, &t);
        let mut m = Vec::new();
        put(&mut m, MODEL_GRAPH, &g);
        let (out, cut) = split(&m, "m.onnx").unwrap();
        assert_eq!(cut, 1);
        let (_, g) = payloads(&out, MODEL_GRAPH).remove(0);
        let (_, t) = payloads(&g, GRAPH_INITIALIZER).remove(0);
        let loc: Vec<u64> = fields(&t)
            .unwrap()
            .into_iter()
            .filter(|f| f.number == DATA_LOCATION)
            .map(|f| t[f.payload][0] as u64)
            .collect();
        assert_eq!(loc, vec![1], "one data_location, EXTERNAL");
        // A truncated file is an error, not a panic.
        assert!(split(&model[..model.len() - 3], "m.onnx").is_err());
    }
    #[test]
    fn onnx_runtime_takes_the_rewrite_of_a_real_export_and_computes_the_same() {
        // ONNX Runtime itself: the rewrite is taken (not the silent fallback) and
        // its session's outputs are the plain session's, bit for bit.
        let lib = crate::engine::locate::locate(None).expect("ONNX Runtime (tests/setup.sh installs it)").path;
        let env = ort::init_from(&lib).unwrap().build().unwrap();
        let make = || Session::builder(&env);
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let model = root.join("models/marian-tiny/encoder_model.onnx");
        let mut mapped = in_place(&make, &model).expect("the rewritten graph is accepted");
        let mut plain = make().unwrap().commit_from_file(&model).unwrap();
        let ids = crate::engine::feeds::Feed {
            name: "input_ids".into(),
            elem: crate::model::signature::ElemType::I64,
            values: crate::engine::feeds::Values::Int(
                ndarray::ArrayD::from_shape_vec(vec![1, 5], vec![5, 17, 99, 3, 0]).unwrap(),
            ),
        };
        let mask = crate::engine::feeds::Feed {
            name: "attention_mask".into(),
            elem: crate::model::signature::ElemType::I64,
            values: crate::engine::feeds::Values::Int(ndarray::ArrayD::from_elem(vec![1, 5], 1)),
        };
        let feeds = [ids, mask];
        let (a, b) = (
            crate::engine::session::run(&mut mapped, &feeds).unwrap(),
            crate::engine::session::run(&mut plain, &feeds).unwrap(),
        );
        assert!(!a.floats.is_empty());
        for (name, x) in &a.floats {
            assert_eq!(Some(x), b.floats.get(name), "{name}: in place and plain differ");
        }
        // External data already: nothing to rewrite, the plain path is taken.
        let external = root.join("models/static-cache-with-mask/model.onnx");
        assert!(in_place(&make, &external).is_none());
    }
}
