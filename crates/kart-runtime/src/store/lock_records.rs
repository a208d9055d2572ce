//! The artifacts of kart.lock read straight into records, for the lines
//! kart itself writes: no JSON text in between, no generic map of values.
//!
//! [`lock_canonical`](crate::store::lock_canonical) rewrites the lock into JSON for
//! serde_json; at 100,000 artifacts that text (60 MB) and its parse are most of what a
//! command reading the whole lock spends. This reader knows the fields of a record and
//! takes each line as it comes. It accepts less than the JSON path: every line it does
//! not expect (a field kart does not write, a value of another shape, a key twice, a
//! value its field's type refuses) makes it answer `None`, and the caller reads the
//! text the general way, so every answer and every error message is the one that path
//! gives.

use std::collections::BTreeMap;

use crate::cubin::EntryInfo;
use crate::model::{ArtifactKind, Config, ParamValue};
use crate::untrusted::{is_c_identifier, is_qualified_name};

/// The fields of one `[[artifact]]` record, as the lock's record type takes them.
pub(crate) struct Fields {
    pub kernel: String,
    pub config: Config,
    pub target: String,
    pub kind: ArtifactKind,
    pub key: String,
    pub digest: String,
    pub size: u64,
    pub nvcc: String,
    pub entries: Vec<EntryInfo>,
    pub derived: BTreeMap<String, i64>,
}

/// The version and every record of the artifact part of a lock (the text before its
/// `[[kernel]]` and `[[pruned]]` tables), or `None` for anything but kart's lines.
pub(crate) fn read<T: From<Fields>>(text: &str) -> Option<(u32, Vec<T>)> {
    let mut version = None;
    let mut artifacts = Vec::new();
    let mut record: Option<Record<'_>> = None;
    let mut table = Table::Artifact;
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with('[') {
            table = match line {
                "[[artifact]]" => {
                    if let Some(done) = record.take() {
                        artifacts.push(T::from(done.finish()?));
                    }
                    record = Some(Record::default());
                    Table::Artifact
                }
                "[artifact.config]" => {
                    let r = record.as_mut()?;
                    once(&mut r.seen, Seen::CONFIG)?;
                    Table::Config
                }
                "[[artifact.entries]]" => {
                    let r = record.as_mut()?;
                    // The entries are one array: no other table between its tables.
                    if r.seen & Seen::ENTRIES != 0 && table != Table::Entry {
                        return None;
                    }
                    r.seen |= Seen::ENTRIES;
                    r.entries.push(Entry::default());
                    Table::Entry
                }
                "[artifact.derived]" => {
                    let r = record.as_mut()?;
                    once(&mut r.seen, Seen::DERIVED)?;
                    Table::Derived
                }
                _ => return None,
            };
            continue;
        }
        let (key, value) = split(line)?;
        let Some(r) = record.as_mut() else {
            // Before the first record: the version, once.
            if key != "version" || version.is_some() {
                return None;
            }
            version = Some(u32::try_from(integer(value)?).ok()?);
            continue;
        };
        match table {
            Table::Artifact => r.field(key, value)?,
            Table::Config => {
                if !is_c_identifier(key) || r.config.contains_key(key) {
                    return None;
                }
                let value = match value.strip_prefix('"') {
                    Some(_) => {
                        ParamValue::Ident(string(value).filter(|s| is_qualified_name(s))?.into())
                    }
                    None => ParamValue::Int(integer(value)?),
                };
                r.config.insert(key.to_string(), value);
            }
            Table::Entry => r.entries.last_mut()?.field(key, value)?,
            Table::Derived => {
                if !bare(key) || r.derived.contains_key(key) {
                    return None;
                }
                r.derived.insert(key.to_string(), integer(value)?);
            }
        }
    }
    if let Some(done) = record {
        artifacts.push(T::from(done.finish()?));
    }
    Some((version?, artifacts))
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

/// One record as its lines come.
#[derive(Default)]
struct Record<'a> {
    seen: u16,
    kernel: &'a str,
    target: &'a str,
    kind: Option<ArtifactKind>,
    key: &'a str,
    digest: &'a str,
    size: u64,
    nvcc: &'a str,
    config: BTreeMap<String, ParamValue>,
    entries: Vec<Entry<'a>>,
    derived: BTreeMap<String, i64>,
}

impl<'a> Record<'a> {
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
                self.kind = Some(match string(value)? {
                    "cubin" => ArtifactKind::Cubin,
                    "ptx" => ArtifactKind::Ptx,
                    _ => return None,
                });
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

    fn finish(self) -> Option<Fields> {
        if self.seen & Seen::REQUIRED != Seen::REQUIRED {
            return None;
        }
        Some(Fields {
            kernel: self.kernel.to_string(),
            config: Config(self.config),
            target: self.target.to_string(),
            kind: self.kind?,
            key: self.key.to_string(),
            digest: self.digest.to_string(),
            size: self.size,
            nvcc: self.nvcc.to_string(),
            entries: self
                .entries
                .into_iter()
                .map(Entry::finish)
                .collect::<Option<_>>()?,
            derived: self.derived,
        })
    }
}

/// One `[[artifact.entries]]` table as its lines come.
#[derive(Default)]
struct Entry<'a> {
    seen: u16,
    name: &'a str,
    symbol: Option<&'a str>,
    template: Option<&'a str>,
    instance: Option<&'a str>,
    registers: u32,
    shared_bytes: u64,
    stack_bytes: u64,
    spill_store_bytes: u64,
    spill_load_bytes: u64,
    params: Vec<u32>,
}

impl<'a> Entry<'a> {
    /// The fields an entry must have: name, registers, and the four byte counts.
    const REQUIRED: u16 = 0b11_1111;

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
                self.params = integers(value)?;
                1 << 9
            }
            // `signature` and anything else: the general path.
            _ => return None,
        };
        once(&mut self.seen, bit)
    }

    fn finish(self) -> Option<EntryInfo> {
        if self.seen & Self::REQUIRED != Self::REQUIRED {
            return None;
        }
        Some(EntryInfo {
            name: self.name.to_string(),
            symbol: self.symbol.map(str::to_string),
            template: self.template.map(str::to_string),
            instance: self.instance.map(str::to_string),
            registers: self.registers,
            shared_bytes: self.shared_bytes,
            stack_bytes: self.stack_bytes,
            spill_store_bytes: self.spill_store_bytes,
            spill_load_bytes: self.spill_load_bytes,
            params: self.params,
            signature: None,
        })
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
/// zero (every such number reads the same in TOML and JSON).
fn integer(value: &str) -> Option<i64> {
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

/// A one-line array of non-negative integers that fit `u32`: `[8, 8, 4]`.
fn integers(value: &str) -> Option<Vec<u32>> {
    let inner = value.strip_prefix('[')?.strip_suffix(']')?.trim();
    if inner.is_empty() {
        return Some(Vec::new());
    }
    inner
        .split(',')
        .map(|item| u32::try_from(integer(item.trim())?).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::store::lockfile::LockedArtifact;

    fn read(text: &str) -> Option<(u32, Vec<LockedArtifact>)> {
        super::read(text)
    }

    /// What the JSON path reads: the reference.
    fn by_json(text: &str) -> Option<(u32, Vec<LockedArtifact>)> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Head {
            version: u32,
            #[serde(default)]
            artifact: Vec<LockedArtifact>,
        }
        let head: Head = crate::store::lock_canonical::parse(text)?;
        Some((head.version, head.artifact))
    }

    const TWO: &str = "# kart.lock\n\nversion = 3\n\n[[artifact]]\nkernel = \"tiny\"\ntarget = \"sm_90\"\nkind = \"cubin\"\nkey = \"0000000000000000000000000000000000000000000000000000000000000001\"\ndigest = \"0000000000000000000000000000000000000000000000000000000000000002\"\nsize = 3824\nnvcc = \"13.0.88\"\n\n[artifact.config]\nA = 499\nT = \"lib::Mode::B\"\n\n[[artifact.entries]]\nname = \"tiny\"\nsymbol = \"_Z4tinyILi499ELi99EEvPi\"\ntemplate = \"tiny<A, B>\"\ninstance = \"tiny<499, 99>\"\nregisters = 10\nshared_bytes = 0\nstack_bytes = 0\nspill_store_bytes = 0\nspill_load_bytes = 0\nparams = [8, 4]\n\n[[artifact.entries]]\nname = \"other\"\nregisters = 1\nshared_bytes = 2\nstack_bytes = 3\nspill_store_bytes = 4\nspill_load_bytes = 5\n\n[artifact.derived]\nS = -7\n\n[[artifact]]\nkernel = \"b\"\ntarget = \"sm_80\"\nkind = \"ptx\"\nkey = \"k\"\ndigest = \"d\"\nsize = 0\nnvcc = \"13.0.88\"\n\n[artifact.config]\n\n[[artifact.entries]]\nname = \"b\"\nregisters = 0\nshared_bytes = 0\nstack_bytes = 0\nspill_store_bytes = 0\nspill_load_bytes = 0\nparams = []\n";

    #[test]
    fn kart_s_lines_read_as_the_json_path_reads_them() {
        let fast = read(TWO).expect("kart's own lines");
        assert_eq!(fast.1.len(), 2);
        assert_eq!(Some(fast), by_json(TWO));
        assert_eq!(read("version = 3\n"), Some((3, Vec::new())));
    }

    #[test]
    fn any_other_line_is_left_to_the_general_path() {
        // Each edit is something kart does not write; the general path reads some of
        // them (and refuses others): this reader reads none.
        for (from, to) in [
            ("version = 3", "version = 3\nother = 1"),
            ("size = 3824", "size = 3824\nsize = 3824"),
            ("size = 3824", "size = -1"),
            ("size = 3824", "size = 03824"),
            ("size = 3824", "size = \"3824\""),
            ("A = 499", "A = 499\nA = 500"),
            ("A = 499", "A = \"499\""),
            ("A = 499", "A-B = 499"),
            ("A = 499", "A = 4.5"),
            ("registers = 10", "registers = 4294967296"),
            ("registers = 10", "registers = 10\nsignature = [\"ptr\"]"),
            ("registers = 10\n", ""),
            ("params = [8, 4]", "params = [8, -4]"),
            ("params = [8, 4]", "params = [8, \"4\"]"),
            ("kind = \"cubin\"", "kind = \"elf\""),
            ("nvcc = \"13.0.88\"\n", ""),
            (
                "nvcc = \"13.0.88\"\n\n[artifact.config]",
                "[artifact.config]\nnvcc = \"13.0.88\"",
            ),
            ("kernel = \"tiny\"", "kernel = \"ti\\\"ny\""),
            ("kernel = \"tiny\"", "kernel=\"tiny\""),
            ("S = -7", "S = \"x\""),
            (
                "[artifact.derived]",
                "[artifact.derived]\nS = 1\n[artifact.derived]",
            ),
            ("[artifact.config]\nA", "[artifact.other]\nA"),
            (
                "[[artifact.entries]]\nname = \"other\"",
                "[artifact.derived]\n[[artifact.entries]]\nname = \"other\"",
            ),
        ] {
            assert!(TWO.contains(from), "{from}");
            let edited = TWO.replacen(from, to, 1);
            assert_eq!(read(&edited), None, "{to}");
        }
    }
}
