//! Rows of a replay's tensors: their digests as the recorders compute them
//! (so a re-run that is bit-exact with the caller's run can supply the row
//! digests a format-1 trace lacks), and a beam search's choice of each new
//! beam's origin from cumulative log-probabilities (what the re-run gathers a
//! reordered past by, and what the caller's strategy is judged on).

use crate::engine::events::RowScores;
use ndarray::{ArrayD, Axis};

/// The recorders' digest of a tensor held as float32 whose recorded dtype is
/// `dtype` (float16 values are exact in float32, so their bytes come back):
/// SHA-1 of the dtype name, the shape as Python prints a list and a newline,
/// then the little-endian bytes. `None` for a dtype not held as floats.
pub fn digest_of(dtype: &str, a: &ArrayD<f32>) -> Option<String> {
    let shape: Vec<i64> = a.shape().iter().map(|&d| d as i64).collect();
    Some(digest_bytes(dtype, &shape, &le_bytes(dtype, a.iter())?))
}

/// Float values as the little-endian bytes of the recorded `dtype`.
fn le_bytes<'a>(dtype: &str, values: impl Iterator<Item = &'a f32>) -> Option<Vec<u8>> {
    match dtype {
        "float32" => Some(values.flat_map(|x| x.to_le_bytes()).collect()),
        "float16" => Some(values.flat_map(|x| half::f16::from_f32(*x).to_le_bytes()).collect()),
        _ => None,
    }
}

/// The recorders' digest of a tensor's little-endian bytes: SHA-1 of the
/// dtype name, the shape as Python prints a list and a newline, the bytes.
pub fn digest_bytes(dtype: &str, shape: &[i64], bytes: &[u8]) -> String {
    let mut h = sha1_smol::Sha1::new();
    h.update(format!("{dtype}{shape:?}\n").as_bytes());
    h.update(bytes);
    format!("sha1:{}", h.digest())
}

/// The digest of each row along axis 0 (rank 2 and more).
pub fn row_digests(dtype: &str, a: &ArrayD<f32>) -> Option<Vec<String>> {
    if a.ndim() < 2 {
        return None;
    }
    a.axis_iter(Axis(0)).map(|r| digest_of(dtype, &r.to_owned())).collect()
}

/// The rows of `a` at `origin`, stacked.
pub fn gather(a: &ArrayD<f32>, origin: &[usize]) -> Option<ArrayD<f32>> {
    if origin.iter().any(|&o| o >= a.shape().first().copied().unwrap_or(0)) {
        return None;
    }
    Some(a.select(Axis(0), origin))
}

/// `a`'s rows gathered by `origin`, when that gather's digest (as `dtype`)
/// is the recorded `digest`: the value a caller fed, exactly.
pub fn gather_matching(a: &ArrayD<f32>, origin: &[usize], dtype: &str, digest: &str) -> Option<ArrayD<f32>> {
    let g = gather(a, origin)?;
    (digest_of(dtype, &g).as_deref() == Some(digest)).then_some(g)
}

/// The length of the runs of equal consecutive rows of `ids` (`per` ids a
/// row) when every run is as long and longer than one: the beams a prompt
/// was expanded to (`repeat_interleave`); else 1.
pub fn group_size(ids: &[i64], per: usize) -> usize {
    if per == 0 || ids.is_empty() || !ids.len().is_multiple_of(per) {
        return 1;
    }
    equal_runs(&ids.chunks(per).collect::<Vec<_>>())
}

/// The length of the runs of equal consecutive `keys` when every run is as
/// long and longer than one (rows expanded per beam), else 1.
pub fn equal_runs<T: PartialEq>(keys: &[T]) -> usize {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < keys.len() {
        let j = (i..keys.len()).find(|&j| keys[j] != keys[i]).unwrap_or(keys.len());
        runs.push(j - i);
        i = j;
    }
    match runs.first() {
        Some(&n) if n > 1 && runs.iter().all(|&r| r == n) => n,
        _ => 1,
    }
}

/// A score far below any real one: the beams that do not start a group.
pub const START_OFF: f64 = -1e9;

/// The running scores a generation starts with: the first beam of each group 0.
pub fn start_scores(rows: usize, beams: usize) -> Vec<f64> {
    (0..rows).map(|r| if beams > 1 && r % beams != 0 { START_OFF } else { 0.0 }).collect()
}

/// Each new beam's origin and running score: within its group, the row whose
/// running score plus the log-probability of the token the beam carries
/// (`tokens[j]`) is highest, a (row, token) pair taken once, as transformers'
/// beam search keeps the best candidates in order.
pub fn assign(beams: usize, running: &[f64], tokens: &[i64], scores: &[RowScores]) -> (Vec<usize>, Vec<f64>) {
    let rows = tokens.len().min(running.len()).min(scores.len());
    let lp = |r: usize, t: i64| scores[r].watched.iter().find(|(w, _)| *w == t).map_or(-1e30, |(_, v)| *v);
    let mut origin: Vec<usize> = (0..rows).collect();
    let mut next: Vec<f64> = running[..rows].to_vec();
    if beams < 2 {
        return (origin, next);
    }
    for g in 0..rows / beams {
        let group = g * beams..(g + 1) * beams;
        let mut taken: Vec<(usize, i64)> = Vec::new();
        for j in group.clone() {
            let t = tokens[j];
            let best = group
                .clone()
                .filter(|i| !taken.contains(&(*i, t)))
                .map(|i| (i, running[i] + lp(i, t)))
                .fold(None::<(usize, f64)>, |b, x| if b.is_none_or(|b| x.1 > b.1) { Some(x) } else { b });
            let (i, s) = best.unwrap_or((j, running[j]));
            taken.push((i, t));
            origin[j] = i;
            next[j] = s;
        }
    }
    (origin, next)
}

/// Bytes hashed at most while searching origins by digest (a few tenths of
/// a second): past it the search gives up and the feed stays undecided.
const MAX_HASHED: u128 = 1 << 28;

/// The most rows (beams × batch) a gather is searched over.
const MAX_ROWS: usize = 256;

/// The origins (each row's source row, within its group of `group` rows)
/// whose gather of `a` has the recorded `digest`, when a digest-only trace
/// cannot say which rows a beam search chose: every origin vector is tried
/// by walking them depth first with the SHA-1 state of each prefix kept (a
/// candidate costs one row's hashing), equal rows tried once. `None` when
/// none matches or the search would hash more than `MAX_HASHED` bytes.
pub fn origins_by_digest(dtype: &str, a: &ArrayD<f32>, group: usize, digest: &str) -> Option<Vec<usize>> {
    let rows = *a.shape().first()?;
    // A trace's shapes are untrusted: beams × batch beyond this is no beam search to walk.
    if a.ndim() < 2 || group == 0 || rows == 0 || rows > MAX_ROWS || !rows.is_multiple_of(group) {
        return None;
    }
    let bytes: Vec<Vec<u8>> = a.axis_iter(Axis(0)).map(|r| le_bytes(dtype, r.iter())).collect::<Option<_>>()?;
    // Each group's distinct rows (equal rows give equal tensors), found once per group.
    let distinct: Vec<Vec<usize>> = (0..rows / group)
        .map(|g| {
            let mut seen = std::collections::HashSet::new();
            (g * group..(g + 1) * group).filter(|&i| seen.insert(bytes[i].as_slice())).collect()
        })
        .collect();
    let choices: Vec<&Vec<usize>> = (0..rows).map(|j| &distinct[j / group]).collect();
    // Every node of the walk hashes a row and clones a hash state; every leaf finalises one.
    let (mut leaves, mut cost) = (1u128, 0u128);
    for (j, c) in choices.iter().enumerate() {
        leaves = leaves.saturating_mul(c.len() as u128);
        cost = cost.saturating_add(leaves.saturating_mul(bytes[j].len().max(64) as u128 + 128));
    }
    if cost > MAX_HASHED {
        return None;
    }
    let shape: Vec<i64> = a.shape().iter().map(|&d| d as i64).collect();
    let mut head = sha1_smol::Sha1::new();
    head.update(format!("{dtype}{shape:?}\n").as_bytes());
    let mut origin = Vec::with_capacity(rows);
    walk(&head, &bytes, &choices, digest, &mut origin).then_some(origin)
}

/// Depth-first over the rows still to choose, the hash of the chosen prefix
/// kept (its depth is the row count, at most `MAX_ROWS`).
fn walk(
    h: &sha1_smol::Sha1,
    bytes: &[Vec<u8>],
    choices: &[&Vec<usize>],
    digest: &str,
    origin: &mut Vec<usize>,
) -> bool {
    let j = origin.len();
    if j == choices.len() {
        return digest.strip_prefix("sha1:").is_some_and(|d| h.digest().to_string() == d);
    }
    for &i in choices[j] {
        let mut next = h.clone();
        next.update(&bytes[i]);
        origin.push(i);
        if walk(&next, bytes, choices, digest, origin) {
            return true;
        }
        origin.pop();
    }
    false
}

/// Whether a beam search explains the tokens a group's rows were fed next:
/// walking its candidates best first (each row's running score plus a top
/// token's log-probability), every fed token is met before more than `beams`
/// candidates were passed over (a finished hypothesis, a suppressed token).
/// Independent rows (several samples of one prompt) are not: their tokens are
/// draws, not the best candidates.
pub fn explains(running: &[f64], tokens: &[i64], scores: &[RowScores], beams: usize) -> bool {
    let mut candidates: Vec<(f64, i64)> =
        scores.iter().zip(running).flat_map(|(s, r)| s.top.iter().map(move |(t, lp)| (r + lp, *t))).collect();
    if candidates.is_empty() {
        return true;
    }
    candidates.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap_or(std::cmp::Ordering::Equal));
    let mut left: Vec<i64> = tokens.to_vec();
    let mut passed = 0;
    for (_, t) in candidates {
        if left.is_empty() {
            return true;
        }
        match left.iter().position(|x| *x == t) {
            Some(i) => {
                left.swap_remove(i);
            }
            None => {
                passed += 1;
                if passed > beams {
                    return false;
                }
            }
        }
    }
    left.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beams_come_from_the_best_cumulative_scores() {
        assert_eq!(group_size(&[3, 14, 3, 14, 3, 14], 2), 3);
        assert_eq!(group_size(&[3, 14, 3, 15], 2), 1);
        assert_eq!(group_size(&[1, 1, 2, 2, 2], 1), 1);
        let s = |pairs: &[(i64, f64)]| RowScores { argmax: pairs[0].0, watched: pairs.to_vec(), top: pairs.to_vec() };
        // Step one of a group of 2: every beam comes from row 0 (row 1 starts far below).
        let scores = vec![s(&[(7, -0.1), (9, -0.5)]), s(&[(7, -0.1), (9, -0.5)])];
        let (o, run) = assign(2, &start_scores(2, 2), &[7, 9], &scores);
        assert_eq!(o, vec![0, 0]);
        assert!((run[0] + 0.1).abs() < 1e-12 && (run[1] + 0.5).abs() < 1e-12);
        // Then row 1's continuation beats row 0's for token 4.
        let scores = vec![s(&[(4, -3.0), (5, -0.2)]), s(&[(4, -0.1), (5, -2.0)])];
        let (o, _) = assign(2, &run, &[5, 4], &scores);
        assert_eq!(o, vec![0, 1]);
        let (o, _) = assign(2, &run, &[4, 5], &scores);
        assert_eq!(o, vec![1, 0]);
        // Beams take the best candidates: (1, 4) at -0.6 and (0, 5) at -0.3; a draw of 4 from row 0 is not one.
        assert!(explains(&run, &[5, 4], &scores, 2));
        let wide = vec![
            s(&[(5, -0.2), (6, -2.5), (7, -2.6), (8, -2.7), (4, -3.0)]),
            s(&[(4, -0.1), (5, -2.0), (6, -0.3), (7, -0.31), (8, -0.32)]),
        ];
        assert!(explains(&run, &[5, 4], &wide, 2));
        assert!(!explains(&run, &[8, 8], &wide, 2), "two draws far down the list are no beam search");
    }

    #[test]
    fn a_gather_is_found_by_its_digest_alone() {
        let a = ndarray::Array::from_shape_fn(ndarray::IxDyn(&[6, 2, 3]), |i| (i[0] * 10 + i[1] * 3 + i[2]) as f32);
        let origin = vec![1, 1, 0, 5, 3, 3];
        let d = digest_of("float32", &gather(&a, &origin).unwrap()).unwrap();
        assert_eq!(origins_by_digest("float32", &a, 3, &d), Some(origin));
        // Outside each group of 3 no origin is tried, and another tensor matches none.
        let across = digest_of("float32", &gather(&a, &[4, 1, 0, 5, 3, 3]).unwrap()).unwrap();
        assert_eq!(origins_by_digest("float32", &a, 3, &across), None);
        assert_eq!(origins_by_digest("float16", &a, 3, &d), None);
        // Equal rows are tried once: the first of them is the origin found.
        let mut b = a.clone();
        let row0 = b.index_axis(Axis(0), 0).to_owned();
        b.index_axis_mut(Axis(0), 2).assign(&row0);
        let d = digest_of("float32", &gather(&b, &[2, 2, 1, 3, 3, 3]).unwrap()).unwrap();
        assert_eq!(origins_by_digest("float32", &b, 3, &d), Some(vec![0, 0, 1, 3, 3, 3]));
    }

    #[test]
    fn digests_are_the_python_recorders() {
        // python3 -c "import numpy as np, sys; sys.path.insert(0, 'python'); import onnx_contract_trace as t;
        //   print(t.digest(np.zeros((1, 8, 0, 4), np.float32)))"
        let z = ArrayD::<f32>::zeros(ndarray::IxDyn(&[1, 8, 0, 4]));
        assert_eq!(digest_of("float32", &z).unwrap(), "sha1:cbd072ae0fb3b2e14522eb7106cc4018de6298ef");
        assert_eq!(row_digests("float32", &z).unwrap().len(), 1);
        assert_eq!(digest_of("int64", &z), None);
    }
}
