//! A fast reader for the layout `kart build` writes kart.lock in.
//!
//! A general TOML parse of a lock of 100,000 artifacts (about 50 MB) takes seconds and
//! allocates a document tree before serde sees a field. The lock kart writes uses a
//! small part of TOML: `[[artifact]]`, `[artifact.NAME]` and `[[artifact.NAME]]`
//! headers, one `key = value` per line with a bare key, and values that are plain
//! strings (no escapes), decimal integers, booleans or one-line arrays of those. This
//! module rewrites exactly that subset into JSON, line by line, and lets serde_json
//! build the same `Lockfile` through the same `Deserialize` implementations (so every
//! field check and every refusal of unknown fields is the one the TOML path applies).
//!
//! Anything outside the subset, and anything serde_json refuses, returns `None`: the
//! caller then parses with the TOML parser, whose answers and error messages (with line
//! and column) are the only ones a user sees. The `[[kernel]]` tables that follow the
//! artifacts are few and go to the TOML parser as they are.

use serde::de::DeserializeOwned;

/// `text` read as `T`, when it is in the layout kart writes and serde accepts it; `None`
/// otherwise (parse it with TOML then). The caller splits off what this layout does not
/// cover (kart.lock's `[[kernel]]` tables).
pub fn parse<T: DeserializeOwned>(text: &str) -> Option<T> {
    serde_json::from_str(&to_json(text, &mut None)?).ok()
}

/// `text` read as `H` (its top-level keys, with `artifact` an empty array) and its
/// `[[artifact]]` records as `R`, each record deserialized as soon as it is read: the
/// JSON of one record at a time is held, never the whole text's. `None` as for
/// [`parse`].
pub fn parse_records<H: DeserializeOwned, R: DeserializeOwned>(text: &str) -> Option<(H, Vec<R>)> {
    let mut records = Vec::new();
    let mut sink = |json: &str| {
        records.push(serde_json::from_str::<R>(json).ok()?);
        Some(())
    };
    let head = to_json(text, &mut Some(&mut sink))?;
    Some((serde_json::from_str(&head).ok()?, records))
}

/// What receives each record's JSON as it closes; `None` keeps the records in the text.
type RecordSink<'a> = Option<&'a mut dyn FnMut(&str) -> Option<()>>;

/// Hands the record that starts at `start` of `out` to `sink` and removes it from `out`
/// (nothing without a sink).
fn emit(out: &mut String, start: usize, sink: &mut RecordSink<'_>) -> Option<()> {
    if let Some(sink) = sink {
        sink(&out[start..])?;
        out.truncate(start);
    }
    Some(())
}

/// Where a line's key goes.
#[derive(PartialEq, Eq)]
enum Table {
    Top,
    Artifact,
    /// `[artifact.NAME]`.
    Sub,
    /// `[[artifact.NAME]]`.
    SubArray,
}

/// The JSON text of the subset, or `None` at the first line outside it. With a sink,
/// each `[[artifact]]` record goes to it as one JSON object when it closes, and the text
/// returned has `"artifact":[]`.
fn to_json(text: &str, sink: &mut RecordSink<'_>) -> Option<String> {
    let mut out = String::with_capacity(if sink.is_some() {
        4096
    } else {
        text.len() + text.len() / 4
    });
    // Where the open record's JSON starts in `out`.
    let mut record = 0;
    out.push('{');
    let mut table = Table::Top;
    // The current table's keys (duplicates are a TOML error, so they leave the subset).
    let mut keys: Vec<&str> = Vec::new();
    // The names of the current artifact's sub-tables and arrays, in order.
    let mut subs: Vec<&str> = Vec::new();
    let mut first_in_table = true;
    let mut artifacts_open = false;
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with('[') {
            keys.clear();
            // Another table of the array just written: only its last table closes.
            if let Some(name) = header(line, "[[artifact.", "]]")
                && table == Table::SubArray
                && subs.last() == Some(&name)
            {
                out.push_str("},{");
                first_in_table = true;
                continue;
            }
            close_sub(&mut out, &table);
            first_in_table = true;
            if line == "[[artifact]]" {
                if table == Table::Top {
                    if artifacts_open {
                        return None;
                    }
                    out.push_str(if out.len() > 1 {
                        ",\"artifact\":["
                    } else {
                        "\"artifact\":["
                    });
                    artifacts_open = true;
                } else {
                    out.push('}');
                    emit(&mut out, record, sink)?;
                    if sink.is_none() {
                        out.push(',');
                    }
                }
                record = out.len();
                out.push('{');
                subs.clear();
                table = Table::Artifact;
            } else if let Some(name) = header(line, "[[artifact.", "]]") {
                if table == Table::Top {
                    return None;
                }
                if subs.contains(&name) {
                    return None;
                }
                subs.push(name);
                push_sep(&mut out);
                out.push('"');
                out.push_str(name);
                out.push_str("\":[{");
                table = Table::SubArray;
            } else if let Some(name) = header(line, "[artifact.", "]") {
                if table == Table::Top || subs.contains(&name) {
                    return None;
                }
                subs.push(name);
                push_sep(&mut out);
                out.push('"');
                out.push_str(name);
                out.push_str("\":{");
                table = Table::Sub;
            } else {
                return None;
            }
            continue;
        }
        // The first `=` must be the one of ` = `: a key with `=` in it is not bare.
        let eq = line.bytes().position(|b| b == b'=')?;
        let (key, value) = (line.get(..eq)?, line.get(eq + 1..)?);
        let (key, value) = (key.strip_suffix(' ')?, value.strip_prefix(' ')?);
        if !is_bare_key(key) || keys.contains(&key) {
            return None;
        }
        keys.push(key);
        if !first_in_table || (table == Table::Top && out.len() > 1) {
            out.push(',');
        }
        first_in_table = false;
        out.push('"');
        out.push_str(key);
        out.push_str("\":");
        push_value(&mut out, value)?;
    }
    close_sub(&mut out, &table);
    if table != Table::Top {
        out.push('}');
        emit(&mut out, record, sink)?;
        out.push(']');
    }
    out.push('}');
    Some(out)
}

/// Closes a `[artifact.NAME]` or `[[artifact.NAME]]` table.
fn close_sub(out: &mut String, table: &Table) {
    match table {
        Table::Sub => out.push('}'),
        Table::SubArray => out.push_str("}]"),
        Table::Top | Table::Artifact => {}
    }
}

/// A comma unless the artifact object was just opened.
fn push_sep(out: &mut String) {
    if !out.ends_with('{') {
        out.push(',');
    }
}

fn header<'a>(line: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let name = line.strip_prefix(open)?.strip_suffix(close)?;
    is_bare_key(name).then_some(name)
}

fn is_bare_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// One value: a string without escapes, a decimal integer, a boolean, or a one-line
/// array of those.
fn push_value(out: &mut String, value: &str) -> Option<()> {
    if let Some(inner) = value.strip_prefix('[') {
        let inner = inner.strip_suffix(']')?;
        out.push('[');
        let inner = inner.trim();
        if !inner.is_empty() {
            for (i, item) in split_items(inner)?.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_scalar(out, item.trim())?;
            }
        }
        out.push(']');
        return Some(());
    }
    push_scalar(out, value)
}

/// The items of a one-line array, split at the commas outside strings.
fn split_items(inner: &str) -> Option<Vec<&str>> {
    let mut items = Vec::new();
    let mut start = 0;
    let mut in_string = false;
    for (i, b) in inner.bytes().enumerate() {
        match b {
            b'"' => in_string = !in_string,
            b',' if !in_string => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            b'[' | b']' | b'{' | b'}' | b'\\' if !in_string => return None,
            _ => {}
        }
    }
    if in_string {
        return None;
    }
    items.push(&inner[start..]);
    Some(items)
}

fn push_scalar(out: &mut String, value: &str) -> Option<()> {
    if let Some(body) = value.strip_prefix('"') {
        let body = body.strip_suffix('"')?;
        // No escapes, quotes or control characters: then the TOML string is also a JSON
        // string, byte for byte.
        if body
            .bytes()
            .any(|b| b == b'"' || b == b'\\' || b < 0x20 || b == 0x7f)
        {
            return None;
        }
        out.push('"');
        out.push_str(body);
        out.push('"');
        return Some(());
    }
    if value == "true" || value == "false" {
        out.push_str(value);
        return Some(());
    }
    // A decimal integer as kart writes one (at most 18 digits: every such number is an
    // i64 to TOML and to serde_json alike).
    super::lock_lines::integer(value)?;
    out.push_str(value);
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_and_arrays_of_tables_become_json() {
        let text = "version = 3\n\n[[artifact]]\nkernel = \"a\"\nsizes = [1, -2]\n\n[artifact.config]\nA = 1\nT = \"lib::Mode::B\"\n\n[[artifact.entries]]\nname = \"x\"\n\n[[artifact.entries]]\nname = \"y\"\nok = true\n\n[artifact.derived]\nS = 0\n\n[[artifact]]\nkernel = \"b\"\n";
        let json: serde_json::Value =
            serde_json::from_str(&to_json(text, &mut None).unwrap()).unwrap();
        let want = serde_json::json!({
            "version": 3,
            "artifact": [
                {
                    "kernel": "a",
                    "sizes": [1, -2],
                    "config": {"A": 1, "T": "lib::Mode::B"},
                    "entries": [{"name": "x"}, {"name": "y", "ok": true}],
                    "derived": {"S": 0},
                },
                {"kernel": "b"},
            ],
        });
        assert_eq!(json, want);
        let parsed: serde_json::Value = parse(text).unwrap();
        assert_eq!(parsed, want);
    }

    #[test]
    fn records_read_one_at_a_time_are_the_records_of_the_whole_text() {
        #[derive(serde::Deserialize, Debug, PartialEq)]
        struct Head {
            version: u32,
            #[serde(default)]
            artifact: Vec<serde_json::Value>,
        }
        let text = "version = 3\n\n[[artifact]]\nkernel = \"a\"\n\n[artifact.config]\nA = 1\n\n[[artifact.entries]]\nname = \"x\"\n\n[[artifact.entries]]\nname = \"y\"\n\n[[artifact]]\nkernel = \"b\"\n\n[[artifact]]\nkernel = \"c\"\n[artifact.derived]\nS = 0\n";
        let whole: Head = parse(text).unwrap();
        let (head, records): (Head, Vec<serde_json::Value>) = parse_records(text).unwrap();
        assert_eq!(head.version, 3);
        assert!(head.artifact.is_empty());
        assert_eq!(records.len(), 3);
        assert_eq!(records, whole.artifact);
        // No record, and a record outside the subset.
        let (head, none): (Head, Vec<serde_json::Value>) = parse_records("version = 3\n").unwrap();
        assert_eq!((head.version, none.len()), (3, 0));
        assert!(
            parse_records::<Head, serde_json::Value>(&text.replace("A = 1", "A = 1.5")).is_none()
        );
        // A record its type refuses makes the whole read `None`.
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Kernel {
            kernel: String,
        }
        assert!(parse_records::<Head, Kernel>(text).is_none());
        let plain = "version = 3\n[[artifact]]\nkernel = \"a\"\n[[artifact]]\nkernel = \"b\"\n";
        let (_, kernels): (Head, Vec<Kernel>) = parse_records(plain).unwrap();
        assert_eq!(kernels.len(), 2);
    }

    #[test]
    fn a_key_is_split_at_its_first_equals_sign() {
        for (line, ok) in [
            ("a = 1", true),
            ("a=1", false),
            ("a =1", false),
            ("a  = 1", false),
            ("a = = 1", false),
            ("a=b = 1", false),
            ("a = \"x = y\"", true),
        ] {
            let text = format!("version = 3\n[[artifact]]\n{line}\n");
            assert_eq!(to_json(&text, &mut None).is_some(), ok, "{line}");
        }
    }

    #[test]
    fn a_value_toml_reads_differently_is_never_read_here() {
        // Strings and integers that JSON would read but TOML rejects, or reads otherwise.
        for bad in [
            "\"a\tb\"",
            "007",
            "18446744073709551615",
            "-",
            "+1",
            "1.5",
            "inf",
            "'raw'",
            "\"\"\"x\"\"\"",
        ] {
            let mut out = String::new();
            assert_eq!(push_scalar(&mut out, bad), None, "{bad}");
        }
    }
}
