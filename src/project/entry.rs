//! Entries as kernel authors write them: an `extern "C"` symbol (`vadd`) or a C++ name
//! expression over params (`gemm<BLOCK_M, BLOCK_N, float>`).
//!
//! A template entry is instantiated per config by a generated translation unit that
//! includes the kernel's source and takes the address of each instantiation in host
//! code (which makes the compiler emit exactly those specializations, the way NVRTC's
//! name expressions do). Its mangled symbol is then found in the cubin by demangling
//! every entry function and matching the readable name and template arguments.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use crate::untrusted::is_qualified_name;

/// One entry of a kernel, as written in `entry = [...]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntrySpec {
    /// An `extern "C"` symbol: its name is its symbol.
    Symbol(String),
    /// A template instantiation.
    Template(TemplateEntry),
}

/// `ns::gemm<BLOCK_M, 2 * BLOCK_N, float>`: a (qualified) name and its template arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplateEntry {
    /// The expression as written.
    pub written: String,
    /// The name before `<` (`ns::gemm`): what callers use to find the entry.
    pub name: String,
    /// Each template argument's text, trimmed.
    pub args: Vec<String>,
}

impl EntrySpec {
    /// Parses one `entry` string; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<EntrySpec, String> {
        let text = one_line(text.trim());
        let text = text.as_ref();
        // `vadd` (`extern "C"`, or a plain C++ kernel) or `lib::scale` (a plain C++
        // kernel in a namespace): found in the image by its name, demangled if need be.
        if !text.contains('<') {
            let name = text.strip_prefix("::").unwrap_or(text);
            if is_qualified_name(name) {
                return Ok(EntrySpec::Symbol(name.to_string()));
            }
        }
        let Some(open) = text.find('<') else {
            return Err(format!(
                "entry `{text}` is neither a kernel's name (`vadd`, `lib::scale`) nor a template instantiation like `gemm<BLOCK_M, BLOCK_N>`"
            ));
        };
        // A leading `::` (the global namespace) is C++'s, not part of the name callers use.
        let name = text[..open].trim();
        let name = name.strip_prefix("::").unwrap_or(name).trim_start();
        if !is_qualified_name(name) {
            return Err(format!(
                "entry `{text}`: `{name}` is not a function name (letters, digits, `_`, and `::` between names)"
            ));
        }
        // What the lock and action entries hold of a template (and check when they are
        // read) is checked here, so nothing kart compiles is refused when recorded.
        kart_runtime::untrusted::expression("entry", text)?;
        if !text.ends_with('>') {
            return Err(format!(
                "entry `{text}` must end with the `>` that closes its template arguments"
            ));
        }
        let inner = &text[open + 1..text.len() - 1];
        let args = split_top_level(inner).map_err(|why| format!("entry `{text}`: {why}"))?;
        if args.iter().any(|a| a.is_empty()) {
            return Err(format!("entry `{text}` has an empty template argument"));
        }
        Ok(EntrySpec::Template(TemplateEntry {
            written: text.to_string(),
            name: name.to_string(),
            args,
        }))
    }

    /// The name callers use: the symbol, or the template's name.
    pub fn name(&self) -> &str {
        match self {
            EntrySpec::Symbol(s) => s,
            EntrySpec::Template(t) => &t.name,
        }
    }
}

impl TemplateEntry {
    /// The identifiers of the arguments that are in `names` (the params and derived
    /// params the expression uses).
    pub fn uses<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> BTreeSet<String> {
        let names: BTreeSet<&str> = names.into_iter().collect();
        let mut used = BTreeSet::new();
        for arg in &self.args {
            for ident in identifiers(arg) {
                if names.contains(ident) {
                    used.insert(ident.to_string());
                }
            }
        }
        used
    }

    /// The expression with every param replaced by its value: `gemm<128, 64, float>`.
    pub fn instance(&self, values: &BTreeMap<String, String>) -> String {
        let args: Vec<String> = self.args.iter().map(|a| substitute(a, values)).collect();
        format!("{}<{}>", self.name, args.join(", "))
    }
}

/// Words after which a name is being declared (`constexpr uint W = …`, `int W;`).
const DECLARING_WORDS: &[&str] = &[
    "auto",
    "bool",
    "char",
    "const",
    "constexpr",
    "define",
    "double",
    "float",
    "int",
    "int32_t",
    "int64_t",
    "long",
    "short",
    "signed",
    "size_t",
    "uint",
    "uint32_t",
    "uint64_t",
    "unsigned",
];

/// Which of `names` the C++ `source` declares itself: `#define NAME`, a declaration
/// after a type word (`constexpr uint NAME = …`, `int NAME;`), or an assignment
/// `NAME = …`. A source that uses NAME as a macro can do none of these (after `-D`
/// they would read `int 2` or `2 = …`), so such a name is the source's own and must
/// not be passed as `-DNAME=…`. Comments and string literals are skipped.
pub fn declared_names(source: &str, names: &[&str]) -> BTreeSet<String> {
    let code = strip_comments_and_strings(source);
    let mut found = BTreeSet::new();
    let mut previous: Option<&str> = None;
    let mut last_end = 0;
    for (start, word) in words(&code) {
        // Only blanks (and a `#`) between two words keep the first as the one before.
        let between = &code[last_end..start];
        if !between.chars().all(|c| c.is_ascii_whitespace() || c == '#') {
            previous = None;
        }
        if names.contains(&word) {
            let rest = code[start + word.len()..].trim_start();
            let assigned = rest.starts_with('=') && !rest.starts_with("==");
            let declared = previous.is_some_and(|p| DECLARING_WORDS.contains(&p));
            if assigned || declared {
                found.insert(word.to_string());
            }
        }
        previous = Some(word);
        last_end = start + word.len();
    }
    found
}

/// Which of `names` the C++ `source` mentions at all (comments and string literals
/// aside): a param that no source mentions reaches nothing as a macro.
pub fn mentioned_names(source: &str, names: &[&str]) -> BTreeSet<String> {
    let code = strip_comments_and_strings(source);
    words(&code)
        .filter(|(_, w)| names.contains(w))
        .map(|(_, w)| w.to_string())
        .collect()
}

/// Each identifier of `text` with its byte offset (numbers with suffixes, `128u`, are
/// not identifiers).
fn words(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let bytes = text.as_bytes();
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < bytes.len() {
            let c = bytes[i];
            let start = i;
            if c.is_ascii_alphanumeric() || c == b'_' {
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                if !c.is_ascii_digit() {
                    return Some((start, &text[start..i]));
                }
            } else {
                i += 1;
            }
        }
        None
    })
}

/// `source` with comments and the insides of string and character literals blanked
/// out (lengths kept).
fn strip_comments_and_strings(source: &str) -> String {
    let bytes = source.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1)) {
            (b'/', Some(b'/')) => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    out.push(b' ');
                    i += 1;
                }
            }
            (b'/', Some(b'*')) => {
                out.extend_from_slice(b"  ");
                i += 2;
                while i < bytes.len() && !(bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/')) {
                    out.push(if bytes[i] == b'\n' { b'\n' } else { b' ' });
                    i += 1;
                }
                out.extend_from_slice(b"  ");
                i += 2;
            }
            (q @ (b'"' | b'\''), _) => {
                out.push(b' ');
                i += 1;
                while i < bytes.len() && bytes[i] != q && bytes[i] != b'\n' {
                    if bytes[i] == b'\\' {
                        out.push(b' ');
                        i += 1;
                    }
                    out.push(b' ');
                    i += 1;
                }
                out.push(b' ');
                i += 1;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out.truncate(bytes.len());
    String::from_utf8_lossy(&out).into_owned()
}

/// The generated translation unit: the kernel source (its file name, found through the
/// `-I` of its folder, so line markers name it by its project-relative path), then one
/// host-side reference per template instance so that the compiler instantiates each for
/// the device. A kernel's `prelude` (checked to close every comment, literal and
/// `#if` it opens) goes between the two, as written.
pub fn translation_unit(source: &Path, prelude: Option<&str>, instances: &[String]) -> String {
    let mut tu =
        String::from("// Generated by kart: instantiates the template entries of one config.\n");
    let _ = writeln!(tu, "#include \"{}\"", escape_include(source));
    if let Some(prelude) = prelude {
        tu.push_str(prelude);
        if !prelude.ends_with('\n') {
            tu.push('\n');
        }
    }
    for (i, inst) in instances.iter().enumerate() {
        let _ = writeln!(
            tu,
            "[[maybe_unused]] static void *const kart_instance_{i} = reinterpret_cast<void *>(&{inst});"
        );
    }
    tu
}

/// A function template instance's name and canonical arguments.
type Demangled = (String, Vec<String>);

/// Finds each instance's mangled symbol among the cubin's functions. Candidates are the
/// functions whose demangled name is the instance's template; when a template has several
/// instances, the arguments decide, compared in a canonical form: integer expressions
/// folded to their value, and the demangler's casts and suffixes dropped (nvcc names
/// `gemm<4096u>` as `gemm<(unsigned int)4096>`), without spaces.
///
/// `batch` holds the instances of every config compiled in the same front-end pass
/// (this one's among them; just this one's for a compile alone). An argument that is
/// the same text in every config of the batch cannot tell instances apart, so only the
/// arguments that differ must match: an enumerator written `lib::Mode::B` that the
/// demangler prints as `(lib::Mode)1` is found that way, with no compile alone. (Batches
/// never mix configs whose qualified-name arguments differ: see [`qualified_values`].)
pub fn find_symbols(
    instances: &[(&TemplateEntry, String)],
    batch: &[Vec<(&TemplateEntry, String)>],
    functions: &[String],
) -> Result<Vec<String>, String> {
    let demangled: Vec<(String, Option<Demangled>)> = functions
        .iter()
        .map(|f| {
            let parts = demangle_name(f).map(|(base, args)| {
                let args = split_top_level(&args)
                    .unwrap_or_else(|_| vec![args])
                    .iter()
                    .map(|a| canonical_arg(a))
                    .collect();
                (base, args)
            });
            (f.clone(), parts)
        })
        .collect();
    let mut found = Vec::new();
    for (index, (entry, instance)) in instances.iter().enumerate() {
        // The name as written; else, for an entry written unqualified (a `prelude` or
        // the source says `using namespace lib;`), the functions of that name in a
        // namespace: the symbol is mangled with the qualified name.
        let named = |qualified: bool| -> Vec<&(String, Option<Demangled>)> {
            demangled
                .iter()
                .filter(|(_, d)| {
                    d.as_ref().is_some_and(|(base, _)| {
                        *base == entry.name
                            || qualified
                                && base
                                    .strip_suffix(entry.name.as_str())
                                    .is_some_and(|ns| ns.ends_with("::"))
                    })
                })
                .collect()
        };
        let mut candidates = named(false);
        if candidates.is_empty() {
            candidates = named(true);
        }
        let same_template = instances
            .iter()
            .filter(|(e, _)| e.name == entry.name)
            .count();
        let want = canonical_args(instance);
        // The positions whose written argument differs between configs of the batch.
        let varying: Vec<usize> = (0..want.len())
            .filter(|&i| {
                batch.iter().any(|other| {
                    other
                        .get(index)
                        .is_some_and(|(_, o)| canonical_args(o).get(i) != want.get(i))
                })
            })
            .collect();
        let args_of = |c: &&(String, Option<Demangled>)| {
            c.1.as_ref()
                .map(|(_, args)| args.clone())
                .unwrap_or_default()
        };
        let exact: Vec<_> = candidates.iter().filter(|c| args_of(c) == want).collect();
        let by_varying: Vec<_> = candidates
            .iter()
            .filter(|c| {
                let args = args_of(c);
                args.len() == want.len() && varying.iter().all(|&i| args[i] == want[i])
            })
            .collect();
        let symbol = match (
            exact.as_slice(),
            by_varying.as_slice(),
            candidates.as_slice(),
        ) {
            ([one], _, _) => one.0.clone(),
            (_, [one], _) => one.0.clone(),
            (_, _, [one]) if same_template == 1 => one.0.clone(),
            _ => {
                let readable: Vec<String> = demangled
                    .iter()
                    .map(|(f, d)| match d {
                        Some((base, args)) => format!("{base}<{}>", args.join(", ")),
                        None => f.clone(),
                    })
                    .collect();
                return Err(format!(
                    "cannot find `{instance}` (entry `{}`) in the cubin; it defines: {}",
                    entry.written,
                    if readable.is_empty() {
                        "nothing".to_string()
                    } else {
                        readable.join(", ")
                    }
                ));
            }
        };
        found.push(symbol);
    }
    Ok(found)
}

/// The symbol of a non-template entry among the image's `functions`: the name itself
/// for an `extern "C"` kernel, else the function whose demangled name is `name` (a plain
/// C++ kernel, `lib::scale`, whose symbol is mangled). Of several overloads, the one
/// `fits` accepts (its parameters match the entry's `[signature]`) when exactly one does.
pub fn plain_symbol(
    name: &str,
    functions: &[String],
    fits: &dyn Fn(&str) -> bool,
) -> Result<String, String> {
    if functions.iter().any(|f| f == name) {
        return Ok(name.to_string());
    }
    let named: Vec<&String> = functions
        .iter()
        .filter(|f| {
            readable(f)
                .split_once('(')
                .is_some_and(|(base, _)| base == name)
        })
        .collect();
    let fitting: Vec<&String> = named.iter().copied().filter(|f| fits(f)).collect();
    match (named.as_slice(), fitting.as_slice()) {
        ([one], _) | (_, [one]) => Ok(one.to_string()),
        ([], _) => Err(format!(
            "missing entry symbol `{name}`: no kernel of that name, `extern \"C\"` or C++ (the image defines: {})",
            if functions.is_empty() {
                "nothing".to_string()
            } else {
                functions
                    .iter()
                    .map(|f| readable(f))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        )),
        _ => Err(format!(
            "`{name}` has {} overloads in the image ({}); declare the entry's `[signature]` in kernel.toml so that exactly one matches",
            named.len(),
            named
                .iter()
                .map(|f| readable(f))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// The values of the params a template entry of `kernel` passes as qualified names
/// (`lib::Mode::B`): the demangler prints an enumerator as a number, which cannot be
/// matched to its name, so configs that differ in one compile in separate batches.
pub fn qualified_values(
    templates: &[&TemplateEntry],
    values: &BTreeMap<String, String>,
) -> Vec<String> {
    let used: BTreeSet<String> = templates
        .iter()
        .flat_map(|t| t.uses(values.keys().map(String::as_str)))
        .collect();
    used.iter()
        .filter_map(|name| {
            values
                .get(name)
                .filter(|v| v.contains("::"))
                .map(|v| format!("{name}={v}"))
        })
        .collect()
}

/// The arguments of an instance as written (`gemm<64, 64 / 64, float>`), each folded and
/// canonical: `["64", "1", "float"]`.
fn canonical_args(instance: &str) -> Vec<String> {
    let folded = folded(instance);
    let Some(open) = folded.find('<') else {
        return Vec::new();
    };
    let inner = folded[open + 1..]
        .strip_suffix('>')
        .unwrap_or(&folded[open + 1..]);
    split_top_level(inner)
        .unwrap_or_else(|_| vec![inner.to_string()])
        .iter()
        .map(|a| canonical_arg(a))
        .collect()
}

/// One template argument without spaces, a leading cast (`(unsigned int)4096`,
/// `(lib::Mode)1`) and integer suffixes (`4096u`, `8ul`) dropped from integer literals.
fn canonical_arg(arg: &str) -> String {
    let arg = squash(arg);
    let mut rest = arg.as_str();
    if rest.starts_with('(')
        && let Some(close) = rest.find(')')
    {
        let after = &rest[close + 1..];
        if after
            .trim_start_matches('-')
            .starts_with(|c: char| c.is_ascii_digit())
        {
            rest = after;
        }
    }
    let digits = rest.trim_start_matches('-');
    if digits.starts_with(|c: char| c.is_ascii_digit()) {
        let number = rest.trim_end_matches(['u', 'U', 'l', 'L']);
        if number
            .trim_start_matches('-')
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            return number.to_string();
        }
    }
    rest.to_string()
}

/// A function's readable form for messages: `gemm<128, 64>(float*, int)` or the symbol.
pub fn readable(symbol: &str) -> String {
    cpp_demangle::Symbol::new(symbol)
        .ok()
        .and_then(|s| s.demangle().ok())
        .map(|d| d.strip_prefix("void ").map(str::to_string).unwrap_or(d))
        .unwrap_or_else(|| symbol.to_string())
}

/// (name, template arguments) of a mangled function template instance.
fn demangle_name(symbol: &str) -> Option<(String, String)> {
    let text = readable(symbol);
    if text == symbol {
        return None;
    }
    // `ns::gemm<128, 64, float>(float*, int)`: the name ends at the first `<` of the
    // outermost level; the arguments end at its matching `>`.
    let open = text.find('<')?;
    let mut depth = 0usize;
    for (i, c) in text.char_indices().skip(open) {
        match c {
            '<' => depth += 1,
            '>' => {
                depth -= 1;
                if depth == 0 {
                    return Some((text[..open].to_string(), text[open + 1..i].to_string()));
                }
            }
            _ => {}
        }
    }
    None
}

/// An instance with each template argument that is an integer expression replaced by
/// its value (`gemm<64, 64 / 64, float>` → `gemm<64, 1, float>`), as the demangler
/// prints it; other arguments as they are.
fn folded(instance: &str) -> String {
    let Some(open) = instance.find('<') else {
        return instance.to_string();
    };
    let inner = instance[open + 1..]
        .strip_suffix('>')
        .unwrap_or(&instance[open + 1..]);
    let Ok(args) = split_top_level(inner) else {
        return instance.to_string();
    };
    let no_names = std::collections::BTreeMap::<String, i64>::new();
    let args: Vec<String> = args
        .iter()
        .map(|a| {
            kart_runtime::expr::Expr::parse(a)
                .ok()
                .and_then(|e| e.evaluate(&no_names).ok())
                .map_or_else(|| a.clone(), |v| v.to_string())
        })
        .collect();
    format!("{}<{}>", &instance[..open], args.join(", "))
}

fn squash(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

/// An entry written over several lines (a TOML multi-line string) as one line: every
/// run of whitespace that holds a line break or tab becomes one space. A one-line entry
/// is returned as written, so the entries of existing locks keep their keys.
fn one_line(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains(['\n', '\r', '\t']) {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(text.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// Splits template arguments at the commas outside nested `<>`, `()` and `[]`.
fn split_top_level(inner: &str) -> Result<Vec<String>, String> {
    let mut args = Vec::new();
    let mut depth: Vec<char> = Vec::new();
    let mut current = String::new();
    for c in inner.chars() {
        // Inside parentheses or brackets, `<` and `>` compare.
        let in_parens = matches!(depth.last(), Some('(' | '['));
        match c {
            '<' | '>' if in_parens => {}
            '<' | '(' | '[' => depth.push(c),
            '>' | ')' | ']' => {
                let want = match c {
                    '>' => '<',
                    ')' => '(',
                    _ => '[',
                };
                if depth.pop() != Some(want) {
                    return Err(format!("unbalanced `{c}`"));
                }
            }
            ',' if depth.is_empty() => {
                args.push(current.trim().to_string());
                current.clear();
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    if let Some(open) = depth.last() {
        return Err(format!("unclosed `{open}`"));
    }
    args.push(current.trim().to_string());
    Ok(args)
}

/// The identifiers of a C++ expression, in order.
fn identifiers(text: &str) -> impl Iterator<Item = &str> {
    words(text).map(|(_, w)| w)
}

/// `text` with each identifier found in `values` replaced by its value.
fn substitute(text: &str, values: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_alphanumeric() || c == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let word = &text[start..i];
            let is_ident = !word.as_bytes()[0].is_ascii_digit();
            match values.get(word) {
                Some(v) if is_ident => out.push_str(v),
                _ => out.push_str(word),
            }
        } else {
            out.push(c as char);
            i += 1;
        }
    }
    out
}

fn escape_include(path: &Path) -> String {
    path.to_string_lossy()
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(text: &str) -> TemplateEntry {
        match EntrySpec::parse(text) {
            Ok(EntrySpec::Template(t)) => t,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn a_name_the_source_declares_is_its_own() {
        let source = r#"
// WMITER = 3 in a comment is not a declaration
#define MINE 4
constexpr uint WMITER = (WM * WN) / (WARPSIZE * TM * TN * WNITER);
template <int BM> __global__ void k(float* out) {
  const char* s = "THREADS = 1";
  out[threadIdx.x] = THREADS + WMITER + MINE + (USED == 2);
}
"#;
        let names = ["WMITER", "THREADS", "MINE", "USED", "BM"];
        let found: Vec<String> = declared_names(source, &names).into_iter().collect();
        assert_eq!(found, ["BM", "MINE", "WMITER"]);
    }

    #[test]
    fn parses_symbols_and_templates() {
        assert_eq!(
            EntrySpec::parse("vadd"),
            Ok(EntrySpec::Symbol("vadd".into()))
        );
        let t = template("ns::gemm<BM, BN * 2, cute::tuple<int, int>, (A > B)>");
        assert_eq!(t.name, "ns::gemm");
        assert_eq!(
            t.args,
            vec!["BM", "BN * 2", "cute::tuple<int, int>", "(A > B)"]
        );
        for bad in [
            "gemm<BM",
            "gemm<>",
            "gemm<BM,>",
            "1gemm<BM>",
            "gemm(BM)",
            "gemm<BM>x",
            "gemm<(BM>",
        ] {
            assert!(EntrySpec::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn substitutes_whole_identifiers_only() {
        let t = template("gemm<BM, BM_2, 2 * BM, 128u, T>");
        let values: BTreeMap<String, String> = [("BM", "64"), ("T", "float")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(t.instance(&values), "gemm<64, BM_2, 2 * 64, 128u, float>");
        assert_eq!(
            t.uses(["BM", "BN", "T"]),
            ["BM", "T"].iter().map(|s| s.to_string()).collect()
        );
    }

    #[test]
    fn matches_demangled_instances() {
        // From nvcc 13.0: gemm<128, 64*2, float, true> and ns::other<3>.
        let functions = vec![
            "_ZN2ns5otherILi3EEEvPf".to_string(),
            "_Z4gemmILi128ELi128EfLb1EEvPT1_PKS0_i".to_string(),
        ];
        let g = template("gemm<BM, BN*2, float, true>");
        let o = template("ns::other<X>");
        let one = vec![
            (&g, "gemm<128, 64*2, float, true>".to_string()),
            (&o, "ns::other<3>".to_string()),
        ];
        let found = find_symbols(&one, std::slice::from_ref(&one), &functions).unwrap();
        assert_eq!(found, vec![functions[1].clone(), functions[0].clone()]);
        assert_eq!(
            readable(&functions[1]),
            "gemm<128, 128, float, true>(float*, float const*, int)"
        );
        let wrong = vec![(&g, "gemm<1, 2>".to_string())];
        let missing =
            find_symbols(&wrong, std::slice::from_ref(&wrong), &functions[..1]).unwrap_err();
        assert!(missing.contains("ns::other<3>"), "{missing}");
    }

    #[test]
    fn a_batch_matches_instances_by_the_arguments_that_differ() {
        // nvcc 13.0's names of lib::gemm<lib::Mode::B, N, true> for N = 4096u and 8192u:
        // the enumerator demangles as `(lib::Mode)1`, the unsigned as `(unsigned int)4096`.
        let functions = vec![
            "_ZN3lib4gemmILNS_4ModeE1ELj8192ELb1EEEvPf".to_string(),
            "_ZN3lib4gemmILNS_4ModeE1ELj4096ELb1EEEvPf".to_string(),
        ];
        let g = template("lib::gemm<lib::Mode::B, N, true>");
        let a = vec![(&g, "lib::gemm<lib::Mode::B, 4096, true>".to_string())];
        let b = vec![(&g, "lib::gemm<lib::Mode::B, 8192, true>".to_string())];
        let batch = [a.clone(), b.clone()];
        assert_eq!(
            find_symbols(&a, &batch, &functions).unwrap(),
            [functions[1].clone()]
        );
        assert_eq!(
            find_symbols(&b, &batch, &functions).unwrap(),
            [functions[0].clone()]
        );
        assert_eq!(canonical_arg("(unsigned int)4096"), "4096");
        assert_eq!(canonical_arg("-3l"), "-3");
        assert_eq!(canonical_arg("(lib::Mode)1"), "1");
        assert_eq!(canonical_arg("cutlass::bfloat16_t"), "cutlass::bfloat16_t");
    }
}
