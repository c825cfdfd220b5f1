//! Edits that make new ONNX files from a model's bytes: a minimal model
//! around one node to file upstream (`extract`), a float16 model with some
//! nodes computed in float32 behind Casts (`float32`), and a quantized
//! variant with some nodes taken back from its fp32 sibling (`unquantize`).
//!
//! Pure functions from bytes to bytes, at the protobuf field level (through
//! `diagnose::graph_edit`'s field reader): weights and attributes this tool
//! does not model are copied as they are, never decoded and re-encoded.

pub mod cache_float32;
pub mod extract;
pub mod float32;
pub mod unquantize;

use crate::diagnose::graph_edit::{fields, len_field, put_varint};

/// Field numbers of `TensorProto` read here.
pub(crate) const TENSOR_DATA_TYPE: u32 = 2;
pub(crate) const TENSOR_NAME: u32 = 8;
pub(crate) const TENSOR_RAW_DATA: u32 = 9;
pub(crate) const TENSOR_EXTERNAL_DATA: u32 = 13;
pub(crate) const TENSOR_DATA_LOCATION: u32 = 14;
/// Field numbers of `NodeProto`.
pub(crate) const NODE_INPUT: u32 = 1;
pub(crate) const NODE_OUTPUT: u32 = 2;
pub(crate) const NODE_NAME: u32 = 3;
pub(crate) const GRAPH_NAME: u32 = 2;
pub(crate) const GRAPH_INPUT: u32 = 11;

/// A varint field.
pub(crate) fn varint_field(out: &mut Vec<u8>, number: u32, v: u64) {
    put_varint(out, u64::from(number) << 3);
    put_varint(out, v);
}

/// A `ValueInfoProto` of a tensor: name, element type and, when known, shape.
pub(crate) fn tensor_value_info(name: &str, elem: i32, shape: Option<&[i64]>) -> Vec<u8> {
    let mut tensor = Vec::new();
    varint_field(&mut tensor, 1, elem as u64);
    if let Some(dims) = shape {
        let mut shape_bytes = Vec::new();
        for d in dims {
            let mut dim = Vec::new();
            varint_field(&mut dim, 1, *d as u64);
            len_field(&mut shape_bytes, 1, &dim);
        }
        len_field(&mut tensor, 2, &shape_bytes);
    }
    let mut ty = Vec::new();
    len_field(&mut ty, 1, &tensor);
    let mut v = Vec::new();
    len_field(&mut v, 1, name.as_bytes());
    len_field(&mut v, 2, &ty);
    v
}

/// A node: inputs, outputs, name, op and `to` (a Cast's only attribute).
pub(crate) fn cast_node(name: &str, input: &str, output: &str, to: i32) -> Vec<u8> {
    let mut attr = Vec::new();
    len_field(&mut attr, 1, b"to");
    varint_field(&mut attr, 3, to as u64);
    // AttributeProto.type = INT (2).
    varint_field(&mut attr, 20, 2);
    let mut node = Vec::new();
    len_field(&mut node, NODE_INPUT, input.as_bytes());
    len_field(&mut node, NODE_OUTPUT, output.as_bytes());
    len_field(&mut node, NODE_NAME, name.as_bytes());
    len_field(&mut node, 4, b"Cast");
    len_field(&mut node, 5, &attr);
    node
}

/// The name and data type of a serialized `TensorProto` (an initializer).
pub(crate) fn tensor_name_and_type(tensor: &[u8]) -> Result<(String, i32), String> {
    let mut name = String::new();
    let mut dtype = 0;
    for f in fields(tensor)? {
        match f.number {
            TENSOR_NAME => name = String::from_utf8_lossy(&tensor[f.payload.clone()]).into_owned(),
            TENSOR_DATA_TYPE => {
                let mut pos = f.all.start;
                crate::diagnose::graph_edit::varint(tensor, &mut pos)?;
                dtype = crate::diagnose::graph_edit::varint(tensor, &mut pos)? as i32;
            }
            _ => {}
        }
    }
    Ok((name, dtype))
}

/// Every node in a model, its subgraphs' included.
pub fn node_count(model: &[u8]) -> usize {
    use prost::Message;
    fn count(g: &crate::model::onnx_proto::GraphProto) -> usize {
        g.node.len()
            + g.node
                .iter()
                .flat_map(|n| &n.attribute)
                .flat_map(|a| a.g.iter().chain(&a.graphs))
                .map(count)
                .sum::<usize>()
    }
    crate::model::onnx_proto::ModelProto::decode(model).ok().and_then(|m| m.graph).map_or(0, |g| count(&g))
}

/// A serialized initializer with external data read into `raw_data`, so a
/// file written elsewhere needs no data file. `base` is the model's folder;
/// a location that leaves it (absolute, `..`) is refused.
pub(crate) fn inline_external(tensor: &[u8], base: &std::path::Path) -> Result<Vec<u8>, String> {
    use std::io::{Read, Seek, SeekFrom};
    let fs = fields(tensor)?;
    if !fs.iter().any(|f| f.number == TENSOR_DATA_LOCATION) {
        return Ok(tensor.to_vec());
    }
    let (mut location, mut offset, mut length) = (None, 0u64, None);
    for f in fs.iter().filter(|f| f.number == TENSOR_EXTERNAL_DATA) {
        let entry = &tensor[f.payload.clone()];
        let (mut key, mut value) = (String::new(), String::new());
        for e in fields(entry)? {
            let text = String::from_utf8_lossy(&entry[e.payload.clone()]).into_owned();
            match e.number {
                1 => key = text,
                2 => value = text,
                _ => {}
            }
        }
        match key.as_str() {
            "location" => location = Some(value),
            "offset" => offset = value.parse().map_err(|_| format!("external data offset `{value}`"))?,
            "length" => length = Some(value.parse::<u64>().map_err(|_| format!("external data length `{value}`"))?),
            _ => {}
        }
    }
    let location = location.ok_or("external data without a location")?;
    let rel = std::path::Path::new(&location);
    if rel.is_absolute() || rel.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
        return Err(format!("external data location `{location}` leaves the model's folder"));
    }
    let path = base.join(rel);
    let mut file = std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let size = file.metadata().map_err(|e| format!("{}: {e}", path.display()))?.len();
    let length = length.unwrap_or(size.saturating_sub(offset));
    if offset.checked_add(length).is_none_or(|end| end > size) {
        return Err(format!("{}: external data past the end of the file", path.display()));
    }
    let mut data = vec![0u8; length as usize];
    file.seek(SeekFrom::Start(offset))
        .and_then(|_| file.read_exact(&mut data))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = Vec::with_capacity(tensor.len() + data.len());
    for f in fs.iter().filter(|f| !matches!(f.number, TENSOR_EXTERNAL_DATA | TENSOR_DATA_LOCATION)) {
        out.extend_from_slice(&tensor[f.all.clone()]);
    }
    len_field(&mut out, TENSOR_RAW_DATA, &data);
    Ok(out)
}

/// Field numbers of `AttributeProto` holding tensors: `t` and `tensors`.
const ATTR_TENSOR: u32 = 5;
const ATTR_TENSORS: u32 = 10;

/// A graph's node field (`GraphProto.node`: tag, length, `NodeProto`) with
/// the external data of its attribute tensors read into `raw_data`:
/// exporters store a `Constant`'s value (the rotary `inv_freq`) in the data
/// file like any weight, and a node copied into a model built in memory
/// would send ONNX Runtime looking for that file beside the working
/// directory. Unchanged bytes when no attribute tensor is external.
pub(crate) fn node_field_inlined(field: &[u8], base: &std::path::Path) -> Result<Vec<u8>, String> {
    let fs = fields(field)?;
    let [f] = fs.as_slice() else { return Ok(field.to_vec()) };
    let node = &field[f.payload.clone()];
    let mut out_node = Vec::with_capacity(node.len());
    let mut changed = false;
    for nf in fields(node)? {
        if nf.number != crate::diagnose::graph_edit::NODE_ATTRIBUTE {
            out_node.extend_from_slice(&node[nf.all.clone()]);
            continue;
        }
        let attr = &node[nf.payload.clone()];
        let mut out_attr = Vec::with_capacity(attr.len());
        for af in fields(attr)? {
            if matches!(af.number, ATTR_TENSOR | ATTR_TENSORS) {
                let t = &attr[af.payload.clone()];
                let inlined = inline_external(t, base)?;
                changed |= inlined.as_slice() != t;
                len_field(&mut out_attr, af.number, &inlined);
            } else {
                out_attr.extend_from_slice(&attr[af.all.clone()]);
            }
        }
        len_field(&mut out_node, nf.number, &out_attr);
    }
    if !changed {
        return Ok(field.to_vec());
    }
    let mut out = Vec::with_capacity(out_node.len() + 8);
    len_field(&mut out, f.number, &out_node);
    Ok(out)
}
