//! Batched, left-padded generation as applications run it: two prompts of
//! different lengths in one batch, the shorter padded on the left (mask zeros,
//! `position_ids = cumsum(mask) - 1` where the model takes them), each row
//! compared at every step with the same row run alone. Exports that derive
//! positions from the past length shift the padded row (optimum PRs #1381, #2326).

use super::feeds::{Feed, Values};
use super::plan::Plan;
use ndarray::{ArrayD, IxDyn};

/// One left-padded batch: each row's real tokens, padded to the longest.
pub(crate) struct Padded {
    /// Real tokens per row (prompt at step 0, one token per later step).
    pub(crate) rows: Vec<Vec<i64>>,
    /// Left padding of each row.
    pub(crate) pads: Vec<usize>,
}

impl Padded {
    pub(crate) fn new(prompts: Vec<Vec<i64>>) -> Padded {
        let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
        let pads = prompts.iter().map(|p| longest - p.len()).collect();
        Padded { rows: prompts, pads }
    }
}

/// The feeds of a batched step: `new` tokens per row on top of `past_len`
/// cache positions (padding included), past tensors as given.
pub(crate) fn padded_step(
    plan: &Plan,
    batch: &Padded,
    new: &[Vec<i64>],
    past_len: usize,
    pasts: &[(String, crate::signature::ElemType, ArrayD<f32>)],
    pad_token: i64,
) -> Vec<Feed> {
    let b = new.len();
    let n = new.iter().map(Vec::len).max().unwrap_or(0);
    let mut ids = Vec::with_capacity(b * n);
    for row in new {
        ids.extend(std::iter::repeat_n(pad_token, n - row.len()));
        ids.extend(row);
    }
    let total = past_len + n;
    let mut mask = Vec::with_capacity(b * total);
    let mut pos = Vec::with_capacity(b * n);
    for r in 0..new.len() {
        // Row r: its padding is the first `pad` positions of the whole sequence
        // (at step 0 the row is shorter by exactly that; later rows are equal).
        let pad = batch.pads[r];
        let row_mask: Vec<i64> = (0..total).map(|i| i64::from(i >= pad)).collect();
        let mut seen = 0i64;
        let cums: Vec<i64> = row_mask
            .iter()
            .map(|m| {
                seen += m;
                (seen - 1).max(0)
            })
            .collect();
        pos.extend(&cums[past_len..]);
        mask.extend(row_mask);
    }
    let ints = |name: &str, shape: &[usize], v: Vec<i64>| Feed {
        name: name.to_string(),
        elem: plan.dtype_of(name),
        values: Values::Int(ArrayD::from_shape_vec(IxDyn(shape), v).expect("shape")),
    };
    let mut feeds = vec![Feed {
        name: plan.input_ids.clone(),
        elem: plan.input_ids_dtype,
        values: Values::Int(ArrayD::from_shape_vec(IxDyn(&[b, n]), ids).expect("shape")),
    }];
    if let Some(m) = &plan.attention_mask {
        feeds.push(ints(m, &[b, total], mask));
    }
    if let Some(p) = &plan.position_ids {
        feeds.push(ints(p, &[b, n], pos));
    }
    for (name, elem, a) in pasts {
        feeds.push(Feed { name: name.clone(), elem: *elem, values: Values::Float(a.clone()) });
    }
    feeds
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn left_padding_masks_the_pad_and_positions_count_real_tokens() {
        let plan_path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/gpt2-tiny/model.onnx");
        let sig = crate::reader::read_signature(&plan_path).unwrap();
        let c = crate::contract::builtin::load(
            "gpt2",
            &[("layers".into(), 2), ("heads".into(), 4), ("head_dim".into(), 8), ("vocab".into(), 1000)],
        )
        .unwrap()
        .unwrap();
        let plan = crate::runtime::plan::build(&sig, &c, 2).unwrap();
        let batch = Padded::new(vec![vec![3, 14, 15, 92], vec![65, 35]]);
        let f = padded_step(&plan, &batch, &batch.rows, 0, &[], 0);
        let ints = |name: &str| match &f.iter().find(|x| x.name == name).unwrap().values {
            Values::Int(a) => a.iter().copied().collect::<Vec<i64>>(),
            _ => panic!(),
        };
        assert_eq!(ints("input_ids"), [3, 14, 15, 92, 0, 0, 65, 35]);
        assert_eq!(ints("attention_mask"), [1, 1, 1, 1, 0, 0, 1, 1]);
        assert_eq!(ints("position_ids"), [0, 1, 2, 3, 0, 0, 0, 1]);
        // A later step: one token per row on a past of 4 (padding included).
        let f = padded_step(&plan, &batch, &[vec![7], vec![8]], 4, &[], 0);
        let ints = |name: &str| match &f.iter().find(|x| x.name == name).unwrap().values {
            Values::Int(a) => a.iter().copied().collect::<Vec<i64>>(),
            _ => panic!(),
        };
        assert_eq!(ints("attention_mask"), [1, 1, 1, 1, 1, 0, 0, 1, 1, 1]);
        assert_eq!(ints("position_ids"), [4, 2]);
    }
}
