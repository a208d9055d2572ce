//! One pass over `kart.lock` that finds where each record lies without keeping the
//! text: the offset of every `[[artifact]]` header, each record's kernel name and a
//! hash of its config table, the version line and the `[[kernel]]` tables. The reader
//! feeds it the file a buffer at a time (a lock of 100,000 artifacts is about 50 MB,
//! and filling fresh memory with it costs more than the scan), so opening a lock
//! touches each byte once and keeps a few words per record.
//!
//! The scan answers only for a lock laid out as this kart's `kart build` writes it;
//! anything else (a hand edit that moves a field, a multi-line string, tables in
//! another order, another version) ends it with `None`, and the reader parses the
//! whole lock instead.

use std::hash::Hasher as _;
use std::ops::Range;

use memchr::memmem;
use serde::Deserialize;

use crate::store::lockfile::{
    LOCK_VERSION, LOCK_VERSION_UNPRUNED, LockedArtifact, LockedKernel, PrunedArtifact,
};
#[cfg(test)]
use crate::text::Limit;

pub(super) const RECORD: &str = "\n[[artifact]]\n";
pub(super) const KERNEL_TABLE: &str = "\n[[kernel]]\n";
pub(super) const PRUNED_TABLE: &str = "\n[[pruned]]\n";
const CONFIG_TABLE: &str = "\n[artifact.config]\n";
const NAME_LINE: &str = "[[artifact]]\nkernel = \"";

/// What the scan found, in file order.
#[derive(Debug, Default)]
pub(super) struct Scanned {
    /// Byte offset of each record's `[[artifact]]` line.
    pub starts: Vec<u64>,
    /// Where the last record ends (the `[[kernel]]` tables or the end of the file).
    pub end: u64,
    /// Each record's config hash ([`config_hash`] of its table's body as kart writes
    /// it, [`UNKNOWN`] when the table is not where kart writes it).
    pub config_keys: Vec<u64>,
    /// Each kernel's name and its run of records, sorted by name.
    pub kernels: Vec<(String, Range<usize>)>,
    /// The `[[kernel]]` tables.
    pub tables: Vec<LockedKernel>,
}

/// The bucket of records whose config table was not found where kart writes it.
pub(super) const UNKNOWN: u64 = u64::MAX;

/// The hash a config's table body is looked up by (`A = 7\nB = "x"`).
pub(super) fn config_hash(body: &[u8]) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    h.write(body);
    // A hash equal to the bucket of unknowns only costs parsing those records too.
    h.finish()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Preamble {
    version: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Tables {
    #[serde(default)]
    kernel: Vec<LockedKernel>,
    /// Checked for their shape only: no reader of artifacts looks at them.
    #[serde(default, rename = "pruned")]
    _pruned: Vec<PrunedArtifact>,
}

/// A scan in progress. Each call to [`Scanner::feed`] is handed the bytes from where
/// the previous one stopped (its return value) to as far as the reader got.
pub(super) struct Scanner {
    found: Scanned,
    /// Bytes consumed so far: the next chunk starts here.
    at: u64,
    /// Whether the preamble (up to the first record) has been read.
    preamble: bool,
    /// Everything from the `[[kernel]]` tables on, once they started.
    tables: Option<Vec<u8>>,
    array_table: memmem::Finder<'static>,
    config_table: memmem::Finder<'static>,
    next_table: memmem::Finder<'static>,
    triple_double: memmem::Finder<'static>,
    triple_single: memmem::Finder<'static>,
}

impl Scanner {
    pub fn new() -> Scanner {
        Scanner {
            found: Scanned::default(),
            at: 0,
            preamble: false,
            tables: None,
            array_table: memmem::Finder::new("\n[["),
            config_table: memmem::Finder::new(CONFIG_TABLE),
            next_table: memmem::Finder::new("\n["),
            triple_double: memmem::Finder::new("\"\"\""),
            triple_single: memmem::Finder::new("'''"),
        }
    }

    /// Scans `chunk`, the bytes from the end of what was consumed so far; `last` when
    /// they run to the end of the file. Returns how many bytes were consumed (the rest,
    /// a record not yet complete, comes again at the front of the next chunk; 0 asks
    /// for a larger chunk), or `None` when the lock is not laid out as kart writes it.
    pub fn feed(&mut self, chunk: &[u8], last: bool) -> Option<usize> {
        if let Some(tables) = &mut self.tables {
            tables.extend_from_slice(chunk);
            self.at += chunk.len() as u64;
            return Some(chunk.len());
        }
        // One pass over the array-of-tables lines (`\n[[`): record headers, until the
        // `[[kernel]]` or `[[pruned]]` tables begin (nothing after them is a record).
        let mut found_heads = Vec::new();
        let mut tables_at = None;
        for h in self.array_table.find_iter(chunk) {
            let rest = &chunk[h..];
            if rest.starts_with(RECORD.as_bytes()) {
                found_heads.push(h + 1);
            } else if rest.starts_with(KERNEL_TABLE.as_bytes())
                || rest.starts_with(PRUNED_TABLE.as_bytes())
            {
                tables_at = Some(h + 1);
                break;
            }
        }
        let limit = tables_at.unwrap_or(chunk.len());
        // Single-line strings cannot hold a newline, so every `[[artifact]]` line is a
        // header when no multi-line string exists. (A chunk ends at a record's start,
        // `\n[`, which no `"""` spans; the tail carried over is scanned again.)
        if self.triple_double.find(&chunk[..limit]).is_some()
            || self.triple_single.find(&chunk[..limit]).is_some()
        {
            return None;
        }
        let mut heads = found_heads.into_iter().peekable();
        let mut from = 0;
        if !self.preamble {
            // The version line and comments, up to the first record (or the tables, or
            // the end).
            let first = match heads.peek() {
                Some(&h) => h,
                None if tables_at.is_some() || last => limit,
                None => return Some(0),
            };
            preamble(&chunk[..first])?;
            self.preamble = true;
            from = first;
        }
        // `from` is a record's start (or `limit`): every record from there ends at the
        // next header, the last one at `limit` if the tables began or the file ended.
        let mut starts: Vec<usize> = Vec::new();
        if from < limit {
            starts.push(from);
        }
        starts.extend(heads.filter(|&h| h > from));
        let complete = tables_at.is_some() || last;
        for (i, &start) in starts.iter().enumerate() {
            let end = match starts.get(i + 1) {
                Some(&next) => next,
                None if complete => limit,
                None => {
                    self.at += start as u64;
                    return Some(start);
                }
            };
            self.record(chunk, start..end)?;
        }
        self.found.end = self.at + limit as u64;
        if let Some(t) = tables_at {
            self.tables = Some(chunk[t..].to_vec());
        }
        self.at += chunk.len() as u64;
        Some(chunk.len())
    }

    /// The result, once every chunk was fed.
    pub fn finish(mut self) -> Option<Scanned> {
        if !self.preamble {
            return None;
        }
        if let Some(tables) = self.tables.take() {
            self.found.tables = tables_of(&tables)?;
        }
        Some(self.found)
    }

    /// One record, `range` of `chunk`: its kernel (runs sorted by name) and config.
    fn record(&mut self, chunk: &[u8], range: Range<usize>) -> Option<()> {
        let text = &chunk[range.clone()];
        let rest = text.strip_prefix(NAME_LINE.as_bytes())?;
        let len = memchr::memchr(b'"', rest)?;
        let name = std::str::from_utf8(&rest[..len]).ok()?;
        if !crate::untrusted::is_c_identifier(name) || rest.get(len + 1) != Some(&b'\n') {
            return None;
        }
        let key = self
            .config_table
            .find(text)
            .map(|at| {
                let body = &text[at + CONFIG_TABLE.len()..];
                let body = self.next_table.find(body).map_or(body, |end| &body[..end]);
                config_hash(body.trim_ascii_end())
            })
            .unwrap_or(UNKNOWN);
        let i = self.found.starts.len();
        self.found.starts.push(self.at + range.start as u64);
        self.found.config_keys.push(key);
        match self.found.kernels.last_mut() {
            Some((last, run)) if last == name => run.end = i + 1,
            Some((last, _)) if last.as_str() > name => return None,
            _ => self.found.kernels.push((name.to_string(), i..i + 1)),
        }
        Some(())
    }
}

/// Whether `text` holds the start of a multi-line string (which may hold lines that
/// look like tables).
pub(super) fn has_multiline(text: &[u8]) -> bool {
    memmem::find(text, b"\"\"\"").is_some() || memmem::find(text, b"'''").is_some()
}

/// Checks the text before the first record: comments and the version line, of a
/// version read this way. `None` when it is anything else.
pub(super) fn preamble(text: &[u8]) -> Option<()> {
    let preamble: Preamble = toml::from_str(std::str::from_utf8(text).ok()?).ok()?;
    (LOCK_VERSION_UNPRUNED..=LOCK_VERSION)
        .contains(&preamble.version)
        .then_some(())
}

/// The `[[kernel]]` tables (each `[launch]` checked) of `text`, the lock from its
/// first `[[kernel]]` or `[[pruned]]` table on; `None` when it reads otherwise.
pub(super) fn tables_of(text: &[u8]) -> Option<Vec<LockedKernel>> {
    if has_multiline(text) {
        return None;
    }
    let tables: Tables = toml::from_str(std::str::from_utf8(text).ok()?).ok()?;
    for k in &tables.kernel {
        if !crate::untrusted::is_c_identifier(&k.name)
            || crate::launch::LaunchSpec::from_text(&k.launch).is_err()
        {
            return None;
        }
    }
    Some(tables.kernel)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Records {
    artifact: Vec<LockedArtifact>,
}

/// The records of `text`, a run of whole records as kart writes them, each validated;
/// `None` when it reads otherwise.
pub(super) fn parse_records(text: &str) -> Option<Vec<LockedArtifact>> {
    // Only a lock of this version is laid out lazily (see `lockscan`): derived params,
    // which need version 2, are allowed.
    let records: Records = toml::from_str(text).ok()?;
    records
        .artifact
        .iter()
        .all(|a| a.validate().is_ok())
        .then_some(records.artifact)
}

/// Scans lock text already in memory.
pub(super) fn scan_text(text: &str) -> Option<Scanned> {
    let mut scanner = Scanner::new();
    let used = scanner.feed(text.as_bytes(), true)?;
    (used == text.len()).then_some(())?;
    scanner.finish()
}

/// Scans the lock a buffer at a time from `file` (`len` bytes when opened); at most
/// `max` bytes are read. `Ok(None)`: not laid out as kart writes it.
pub(super) fn scan_file(
    file: impl std::io::Read,
    len: u64,
    max: u64,
) -> std::io::Result<Option<Scanned>> {
    // A buffer that stays in the cache; most locks fit in one.
    scan_chunked(file, (1 << 20).min(len as usize + 1).max(4096), max)
}

fn scan_chunked(
    mut file: impl std::io::Read,
    chunk: usize,
    max: u64,
) -> std::io::Result<Option<Scanned>> {
    let mut scanner = Scanner::new();
    let mut buf = vec![0u8; chunk];
    let (mut filled, mut read) = (0usize, 0u64);
    loop {
        if filled == buf.len() {
            // One record larger than the buffer: grow it.
            buf.resize(buf.len() * 2, 0);
        }
        let n = file.read(&mut buf[filled..])?;
        read += n as u64;
        if read > max {
            return Ok(None);
        }
        filled += n;
        let last = n == 0;
        let Some(used) = scanner.feed(&buf[..filled], last) else {
            return Ok(None);
        };
        if last {
            return Ok((used == filled).then(|| scanner.finish()).flatten());
        }
        buf.copy_within(used..filled, 0);
        filled -= used;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::lockfile::LOCK_FILE;

    /// Hands out at most `step` bytes per read, as a pipe or a slow disk may.
    struct Trickle<'a> {
        bytes: &'a [u8],
        step: usize,
    }

    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.step.min(buf.len()).min(self.bytes.len());
            buf[..n].copy_from_slice(&self.bytes[..n]);
            self.bytes = &self.bytes[n..];
            Ok(n)
        }
    }

    fn same(a: &Scanned, b: &Scanned) -> bool {
        a.starts == b.starts
            && a.end == b.end
            && a.config_keys == b.config_keys
            && a.kernels == b.kernels
            && a.tables == b.tables
    }

    #[test]
    fn a_lock_read_in_any_chunks_scans_as_read_whole() {
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../..")
                .join(LOCK_FILE),
        )
        .unwrap();
        let whole = scan_text(&text).expect("the repository's lock is laid out as kart writes it");
        assert!(whole.starts.len() > 100 && !whole.tables.is_empty());
        // Buffers smaller than one record (they grow), a few records, odd sizes; reads
        // of one byte and of many.
        for (chunk, step) in [(64, 1 << 20), (700, 3), (4096, 1 << 20), (5000, 977)] {
            let reader = Trickle {
                bytes: text.as_bytes(),
                step,
            };
            let chunked = scan_chunked(reader, chunk, Limit::LOCK.bytes)
                .unwrap()
                .expect("laid out");
            assert!(same(&chunked, &whole), "chunk {chunk}, step {step}");
        }
        // A multi-line string anywhere, even across where a chunk ends, ends the scan.
        let at = text.len() / 2;
        let cut = text[..at].rfind("nvcc = \"").unwrap();
        let multiline = format!(
            "{}nvcc = \"\"\"13.0.88\"\"\"{}",
            &text[..cut],
            &text[cut + "nvcc = \"13.0.88\"".len()..]
        );
        for chunk in [64, 700, 4096] {
            let reader = Trickle {
                bytes: multiline.as_bytes(),
                step: 1 << 20,
            };
            assert!(
                scan_chunked(reader, chunk, Limit::LOCK.bytes)
                    .unwrap()
                    .is_none()
            );
        }
        // More than the limit: not scanned.
        let reader = Trickle {
            bytes: text.as_bytes(),
            step: 1 << 20,
        };
        assert!(scan_chunked(reader, 4096, 1000).unwrap().is_none());
    }
}
