//! Folds per-layer tensor names into templates, e.g. twelve names into
//! `past_key_values.{0..5}.decoder.{key,value}`, so tables stay readable.

use std::hash::Hash;

/// A run of names that differ only in dot-separated segments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// `past_key_values.{0..5}.decoder.{key,value}`, or the plain name.
    pub label: String,
    /// Indices into the input slice, in their original order.
    pub members: Vec<usize>,
}

struct Item<K> {
    /// `.`, or `_` for a name that numbers its layers between underscores
    /// (`past_0_key`, winml-cli's), with no dot.
    sep: char,
    segments: Vec<Vec<String>>,
    key: K,
    members: Vec<usize>,
}

/// Folds `names`; only names that also share `key` (say, dtype and shape)
/// are merged. Layer numbers fold first, then alternatives such as
/// `key`/`value`. Single-segment names never fold (`input_ids` and
/// `attention_mask` are not a family). Groups come in first-member order.
pub fn fold<K: Eq + Hash + Clone>(names: &[(String, K)]) -> Vec<Group> {
    fold_on(names, false)
}

/// [`fold`]; with `underscores`, a name without dots that numbers its layers
/// between underscores (`past_0_key`, winml-cli's) folds on them (for
/// messages only: a contract's templates are dotted).
fn fold_on<K: Eq + Hash + Clone>(names: &[(String, K)], underscores: bool) -> Vec<Group> {
    let mut items: Vec<Item<K>> = names
        .iter()
        .enumerate()
        .map(|(i, (n, k))| {
            // A layer number inside the name (`past_0_key`), not an exporter's serial at its end (`cat_7`).
            let parts: Vec<&str> = n.split('_').collect();
            let inside = parts.len() > 2 && parts[1..parts.len() - 1].iter().any(|p| is_number(p));
            let by_underscore = underscores && !n.contains('.') && inside;
            let sep = if by_underscore { '_' } else { '.' };
            Item {
                sep,
                segments: n.split(sep).map(|s| vec![s.to_string()]).collect(),
                key: k.clone(),
                members: vec![i],
            }
        })
        .collect();
    let max_segments = items.iter().map(|i| i.segments.len()).max().unwrap_or(0);
    for numeric in [true, false] {
        for pos in 0..max_segments {
            items = merge_at(items, pos, numeric);
        }
    }
    let mut groups: Vec<Group> = items
        .into_iter()
        .map(|mut it| {
            it.members.sort_unstable();
            Group { label: render(&it.segments, it.sep), members: it.members }
        })
        .collect();
    groups.sort_by_key(|g| g.members[0]);
    groups
}

/// Folds names alone, with no attribute to keep apart (lists of missing names).
pub fn fold_names<S: AsRef<str>>(names: &[S]) -> Vec<String> {
    fold_members(names).into_iter().map(|g| g.0).collect()
}

/// Like [`fold_names`], with the names behind each label.
pub fn fold_members<S: AsRef<str>>(names: &[S]) -> Vec<(String, Vec<String>)> {
    let keyed: Vec<(String, ())> = names.iter().map(|n| (n.as_ref().to_string(), ())).collect();
    fold_on(&keyed, true)
        .into_iter()
        .map(|g| {
            let members = g.members.iter().map(|&i| keyed[i].0.clone()).collect();
            (g.label, members)
        })
        .collect()
}

/// Splits a folded label on the dots outside `{…}` groups (`{0..5}` has dots).
pub fn label_segments(label: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in label.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            '.' if depth == 0 => {
                out.push(&label[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&label[start..]);
    out
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.len() < 10 && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
}

fn merge_at<K: Eq + Hash + Clone>(items: Vec<Item<K>>, pos: usize, numeric: bool) -> Vec<Item<K>> {
    let mut out: Vec<Item<K>> = Vec::with_capacity(items.len());
    'next: for item in items {
        let eligible = item.segments.len() > 1
            && pos < item.segments.len()
            && item.segments[pos].iter().all(|s| is_number(s) == numeric);
        if eligible {
            for existing in out.iter_mut() {
                if existing.key == item.key
                    && existing.sep == item.sep
                    && existing.segments.len() == item.segments.len()
                    && existing.segments[pos].iter().all(|s| is_number(s) == numeric)
                    && existing.segments.iter().zip(&item.segments).enumerate().all(|(i, (a, b))| i == pos || a == b)
                {
                    for v in &item.segments[pos] {
                        if !existing.segments[pos].contains(v) {
                            existing.segments[pos].push(v.clone());
                        }
                    }
                    existing.members.extend(&item.members);
                    continue 'next;
                }
            }
        }
        out.push(item);
    }
    out
}

fn render(segments: &[Vec<String>], sep: char) -> String {
    let parts: Vec<String> = segments.iter().map(|values| render_segment(values)).collect();
    parts.join(&sep.to_string())
}

fn render_segment(values: &[String]) -> String {
    if values.len() == 1 {
        return values[0].clone();
    }
    if values.iter().all(|v| is_number(v)) {
        let mut nums: Vec<u64> = values.iter().filter_map(|v| v.parse().ok()).collect();
        nums.sort_unstable();
        let contiguous = nums.windows(2).all(|w| w[1] == w[0] + 1);
        if contiguous && nums.len() > 2 {
            return format!("{{{}..{}}}", nums[0], nums[nums.len() - 1]);
        }
        let list: Vec<String> = nums.iter().map(u64::to_string).collect();
        return format!("{{{}}}", list.join(","));
    }
    format!("{{{}}}", values.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marian_past(parts: &[&str]) -> Vec<String> {
        let mut v = Vec::new();
        for l in 0..6 {
            for p in parts {
                for kv in ["key", "value"] {
                    v.push(format!("past_key_values.{l}.{p}.{kv}"));
                }
            }
        }
        v
    }

    #[test]
    fn folds_layers_then_key_value() {
        let names = marian_past(&["encoder"]);
        assert_eq!(fold_names(&names), vec!["past_key_values.{0..5}.encoder.{key,value}"]);
    }

    #[test]
    fn underscore_layer_numbers_fold_too() {
        // winml-cli's names; `position_ids` and `input_ids` stay apart (no number between underscores).
        let mut names: Vec<String> =
            (0..24).flat_map(|i| [format!("past_{i}_key"), format!("past_{i}_value")]).collect();
        names.extend(["input_ids".to_string(), "position_ids".to_string(), "cat_7".into(), "cat_8".into()]);
        assert_eq!(fold_names(&names), vec!["past_{0..23}_{key,value}", "input_ids", "position_ids", "cat_7", "cat_8"]);
    }

    #[test]
    fn keeps_plain_names_apart() {
        let mut names = vec!["input_ids".to_string(), "attention_mask".to_string()];
        names.extend(marian_past(&["decoder"]));
        names.push("use_cache_branch".into());
        assert_eq!(
            fold_names(&names),
            vec!["input_ids", "attention_mask", "past_key_values.{0..5}.decoder.{key,value}", "use_cache_branch"]
        );
    }

    #[test]
    fn key_keeps_different_shapes_apart() {
        let names: Vec<(String, &str)> = marian_past(&["decoder", "encoder"])
            .into_iter()
            .map(|n| {
                let k = if n.contains("decoder") { "past" } else { "enc" };
                (n, k)
            })
            .collect();
        let labels: Vec<String> = fold(&names).into_iter().map(|g| g.label).collect();
        assert_eq!(
            labels,
            vec!["past_key_values.{0..5}.decoder.{key,value}", "past_key_values.{0..5}.encoder.{key,value}"]
        );
    }

    #[test]
    fn gaps_are_listed() {
        let names = ["a.0.k", "a.2.k", "a.3.k"];
        assert_eq!(fold_names(&names), vec!["a.{0,2,3}.k"]);
    }
}
