//! Where a fed tensor came from: every earlier call's outputs indexed by
//! digest (a trace of 10,000 calls is looked up in constant time per feed,
//! not by scanning), and the digest a fresh zero tensor of a dtype and shape
//! has, so that "fresh zeros" is said as a fact, not guessed.

use super::{TensorMeta, Tensors};
use std::collections::HashMap;

/// One earlier call: its index, model, and the small integer values it was
/// fed (token ids, for saying whose embeddings an output holds); its outputs
/// are in the digest index.
pub(super) struct Earlier {
    pub call: usize,
    pub model: String,
    pub fed_values: Vec<(String, Vec<i64>)>,
}

/// Every call's outputs so far.
#[derive(Default)]
pub(super) struct History {
    calls: Vec<Earlier>,
    /// digest -> (index into `calls`, output name), oldest first.
    by_digest: HashMap<String, Vec<(usize, String)>>,
    /// (dtype, shape) -> the digest of zeros of that form (None: too large to hash).
    zeros: HashMap<(String, Vec<i64>), Option<String>>,
}

/// The most bytes hashed to know a zero tensor's digest: a trace's shapes are
/// untrusted, and a past of a real model is far below this.
const MAX_ZERO_BYTES: u64 = 1 << 28;

/// Bytes per element of a numpy dtype name (None: not a tensor we hash).
fn elem_bytes(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "float64" | "int64" | "uint64" => 8,
        "float32" | "int32" | "uint32" => 4,
        "float16" | "bfloat16" | "int16" | "uint16" => 2,
        "bool" | "int8" | "uint8" => 1,
        _ => return None,
    })
}

/// The recorders' digest of an all-zero tensor: SHA-1 of the dtype name, the
/// shape as Python prints a list, a newline, then the little-endian bytes.
pub(crate) fn zero_digest(dtype: &str, shape: &[i64]) -> Option<String> {
    let n = shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(u64::try_from(d).ok()?))?;
    let bytes = n.checked_mul(elem_bytes(dtype)?).filter(|&b| b <= MAX_ZERO_BYTES)?;
    let mut h = sha1_smol::Sha1::new();
    h.update(format!("{dtype}{shape:?}\n").as_bytes());
    let chunk = [0u8; 1 << 16];
    let mut left = bytes;
    while left > 0 {
        let take = left.min(chunk.len() as u64) as usize;
        h.update(&chunk[..take]);
        left -= take as u64;
    }
    Some(format!("sha1:{}", h.digest()))
}

impl History {
    /// Takes in call `call` of `model`: what it was fed (small values) and returned.
    pub fn push(&mut self, call: usize, model: &str, feeds: &Tensors, outputs: &Tensors) {
        let i = self.calls.len();
        for (name, t) in outputs {
            if let Some(d) = &t.digest {
                self.by_digest.entry(d.clone()).or_default().push((i, name.clone()));
            }
        }
        let fed_values = feeds.iter().filter_map(|(n, t)| Some((n.clone(), t.value.clone()?))).collect();
        self.calls.push(Earlier { call, model: model.to_string(), fed_values });
    }

    /// The newest earlier output equal to `fed` (by digest): that call and the output's name.
    pub fn origin(&self, fed: &TensorMeta) -> Option<(&Earlier, &str)> {
        self.origin_like(fed, "")
    }

    /// [`History::origin`]; among equal outputs of that call (placeholders
    /// all alike), the one named `like`, else the first.
    pub fn origin_like(&self, fed: &TensorMeta, like: &str) -> Option<(&Earlier, &str)> {
        let hits = self.by_digest.get(fed.digest.as_ref()?)?;
        let (newest, _) = hits.last()?;
        let same: Vec<&(usize, String)> = hits.iter().filter(|(i, _)| i == newest).collect();
        let (i, name) = same.iter().find(|(_, n)| n == like).or(same.first())?;
        Some((&self.calls[*i], name.as_str()))
    }

    /// The newest call of `model`, before call `before`.
    pub fn last_of(&self, model: &str, before: usize) -> Option<&Earlier> {
        self.calls.iter().rev().find(|c| c.model == model && c.call < before)
    }

    /// Where the past `past` (which should be `present` of call `last`) came from, in words.
    pub fn provenance(&self, past: &str, present: &str, fed: &TensorMeta, last: usize) -> Option<String> {
        let (e, name) = self.origin_like(fed, present)?;
        let slot = |n: &str| crate::model::names::cache_slot(n).map(|(layer, kind, _)| (layer, kind));
        let (want, got) = (slot(present), slot(name));
        let why = if e.call < last {
            format!("a present from {} calls back: a stale cache", self.calls_between(e.call, last) + 1)
        } else if want.map(|w| w.0) != got.map(|g| g.0) {
            "another layer's present: the layers are swapped".to_string()
        } else if want.map(|w| w.1) != got.map(|g| g.1) {
            "the other half of the pair: key and value are swapped".to_string()
        } else {
            "another output of that call".to_string()
        };
        Some(format!("`{past}` = `{name}` of call {} ({why}); feed `{present}` of call {last}", e.call))
    }

    /// Calls of the model that made call `from`, after it up to `to` (the decoder calls between two presents).
    fn calls_between(&self, from: usize, to: usize) -> usize {
        // Calls are kept in call order: start at `from`, never scan the whole trace.
        let start = self.calls.partition_point(|c| c.call < from);
        let Some(model) = self.calls.get(start).map(|c| c.model.as_str()) else { return to.saturating_sub(from) };
        self.calls[start + 1..].iter().take_while(|c| c.call <= to).filter(|c| c.model == model).count()
    }

    /// Whether `fed` holds only zeros (its digest is that of zeros of its dtype and shape).
    pub fn is_zeros(&mut self, fed: &TensorMeta) -> bool {
        let Some(d) = &fed.digest else { return false };
        let key = (fed.dtype.clone(), fed.shape.clone());
        let zero = self.zeros.entry(key).or_insert_with(|| zero_digest(&fed.dtype, &fed.shape));
        zero.as_ref() == Some(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_digests_are_the_python_recorders() {
        // python3 -c "import numpy as np, sys; sys.path.insert(0, 'python');
        //   import onnx_contract_trace as t; print(t.digest(np.zeros((1, 8, 0, 4), np.float32)),
        //   t.digest(np.zeros((2, 3), np.int64)), t.digest(np.zeros((1,), bool)))"
        assert_eq!(zero_digest("float32", &[1, 8, 0, 4]).unwrap(), "sha1:cbd072ae0fb3b2e14522eb7106cc4018de6298ef");
        assert_eq!(zero_digest("int64", &[2, 3]).unwrap(), "sha1:ecb0ff2fa98b2809c0971ab53bf866789c7326c7");
        assert_eq!(zero_digest("bool", &[1]).unwrap(), "sha1:eabd8d6befe6d1fc1c23daeb191493668e060152");
        // Untrusted shapes: an overflowing or huge product is not hashed.
        assert_eq!(zero_digest("float32", &[i64::MAX, 4]), None);
        assert_eq!(zero_digest("float32", &[1 << 20, 1 << 20]), None);
        assert_eq!(zero_digest("float32", &[-1, 4]), None);
    }
}
