//! A multiplier read off a chain of graph nodes, for the config audits: the
//! ops a value passes unscaled, the products that end a chain, and the
//! factor folded from each scalar `Mul`/`Div` met on the way.

use super::constants::{tolerance, Const, Graph, FLOAT};

/// Ops a value passes through unscaled (shape moves, casts, and Tanh, whose
/// slope at 0 is 1: a softcap keeps the multiplier of small logits).
pub(crate) const PASS: &[&str] =
    &["Cast", "Identity", "Reshape", "Squeeze", "Unsqueeze", "Transpose", "Slice", "Flatten", "Expand", "Tanh"];
/// Ops that end the logits chain: the head's product.
pub(crate) const HEAD: &[&str] = &[
    "MatMul",
    "Gemm",
    "MatMulInteger",
    "MatMulNBits",
    "DynamicQuantizeMatMul",
    "QLinearMatMul",
    "FusedMatMul",
    "MatMulIntegerToFloat",
];

/// A multiplier read off a chain of nodes: its value, the least precise
/// type its constants were stored in, and the chain in words.
pub(crate) struct Chain {
    pub(crate) factor: f64,
    pub(crate) dtype: i32,
    pub(crate) words: Vec<String>,
}

impl Chain {
    pub(crate) fn new() -> Chain {
        Chain { factor: 1.0, dtype: FLOAT, words: Vec::new() }
    }

    /// Folds a `Mul`/`Div` node `i` whose other operand `c` is a constant.
    pub(crate) fn scale(&mut self, g: &Graph<'_>, i: usize, c: &Const, divides: bool) -> Result<(), String> {
        let v =
            c.scalar().ok_or_else(|| format!("`{}` ({}) scales by a tensor of several values", g.name(i), g.op(i)))?;
        self.factor = if divides { self.factor / v } else { self.factor * v };
        if tolerance(c.dtype) > tolerance(self.dtype) {
            self.dtype = c.dtype;
        }
        self.words.push(format!("{} {} {}", g.op(i), if divides { "÷" } else { "×" }, v));
        Ok(())
    }

    /// Walking back, node `i` folded when it scales by a constant: a `Mul`
    /// with one constant operand or a `Div` by one (of a computed dividend).
    /// The tensor the chain goes on from; `None` when `i` is no such node,
    /// or (`scalars_only`) its constant holds several values — a norm's
    /// weight on a query, which the chain leaves to the caller.
    pub(crate) fn fold_back(&mut self, g: &Graph<'_>, i: usize, scalars_only: bool) -> Result<Option<String>, String> {
        let n = &g.nodes[i];
        let input = |k: usize| n.input.get(k).cloned().unwrap_or_default();
        let usable = |c: &Const| !scalars_only || c.scalar().is_some();
        let (c, divides, next) = match g.op(i) {
            "Mul" => match (g.constant(&input(0)), g.constant(&input(1))) {
                (None, Some(c)) => (c, false, input(0)),
                (Some(c), None) => (c, false, input(1)),
                _ => return Ok(None),
            },
            "Div" if !g.is_constant(&input(0)) => match g.constant(&input(1)) {
                Some(c) => (c, true, input(0)),
                None => return Ok(None),
            },
            _ => return Ok(None),
        };
        if !usable(&c) {
            return Ok(None);
        }
        self.scale(g, i, &c, divides)?;
        Ok(Some(next))
    }
}
