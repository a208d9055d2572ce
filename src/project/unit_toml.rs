//! What kernel.toml puts into the compiled unit besides params and `-DNAME=VALUE`
//! defines: params that choose a macro to define (`define_params`), and the `prelude`
//! of a template kernel's generated unit. Each checked where it is written.

use std::collections::BTreeSet;

use kart_runtime::error::Result;
use kart_runtime::text::SourceFile;
use kart_runtime::untrusted::is_c_identifier;

use crate::project::kernel::Kernel;
use crate::project::raw::{RawKernel, RawValue};

/// The most bytes a `prelude` may hold: a few lines of `using` and includes, not a
/// source file (a long one belongs in a header of the kernel's `sources`).
pub const PRELUDE_MAX_BYTES: usize = 16 << 10;

/// `define_params`: params of the grid whose value is the name of the macro a config
/// defines without a value (`-DENABLE_BF16`), `true` (the param's own name) or `false`
/// (nothing). Every macro a value names must be a C identifier and must not also be a
/// param, a derived param or a define.
pub(super) fn define_params(
    file: &SourceFile<'_>,
    raw: &RawKernel,
    kernel: &Kernel,
) -> Result<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    let define_names: BTreeSet<&str> = raw.defines.keys().map(|k| k.get_ref().as_str()).collect();
    for name in &raw.define_params {
        let param = name.get_ref();
        if !kernel.params.contains_key(param) {
            let params: Vec<&str> = kernel.params.keys().map(String::as_str).collect();
            return Err(file.error(
                name.span(),
                format!("`define_params` names `{param}`, which is not a param"),
                if params.is_empty() {
                    "declare it in [params] with the macros it chooses: `PRECISION = [\"ENABLE_BF16\", \"ENABLE_FP16\"]`".to_string()
                } else {
                    format!("params of this kernel: {}", params.join(", "))
                },
            ));
        }
        if !out.insert(param.clone()) {
            return Err(file.error(
                name.span(),
                format!("`define_params` lists `{param}` twice"),
                "remove the repeated name",
            ));
        }
        let Some((_, values)) = raw.params.iter().find(|(k, _)| k.get_ref() == param) else {
            continue;
        };
        for v in values.get_ref() {
            let macro_name = match v.get_ref() {
                RawValue::Bool(true) => param.clone(),
                RawValue::Bool(false) => continue,
                RawValue::Text(t) if t == "true" => param.clone(),
                RawValue::Text(t) if t == "false" => continue,
                RawValue::Text(t) if is_c_identifier(t) => t.clone(),
                RawValue::Text(t) => {
                    return Err(file.error(
                        v.span(),
                        format!(
                            "`{param}` is in `define_params`, so each value names the macro a config defines, and `{t}` is not a C identifier"
                        ),
                        format!(
                            "write a macro name (`\"ENABLE_BF16\"` passes -DENABLE_BF16), or true/false to define `{param}` or not"
                        ),
                    ));
                }
                RawValue::Int(i) => {
                    return Err(file.error(
                        v.span(),
                        format!(
                            "`{param}` is in `define_params`, so each value names the macro a config defines, and `{i}` is a number"
                        ),
                        format!(
                            "write a macro name as a string (\"ENABLE_BF16\"), or true/false to define `{param}` or not; for -D{param}={i}, remove `{param}` from `define_params`"
                        ),
                    ));
                }
                RawValue::Other(_) => continue, // refused with the grid's values
            };
            let clash = if macro_name != *param && kernel.params.contains_key(&macro_name) {
                Some("a param (passed as its own macro)")
            } else if kernel.derived.iter().any(|d| d.name == macro_name) {
                Some("a derived param")
            } else if define_names.contains(macro_name.as_str()) {
                Some("a key of `defines`")
            } else {
                None
            };
            if let Some(what) = clash {
                return Err(file.error(
                    v.span(),
                    format!(
                        "define param `{param}` would pass -D{macro_name}, and `{macro_name}` is also {what}: the two forms conflict"
                    ),
                    "each macro is defined one way: give the param's value another name, or remove the other definition",
                ));
            }
        }
    }
    Ok(out)
}

/// `prelude`: C++ lines for the generated unit of a kernel with template entries,
/// placed as written after the source's `#include` and before the instantiations.
/// Refused when it could change the generator's own lines rather than precede them:
/// an unterminated comment, string or raw string, a last line continued with `\`, an
/// open `#if`, unbalanced brackets; and when it holds a NUL or is over
/// [`PRELUDE_MAX_BYTES`].
pub(super) fn prelude(
    file: &SourceFile<'_>,
    raw: &RawKernel,
    kernel: &Kernel,
) -> Result<Option<String>> {
    let Some(text) = &raw.prelude else {
        return Ok(None);
    };
    let refuse = |why: String, hint: &str| Err(file.error(text.span(), why, hint));
    if kernel.templates.is_empty() {
        return refuse(
            "`prelude` is for the unit kart generates for template entries, and this kernel has none".into(),
            "put these lines in the kernel's source, or remove `prelude`",
        );
    }
    let body = text.get_ref();
    if body.contains('\0') {
        return refuse(
            "`prelude` contains a NUL character".into(),
            "remove it: the prelude is C++ text",
        );
    }
    if body.len() > PRELUDE_MAX_BYTES {
        return refuse(
            format!(
                "`prelude` is {} bytes, over the {PRELUDE_MAX_BYTES} a prelude may hold",
                body.len()
            ),
            "move the code into a header listed in `sources` and include it from the prelude",
        );
    }
    if let Err(why) = check_complete(body) {
        return refuse(
            format!("`prelude` {why}, which would swallow the lines kart writes after it"),
            "end every comment, string and `#if` inside the prelude, and balance its brackets",
        );
    }
    Ok(Some(body.clone()))
}

/// Whether C++ `text` ends where it began: outside every comment, literal,
/// preprocessor conditional and bracket, its last line not continued. The error says
/// what is left open.
pub fn check_complete(text: &str) -> std::result::Result<(), String> {
    #[derive(PartialEq)]
    enum State {
        Code,
        LineComment,
        BlockComment,
        Quoted(char),
        Raw(String),
    }
    let chars: Vec<char> = text.chars().collect();
    let mut state = State::Code;
    let mut brackets: Vec<char> = Vec::new();
    let mut conditionals = 0usize;
    let mut line_start = true;
    let mut in_directive = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        // A backslash before a line break joins the lines (in code, comments, literals).
        if c == '\\' && !matches!(state, State::Raw(_)) {
            let mut j = i + 1;
            while matches!(chars.get(j), Some(' ' | '\t')) {
                j += 1;
            }
            if matches!(chars.get(j), Some('\n')) {
                i = j + 1;
                continue;
            }
            if matches!(state, State::Quoted(_)) {
                i += 2;
                continue;
            }
        }
        match &state {
            State::LineComment => {
                if c == '\n' {
                    state = State::Code;
                    in_directive = false;
                    line_start = true;
                }
            }
            State::BlockComment => {
                if c == '*' && next == Some('/') {
                    state = State::Code;
                    i += 1;
                }
            }
            State::Quoted(q) => {
                if c == *q {
                    state = State::Code;
                } else if c == '\n' {
                    return Err(format!("has an unterminated {q}literal{q}"));
                }
            }
            State::Raw(end) => {
                if chars[i..]
                    .iter()
                    .take(end.chars().count())
                    .copied()
                    .eq(end.chars())
                {
                    i += end.chars().count();
                    state = State::Code;
                    continue;
                }
            }
            State::Code => {
                if c == '\n' {
                    in_directive = false;
                    line_start = true;
                    i += 1;
                    continue;
                }
                if c == '#' && line_start {
                    let word: String = chars[i + 1..]
                        .iter()
                        .skip_while(|c| **c == ' ' || **c == '\t')
                        .take_while(|c| c.is_ascii_alphanumeric() || **c == '_')
                        .collect();
                    match word.as_str() {
                        "if" | "ifdef" | "ifndef" => conditionals += 1,
                        "endif" if conditionals == 0 => {
                            return Err("has an `#endif` with no `#if`".into());
                        }
                        "endif" => conditionals -= 1,
                        _ => {}
                    }
                    in_directive = true;
                }
                if !c.is_whitespace() {
                    line_start = false;
                }
                match (c, next) {
                    ('/', Some('/')) => {
                        state = State::LineComment;
                        i += 1;
                    }
                    ('/', Some('*')) => {
                        state = State::BlockComment;
                        i += 1;
                    }
                    ('R', Some('"')) if !preceded_by_word(&chars, i) => {
                        let delim: String =
                            chars[i + 2..].iter().take_while(|c| **c != '(').collect();
                        state = State::Raw(format!("){delim}\""));
                        i += 2 + delim.chars().count();
                    }
                    ('"', _) => state = State::Quoted('"'),
                    // A digit separator (`1'000`) is not a character literal.
                    ('\'', _) if !preceded_by_digit(&chars, i) => state = State::Quoted('\''),
                    ('(' | '[' | '{', _) if !in_directive => brackets.push(c),
                    (')' | ']' | '}', _) if !in_directive => {
                        let open = match c {
                            ')' => '(',
                            ']' => '[',
                            _ => '{',
                        };
                        if brackets.pop() != Some(open) {
                            return Err(format!("has a `{c}` that closes nothing it opened"));
                        }
                    }
                    _ => {}
                }
            }
        }
        i += 1;
    }
    match state {
        State::BlockComment => return Err("has an unterminated `/*` comment".into()),
        State::Raw(_) => return Err("has an unterminated raw string".into()),
        State::Quoted(q) => return Err(format!("has an unterminated {q}literal{q}")),
        State::Code | State::LineComment => {}
    }
    // kart ends the prelude with a line break: a last line ending in `\` would join
    // the generator's next line to it.
    let last = text.strip_suffix('\n').unwrap_or(text);
    let last = last.strip_suffix('\r').unwrap_or(last);
    if last.trim_end_matches([' ', '\t']).ends_with('\\') {
        return Err("ends with a `\\` that continues its last line".into());
    }
    if conditionals > 0 {
        return Err(format!("leaves {conditionals} `#if` without its `#endif`"));
    }
    if let Some(open) = brackets.last() {
        return Err(format!("leaves a `{open}` open"));
    }
    Ok(())
}

fn preceded_by_word(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

fn preceded_by_digit(chars: &[char], i: usize) -> bool {
    i > 0
        && chars[i - 1].is_ascii_hexdigit()
        && chars.get(i + 1).is_some_and(char::is_ascii_hexdigit)
}

#[cfg(test)]
mod tests {
    use super::check_complete;

    #[test]
    fn a_complete_prelude_passes() {
        for ok in [
            "using namespace lib;",
            "using namespace lib;\n",
            "#include <cstdint>\nnamespace a { using T = float; }\n",
            "// a comment\n/* a block */ using U = int; // \"quoted\" /*\n",
            "#if 1\n#define OPEN namespace x {\n#endif\n",
            "constexpr int k = 1'000;\nconstexpr char c = '}';\nconst char *s = \"/*\";\n",
            "const char *r = R\"x(/* ) {)x\";\n",
            "#define LONG(a) \\\n  (a)\nusing V = int;\n",
        ] {
            assert_eq!(check_complete(ok), Ok(()), "{ok:?}");
        }
    }

    #[test]
    fn a_prelude_that_would_swallow_the_next_lines_is_refused() {
        for (bad, why) in [
            ("using namespace lib; /* open", "unterminated `/*` comment"),
            ("// ends continued \\\n", "continues its last line"),
            ("using T = int; \\", "continues its last line"),
            ("#if 0\nusing T = int;\n", "`#if` without its `#endif`"),
            ("#endif\n", "`#endif` with no `#if`"),
            ("namespace lib {\n", "leaves a `{` open"),
            ("}\n", "closes nothing"),
            ("const char *r = R\"x(open", "unterminated raw string"),
            ("const char *s = \"open\n;", "unterminated \"literal\""),
        ] {
            let err = check_complete(bad).unwrap_err();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
    }
}
