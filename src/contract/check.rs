//! The static check: a pure function from (signature, contract) to findings.

use super::{Contract, DimRule, TensorRule, Term};
use crate::contract::spec::Policy;
use crate::finding::{Code, Finding, Severity};
use crate::model::dims::Expr;
use crate::model::fold::fold_members;
use crate::model::signature::{shape_label, Dim, Port, Signature};
use std::collections::HashMap;

/// Compares a model's signature with a contract. Findings come in reading
/// order: the count verdicts first, then missing/extra names, then per-tensor
/// differences, each family folded into one finding.
pub fn check(sig: &Signature, contract: &Contract) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut per_tensor = Vec::new();
    let mut bindings = Bindings::new(contract);
    for side in [Side::Input, Side::Output] {
        let (rules, ports) = match side {
            Side::Input => (&contract.inputs, &sig.inputs),
            Side::Output => (&contract.outputs, &sig.outputs),
        };
        out.extend(presence(side, rules, ports, contract));
        for port in ports {
            if let Some(rule) = rules.iter().find(|r| r.name == port.name) {
                tensor(rule, port, &mut bindings, &mut per_tensor);
            }
        }
        if contract.order {
            out.extend(order(side, rules, ports));
        }
    }
    // Sums refer to variables bound anywhere, so they are checked last.
    for p in bindings.deferred.clone() {
        bindings.check_sum(&p, &mut per_tensor);
    }
    out.extend(fold_findings(per_tensor));
    out
}

#[derive(Clone, Copy, PartialEq)]
enum Side {
    Input,
    Output,
}

impl Side {
    fn word(self) -> &'static str {
        match self {
            Side::Input => "input",
            Side::Output => "output",
        }
    }
    fn codes(self) -> (Code, Code, Code) {
        match self {
            Side::Input => (Code::InputCount, Code::InputMissing, Code::InputExtra),
            Side::Output => (Code::OutputCount, Code::OutputMissing, Code::OutputExtra),
        }
    }
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

fn presence(side: Side, rules: &[TensorRule], ports: &[Port], contract: &Contract) -> Vec<Finding> {
    let (count_code, missing_code, extra_code) = side.codes();
    let policy = match side {
        Side::Input => contract.extra_inputs,
        Side::Output => contract.extra_outputs,
    };
    let missing: Vec<&TensorRule> =
        rules.iter().filter(|r| !r.optional && !ports.iter().any(|p| p.name == r.name)).collect();
    let extra: Vec<&Port> = ports.iter().filter(|p| !rules.iter().any(|r| r.name == p.name)).collect();
    let required = rules.iter().filter(|r| !r.optional).count();
    let optional = rules.len() - required;
    let mut out = Vec::new();
    let extra_is_error = policy == Policy::Error && !extra.is_empty();
    if !missing.is_empty() || extra_is_error {
        let expected = if optional > 0 {
            format!("{} (+{optional} optional)", plural(required, side.word()))
        } else {
            plural(required, side.word())
        };
        let mut parts = Vec::new();
        if !missing.is_empty() {
            parts.push(format!("{} missing", missing.len()));
        }
        if !extra.is_empty() {
            parts.push(format!("{} not in the contract", extra.len()));
        }
        out.push(Finding::error(
            count_code,
            format!("expected {expected}, found {}: {}", ports.len(), parts.join(", ")),
        ));
    }
    // Missing names, folded by template so each family is one line.
    let mut by_template: Vec<(&str, u64, Vec<String>)> = Vec::new();
    for r in &missing {
        match by_template.iter_mut().find(|(t, _, _)| *t == r.template) {
            Some(entry) => entry.2.push(r.name.clone()),
            None => by_template.push((&r.template, r.line, vec![r.name.clone()])),
        }
    }
    for (_, line, names) in by_template {
        for (label, members) in fold_members(&names) {
            let count = if members.len() > 1 { format!(" ({} tensors)", members.len()) } else { String::new() };
            out.push(
                Finding::error(missing_code, format!("missing {} {label}{count}", side.word()))
                    .tensor(label.clone())
                    .names(if members.len() > 1 { members } else { Vec::new() })
                    .line(Some(line)),
            );
        }
    }
    if policy != Policy::Allow {
        let severity = if policy == Policy::Error { Severity::Error } else { Severity::Warning };
        let names: Vec<&str> = extra.iter().map(|p| p.name.as_str()).collect();
        for (label, members) in fold_members(&names) {
            let count = if members.len() > 1 { format!(" ({} tensors)", members.len()) } else { String::new() };
            out.push(
                Finding::new(extra_code, severity, format!("{} {label}{count} is not in the contract", side.word()))
                    .tensor(label.clone())
                    .names(if members.len() > 1 { members } else { Vec::new() }),
            );
        }
    }
    out
}

/// A per-tensor difference before folding: `rest` is the message after the name.
struct Raw {
    code: Code,
    severity: Severity,
    tensor: String,
    rest: String,
    line: u64,
}

fn tensor(rule: &TensorRule, port: &Port, bindings: &mut Bindings, out: &mut Vec<Raw>) {
    let mut push = |code, severity, rest: String| {
        out.push(Raw { code, severity, tensor: port.name.clone(), rest, line: rule.line })
    };
    let Some((elem, shape)) = port.ty.tensor_parts() else {
        push(Code::NotTensor, Severity::Error, format!("is a {}, contract expects a tensor", port.ty));
        return;
    };
    if !rule.dtypes.contains(&elem) {
        let want: Vec<String> = rule.dtypes.iter().map(|d| d.to_string()).collect();
        push(Code::Dtype, Severity::Error, format!("dtype is {elem}, contract expects {}", want.join("|")));
    }
    let Some(want) = &rule.shape else { return };
    let Some(dims) = shape else {
        push(Code::Rank, Severity::Warning, format!("declares no shape, contract expects rank {}", want.len()));
        return;
    };
    if dims.len() != want.len() {
        let want_s: Vec<String> = want.iter().map(|d| d.to_string()).collect();
        push(
            Code::Rank,
            Severity::Error,
            format!(
                "rank is {} {}, contract expects rank {} [{}]",
                dims.len(),
                shape_label(Some(dims)),
                want.len(),
                want_s.join(", ")
            ),
        );
        return;
    }
    for (axis, (have, rule_dim)) in dims.iter().zip(want).enumerate() {
        let at = Place { tensor: port.name.clone(), axis, line: rule.line };
        match (rule_dim, have) {
            (DimRule::Any, _) => {}
            (DimRule::Fixed(v, _), Dim::Fixed(h)) if v == h => {}
            (DimRule::Fixed(_, _), Dim::Fixed(h)) => {
                push(Code::DimValue, Severity::Error, format!("axis {axis} is {h}, contract expects {rule_dim}"))
            }
            (DimRule::Fixed(_, _), Dim::Symbolic(s)) => push(
                Code::DimDynamic,
                Severity::Warning,
                format!("axis {axis} is symbolic `{s}`, contract expects fixed {rule_dim}"),
            ),
            (_, Dim::Unknown) => push(
                Code::DimUnknown,
                Severity::Warning,
                format!("axis {axis} has no size or name in the model, contract expects {rule_dim}"),
            ),
            (_, Dim::Fixed(h)) => push(
                Code::DimStatic,
                Severity::Error,
                format!("axis {axis} is fixed at {h}, contract expects a dynamic axis `{rule_dim}` (a size baked in at export time)"),
            ),
            (DimRule::AnySymbol, Dim::Symbolic(_)) => {}
            (DimRule::Var(var), Dim::Symbolic(s)) => {
                if let Some(raw) = bindings.bind(var, s, &at) {
                    push(raw.code, raw.severity, raw.rest);
                }
            }
            (DimRule::Sum(terms), Dim::Symbolic(s)) => bindings.deferred.push(Pending { terms: terms.clone(), have: s.clone(), at }),
        }
    }
}

#[derive(Clone)]
struct Place {
    tensor: String,
    axis: usize,
    line: u64,
}

#[derive(Clone)]
struct Pending {
    terms: Vec<Term>,
    have: String,
    at: Place,
}

/// Dimension variables bound to model symbols, first come first bound.
struct Bindings<'c> {
    bound: HashMap<String, (String, String)>,
    pins: &'c HashMap<String, (String, u64)>,
    deferred: Vec<Pending>,
}

impl<'c> Bindings<'c> {
    fn new(contract: &'c Contract) -> Self {
        Bindings { bound: HashMap::new(), pins: &contract.pins, deferred: Vec::new() }
    }

    fn bind(&mut self, var: &str, symbol: &str, at: &Place) -> Option<Raw> {
        if let Some((pinned, pin_line)) = self.pins.get(var) {
            if pinned != symbol {
                return Some(Raw {
                    code: Code::DimName,
                    severity: Severity::Error,
                    tensor: at.tensor.clone(),
                    rest: if var == pinned {
                        format!(
                            "axis {} is `{symbol}`, contract expects `{pinned}` (pinned at line {pin_line})",
                            at.axis
                        )
                    } else {
                        format!(
                            "axis {} is `{symbol}`, contract expects `{pinned}` (`{var}`, pinned at line {pin_line})",
                            at.axis
                        )
                    },
                    line: at.line,
                });
            }
        }
        match self.bound.get(var) {
            None => {
                self.bound.insert(var.to_string(), (symbol.to_string(), format!("{} axis {}", at.tensor, at.axis)));
                None
            }
            Some((s, _)) if s == symbol => None,
            Some((s, first)) => Some(Raw {
                code: Code::DimBinding,
                severity: Severity::Error,
                tensor: at.tensor.clone(),
                rest: format!("axis {} is `{symbol}`, but `{var}` is `{s}` in {first}", at.axis),
                line: at.line,
            }),
        }
    }

    fn check_sum(&self, p: &Pending, out: &mut Vec<Raw>) {
        let mut parts = Vec::new();
        for t in &p.terms {
            match t {
                Term::Int(i) => parts.push(i.to_string()),
                Term::Var(v) => {
                    match self.bound.get(v).map(|b| b.0.clone()).or_else(|| self.pins.get(v).map(|p| p.0.clone())) {
                        Some(s) => parts.push(s),
                        // An unbound term cannot be judged; the axis is still dynamic.
                        None => return,
                    }
                }
            }
        }
        let expected = parts.join(" + ");
        // The same terms in another order (`seq + past` for `past + seq`) are the same size.
        if same_terms(&expected, &p.have) {
            return;
        }
        let have = p.have.trim();
        let bare = matches!(Expr::parse(have), Expr::Sym(ref s) if s == have);
        let owner = self.bound.iter().find(|(_, (s, _))| s == have).map(|(v, (_, at))| (v.clone(), at.clone()));
        if bare && owner.is_none() {
            // A symbol of the model's own (`total_seq`): nothing else pins it, so it
            // binds to the contract's sum; the run confirms it with concrete sizes.
            out.push(Raw {
                code: Code::DimName,
                severity: Severity::Info,
                tensor: p.at.tensor.clone(),
                rest: format!(
                    "axis {} is `{have}`, a symbol of the model's own: bound to `{expected}` (what a standard caller feeds); the run confirms it",
                    p.at.axis
                ),
                line: p.at.line,
            });
            return;
        }
        if let (true, Some((var, at))) = (bare, owner) {
            out.push(Raw {
                code: Code::DimName,
                severity: Severity::Error,
                tensor: p.at.tensor.clone(),
                rest: format!(
                    "axis {} is `{have}`, the same size as `{var}` ({at}), where the contract expects `{expected}`: a standard caller feeds {expected} here and the model refuses it",
                    p.at.axis
                ),
                line: p.at.line,
            });
            return;
        }
        if normalise(&expected) != normalise(&p.have) {
            let rule = DimRule::Sum(p.terms.clone());
            out.push(Raw {
                code: Code::DimName,
                severity: Severity::Error,
                tensor: p.at.tensor.clone(),
                rest: if rule.to_string() == expected {
                    format!("axis {} is `{}`, contract expects `{expected}`", p.at.axis, p.have)
                } else {
                    format!("axis {} is `{}`, contract expects `{rule}` = `{expected}`", p.at.axis, p.have)
                },
                line: p.at.line,
            });
        }
    }
}

/// Whether two sums have the same terms, in any order.
fn same_terms(a: &str, b: &str) -> bool {
    let terms = |s: &str| {
        let mut v: Vec<String> = s.split('+').map(normalise).collect();
        v.sort();
        v
    };
    terms(a) == terms(b)
}

fn normalise(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

fn order(side: Side, rules: &[TensorRule], ports: &[Port]) -> Option<Finding> {
    let expected: Vec<&TensorRule> = rules.iter().filter(|r| ports.iter().any(|p| p.name == r.name)).collect();
    let actual: Vec<&Port> = ports.iter().filter(|p| rules.iter().any(|r| r.name == p.name)).collect();
    let (i, (rule, port)) = expected.iter().zip(&actual).enumerate().find(|(_, (r, p))| r.name != p.name)?;
    let position = ports.iter().position(|p| p.name == port.name).unwrap_or(i);
    Some(
        Finding::error(
            Code::Order,
            format!("{} #{} is `{}`, contract expects `{}` there", side.word(), position, port.name, rule.name),
        )
        .tensor(port.name.clone())
        .line(Some(rule.line)),
    )
}

/// Merges per-tensor findings that say the same thing about a layer family.
fn fold_findings(raws: Vec<Raw>) -> Vec<Finding> {
    let mut groups: Vec<(Code, Severity, String, u64, Vec<String>)> = Vec::new();
    for r in raws {
        // Exporters put the tensor name into per-layer dim symbols
        // (`Concatpresent.3.encoder.key_dim_1`); abstract it so layers fold.
        let rest = r.rest.replace(&r.tensor, "\u{0}");
        match groups.iter_mut().find(|g| g.0 == r.code && g.2 == rest && g.3 == r.line && g.1 == r.severity) {
            Some(g) => g.4.push(r.tensor),
            None => groups.push((r.code, r.severity, rest, r.line, vec![r.tensor])),
        }
    }
    let mut out = Vec::new();
    for (code, severity, rest, line, names) in groups {
        for (label, members) in fold_members(&names) {
            out.push(
                Finding::new(code, severity, format!("{label}: {}", rest.replace('\u{0}', &label)))
                    .tensor(label.clone())
                    .names(if members.len() > 1 { members } else { Vec::new() })
                    .line(Some(line)),
            );
        }
    }
    out
}
