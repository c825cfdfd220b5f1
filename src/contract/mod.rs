//! Contracts: load and validate the YAML (`spec`, here), check a signature
//! against it (`check`), or write one from a known-good model (`init`).

pub mod builtin;
pub mod check;
pub mod init;
pub mod spec;
mod template;

use crate::model::signature::ElemType;
use spec::{ContractFile, DimSpecRaw, Policy};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub use crate::error::{ContractError, ContractErrorKind};
pub use check::check;

/// A validated contract with templates expanded and parameters resolved.
#[derive(Debug, Clone)]
pub struct Contract {
    /// Its `name` (default: the file stem).
    pub name: String,
    /// Where it was read from.
    pub path: PathBuf,
    /// Parameters after overrides, in the contract's order.
    pub params: Vec<(String, i64)>,
    /// variable -> (exact model symbol, contract line)
    pub pins: HashMap<String, (String, u64)>,
    /// Whether inputs and outputs must be in the contract's order.
    pub order: bool,
    /// What an input the contract does not list is.
    pub extra_inputs: Policy,
    /// What an output the contract does not list is.
    pub extra_outputs: Policy,
    /// Input rules, templates expanded.
    pub inputs: Vec<TensorRule>,
    /// Output rules, templates expanded.
    pub outputs: Vec<TensorRule>,
    /// The cache protocol, when given.
    pub cache: Option<spec::CacheSpec>,
    /// Line of the `cache:` section.
    pub cache_line: Option<u64>,
}

/// What one input or output must look like.
#[derive(Debug, Clone)]
pub struct TensorRule {
    /// The tensor name.
    pub name: String,
    /// The name as written in the contract (a template for layer families).
    pub template: String,
    /// Accepted element types.
    pub dtypes: Vec<ElemType>,
    /// Axis rules; `None` for any shape.
    pub shape: Option<Vec<DimRule>>,
    /// The model may lack this input.
    pub optional: bool,
    /// Contract line.
    pub line: u64,
    /// Position in the expected order (layer families interleave by layer).
    pub order_key: (usize, i64, usize, usize),
}

/// What one axis must be.
#[derive(Debug, Clone, PartialEq)]
pub enum DimRule {
    /// A fixed size; the parameter it came from, if any, for messages.
    Fixed(i64, Option<String>),
    /// Any symbolic (dynamic) dim.
    AnySymbol,
    /// Anything at all, even unknown or fixed.
    Any,
    /// A variable: symbolic, and the same model dim wherever it appears.
    Var(String),
    /// `a + b`: a symbol spelled as the sum of the terms' bound symbols.
    Sum(Vec<Term>),
}

/// One term of a `Sum` dim rule.
#[derive(Debug, Clone, PartialEq)]
pub enum Term {
    /// A dim variable.
    Var(String),
    /// A constant.
    Int(i64),
}

impl std::fmt::Display for DimRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DimRule::Fixed(v, Some(p)) => write!(f, "{v} (${p})"),
            DimRule::Fixed(v, None) => write!(f, "{v}"),
            DimRule::AnySymbol => f.write_str("_"),
            DimRule::Any => f.write_str("any"),
            DimRule::Var(v) => f.write_str(v),
            DimRule::Sum(terms) => {
                let parts: Vec<String> = terms
                    .iter()
                    .map(|t| match t {
                        Term::Var(v) => v.clone(),
                        Term::Int(i) => i.to_string(),
                    })
                    .collect();
                f.write_str(&parts.join(" + "))
            }
        }
    }
}

impl Contract {
    /// Reads and validates a contract file; `overrides` replace `params` values.
    pub fn load(path: &Path, overrides: &[(String, i64)]) -> Result<Contract, ContractError> {
        load(path, overrides)
    }

    /// A contract file, or a built-in contract by name (`marian`,
    /// `gpt2-decoder`; `onnx-contract specs` lists them) when no such file exists.
    pub fn resolve(spec: &str, overrides: &[(String, i64)]) -> Result<Contract, ContractError> {
        let path = Path::new(spec);
        if path.exists() {
            return load(path, overrides);
        }
        builtin::load(spec, overrides).unwrap_or_else(|| {
            let names: Vec<&str> = builtin::SPECS.iter().map(|(n, _)| *n).collect();
            Err(ContractError {
                path: path.to_path_buf(),
                kind: ContractErrorKind::Invalid,
                line: None,
                column: None,
                message: format!(
                    "no such contract file, and no built-in contract of that name (built in: {})",
                    names.join(", ")
                ),
            })
        })
    }

    /// The value of parameter `name`.
    pub fn param(&self, name: &str) -> Option<i64> {
        self.params.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
    }
}

/// Reads and validates a contract; `overrides` replace `params` values.
pub fn load(path: &Path, overrides: &[(String, i64)]) -> Result<Contract, ContractError> {
    let text = std::fs::read(path).map_err(|e| ContractError {
        path: path.to_path_buf(),
        kind: ContractErrorKind::Invalid,
        line: None,
        column: None,
        message: format!("cannot read contract: {e}"),
    })?;
    let text = String::from_utf8(text).map_err(|e| ContractError {
        path: path.to_path_buf(),
        kind: ContractErrorKind::Invalid,
        line: None,
        column: None,
        message: format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()),
    })?;
    parse(path, &text, overrides)
}

/// Parses contract text; `path` is only used in error messages.
pub fn parse(path: &Path, text: &str, overrides: &[(String, i64)]) -> Result<Contract, ContractError> {
    if text.trim().is_empty() {
        return Err(ContractError {
            path: path.to_path_buf(),
            kind: ContractErrorKind::Invalid,
            line: Some(1),
            column: Some(1),
            message: "the contract is empty: it needs at least `inputs:` and `outputs:`".into(),
        });
    }
    let file: ContractFile = serde_saphyr::from_str(text).map_err(|e| {
        let loc = e.location();
        ContractError {
            path: path.to_path_buf(),
            kind: ContractErrorKind::Invalid,
            line: loc.map(|l| l.line()),
            column: loc.map(|l| l.column()),
            message: first_line_of(&e),
        }
    })?;
    validate(path, file, overrides)
}

/// serde-saphyr renders `error: line L column C: message` and a source
/// snippet; we print our own `file:line:col:` prefix, so keep the message.
fn first_line_of(e: &serde_saphyr::Error) -> String {
    let full = e.to_string();
    let mut msg = full.lines().next().unwrap_or("").trim();
    msg = msg.strip_prefix("error:").unwrap_or(msg).trim_start();
    if let Some(rest) = msg.strip_prefix("line ") {
        if let Some((_, tail)) = rest.split_once(": ") {
            msg = tail;
        }
    }
    msg.to_string()
}

fn validate(path: &Path, file: ContractFile, overrides: &[(String, i64)]) -> Result<Contract, ContractError> {
    let err = |line: u64, column: u64, message: String| ContractError {
        path: path.to_path_buf(),
        kind: ContractErrorKind::Invalid,
        line: Some(line),
        column: Some(column),
        message,
    };
    let mut params: Vec<(String, i64)> = file.params.0.iter().map(|(k, v)| (k.value.clone(), *v)).collect();
    for (k, v) in overrides {
        match params.iter_mut().find(|(name, _)| name == k) {
            Some(slot) => slot.1 = *v,
            None => {
                let known: Vec<&str> = params.iter().map(|(n, _)| n.as_str()).collect();
                return Err(ContractError {
                    path: path.to_path_buf(),
                    kind: ContractErrorKind::UnknownParam,
                    line: None,
                    column: None,
                    message: format!(
                        "no parameter `{k}` to override (the contract's parameters: {})",
                        known.join(", ")
                    ),
                });
            }
        }
    }
    let param_map: HashMap<&str, i64> = params.iter().map(|(k, v)| (k.as_str(), *v)).collect();

    let mut pins = HashMap::new();
    for (k, v) in &file.dims.0 {
        if !is_variable(&k.value) {
            return Err(err(
                k.referenced.line(),
                k.referenced.column(),
                format!("`{}` is not a dimension variable name", k.value),
            ));
        }
        pins.insert(k.value.clone(), (v.clone(), k.referenced.line()));
    }

    let mut sections = Vec::new();
    for (section, entries) in [("inputs", &file.inputs), ("outputs", &file.outputs)] {
        let mut rules: Vec<TensorRule> = Vec::new();
        let mut family_anchor: Option<usize> = None;
        for (idx, (key, spec)) in entries.0.iter().enumerate() {
            let (line, col) = (key.referenced.line(), key.referenced.column());
            let spec_v = &spec.value;
            let dtypes = spec_v
                .dtype
                .split('|')
                .map(|d| {
                    ElemType::from_name(d.trim()).ok_or_else(|| {
                        let known: Vec<&str> = ElemType::all_names().collect();
                        err(
                            spec.referenced.line(),
                            spec.referenced.column(),
                            format!("{}: unknown dtype `{}` (known: {})", key.value, d.trim(), known.join(", ")),
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            let shape = match &spec_v.shape {
                None => None,
                Some(dims) => {
                    Some(dims.iter().map(|d| dim_rule(d, &param_map)).collect::<Result<Vec<_>, String>>().map_err(
                        |m| err(spec.referenced.line(), spec.referenced.column(), format!("{}: {m}", key.value)),
                    )?)
                }
            };
            let names = template::expand(&key.value, &param_map).map_err(|m| err(line, col, m))?;
            if names.is_empty() {
                return Err(err(
                    line,
                    col,
                    format!("`{}` expands to no tensor names (is a layer count 0?)", key.value),
                ));
            }
            let layered = key.value.contains("{layer}");
            let anchor = if layered { *family_anchor.get_or_insert(idx) } else { idx };
            for (inner, (name, layer)) in names.into_iter().enumerate() {
                if rules.iter().any(|r| r.name == name) {
                    return Err(err(
                        line,
                        col,
                        format!("{section}: `{name}` is listed twice (check overlapping templates)"),
                    ));
                }
                rules.push(TensorRule {
                    name,
                    template: key.value.clone(),
                    dtypes: dtypes.clone(),
                    shape: shape.clone(),
                    optional: spec_v.optional,
                    line,
                    order_key: (anchor, layer.unwrap_or(0), idx, inner),
                });
            }
            if spec_v.optional && section == "outputs" {
                return Err(err(line, col, "`optional` applies to inputs only".into()));
            }
        }
        rules.sort_by_key(|r| r.order_key);
        sections.push(rules);
    }
    let outputs = sections.pop().unwrap_or_default();
    let inputs = sections.pop().unwrap_or_default();
    if inputs.is_empty() && outputs.is_empty() {
        return Err(ContractError {
            path: path.to_path_buf(),
            kind: ContractErrorKind::Invalid,
            line: None,
            column: None,
            message: "the contract lists no inputs and no outputs".into(),
        });
    }
    let (cache, cache_line) = match file.cache {
        Some(c) => (Some(c.value), Some(c.referenced.line())),
        None => (None, None),
    };
    Ok(Contract {
        name: file
            .name
            .unwrap_or_else(|| path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()),
        path: path.to_path_buf(),
        params,
        pins,
        order: file.order,
        extra_inputs: file.extra_inputs,
        extra_outputs: file.extra_outputs,
        inputs,
        outputs,
        cache,
        cache_line,
    })
}

pub(crate) fn is_variable(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && s != "_"
        && s != "any"
}

fn dim_rule(d: &DimSpecRaw, params: &HashMap<&str, i64>) -> Result<DimRule, String> {
    let text = match d {
        DimSpecRaw::Int(v) if *v >= 0 => return Ok(DimRule::Fixed(*v, None)),
        DimSpecRaw::Int(v) => return Err(format!("negative dim {v}")),
        DimSpecRaw::Text(t) => t.trim(),
    };
    let param = |p: &str| {
        params.get(p).map(|v| DimRule::Fixed(*v, Some(p.to_string()))).ok_or_else(|| {
            let known: Vec<&&str> = params.keys().collect();
            format!("`${p}` is not a parameter (params: {known:?})")
        })
    };
    match text {
        "_" => Ok(DimRule::AnySymbol),
        "any" => Ok(DimRule::Any),
        t if t.starts_with('$') => param(&t[1..]),
        t if is_variable(t) => Ok(DimRule::Var(t.to_string())),
        t if t.contains('+') => {
            let terms = t
                .split('+')
                .map(|p| {
                    let p = p.trim();
                    if let Ok(i) = p.parse::<i64>() {
                        Ok(Term::Int(i))
                    } else if is_variable(p) {
                        Ok(Term::Var(p.to_string()))
                    } else {
                        Err(format!("`{p}` in `{t}` is neither a variable nor an integer"))
                    }
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(DimRule::Sum(terms))
        }
        t => Err(format!(
            "dim `{t}` is not understood: use an integer, `$param`, a variable name, `var + var`, `_` (any symbol) or `any`"
        )),
    }
}
