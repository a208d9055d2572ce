//! `kart build --skip-infeasible`: the `require` rule that excludes a grid's configs
//! over a resource limit, written into the kernel's `kernel.toml` with a comment saying
//! why, so the exclusion is reviewed and committed with the grid it narrows (and shown
//! by `kart build --explain-grid` like any other rule).

use std::path::Path;

use crate::error::{Error, IoContext as _, Result};
use crate::pipeline::infeasible::{Exclusion, comment};
use crate::pipeline::plan::Planned;
use crate::pipeline::reporter::BuildReporter;
use crate::workspace::Workspace;

/// After a build whose only failures were configs over a resource limit: adds each
/// kernel's rule to its kernel.toml and returns the plan without the excluded configs
/// (on every target), with how many of the selection they were (`selected` loses them).
pub(super) fn exclude(
    ws: &Workspace,
    exclusions: &[Exclusion<'_>],
    planned: &[Planned],
    selected: &mut Vec<&Planned>,
    reporter: &dyn BuildReporter,
) -> Result<(Vec<Planned>, usize)> {
    for e in exclusions {
        let kernel = &ws.project.kernels[e.kernel];
        record_rule(&kernel.manifest, &e.rule, &comment(e))?;
        reporter.note(&format!(
            "{}: {} config(s) over a resource limit excluded: added {} to `require` in {}",
            kernel.name,
            e.failing.len(),
            quoted(&e.rule),
            kernel.manifest.display()
        ));
    }
    let out = |kernel: usize, config: &crate::model::Config| {
        exclusions
            .iter()
            .any(|e| e.kernel == kernel && e.failing.contains(config))
    };
    let kept = planned
        .iter()
        .filter(|p| !out(p.kernel, &p.config))
        .cloned()
        .collect();
    let before = selected.len();
    selected.retain(|p| !out(p.kernel, &p.config));
    Ok((kept, before - selected.len()))
}

/// Adds `rule` to the top-level `require` list of the kernel.toml at `path`, after a
/// `# comment` line: appended to an existing list (its other rules, comments and layout
/// kept), else a new `require = [...]` before the file's first table. The written text
/// is parsed back and must be the old document plus the rule, or nothing is written.
pub(super) fn record_rule(path: &Path, rule: &str, comment: &str) -> Result<()> {
    let text = std::fs::read_to_string(path).at("read", path)?;
    let new = with_rule(&text, rule, comment).map_err(|why| Error::InvalidFile {
        path: path.to_path_buf(),
        line: 0,
        column: 0,
        message: format!(
            "cannot add the rule {} to its `require` list: {why}",
            quoted(rule)
        ),
        hint: Some(format!(
            "add `{}` to `require` by hand and build again",
            quoted(rule)
        )),
    })?;
    let tmp = path.with_extension("toml.kart-new");
    std::fs::write(&tmp, new).at("write", &tmp)?;
    std::fs::rename(&tmp, path).at("rename to", path)
}

/// `rule` as a TOML (and JSON) string.
fn quoted(rule: &str) -> String {
    serde_json::Value::String(rule.to_string()).to_string()
}

#[derive(serde::Deserialize)]
struct Top {
    require: Option<toml::Spanned<Vec<toml::Spanned<String>>>>,
}

/// `text` with `rule` added to its `require` list (see [`record_rule`]).
fn with_rule(text: &str, rule: &str, comment: &str) -> std::result::Result<String, String> {
    let old: toml::Table = toml::from_str(text).map_err(|e| e.message().to_string())?;
    let top: Top = toml::from_str(text).map_err(|e| e.message().to_string())?;
    let mut expected = old.clone();
    let mut rules = match old.get("require") {
        Some(toml::Value::Array(a)) => a.clone(),
        Some(_) => return Err("`require` is not a list".into()),
        None => Vec::new(),
    };
    rules.push(toml::Value::String(rule.to_string()));
    expected.insert("require".into(), toml::Value::Array(rules));
    let comment: String = comment
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    let candidates: Vec<String> = match &top.require {
        Some(list) => vec![appended(text, list, rule, &comment)],
        None => new_list(text, rule, &comment),
    };
    candidates
        .into_iter()
        .find(|new| toml::from_str::<toml::Table>(new).is_ok_and(|t| t == expected))
        .ok_or_else(|| "the file's layout is not one kart can edit safely".to_string())
}

/// The rule appended to the existing list `list` (spans into `text`).
fn appended(
    text: &str,
    list: &toml::Spanned<Vec<toml::Spanned<String>>>,
    rule: &str,
    comment: &str,
) -> String {
    let item = format!("\n  # {comment}\n  {}", quoted(rule));
    let Some(last) = list.get_ref().last() else {
        // `require = []`: the rule goes after the `[`.
        let at = list.span().start + 1;
        return format!("{}{item},\n{}", &text[..at], &text[at..]);
    };
    let end = last.span().end;
    let after = &text[end..];
    let spaces = after.len() - after.trim_start_matches([' ', '\t']).len();
    let had_comma = after[spaces..].starts_with(',');
    let mut at = if had_comma { end + spaces + 1 } else { end };
    // A comment after the last rule stays on its line.
    let rest = &text[at..];
    if rest.trim_start_matches([' ', '\t']).starts_with('#') {
        at += rest.find('\n').unwrap_or(rest.len());
    }
    let comma = if had_comma { "" } else { "," };
    let trailing = if had_comma { "," } else { "" };
    format!(
        "{}{comma}{}{item}{trailing}{}",
        &text[..end],
        &text[end..at],
        &text[at..]
    )
}

/// A new `require` list: before each line that may be the first table header, then at
/// the end (the caller keeps the first that parses to the right document).
fn new_list(text: &str, rule: &str, comment: &str) -> Vec<String> {
    let block = format!("# {comment}\nrequire = [{}]\n", quoted(rule));
    let mut out = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if line.trim_start().starts_with('[') {
            out.push(format!("{}{block}\n{}", &text[..offset], &text[offset..]));
        }
        offset += line.len();
    }
    let sep = if text.is_empty() || text.ends_with('\n') {
        ""
    } else {
        "\n"
    };
    out.push(format!("{text}{sep}{block}"));
    out
}

#[cfg(test)]
mod tests {
    use super::with_rule;

    #[test]
    fn a_rule_joins_the_list_keeping_its_layout_and_comments() {
        let text = "name = \"k\"\nrequire = [\n  \"A < 4\", # small\n]\n\n[params]\nA = [1, 2]\n";
        let new = with_rule(text, "A * 2 < 9", "why").unwrap();
        assert_eq!(
            new,
            "name = \"k\"\nrequire = [\n  \"A < 4\", # small\n  # why\n  \"A * 2 < 9\",\n]\n\n[params]\nA = [1, 2]\n"
        );
        let one_line = with_rule("require = [\"A < 4\"]\n", "A != 2", "why").unwrap();
        assert_eq!(one_line, "require = [\"A < 4\",\n  # why\n  \"A != 2\"]\n");
        let empty = with_rule("require = []\n", "A != 2", "why").unwrap();
        assert_eq!(empty, "require = [\n  # why\n  \"A != 2\",\n]\n");
    }

    #[test]
    fn a_new_list_goes_before_the_first_table() {
        // `[`-lines inside a multi-line array are not tables: the parse back decides.
        let text = "name = \"k\"\nshape = [\n[1, 2],\n]\n[params]\nA = [1]\n";
        let new = with_rule(text, "A < 2", "over a limit").unwrap();
        let table: toml::Table = toml::from_str(&new).unwrap();
        assert_eq!(table["require"].as_array().unwrap().len(), 1);
        let plain = "name = \"k\"\n\n[params]\nA = [1]\n";
        assert_eq!(
            with_rule(plain, "A < 2", "c").unwrap(),
            "name = \"k\"\n\n# c\nrequire = [\"A < 2\"]\n\n[params]\nA = [1]\n"
        );
        assert!(with_rule("require = \"A\"\n", "A < 2", "c").is_err());
    }
}
