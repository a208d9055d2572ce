//! The lines kart writes for the artifacts of kart.lock, read one record at a time into
//! a record that borrows from the text and is reused from one record to the next: no
//! allocation per record once its buffers have grown.
//!
//! `scan` accepts only what kart writes. Every line it does not expect (a field kart
//! does not write, a value of another shape, a key twice, a value its field's type
//! refuses) makes it answer `None`, and the caller reads the text the general way, so
//! every answer and every error message is the one that path gives. The owned records
//! of [`Lockfile::parse`](crate::store::lockfile::Lockfile::parse) and the streaming
//! reader ([`lock_stream`](crate::store::lock_stream)) both read through it.

use serde::Serialize;

use crate::model::{ArtifactKind, ParamValue};
use crate::untrusted::{is_c_identifier, is_qualified_name};

/// A param's value as the lock writes it: an integer, or a name (unquoted here).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(untagged)]
pub enum ParamRef<'a> {
    /// `A = 128`
    Int(i64),
    /// `T = "lib::Mode::B"`
    Ident(&'a str),
}

impl ParamRef<'_> {
    /// The owned value.
    pub fn to_value(self) -> ParamValue {
        match self {
            ParamRef::Int(v) => ParamValue::Int(v),
            ParamRef::Ident(s) => ParamValue::Ident(s.to_string()),
        }
    }
}

impl PartialEq<ParamValue> for ParamRef<'_> {
    fn eq(&self, other: &ParamValue) -> bool {
        match (self, other) {
            (ParamRef::Int(a), ParamValue::Int(b)) => a == b,
            (ParamRef::Ident(a), ParamValue::Ident(b)) => *a == b.as_str(),
            _ => false,
        }
    }
}

/// One `[[artifact.entries]]` table, borrowed from the lock's text.
#[derive(Clone, Debug, Default)]
pub struct EntryRef<'a> {
    seen: u16,
    /// The entry's name.
    pub name: &'a str,
    /// The mangled symbol of a template entry.
    pub symbol: Option<&'a str>,
    /// A template entry's expression.
    pub template: Option<&'a str>,
    /// The expression with this config's values.
    pub instance: Option<&'a str>,
    /// Registers per thread.
    pub registers: u32,
    /// Static shared memory, bytes.
    pub shared_bytes: u64,
    /// Stack frame, bytes per thread.
    pub stack_bytes: u64,
    /// Bytes spilled (stores).
    pub spill_store_bytes: u64,
    /// Bytes reloaded.
    pub spill_load_bytes: u64,
    /// The `params` array as written (`[8, 4]`), checked to be one.
    pub(crate) params: Option<&'a str>,
    /// How many params, and the largest.
    pub(crate) params_len: usize,
    pub(crate) params_max: u32,
}

/// One `[[artifact]]` record, borrowed from the lock's text. Its config and derived
/// params are in the order of their lines.
#[derive(Clone, Debug)]
pub struct RecordRef<'a> {
    seen: u16,
    /// Kernel name.
    pub kernel: &'a str,
    /// Target, `sm_90a`.
    pub target: &'a str,
    /// cubin or PTX (cubin until its line is read).
    pub kind: ArtifactKind,
    /// The action key.
    pub key: &'a str,
    /// sha256 of the artifact's bytes.
    pub digest: &'a str,
    /// Its size in bytes.
    pub size: u64,
    /// The nvcc release that built it.
    pub nvcc: &'a str,
    config: Vec<(&'a str, ParamRef<'a>)>,
    /// Whether the config's names came in increasing order (each once).
    config_sorted: bool,
    entries: Vec<EntryRef<'a>>,
    derived: Vec<(&'a str, i64)>,
    derived_sorted: bool,
}

impl Default for RecordRef<'_> {
    fn default() -> Self {
        RecordRef {
            seen: 0,
            kernel: "",
            target: "",
            kind: ArtifactKind::Cubin,
            key: "",
            digest: "",
            size: 0,
            nvcc: "",
            config: Vec::new(),
            config_sorted: true,
            entries: Vec::new(),
            derived: Vec::new(),
            derived_sorted: true,
        }
    }
}

impl<'a> RecordRef<'a> {
    /// The config's params, in the order of their lines.
    pub fn config(&self) -> &[(&'a str, ParamRef<'a>)] {
        &self.config
    }

    /// The entries.
    pub fn entries(&self) -> &[EntryRef<'a>] {
        &self.entries
    }

    /// The derived params, in the order of their lines.
    pub fn derived(&self) -> &[(&'a str, i64)] {
        &self.derived
    }

    /// Whether the config's and the derived params' names came in increasing order,
    /// as kart writes them (what makes the slices above compare and print as maps).
    pub fn sorted(&self) -> bool {
        self.config_sorted && self.derived_sorted
    }

    /// The sort key and identity, as [`LockedArtifact::id`] orders it when
    /// [`RecordRef::sorted`] holds.
    ///
    /// [`LockedArtifact::id`]: crate::store::lockfile::LockedArtifact::id
    pub fn id(&self) -> (&'a str, &[(&'a str, ParamRef<'a>)], &'a str, ArtifactKind) {
        (self.kernel, &self.config, self.target, self.kind)
    }

    /// True when every (name, value) of `partial` is also in the config.
    pub fn matches(&self, partial: &std::collections::BTreeMap<String, ParamValue>) -> bool {
        partial
            .iter()
            .all(|(k, v)| self.config.iter().any(|(n, c)| n == k && c == v))
    }

    /// Empties the record for the next one, keeping its buffers.
    fn clear(&mut self) {
        self.seen = 0;
        self.config.clear();
        self.config_sorted = true;
        self.entries.clear();
        self.derived.clear();
        self.derived_sorted = true;
    }

    /// Whether every field a record must have was read.
    fn complete(&self) -> bool {
        self.seen & Seen::REQUIRED == Seen::REQUIRED
            && self
                .entries
                .iter()
                .all(|e| e.seen & EntryRef::REQUIRED == EntryRef::REQUIRED)
    }

    /// A `key = value` line of the record's own table.
    fn field(&mut self, key: &str, value: &'a str) -> Option<()> {
        let bit = match key {
            "kernel" => {
                self.kernel = string(value)?;
                Seen::KERNEL
            }
            "target" => {
                self.target = string(value)?;
                Seen::TARGET
            }
            "kind" => {
                self.kind = match string(value)? {
                    "cubin" => ArtifactKind::Cubin,
                    "ptx" => ArtifactKind::Ptx,
                    _ => return None,
                };
                Seen::KIND
            }
            "key" => {
                self.key = string(value)?;
                Seen::KEY
            }
            "digest" => {
                self.digest = string(value)?;
                Seen::DIGEST
            }
            "size" => {
                self.size = u64::try_from(integer(value)?).ok()?;
                Seen::SIZE
            }
            "nvcc" => {
                self.nvcc = string(value)?;
                Seen::NVCC
            }
            _ => return None,
        };
        // A table's fields come before its sub-tables: a field after them would be the
        // sub-table's in TOML.
        if self.seen & (Seen::CONFIG | Seen::ENTRIES | Seen::DERIVED) != 0 {
            return None;
        }
        once(&mut self.seen, bit)
    }

    /// A line of `[artifact.config]`.
    fn param(&mut self, key: &'a str, value: &'a str) -> Option<()> {
        if !is_c_identifier(key) {
            return None;
        }
        let value = match value.strip_prefix('"') {
            Some(_) => ParamRef::Ident(string(value).filter(|s| is_qualified_name(s))?),
            None => ParamRef::Int(integer(value)?),
        };
        push_once(&mut self.config, &mut self.config_sorted, key, value)
    }

    /// A line of `[artifact.derived]`.
    fn derived_param(&mut self, key: &'a str, value: &'a str) -> Option<()> {
        if !bare(key) {
            return None;
        }
        let value = integer(value)?;
        push_once(&mut self.derived, &mut self.derived_sorted, key, value)
    }
}

/// Appends `(key, value)`; `None` for a key already there. `sorted` stays true while
/// the keys come in increasing order.
fn push_once<'a, V>(
    pairs: &mut Vec<(&'a str, V)>,
    sorted: &mut bool,
    key: &'a str,
    value: V,
) -> Option<()> {
    match pairs.last() {
        Some((last, _)) if *last >= key => {
            if pairs.iter().any(|(k, _)| *k == key) {
                return None;
            }
            *sorted = false;
        }
        _ => {}
    }
    pairs.push((key, value));
    Some(())
}

/// Reads the artifact part of a lock (or a piece of it that starts at a record's
/// header), calling `each` with every record once it is complete, and returns the
/// `version` line's value if the text had one before its first record. `each` may swap
/// the record with another (it is cleared before the next is read into it); its `None`
/// ends the scan with `None`, as any line not kart's does.
pub(crate) fn scan<'a>(
    text: &'a str,
    mut each: impl FnMut(&mut RecordRef<'a>) -> Option<()>,
) -> Option<Option<u32>> {
    let mut version = None;
    let mut record = RecordRef::default();
    let mut open = false;
    let mut table = Table::Artifact;
    for line in lines(text) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with('[') {
            let r = &mut record;
            table = match line {
                "[[artifact]]" => {
                    if open {
                        r.complete().then_some(())?;
                        each(r)?;
                    }
                    r.clear();
                    open = true;
                    Table::Artifact
                }
                _ if !open => return None,
                "[artifact.config]" => {
                    once(&mut r.seen, Seen::CONFIG)?;
                    Table::Config
                }
                "[[artifact.entries]]" => {
                    // The entries are one array: no other table between its tables.
                    if r.seen & Seen::ENTRIES != 0 && table != Table::Entry {
                        return None;
                    }
                    r.seen |= Seen::ENTRIES;
                    r.entries.push(EntryRef::default());
                    Table::Entry
                }
                "[artifact.derived]" => {
                    once(&mut r.seen, Seen::DERIVED)?;
                    Table::Derived
                }
                _ => return None,
            };
            continue;
        }
        let (key, value) = split(line)?;
        if !open {
            // Before the first record: the version, once.
            if key != "version" || version.is_some() {
                return None;
            }
            version = Some(u32::try_from(integer(value)?).ok()?);
            continue;
        }
        match table {
            Table::Artifact => record.field(key, value)?,
            Table::Config => record.param(key, value)?,
            Table::Entry => record.entries.last_mut()?.field(key, value)?,
            Table::Derived => record.derived_param(key, value)?,
        }
    }
    if open {
        record.complete().then_some(())?;
        each(&mut record)?;
    }
    Some(version)
}

/// The lines of `text` as [`str::lines`] gives them (without `\n` or `\r\n`), found
/// with memchr's search: a call per line of `str::lines` costs more than the line's
/// reading.
fn lines(text: &str) -> impl Iterator<Item = &str> {
    let mut start = 0;
    let mut ends = memchr::memchr_iter(b'\n', text.as_bytes()).chain([text.len()]);
    std::iter::from_fn(move || {
        let end = ends.next()?;
        if end == text.len() && start == end {
            return None;
        }
        let line = &text[start..end];
        start = end + 1;
        // A `\r` at the very end, with no `\n` after it, stays (as `str::lines` keeps it).
        Some(match end < text.len() {
            true => line.strip_suffix('\r').unwrap_or(line),
            false => line,
        })
    })
}

/// Which table the lines belong to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Table {
    Artifact,
    Config,
    Entry,
    Derived,
}

/// Bits of what a record has had, each allowed once.
struct Seen;

impl Seen {
    const KERNEL: u16 = 1;
    const TARGET: u16 = 1 << 1;
    const KIND: u16 = 1 << 2;
    const KEY: u16 = 1 << 3;
    const DIGEST: u16 = 1 << 4;
    const SIZE: u16 = 1 << 5;
    const NVCC: u16 = 1 << 6;
    const CONFIG: u16 = 1 << 7;
    const ENTRIES: u16 = 1 << 8;
    const DERIVED: u16 = 1 << 9;
    /// The fields a record must have (`derived` may be absent).
    const REQUIRED: u16 = (1 << 9) - 1;
}

/// Marks `bit` seen; `None` the second time.
fn once(seen: &mut u16, bit: u16) -> Option<()> {
    if *seen & bit != 0 {
        return None;
    }
    *seen |= bit;
    Some(())
}

impl<'a> EntryRef<'a> {
    /// The fields an entry must have: name, registers, and the four byte counts.
    const REQUIRED: u16 = 0b11_1111;

    /// The params' sizes, as written.
    pub fn params(&self) -> impl Iterator<Item = u32> + use<'a> {
        // Checked when read: every item is a u32.
        self.params
            .and_then(integers)
            .into_iter()
            .flatten()
            .map(|p| p.unwrap_or_default())
    }

    fn field(&mut self, key: &str, value: &'a str) -> Option<()> {
        let count = || u64::try_from(integer(value)?).ok();
        let bit = match key {
            "name" => {
                self.name = string(value)?;
                1
            }
            "registers" => {
                self.registers = u32::try_from(integer(value)?).ok()?;
                1 << 1
            }
            "shared_bytes" => {
                self.shared_bytes = count()?;
                1 << 2
            }
            "stack_bytes" => {
                self.stack_bytes = count()?;
                1 << 3
            }
            "spill_store_bytes" => {
                self.spill_store_bytes = count()?;
                1 << 4
            }
            "spill_load_bytes" => {
                self.spill_load_bytes = count()?;
                1 << 5
            }
            "symbol" => {
                self.symbol = Some(string(value)?);
                1 << 6
            }
            "template" => {
                self.template = Some(string(value)?);
                1 << 7
            }
            "instance" => {
                self.instance = Some(string(value)?);
                1 << 8
            }
            "params" => {
                let (mut len, mut max) = (0, 0);
                for p in integers(value)? {
                    len += 1;
                    max = max.max(p?);
                }
                (self.params, self.params_len, self.params_max) = (Some(value), len, max);
                1 << 9
            }
            // `signature` and anything else: the general path.
            _ => return None,
        };
        once(&mut self.seen, bit)
    }
}

/// `key = value`, the key bare.
fn split(line: &str) -> Option<(&str, &str)> {
    let eq = line.bytes().position(|b| b == b'=')?;
    let key = line.get(..eq)?.strip_suffix(' ')?;
    let value = line.get(eq + 1..)?.strip_prefix(' ')?;
    bare(key).then_some((key, value))
}

fn bare(key: &str) -> bool {
    !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A basic string with nothing to unescape: no quote, backslash or control character
/// inside (what TOML and JSON read the same).
fn string(value: &str) -> Option<&str> {
    let body = value.strip_prefix('"')?.strip_suffix('"')?;
    (!body
        .bytes()
        .any(|b| b == b'"' || b == b'\\' || b < 0x20 || b == 0x7f))
    .then_some(body)
}

/// A decimal integer as kart writes one: an optional `-`, at most 18 digits, no leading
/// zero (every such number reads the same in TOML and JSON). `lock_canonical` holds
/// integers to the same rule.
pub(super) fn integer(value: &str) -> Option<i64> {
    let digits = value.strip_prefix('-').unwrap_or(value);
    let decimal = !digits.is_empty()
        && digits.len() <= 18
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    if !decimal {
        return None;
    }
    value.parse().ok()
}

/// The items of a one-line array of non-negative integers that fit `u32` (`[8, 8, 4]`),
/// each `None` where it is not one; `None` for anything but such an array.
fn integers(value: &str) -> Option<impl Iterator<Item = Option<u32>>> {
    let inner = value.strip_prefix('[')?.strip_suffix(']')?.trim();
    Some(
        (!inner.is_empty())
            .then(|| inner.split(','))
            .into_iter()
            .flatten()
            .map(|item| u32::try_from(integer(item.trim())?).ok()),
    )
}
