//! Checks for what kart reads from files it did not just write itself: `kart.lock`,
//! action entries (local or a remote's), `kart.tune`, `kart.attest`. Any of them may have
//! been edited by hand, merged badly or forged, and their strings end up in nvcc's
//! command line (which nvcc hands to `sh`), in generated Python and on a terminal. So
//! every name is held to the shape kart itself writes, and text shown to a person is
//! stripped of control characters first. Unicode's invisible format characters count
//! as control characters here: a right-to-left override or an isolate reorders what a
//! terminal or an editor shows, and a zero-width one hides a difference between names.

use std::borrow::Cow;

/// Longest free-text label kart accepts (a GPU's name, a host compiler's version).
const MAX_LABEL: usize = 256;
/// Longest symbol or template expression kart accepts.
const MAX_SYMBOL: usize = 4096;

/// True for `[A-Za-z_][A-Za-z0-9_]*`: kernel, param, derived-param and entry names.
pub fn is_c_identifier(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// `what` must be a C identifier.
pub fn identifier(what: &str, s: &str) -> Result<(), String> {
    if is_c_identifier(s) {
        Ok(())
    } else {
        Err(format!("{what} {} is not a C identifier", quoted(s)))
    }
}

/// True for a C identifier or identifiers joined by `::` (`lib::gemm`, a kernel in a
/// namespace; `lib::Mode::B`, an enumerator as a param's value). The one check of entry
/// names and of identifier values: the kernel.toml parser, action entries, the lock, the
/// runtime and the exported module all hold them to it, so a name kart compiled is a
/// name it can record.
pub fn is_qualified_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_SYMBOL && s.split("::").all(is_c_identifier)
}

/// `what` must be a qualified name (see [`is_qualified_name`]).
pub fn qualified_name(what: &str, s: &str) -> Result<(), String> {
    if is_qualified_name(s) {
        Ok(())
    } else {
        Err(format!(
            "{what} {} is not a function name (C identifiers, joined by `::` in a namespace)",
            quoted(s)
        ))
    }
}

/// A mangled (Itanium) symbol: letters, digits, `_`, `$` and `.`.
pub fn symbol(what: &str, s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= MAX_SYMBOL
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'$' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!("{what} {} is not a mangled symbol", quoted(s)))
    }
}

/// A template expression as kernel.toml writes it (`gemm<BM, 128, float>`): names,
/// numbers, operators, brackets, commas, colons and spaces; no quotes, backslashes or
/// control characters.
pub fn expression(what: &str, s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= MAX_SYMBOL
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b" _,<>()[]+-*/%:.&|!=~^?".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!("{what} {} is not a template expression", quoted(s)))
    }
}

/// A release number such as `13.0.88`.
pub fn release(what: &str, s: &str) -> Result<(), String> {
    let ok = !s.is_empty() && s.len() <= 32 && s.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(format!("{what} {} is not a release number", quoted(s)))
    }
}

/// Whether `c` must not reach a terminal as is: a control character (C0, DEL, C1), an
/// invisible format character (Unicode category Cf: bidirectional overrides, embeddings
/// and isolates, zero-width spaces and joiners, the byte order mark, tags) or a line or
/// paragraph separator.
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{ad}'
                | '\u{600}'..='\u{605}'
                | '\u{61c}'
                | '\u{6dd}'
                | '\u{70f}'
                | '\u{890}'..='\u{891}'
                | '\u{8e2}'
                | '\u{180e}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{206f}'
                | '\u{feff}'
                | '\u{fff9}'..='\u{fffb}'
                | '\u{110bd}'
                | '\u{110cd}'
                | '\u{13430}'..='\u{1343f}'
                | '\u{1bca0}'..='\u{1bca3}'
                | '\u{1d173}'..='\u{1d17a}'
                | '\u{e0001}'
                | '\u{e0020}'..='\u{e007f}'
        )
}

/// Free text shown to people (a GPU's name): printable, no control or format
/// characters, short.
pub fn label(what: &str, s: &str) -> Result<(), String> {
    if s.len() <= MAX_LABEL && !s.chars().any(is_unsafe) {
        Ok(())
    } else {
        Err(format!(
            "{what} {} has control characters or invisible format characters, or is over {MAX_LABEL} bytes",
            quoted(s)
        ))
    }
}

/// Text of several lines (a preimage's value, a compiler's output): no control or format
/// characters but newline and tab, at most `max` bytes.
pub fn multiline(what: &str, s: &str, max: usize) -> Result<(), String> {
    if s.len() <= max && !s.chars().any(|c| is_unsafe(c) && c != '\n' && c != '\t') {
        Ok(())
    } else {
        Err(format!(
            "{what} {} has control characters or invisible format characters, or is over {max} bytes",
            quoted(s)
        ))
    }
}

/// `s` quoted for a message: at most 80 characters, control and format characters
/// escaped.
pub fn quoted(s: &str) -> String {
    let mut out = String::from("`");
    for (i, c) in s.chars().enumerate() {
        if i == 80 {
            out.push('…');
            break;
        }
        if is_unsafe(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out.push('`');
    out
}

/// Text for a terminal: every control and format character except newline and tab
/// replaced by its escape (`\u{1b}`, `\u{202e}`), so replayed compiler output or a
/// hostile name cannot move the cursor, rewrite earlier lines, set the window title or
/// show its characters in another order than they are.
pub fn for_terminal(s: &str) -> Cow<'_, str> {
    let escaped = |c: char| is_unsafe(c) && c != '\n' && c != '\t';
    if !s.chars().any(escaped) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if escaped(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_held_to_kart_shapes() {
        assert!(identifier("kernel", "flash_attn").is_ok());
        assert!(identifier("kernel", "a\"\"\"b").is_err());
        assert!(identifier("param", "").is_err());
        assert!(symbol("symbol", "_Z9cute_gemmILi128EEv").is_ok());
        assert!(symbol("symbol", "x$(id)").is_err());
        assert!(expression("template", "gemm<BM, BN, 64 / 2>").is_ok());
        assert!(expression("template", "gemm<\"x\">").is_err());
        assert!(release("nvcc", "13.0.88").is_ok());
        assert!(release("nvcc", "13.0\n").is_err());
        assert!(label("gpu", "NVIDIA H200").is_ok());
        assert!(label("gpu", "H200\u{1b}]0;pwned\u{7}").is_err());
        // Reordering and invisible characters are refused like control characters.
        for hidden in [
            "\u{202e}", "\u{2066}", "\u{2069}", "\u{200b}", "\u{feff}", "\u{61c}",
        ] {
            assert!(
                label("gpu", &format!("H200{hidden}")).is_err(),
                "{hidden:?}"
            );
            assert!(multiline("value", &format!("a\n{hidden}b"), 100).is_err());
        }
        assert!(label("gpu", "NVIDIA GeForce RTX 4090 — café").is_ok());
        assert!(multiline("value", "a\n\tb", 100).is_ok());
    }

    #[test]
    fn terminal_text_has_no_escape_sequences() {
        assert_eq!(for_terminal("ok\n\tline"), "ok\n\tline");
        assert_eq!(for_terminal("a\u{1b}[2Jb\r"), "a\\u{1b}[2Jb\\r");
        assert_eq!(quoted("x\u{7}y"), "`x\\u{7}y`");
        assert_eq!(for_terminal("abc\u{202e}fed"), "abc\\u{202e}fed");
        assert_eq!(quoted("a\u{200b}b"), "`a\\u{200b}b`");
    }
}
