//! Expands tensor-name templates: `{layer}`, `{a,b}`, `{0..5}`, `{0..$n}`.

use std::collections::HashMap;

/// Each expanded name, with its layer index when the template has `{layer}`.
pub fn expand(template: &str, params: &HashMap<&str, i64>) -> Result<Vec<(String, Option<i64>)>, String> {
    let mut out: Vec<(String, Option<i64>)> = vec![(String::new(), None)];
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let close = rest[open..].find('}').map(|c| open + c).ok_or_else(|| format!("`{template}`: unclosed `{{`"))?;
        let literal = &rest[..open];
        let group = &rest[open + 1..close];
        let (choices, is_layer) = group_choices(group, params).map_err(|m| format!("`{template}`: {m}"))?;
        let mut next = Vec::with_capacity(out.len() * choices.len());
        for (prefix, layer) in &out {
            for c in &choices {
                let l = if is_layer { c.parse().ok() } else { *layer };
                next.push((format!("{prefix}{literal}{c}"), l));
            }
        }
        out = next;
        rest = &rest[close + 1..];
    }
    if rest.contains('}') {
        return Err(format!("`{template}`: `}}` without `{{`"));
    }
    for (name, _) in out.iter_mut() {
        name.push_str(rest);
    }
    Ok(out)
}

fn group_choices(group: &str, params: &HashMap<&str, i64>) -> Result<(Vec<String>, bool), String> {
    let group = group.trim();
    let value = |s: &str| -> Result<i64, String> {
        let s = s.trim();
        if let Some(p) = s.strip_prefix('$') {
            params.get(p).copied().ok_or_else(|| format!("`${p}` is not a parameter"))
        } else {
            s.parse().map_err(|_| format!("`{s}` is not an integer or `$param`"))
        }
    };
    if group == "layer" {
        let n = params.get("layers").copied().ok_or("`{layer}` needs a `layers` parameter in `params`")?;
        if n > 100_000 {
            return Err(format!("layers = {n} is not plausible"));
        }
        return Ok(((0..n.max(0)).map(|i| i.to_string()).collect(), true));
    }
    if let Some((a, b)) = group.split_once("..") {
        let (a, b) = (value(a)?, value(b)?);
        if b - a > 100_000 {
            return Err(format!("range {a}..{b} is too large"));
        }
        return Ok(((a..=b).map(|i| i.to_string()).collect(), true));
    }
    if group.is_empty() {
        return Err("empty `{}`".into());
    }
    Ok((group.split(',').map(|s| s.trim().to_string()).collect(), false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_and_alternatives() {
        let params = HashMap::from([("layers", 2)]);
        let names: Vec<String> = expand("p.{layer}.d.{key,value}", &params).unwrap().into_iter().map(|n| n.0).collect();
        assert_eq!(names, ["p.0.d.key", "p.0.d.value", "p.1.d.key", "p.1.d.value"]);
    }

    #[test]
    fn zero_layers_expand_to_nothing() {
        let params = HashMap::from([("layers", 0)]);
        assert!(expand("p.{layer}.k", &params).unwrap().is_empty());
    }

    #[test]
    fn errors_are_sentences() {
        let params = HashMap::new();
        assert!(expand("p.{layer}.k", &params).unwrap_err().contains("`layers` parameter"));
        assert!(expand("p.{0..2", &params).unwrap_err().contains("unclosed"));
    }
}
