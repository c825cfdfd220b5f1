//! Values a trace keeps only as digests, recovered by testing hypotheses:
//! for the small feeds whose correct value the protocol fixes (the branch
//! flag, positions, an all-ones mask), each candidate a caller could have
//! fed is hashed with the trace's own scheme and compared with the
//! recorded digest. A match is the value fed — exact, not assumed — and the
//! calls are judged on it; no match leaves the feed unknown, as before.

use super::trace::{Call, TensorRecord};

/// Positions are tried from 0 up to this start (longer generations are
/// rare in a trace, and each candidate costs one small hash).
const MAX_START: i64 = 8192;

/// The digest schemes a trace may use for `bytes` of `dtype` and `shape`:
/// the recorders' (SHA-1 of dtype, shape and bytes), or SHA-1 of the bytes alone.
fn digests(dtype: &str, shape: &[i64], bytes: &[u8]) -> [String; 2] {
    let mut h = sha1_smol::Sha1::new();
    h.update(format!("{dtype}{shape:?}\n").as_bytes());
    h.update(bytes);
    let mut raw = sha1_smol::Sha1::new();
    raw.update(bytes);
    [format!("sha1:{}", h.digest()), format!("sha1:{}", raw.digest())]
}

/// `values` as the little-endian bytes of `dtype`.
fn bytes_of(dtype: &str, values: &[i64]) -> Option<Vec<u8>> {
    Some(match dtype {
        "int64" => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        "int32" => values.iter().flat_map(|v| (*v as i32).to_le_bytes()).collect(),
        "bool" | "uint8" | "int8" => values.iter().map(|v| *v as u8).collect(),
        _ => return None,
    })
}

/// Whether `t`'s digest is that of `values`.
fn matches(t: &TensorRecord, values: &[i64]) -> bool {
    let (Some(d), Some(bytes)) = (t.digest.as_deref(), bytes_of(&t.dtype, values)) else { return false };
    digests(&t.dtype, &t.shape, &bytes).iter().any(|x| x == d)
}

/// Positions `start … start + n − 1` on the last axis, the same in every row.
fn positions(shape: &[i64], start: i64) -> Option<Vec<i64>> {
    let n = *shape.last()?;
    let rows = shape[..shape.len() - 1].iter().try_fold(1i64, |acc, &d| acc.checked_mul(d))?;
    (n > 0 && rows > 0 && rows * n <= 1 << 16).then(|| (0..rows).flat_map(|_| start..start + n).collect())
}

/// `rows` rows of `len` slots, ones over the first (or, `right`, the last) `k`.
fn aligned(rows: i64, len: i64, k: i64, right: bool) -> Vec<i64> {
    let row: Vec<i64> = (0..len).map(|j| i64::from(if right { j >= len - k } else { j < k })).collect();
    (0..rows).flat_map(|_| row.iter().copied()).collect()
}

/// The value of one digest-only feed, when a hypothesis matches: with
/// what was hypothesised, in words.
fn recover(name: &str, t: &TensorRecord) -> Option<(Vec<i64>, String)> {
    // A trace's shape is untrusted: an overflowing product is no candidate.
    let n = t.shape.iter().try_fold(1i64, |acc, &d| if d < 0 { None } else { acc.checked_mul(d) })?;
    if t.digest.is_none() || t.value.is_some() || n > 1 << 16 {
        return None;
    }
    // A one-element flag (the merged decoder's branch flag).
    if t.dtype == "bool" && n == 1 {
        return [0, 1]
            .into_iter()
            .find(|v| matches(t, &[*v]))
            .map(|v| (vec![v], format!("`{name}` is {}", if v == 1 { "true" } else { "false" })));
    }
    if !t.dtype.starts_with("int") {
        return None;
    }
    let lower = name.to_ascii_lowercase();
    if lower.contains("mask") && matches(t, &vec![1; n as usize]) {
        return Some((vec![1; n as usize], format!("`{name}` is all ones {:?}", t.shape)));
    }
    // A mask over a whole fixed buffer: ones over the first k slots (a static
    // cache), or over the last k (a buffer the caller rolls), every row alike.
    if let (true, &[rows, len]) = (lower.contains("mask"), &t.shape[..]) {
        for k in 1..len {
            for (right, v) in [(false, aligned(rows, len, k, false)), (true, aligned(rows, len, k, true))] {
                if matches(t, &v) {
                    let side = if right { "last" } else { "first" };
                    return Some((v, format!("`{name}` is ones over the {side} {k} of {len} slots")));
                }
            }
        }
    }
    if lower.contains("position") {
        return (0..=MAX_START).find_map(|s| {
            let v = positions(&t.shape, s)?;
            matches(t, &v).then(|| {
                let last = s + t.shape.last().copied().unwrap_or(1) - 1;
                (v, format!("`{name}` counts {s}…{last} in every row"))
            })
        });
    }
    None
}

/// Fills every digest-only feed of `calls` whose value a hypothesis
/// matches; returns what was recovered, per call, in words.
pub fn fill(calls: &mut [Call]) -> Vec<String> {
    let mut said = Vec::new();
    for c in calls.iter_mut() {
        let mut found = Vec::new();
        for (name, t) in c.feeds.iter_mut() {
            if let Some((v, words)) = recover(name, t) {
                t.value = Some(v);
                found.push(words);
            }
        }
        if !found.is_empty() {
            said.push(format!("call {}: {}", c.call, found.join(", ")));
        }
    }
    said
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(dtype: &str, shape: &[i64], values: &[i64]) -> TensorRecord {
        let d = digests(dtype, shape, &bytes_of(dtype, values).unwrap())[0].clone();
        TensorRecord {
            dtype: dtype.into(),
            shape: shape.to_vec(),
            digest: Some(d),
            rows: None,
            value: None,
            kept: None,
        }
    }

    #[test]
    fn flags_positions_and_masks_are_recovered_from_their_digests() {
        // The python recorder's digest of np.array([True]) (origin.rs' zero test has [False]).
        let flag = record("bool", &[1], &[1]);
        assert_eq!(recover("use_cache_branch", &flag).unwrap().0, vec![1]);
        let pos = record("int64", &[2, 3], &[7, 8, 9, 7, 8, 9]);
        let (v, words) = recover("position_ids", &pos).unwrap();
        assert_eq!(v, vec![7, 8, 9, 7, 8, 9]);
        assert!(words.contains("counts 7…9"), "{words}");
        let mask = record("int64", &[1, 5], &[1; 5]);
        assert_eq!(recover("attention_mask", &mask).unwrap().0, vec![1; 5]);
        // Masks over a fixed buffer: left-aligned (a static cache), right-aligned (a rolled one).
        let left = record("int64", &[1, 6], &[1, 1, 0, 0, 0, 0]);
        assert_eq!(recover("attention_mask", &left).unwrap().0, vec![1, 1, 0, 0, 0, 0]);
        let (v, words) = recover("attention_mask", &record("int64", &[2, 4], &[0, 0, 0, 1, 0, 0, 0, 1])).unwrap();
        assert_eq!((v, words.contains("the last 1 of 4")), (vec![0, 0, 0, 1, 0, 0, 0, 1], true));
        // A value nothing hypothesised gives stays unknown.
        let odd = record("int64", &[1, 2], &[5, 3]);
        assert!(recover("position_ids", &odd).is_none());
        assert!(recover("input_ids", &record("int64", &[1, 1], &[42])).is_none());
        // An untrusted huge shape is no candidate (and no overflow).
        let mut huge = record("int64", &[1, 1], &[0]);
        huge.shape = vec![i64::MAX, 4];
        assert!(recover("position_ids", &huge).is_none());
    }
}
