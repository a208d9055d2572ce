//! A large `kart.lock` looked up by bisection. `kart build` writes the records sorted
//! by (kernel, config, target, kind), so the records of one (kernel, config) are found
//! by reading about log2(n) records of the file, not all n: at 100,000 artifacts a
//! lookup reads some 20 windows of a few KiB instead of 50 MB.
//!
//! At open, the head (comments and the version line, up to the first record) and the
//! tail (the last record, parsed, then the `[[kernel]]` and `[[pruned]]` tables) are
//! read and checked as the one-pass scan (`lockscan.rs`) checks them. A lookup checks each
//! record it reads (one record, laid out as kart writes it, no multi-line string,
//! every field valid) and the order of the records it answers with. A config not
//! found is not in a sorted lock (the whole parse refuses a lock out of order), and the
//! records around where it would be name the nearest configs. Anything that does not
//! read as kart writes it is left to the caller, which scans the whole file.

use std::ops::Range;
use std::sync::OnceLock;

use memchr::memmem;

use crate::model::Config;
use crate::store::lockfile::{LockedArtifact, LockedKernel};
use crate::store::lockscan::{self, KERNEL_TABLE, PRUNED_TABLE, RECORD};
use crate::store::section::Section;

/// A record is never shorter than this (its key and digest alone are 128 hex digits),
/// so `offset / SLOT_BYTES` tells records apart.
const SLOT_BYTES: u64 = 128;
/// Slots per page of the cache of records read.
const PAGE_SLOTS: usize = 1024;
/// The first window read around an offset; it doubles while a record runs on.
const WINDOW: u64 = 4096;

/// Where a large lock's records lie, read at open from its ends.
#[derive(Debug)]
pub(super) struct Bisect {
    /// Offset of the first record's `[[artifact]]` line.
    first: u64,
    /// Where the last record ends: the `[[kernel]]` or `[[pruned]]` tables, or the end.
    end: u64,
    /// The `[[kernel]]` tables.
    pub tables: Vec<LockedKernel>,
    /// Each record read so far, by `offset / SLOT_BYTES`, in pages allocated on first
    /// use (the records a lookup answers with are borrowed from here).
    pages: Vec<OnceLock<Box<[Slot]>>>,
}

type Slot = OnceLock<(u64, Box<LockedArtifact>)>;

/// What a bisection found for one (kernel, config).
#[derive(Debug)]
pub enum Bisected<'a> {
    /// Its records, sorted by target and kind.
    Found(Vec<&'a LockedArtifact>),
    /// None: the records around where it would be, the nearest in the lock's order
    /// (of another kernel, or none, at either end of the kernel's records).
    Missing {
        /// The record just before.
        before: Option<&'a LockedArtifact>,
        /// The record just after.
        after: Option<&'a LockedArtifact>,
    },
}

impl Bisect {
    /// Reads the ends of the lock in `file` (a whole file or a bundle's section);
    /// `None` when they are not laid out as kart writes them (the caller scans it all).
    pub fn open(file: &Section) -> Option<Bisect> {
        let len = file.len();
        let record = memmem::Finder::new(RECORD);
        // The head: the first record starts within a few lines.
        let head = file.read_at(0, WINDOW.min(len))?;
        let first = record.find(&head)? as u64 + 1;
        if lockscan::has_multiline(&head[..first as usize]) {
            return None;
        }
        lockscan::preamble(&head[..first as usize])?;
        // The tail: from the last record's header, the first table that is not a record
        // ends the records.
        let last_record = memmem::FinderRev::new(RECORD);
        let mut window = WINDOW;
        let (tail_at, tail, last) = loop {
            let at = len.saturating_sub(window);
            let tail = file.read_at(at, len - at)?;
            match last_record.rfind(&tail) {
                Some(h) => break (at, tail, h + 1),
                None if at == 0 => return None,
                None => window *= 2,
            }
        };
        let after = &tail[last..];
        let tables_at = [KERNEL_TABLE, PRUNED_TABLE]
            .iter()
            .filter_map(|t| memmem::find(after, t.as_bytes()))
            .min()
            .map(|t| last + t + 1);
        let end = tables_at.unwrap_or(tail.len());
        // The last record read whole: a lock cut short (a copy interrupted) is found at
        // open, as the scan finds it.
        if lockscan::has_multiline(&tail[last..end])
            || lockscan::parse_records(std::str::from_utf8(&tail[last..end]).ok()?)?.len() != 1
        {
            return None;
        }
        let tables = match tables_at {
            Some(t) => lockscan::tables_of(&tail[t..])?,
            None => Vec::new(),
        };
        let end = tail_at + end as u64;
        if end <= first {
            return None;
        }
        let slots = len / SLOT_BYTES + 1;
        let pages = slots.div_ceil(PAGE_SLOTS as u64);
        Some(Bisect {
            first,
            end,
            tables,
            pages: (0..pages).map(|_| OnceLock::new()).collect(),
        })
    }

    /// The records of (kernel, config), sorted, or where they would be; `None` when a
    /// record read is not laid out as kart writes it (then the whole file decides).
    pub fn of_config<'a>(
        &'a self,
        file: &Section,
        kernel: &str,
        config: &Config,
    ) -> Option<Bisected<'a>> {
        let want = (kernel, config);
        // Every record starting before `lo` sorts before the config; none starting at
        // `hi` or later does. `before` is the record that ends at `lo`.
        let (mut lo, mut hi) = (self.first, self.end);
        let mut before = None;
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.record_from(file, mid, hi)? {
                None => hi = mid,
                Some((range, a)) if (a.kernel.as_str(), &a.config) < want => {
                    lo = range.end;
                    before = Some(a);
                }
                Some((range, _)) => hi = range.start,
            }
        }
        let mut found: Vec<&LockedArtifact> = Vec::new();
        let mut after = None;
        let mut at = lo;
        while at < self.end {
            let (range, a) = self.record_from(file, at, at + 1)??;
            if (a.kernel.as_str(), &a.config) != want {
                after = Some(a);
                break;
            }
            found.push(a);
            at = range.end;
        }
        if found.is_empty() {
            // The records are sorted: the config would lie between these two.
            return Some(Bisected::Missing { before, after });
        }
        let ordered = found.windows(2).all(|w| w[0].id() < w[1].id());
        ordered.then_some(Bisected::Found(found))
    }

    /// The record whose header is the first at or after `from` and before `before`
    /// (`Some(None)` when there is none), read and checked.
    fn record_from<'a>(
        &'a self,
        file: &Section,
        from: u64,
        before: u64,
    ) -> Option<Option<(Range<u64>, &'a LockedArtifact)>> {
        // A header at `from` starts with the newline before it.
        let Some(start) = self.next_header(file, from.checked_sub(1)?, before)? else {
            return Some(None);
        };
        let end = self.next_header(file, start, self.end)?.unwrap_or(self.end);
        let slot = self.slot(start)?;
        if let Some((at, a)) = slot.get() {
            return (*at == start).then_some(Some((start..end, &**a)));
        }
        let text = file.read_at(start, end - start)?;
        if text.len() as u64 != end - start || lockscan::has_multiline(&text) {
            return None;
        }
        let mut parsed = lockscan::parse_records(std::str::from_utf8(&text).ok()?)?;
        if parsed.len() != 1 {
            return None;
        }
        let a = parsed.pop()?;
        let (at, a) = slot.get_or_init(|| (start, Box::new(a)));
        (*at == start).then_some(Some((start..end, &**a)))
    }

    /// The offset of the first record header whose newline is at or after `from` and
    /// whose record starts before `before`.
    fn next_header(&self, file: &Section, from: u64, before: u64) -> Option<Option<u64>> {
        let finder = memmem::Finder::new(RECORD);
        // Far enough to see a header whose record starts just before `before`.
        let stop = (before + RECORD.len() as u64).min(self.end + RECORD.len() as u64);
        let mut window = WINDOW;
        loop {
            let to = (from + window).min(stop);
            let bytes = file.read_at(from, to - from)?;
            if let Some(h) = finder.find(&bytes) {
                let start = from + h as u64 + 1;
                return Some((start < before).then_some(start));
            }
            if to >= stop || (bytes.len() as u64) < to - from {
                return Some(None);
            }
            window *= 2;
        }
    }

    fn slot(&self, start: u64) -> Option<&Slot> {
        let slot = usize::try_from(start / SLOT_BYTES).ok()?;
        let page = self.pages.get(slot / PAGE_SLOTS)?.get_or_init(|| {
            (0..PAGE_SLOTS)
                .map(|_| OnceLock::new())
                .collect::<Vec<_>>()
                .into_boxed_slice()
        });
        page.get(slot % PAGE_SLOTS)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::cubin::EntryInfo;
    use crate::error::Error;
    use crate::model::{Config, ParamValue};
    use crate::store::lockfile::{LOCK_FILE, LockedArtifact, Lockfile};
    use crate::store::lockindex::{Bisected, LockIndex};
    use crate::store::testlock::generated;

    /// `text` as a file, read with every size bisected.
    fn bisected(text: &str) -> (tempfile::TempDir, LockIndex) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOCK_FILE);
        std::fs::write(&path, text).unwrap();
        let index = LockIndex::read_bisecting_from(&path, Path::new(LOCK_FILE), 0)
            .unwrap()
            .unwrap();
        (dir, index)
    }

    /// A lookup: kernel and config.
    type Asked = Vec<(String, Config)>;

    /// Each (kernel, config) of `lock`, then the same with a param changed, and one of
    /// a kernel it does not have.
    fn asked(lock: &Lockfile) -> (Asked, Asked) {
        let mut present: Vec<(String, Config)> = lock
            .artifacts
            .iter()
            .map(|a| (a.kernel.clone(), a.config.clone()))
            .collect();
        present.dedup();
        let absent = present
            .iter()
            .map(|(k, c)| {
                let mut c = c.clone();
                c.insert("BLOCK", ParamValue::Int(3));
                (k.clone(), c)
            })
            .chain([("none".to_string(), Config::default())])
            .collect();
        (present, absent)
    }

    #[test]
    fn lookups_of_a_bisected_lock_answer_as_the_whole_parse() {
        for seed in 1..=12 {
            let mut lock = generated(seed);
            if seed % 3 == 0 {
                // A record longer than the windows read around an offset.
                let a = &mut lock.artifacts[seed as usize];
                let entry = a.entries[0].clone();
                a.entries = (0..60)
                    .map(|i| EntryInfo {
                        name: format!("{}_{i}", entry.name),
                        ..entry.clone()
                    })
                    .collect();
            }
            if seed % 2 == 0 {
                let a = &lock.artifacts[seed as usize];
                let pruned = crate::store::lockfile::PrunedArtifact::new(
                    a.kernel.clone(),
                    a.config.clone(),
                    "sm_100".into(),
                    a.kind,
                    a.key.clone(),
                    Default::default(),
                );
                lock = lock.with_pruned(vec![pruned]);
            }
            if seed % 4 == 0 {
                lock = lock.with_kernels(Vec::new());
            }
            let (_dir, index) = bisected(&lock.to_text());
            assert!(index.bisecting(), "seed {seed}");
            let (mut present, absent) = asked(&lock);
            present.reverse();
            for (kernel, config) in &present {
                let found: Vec<&LockedArtifact> = index.of_config(kernel, config).unwrap();
                let whole: Vec<&LockedArtifact> = lock.of_config(kernel, config).iter().collect();
                assert_eq!(found, whole, "seed {seed}: {kernel}[{config}]");
            }
            for kernel in ["attn", "gemm", "gemm_v2", "tiny", "nope"] {
                assert_eq!(index.launch(kernel), lock.launch(kernel));
            }
            assert!(
                index.bisecting() && !index.is_whole(),
                "seed {seed}: configs found read only their records"
            );
            // A config not in the lock: none, with the records around where it would be.
            for (kernel, config) in &absent {
                assert!(index.of_config(kernel, config).unwrap().is_empty());
                let Some(Bisected::Missing { before, after }) = index.bisected(kernel, config)
                else {
                    panic!("seed {seed}: {kernel}[{config}] found")
                };
                let place = lock.artifacts.partition_point(|a| {
                    (a.kernel.as_str(), &a.config) < (kernel.as_str(), config)
                });
                assert_eq!(before, place.checked_sub(1).map(|i| &lock.artifacts[i]));
                assert_eq!(after, lock.artifacts.get(place));
            }
            assert!(
                index.bisecting(),
                "seed {seed}: a miss reads no more than a hit"
            );
            for kernel in ["attn", "gemm", "gemm_v2", "tiny", "nope"] {
                assert_eq!(index.records(kernel).unwrap(), lock.of_kernel(kernel));
            }
            assert_eq!(index.whole().unwrap(), &lock);
        }
    }

    #[test]
    fn the_repositorys_lock_is_found_by_bisection() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(LOCK_FILE);
        let lock = Lockfile::parse(&std::fs::read_to_string(&path).unwrap(), &path).unwrap();
        let index = LockIndex::read_bisecting_from(&path, Path::new(LOCK_FILE), 0)
            .unwrap()
            .unwrap();
        let (present, _) = asked(&lock);
        assert!(present.len() > 100);
        for (kernel, config) in &present {
            let found: Vec<&LockedArtifact> = index.of_config(kernel, config).unwrap();
            let whole: Vec<&LockedArtifact> = lock.of_config(kernel, config).iter().collect();
            assert_eq!(found, whole, "{kernel}[{config}]");
        }
        for k in &lock.kernels {
            assert_eq!(index.launch(&k.name), Some(&k.launch));
        }
        assert!(index.bisecting());
    }

    #[test]
    fn a_bisected_lock_read_otherwise_is_answered_by_the_scan_or_the_whole_parse() {
        let lock = generated(5);
        let text = lock.to_text();
        let some = &lock.artifacts[7];
        let other = &lock.of_kernel("tiny")[0];
        let digest = format!("digest = \"{}\"", some.digest);
        // A multi-line string in the record found: answered as the whole parse does.
        let multiline = text.replacen(&digest, &format!("digest = \"\"\"{}\"\"\"", some.digest), 1);
        let (_dir, index) = bisected(&multiline);
        let found = index.find(&some.kernel, &some.config, &some.target, some.kind);
        assert_eq!(found.unwrap(), Some(some));
        // A malformed record: its lookup fails with the file and its line; another
        // kernel's is found.
        let bad = text.replacen(&digest, "digest = \"../../etc/passwd\"", 1);
        let (_dir, index) = bisected(&bad);
        assert!(index.bisecting());
        let found = index.find(&other.kernel, &other.config, &other.target, other.kind);
        assert_eq!(found.unwrap(), Some(other));
        let err = index.of_config(&some.kernel, &some.config).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidFile { path, line, .. } if path == Path::new(LOCK_FILE) && *line > 5),
            "{err}"
        );
        // Ends not as kart writes them: another version, a multi-line string in the
        // tables, no tables after a cut record. Not bisected; answered the same.
        let older = text.replacen("version = 3", "version = 2", 1);
        let tables = text.replacen("grid = [", "grid = [\"\"\"1\"\"\", ", 1);
        assert_ne!(tables, text);
        for edited in [older, tables] {
            let (_dir, index) = bisected(&edited);
            assert!(!index.bisecting());
            let found = index.find(&some.kernel, &some.config, &some.target, some.kind);
            assert_eq!(found.unwrap(), Some(some));
        }
        let cut = &text[..text.rfind("[[artifact]]").unwrap() + "[[artifact]]\nkernel".len()];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOCK_FILE);
        std::fs::write(&path, cut).unwrap();
        let err = LockIndex::read_bisecting_from(&path, Path::new(LOCK_FILE), 0).unwrap_err();
        assert!(matches!(err, Error::InvalidFile { .. }), "{err}");
    }
}
