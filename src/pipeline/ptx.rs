//! Cutting one config's module out of the PTX of a batch: the front end (`cicc`) runs
//! once for several configs of a kernel, and each config's PTX is then what `cicc`
//! would have written for that config alone, so `ptxas` makes the same cubin.
//!
//! PTX is a list of top-level statements: directives (`.version`, `.target`,
//! `.address_size`), variables (`.global`, `.const`, `.extern .shared`), function
//! declarations and definitions (`.func`, `.entry`). A config keeps its entries, every
//! function and variable they reach, and the variables no function uses (those a
//! header defines for every unit, such as libcu++'s customization-point objects).
//! Names `cicc` numbers per module are renumbered as a module of only the kept
//! functions numbers them: basic-block labels and local-memory depots by the function's
//! position, string constants by their order.

use std::collections::{BTreeMap, BTreeSet};

/// One top-level statement.
#[derive(Debug)]
struct Item<'a> {
    kind: ItemKind,
    /// The name it defines or declares, if any.
    name: Option<&'a str>,
    text: &'a str,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ItemKind {
    /// `.version`, `.target`, `.address_size` and other directives.
    Directive,
    /// A variable.
    Variable,
    /// A function prototype (no body).
    Declaration,
    /// A function or entry with its body.
    Definition,
}

/// The PTX of `module` that defines `entries` (symbols) as a module of their own
/// would; an error names an entry the module does not define.
pub fn split(module: &str, entries: &[String]) -> Result<String, String> {
    let items = parse(module)?;
    // A function may be declared (a prototype) and defined: a name stands for both.
    let mut by_name: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (k, item) in items.iter().enumerate() {
        if item.kind != ItemKind::Directive
            && let Some(name) = item.name
        {
            by_name.entry(name).or_default().push(k);
        }
    }
    // Which items each item names (a function's body, a variable's initializer).
    let uses: Vec<BTreeSet<usize>> = items
        .iter()
        .enumerate()
        .map(|(k, item)| {
            let after_name = match item.name {
                Some(n) => item
                    .text
                    .find(n)
                    .map_or(item.text, |at| &item.text[at + n.len()..]),
                None => item.text,
            };
            identifiers(after_name)
                .filter_map(|w| by_name.get(w))
                .flatten()
                .copied()
                .filter(|&d| d != k)
                .collect()
        })
        .collect();
    let used_anywhere: BTreeSet<usize> = uses.iter().flatten().copied().collect();
    let mut keep = BTreeSet::new();
    let mut todo = Vec::new();
    for e in entries {
        let found = by_name
            .get(e.as_str())
            .ok_or_else(|| format!("the batch's PTX defines no `{e}`"))?;
        todo.extend(found.iter().copied());
    }
    while let Some(k) = todo.pop() {
        if keep.insert(k) {
            todo.extend(uses[k].iter().copied());
            if let Some(same) = items[k].name.and_then(|n| by_name.get(n)) {
                todo.extend(same.iter().copied());
            }
        }
    }
    let mut out = String::new();
    let mut functions = 0usize;
    let mut strings: BTreeMap<&str, String> = BTreeMap::new();
    for (k, item) in items.iter().enumerate() {
        let kept = match item.kind {
            ItemKind::Directive => true,
            ItemKind::Variable => keep.contains(&k) || !used_anywhere.contains(&k),
            ItemKind::Declaration | ItemKind::Definition => keep.contains(&k),
        };
        if !kept {
            continue;
        }
        if item.kind == ItemKind::Variable
            && let Some(name) = item.name
            && is_string_constant(name)
        {
            let canonical = match strings.len() {
                0 => "$str".to_string(),
                n => format!("$str${n}"),
            };
            strings.insert(name, canonical);
        }
        let mut text = item.text.to_string();
        if item.kind == ItemKind::Definition {
            text = renumber(&text, functions);
            functions += 1;
        }
        out.push_str(&text);
        out.push('\n');
    }
    if strings.iter().any(|(old, new)| old != new) {
        out = rename_words(&out, &strings);
    }
    Ok(out)
}

/// `$str`, `$str$1`, …: string constants, named by the order `cicc` made them.
fn is_string_constant(name: &str) -> bool {
    name == "$str"
        || name
            .strip_prefix("$str$")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The function-numbered names of one function's text, for its position `n`:
/// `$L__BB<n>_<block>`, `__local_depot<n>`, `$L__func_begin<n>`, `$L__func_end<n>`.
fn renumber(text: &str, n: usize) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    const PREFIXES: [(&str, bool); 4] = [
        ("$L__BB", true),
        ("__local_depot", false),
        ("$L__func_begin", false),
        ("$L__func_end", false),
    ];
    'scan: while !rest.is_empty() {
        for (prefix, underscore) in PREFIXES {
            if let Some(after) = rest.strip_prefix(prefix) {
                let digits = after.bytes().take_while(u8::is_ascii_digit).count();
                let follows_ok = !underscore || after[digits..].starts_with('_');
                if digits > 0 && follows_ok {
                    out.push_str(prefix);
                    out.push_str(&n.to_string());
                    rest = &after[digits..];
                    continue 'scan;
                }
            }
        }
        let c = rest.chars().next().unwrap_or(' ');
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// `text` with whole words renamed.
fn rename_words(text: &str, names: &BTreeMap<&str, String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (start, word) in words(text) {
        if let Some(new) = names.get(word) {
            out.push_str(&text[last..start]);
            out.push_str(new);
            last = start + word.len();
        }
    }
    out.push_str(&text[last..]);
    out
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b == b'%'
}

/// PTX identifiers (letters, digits, `_`, `$`, `%`) with their offsets.
fn words(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let bytes = text.as_bytes();
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < bytes.len() {
            if is_word_byte(bytes[i]) {
                let start = i;
                while i < bytes.len() && is_word_byte(bytes[i]) {
                    i += 1;
                }
                return Some((start, &text[start..i]));
            }
            i += 1;
        }
        None
    })
}

fn identifiers(text: &str) -> impl Iterator<Item = &str> {
    words(text).map(|(_, w)| w)
}

/// The top-level statements of a PTX module, comments dropped.
fn parse(module: &str) -> Result<Vec<Item<'_>>, String> {
    let bytes = module.as_bytes();
    let mut items = Vec::new();
    let mut start: Option<usize> = None;
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        let rest = &module[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
            continue;
        }
        if rest.starts_with("/*") {
            i += rest.find("*/").map_or(rest.len(), |e| e + 2);
            continue;
        }
        if start.is_none() && depth == 0 && bytes[i] == b'.' && is_line_directive(rest) {
            let end = rest.find('\n').unwrap_or(rest.len());
            items.push(item(&rest[..end]));
            i += end;
            continue;
        }
        match bytes[i] {
            b'"' => {
                start.get_or_insert(i);
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += 1;
                }
            }
            b'{' => {
                start.get_or_insert(i);
                depth += 1;
            }
            b'}' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or("unbalanced `}` in the batch's PTX")?;
                // A function ends at its closing brace; a variable's initializer
                // (`= {1, 2};`) at the `;` after it.
                if depth == 0 {
                    let s = start.unwrap_or(i);
                    let head = module[s..=i].split('{').next().unwrap_or("");
                    if identifiers(head).any(|w| w == "entry" || w == "func") {
                        items.push(item(&module[s..=i]));
                        start = None;
                    }
                }
            }
            b';' if depth == 0 => {
                let s = start.take().unwrap_or(i);
                items.push(item(&module[s..=i]));
            }
            c if !c.is_ascii_whitespace() => {
                start.get_or_insert(i);
            }
            _ => {}
        }
        i += 1;
    }
    if depth != 0 || start.is_some() {
        return Err("the batch's PTX ends inside a statement".into());
    }
    Ok(items)
}

/// Directives that end at the end of their line, without `;`.
fn is_line_directive(text: &str) -> bool {
    let t = text.trim_start();
    [".version", ".target", ".address_size", ".file"]
        .iter()
        .any(|d| t.starts_with(d))
}

fn item(text: &str) -> Item<'_> {
    let t = text.trim();
    if is_line_directive(t) {
        return Item {
            kind: ItemKind::Directive,
            name: None,
            text: t,
        };
    }
    let head = t.split('{').next().unwrap_or(t);
    let words: Vec<&str> = identifiers(head).collect();
    if let Some(at) = words.iter().position(|w| *w == "entry" || *w == "func") {
        // `.func (.param .b32 r) name (…)`: the name follows the return parameters.
        let after_kw = &head[head.find(&format!(".{}", words[at])).unwrap_or(0)..];
        let after_kw = after_kw.split_once(char::is_whitespace).map_or("", |x| x.1);
        let after_ret = match after_kw.trim_start().strip_prefix('(') {
            Some(rest) => rest.split_once(')').map_or("", |x| x.1),
            None => after_kw,
        };
        let name = identifiers(after_ret).next();
        return Item {
            kind: if t.contains('{') {
                ItemKind::Definition
            } else {
                ItemKind::Declaration
            },
            name,
            text: t,
        };
    }
    // A variable: its name is the last word before `[`, `=` or `;`.
    let decl = t.split(['[', '=', ';']).next().unwrap_or(t);
    Item {
        kind: ItemKind::Variable,
        name: identifiers(decl).last(),
        text: t,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BATCH: &str = r#"//
// Generated by NVIDIA NVVM Compiler
//

.version 9.0
.target sm_90a
.address_size 64

	// .globl	a
// _ZZ1aE4full has been demoted
.global .align 1 .b8 _ZN4cute1_E[1];
.global .align 4 .u32 shared_table[2] = {1, 2};
.global .align 1 .b8 $str[3] = {104, 105, 0};
.global .align 1 .b8 $str$1[3] = {121, 111, 0};
.extern .shared .align 16 .b8 dynamic_smem[];
.func  (.param .b32 func_retval0) helper(
	.param .b32 helper_param_0
)
;
.visible .entry a(
	.param .u64 a_param_0
)
{
	.local .align 8 .b8 	__local_depot0[8];
	mov.u64 	%rd1, $str;
$L__BB0_1:
	@%p1 bra 	$L__BB0_1;
	ret;
}
.visible .entry b(
	.param .u64 b_param_0
)
{
	.local .align 8 .b8 	__local_depot1[8];
	mov.u64 	%rd1, $str$1;
	ld.global.u32 	%r1, [shared_table];
	{ // callseq 0
	call.uni (retval0), helper, (param0);
	} // callseq 0
$L__BB1_1:
	@%p1 bra 	$L__BB1_1;
	ret;
}
.func  (.param .b32 func_retval0) helper(
	.param .b32 helper_param_0
)
{
$L__BB2_1:
	ret;
}
"#;

    #[test]
    fn each_entry_keeps_what_it_reaches_renumbered() {
        let a = split(BATCH, &["a".into()]).unwrap();
        assert!(a.contains(".visible .entry a("), "{a}");
        assert!(!a.contains("entry b") && !a.contains("helper"), "{a}");
        assert!(!a.contains("shared_table"), "used by b only:\n{a}");
        assert!(
            a.contains("_ZN4cute1_E") && a.contains("dynamic_smem"),
            "{a}"
        );
        assert!(!a.contains("// "), "comments dropped:\n{a}");

        let b = split(BATCH, &["b".into()]).unwrap();
        // b is the first function of its own module: its numbers start at 0, its string
        // constant is the first.
        assert!(
            b.contains("__local_depot0[8]") && b.contains("$L__BB0_1"),
            "{b}"
        );
        assert!(
            b.contains(".b8 $str[3] = {121, 111, 0}") && b.contains("mov.u64 \t%rd1, $str;"),
            "{b}"
        );
        assert!(!b.contains("{104, 105, 0}"), "{b}");
        assert!(
            b.contains("helper(") && b.contains("$L__BB1_1:\n\tret;"),
            "{b}"
        );
        assert!(b.contains("shared_table[2]"), "{b}");
        assert!(
            b.starts_with(".version 9.0\n.target sm_90a\n.address_size 64\n"),
            "{b}"
        );
        // The prototype and the definition of helper both stay, in order.
        assert!(
            b.find("helper(\n\t.param .b32 helper_param_0\n)\n;")
                .unwrap()
                < b.find(".entry b").unwrap(),
            "{b}"
        );
    }

    #[test]
    fn an_entry_the_module_lacks_is_an_error() {
        assert!(split(BATCH, &["c".into()]).unwrap_err().contains("`c`"));
    }
}
