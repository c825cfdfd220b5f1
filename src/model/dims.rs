//! Symbolic dimension expressions as exporters write them in `dim_param`:
//! a bare symbol (`past_sequence_length`, `s88`), a sum the dynamo exporter
//! writes for a grown cache (`s70 + s88`), or an encoder's output length
//! (`( ( encoder_sequence_length - 127 ) // 64 + 1 - 7 ) // 3 + 1`). Parsed
//! once, so that a present's axis can be read as "past + new" and an
//! encoder's output length evaluated for a given input length, instead of
//! comparing strings.

use std::collections::BTreeMap;

/// A parsed `dim_param`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expr {
    /// An integer literal.
    Int(i64),
    /// A symbol.
    Sym(String),
    /// `a + b`.
    Add(Box<Expr>, Box<Expr>),
    /// `a - b`.
    Sub(Box<Expr>, Box<Expr>),
    /// `a * b`.
    Mul(Box<Expr>, Box<Expr>),
    /// `a // b` (floor division) or `a / b`.
    FloorDiv(Box<Expr>, Box<Expr>),
}

/// Longest expression we parse; a dim_param longer than this is a symbol.
const MAX_LEN: usize = 1024;

impl Expr {
    /// Parses a `dim_param`. Anything that is not an arithmetic expression of
    /// symbols and integers (a name with spaces, `batch_size x num_heads`) is
    /// one symbol, kept verbatim.
    pub fn parse(text: &str) -> Expr {
        let t = text.trim();
        if t.len() <= MAX_LEN {
            let tokens = tokenize(t);
            if let Some(tokens) = tokens {
                let mut p = Parser { tokens: &tokens, at: 0, depth: 0 };
                if let Some(e) = p.sum() {
                    if p.at == tokens.len() {
                        return e;
                    }
                }
            }
        }
        Expr::Sym(t.to_string())
    }

    /// Every symbol the expression uses, in order of first use.
    pub fn symbols(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.collect(&mut out);
        out
    }

    fn collect(&self, out: &mut Vec<String>) {
        match self {
            Expr::Int(_) => {}
            Expr::Sym(s) => {
                if !out.contains(s) {
                    out.push(s.clone());
                }
            }
            Expr::Add(a, b) | Expr::Sub(a, b) | Expr::Mul(a, b) | Expr::FloorDiv(a, b) => {
                a.collect(out);
                b.collect(out);
            }
        }
    }

    /// The value with every symbol bound, or `None` when one is unbound (or
    /// a division by zero, or an overflow).
    pub fn eval(&self, env: &BTreeMap<String, i64>) -> Option<i64> {
        match self {
            Expr::Int(v) => Some(*v),
            Expr::Sym(s) => env.get(s).copied(),
            Expr::Add(a, b) => a.eval(env)?.checked_add(b.eval(env)?),
            Expr::Sub(a, b) => a.eval(env)?.checked_sub(b.eval(env)?),
            Expr::Mul(a, b) => a.eval(env)?.checked_mul(b.eval(env)?),
            Expr::FloorDiv(a, b) => {
                let (x, y) = (a.eval(env)?, b.eval(env)?);
                (y != 0).then(|| x.div_euclid(y))
            }
        }
    }

    /// `a + b` (in either order) as the two sides' symbols, when the
    /// expression is exactly a sum of two distinct bare symbols: how a
    /// grown cache axis reads (`s70 + s88`, `past_sequence_length + sequence_length`).
    pub fn sum_of_two_symbols(&self) -> Option<(String, String)> {
        match self {
            Expr::Add(a, b) => match (a.as_ref(), b.as_ref()) {
                (Expr::Sym(x), Expr::Sym(y)) if x != y => Some((x.clone(), y.clone())),
                _ => None,
            },
            _ => None,
        }
    }

    /// `symbol + k` with a literal `k`, e.g. `past_sequence_length + 1`.
    pub fn symbol_plus_literal(&self) -> Option<(String, i64)> {
        match self {
            Expr::Add(a, b) => match (a.as_ref(), b.as_ref()) {
                (Expr::Sym(s), Expr::Int(k)) | (Expr::Int(k), Expr::Sym(s)) => Some((s.clone(), *k)),
                _ => None,
            },
            _ => None,
        }
    }

    /// The smallest value of `symbol` (up to `limit`) for which the
    /// expression, with only that symbol bound, is at least `at_least`: the
    /// fewest input samples an audio encoder needs for one output frame.
    /// Output lengths of convolutions grow with their input, so a binary
    /// search finds it.
    pub fn smallest_input_for(&self, symbol: &str, at_least: i64, limit: i64) -> Option<i64> {
        let mut env = BTreeMap::new();
        let mut enough = |n: i64| {
            env.insert(symbol.to_string(), n);
            self.eval(&env).is_some_and(|v| v >= at_least)
        };
        if !enough(limit) {
            return None;
        }
        if enough(1) {
            return Some(1);
        }
        let (mut lo, mut hi) = (1, limit);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if enough(mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Some(hi)
    }
}

impl std::fmt::Display for Expr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expr::Int(v) => write!(f, "{v}"),
            Expr::Sym(s) => write!(f, "{s}"),
            Expr::Add(a, b) => write!(f, "({a} + {b})"),
            Expr::Sub(a, b) => write!(f, "({a} - {b})"),
            Expr::Mul(a, b) => write!(f, "({a} * {b})"),
            Expr::FloorDiv(a, b) => write!(f, "({a} // {b})"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Int(i64),
    Sym(String),
    Op(&'static str),
    Open,
    Close,
}

fn tokenize(t: &str) -> Option<Vec<Tok>> {
    let mut out = Vec::new();
    let chars: Vec<char> = t.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && chars[i].is_ascii_digit() {
                i += 1;
            }
            // `12abc` is not a number followed by a name: the whole is one symbol.
            if i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                return None;
            }
            out.push(Tok::Int(chars[start..i].iter().collect::<String>().parse().ok()?));
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '.') {
                i += 1;
            }
            out.push(Tok::Sym(chars[start..i].iter().collect()));
        } else if c == '/' && chars.get(i + 1) == Some(&'/') {
            out.push(Tok::Op("//"));
            i += 2;
        } else {
            out.push(match c {
                '+' => Tok::Op("+"),
                '-' => Tok::Op("-"),
                '*' => Tok::Op("*"),
                '/' => Tok::Op("//"),
                '(' => Tok::Open,
                ')' => Tok::Close,
                _ => return None,
            });
            i += 1;
        }
    }
    // Two names in a row (`batch_size x num_heads`) are a name, not arithmetic.
    if out.windows(2).any(|w| matches!(w, [Tok::Sym(_), Tok::Sym(_)])) {
        return None;
    }
    Some(out)
}

struct Parser<'a> {
    tokens: &'a [Tok],
    at: usize,
    depth: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.at)
    }

    fn sum(&mut self) -> Option<Expr> {
        let mut left = self.product()?;
        while let Some(Tok::Op(op @ ("+" | "-"))) = self.peek().cloned() {
            self.at += 1;
            let right = self.product()?;
            left = if op == "+" { Expr::Add(left.into(), right.into()) } else { Expr::Sub(left.into(), right.into()) };
        }
        Some(left)
    }

    fn product(&mut self) -> Option<Expr> {
        let mut left = self.atom()?;
        while let Some(Tok::Op(op @ ("*" | "//"))) = self.peek().cloned() {
            self.at += 1;
            let right = self.atom()?;
            left = if op == "*" {
                Expr::Mul(left.into(), right.into())
            } else {
                Expr::FloorDiv(left.into(), right.into())
            };
        }
        Some(left)
    }

    fn atom(&mut self) -> Option<Expr> {
        let tok = self.peek()?.clone();
        self.at += 1;
        match tok {
            Tok::Int(v) => Some(Expr::Int(v)),
            Tok::Sym(s) => Some(Expr::Sym(s)),
            Tok::Op("-") => Some(Expr::Sub(Expr::Int(0).into(), self.atom()?.into())),
            Tok::Open => {
                // Hostile nesting stays a symbol rather than a deep recursion.
                self.depth += 1;
                if self.depth > 64 {
                    return None;
                }
                let e = self.sum()?;
                self.depth -= 1;
                (self.peek() == Some(&Tok::Close)).then(|| self.at += 1)?;
                Some(e)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn a_grown_cache_axis_reads_as_a_sum_of_two_symbols() {
        assert_eq!(Expr::parse("s70 + s88").sum_of_two_symbols(), Some(("s70".into(), "s88".into())));
        assert_eq!(
            Expr::parse("past_sequence_length + sequence_length").sum_of_two_symbols(),
            Some(("past_sequence_length".into(), "sequence_length".into()))
        );
        assert_eq!(
            Expr::parse("past_sequence_length + 1").symbol_plus_literal(),
            Some(("past_sequence_length".into(), 1))
        );
        assert_eq!(Expr::parse("s70").sum_of_two_symbols(), None);
    }

    #[test]
    fn names_that_are_not_arithmetic_stay_one_symbol() {
        assert_eq!(Expr::parse("batch_size x num_heads"), Expr::Sym("batch_size x num_heads".into()));
        assert_eq!(Expr::parse("12abc"), Expr::Sym("12abc".into()));
        assert_eq!(Expr::parse("a + "), Expr::Sym("a +".into()));
        assert_eq!(Expr::parse(&"(".repeat(500)), Expr::Sym("(".repeat(500)));
        assert_eq!(Expr::parse("unk__0"), Expr::Sym("unk__0".into()));
    }

    #[test]
    fn moonshine_encoder_length_evaluates_and_inverts() {
        // The expression optimum writes for Moonshine's encoder output length.
        let e = Expr::parse("( ( ( encoder_sequence_length - 127 ) // 64 + 1 - 7 ) // 3 + 1 - 3 ) // 2 + 1");
        assert_eq!(e.symbols(), vec!["encoder_sequence_length".to_string()]);
        assert_eq!(e.eval(&env(&[("encoder_sequence_length", 16000)])), Some(40));
        let min = e.smallest_input_for("encoder_sequence_length", 1, 1_000_000).unwrap();
        assert_eq!(e.eval(&env(&[("encoder_sequence_length", min)])), Some(1));
        assert!(e.eval(&env(&[("encoder_sequence_length", min - 1)])).unwrap() < 1);
        assert_eq!(e.eval(&BTreeMap::new()), None);
    }
}
