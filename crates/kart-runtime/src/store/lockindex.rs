//! `kart.lock` read by what a reader touches: one pass over the file at open finds
//! where each record lies (`store/lockscan.rs`: the offset of every
//! `[[artifact]]` header, its kernel and a hash of its config), and a record is read
//! from the file and parsed the first time it is asked for. The runtime opening one
//! kernel of a lock of 100,000 artifacts and `kart path` of one artifact read the file
//! once through a small buffer and parse a few records, not all of them.
//!
//! At open, for the whole file: its size (the lock's [`Limit`]), the version line, the
//! header of every record (`kernel = "NAME"` right after `[[artifact]]`, names
//! sorted), and the `[[kernel]]` tables (each `[launch]` parsed, with the depth limits
//! of expressions). A lock not laid out as `kart build` writes it (a hand edit,
//! multi-line strings, tables in another order, an older version) is parsed whole at
//! open instead, with every check of [`Lockfile::parse`].
//!
//! A lock of more than [`BISECT_FROM`] bytes read from a file is not scanned at open:
//! its ends are read (the version line, the last record, the `[[kernel]]` tables) and
//! a lookup of one config bisects the sorted records (`store/lockbisect.rs`), reading
//! a few KiB around some 20 offsets. What a bisection cannot answer (a config not in
//! the lock, a record not laid out as kart writes it, the list of kernels or all of a
//! kernel's records) scans the file then, as a smaller lock is scanned at open.
//!
//! A record is parsed and validated when a lookup touches it; a malformed one found
//! then is reported with the whole parse's error (file, line and what is wrong, the
//! same message a whole parse gives). A malformed record that no lookup touches is not
//! reported by the reader that does not read it: `kart build`, `kart build --locked`
//! and `kart verify` parse the whole lock and report it.

use std::borrow::Cow;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{IoContext as _, Result};
use crate::launch::LaunchText;
use crate::model::{ArtifactKind, Config};
use crate::store::lockbisect::Bisect;
pub use crate::store::lockbisect::Bisected;
use crate::store::lockfile::{LockedArtifact, LockedKernel, Lockfile};
use crate::store::lockscan::{self, Scanned, UNKNOWN, config_hash, parse_records};
use crate::store::section::Section;
use crate::text::{Limit, open_limited, over_limit, read_text, text_of};

/// A lock, parsed as far as it has been asked. `Send + Sync`: lookups from several
/// threads parse a record at most a few times and agree on the result.
#[derive(Debug)]
pub struct LockIndex {
    source: Source,
    shown: PathBuf,
    /// The whole lock, parsed: at open when the text is not laid out as kart writes
    /// it, else on the first call that needs every record.
    whole: OnceLock<Lockfile>,
    /// Where each record and kernel lies, from the one-pass scan: at open, or for a
    /// large lock when a call first needs it. `None` inside: not laid out as kart
    /// writes it (then `whole` holds the lock).
    layout: OnceLock<Option<Layout>>,
    /// A large lock's ends, read at open: lookups of one config bisect its records.
    bisect: Option<Bisect>,
}

/// From this size on, a lock read from a file is bisected, not scanned, at open: it is
/// more than one buffer of the scan, some 2,000 artifacts.
pub const BISECT_FROM: u64 = 1 << 20;

/// Where the lock's text is.
#[derive(Debug)]
enum Source {
    /// In memory (a bundle's lock, or one already parsed: then empty).
    Text(String),
    /// In a file, read a record at a time: the handle opened at open, so every read
    /// is of the file scanned. `lock_file`: the whole of `path`, a `kart.lock` (else
    /// a section of a bundle).
    File {
        file: Section,
        path: PathBuf,
        lock_file: bool,
    },
}

#[derive(Debug)]
struct Layout {
    /// Byte offset of each record's `[[artifact]]` line, and the end of the last.
    starts: Vec<u64>,
    end: u64,
    /// Each record's config hash.
    config_keys: Vec<u64>,
    /// Every kernel, sorted by name, with its run of records.
    kernels: Vec<KernelRun>,
    /// The `[[kernel]]` tables.
    tables: Vec<LockedKernel>,
    /// Each record, once parsed.
    records: Vec<OnceLock<Box<LockedArtifact>>>,
}

#[derive(Debug)]
struct KernelRun {
    name: String,
    records: Range<usize>,
    /// (config hash, record) of the run's records, sorted, built on the first lookup.
    by_config: OnceLock<Vec<(u64, usize)>>,
    /// Lookups so far: the index above is built only for a run asked often.
    lookups: AtomicUsize,
    /// Every record of the kernel, parsed (for listings).
    all: OnceLock<Vec<LockedArtifact>>,
}

impl LockIndex {
    /// Reads the lock at `path` (`None` when there is none); `shown` names it in
    /// messages.
    pub fn read(path: &Path, shown: &Path) -> Result<Option<LockIndex>> {
        LockIndex::read_bisecting_from(path, shown, BISECT_FROM)
    }

    /// [`LockIndex::read`], bisecting a lock of `bisect_from` bytes or more.
    pub fn read_bisecting_from(
        path: &Path,
        shown: &Path,
        bisect_from: u64,
    ) -> Result<Option<LockIndex>> {
        if !path.exists() {
            return Ok(None);
        }
        let (file, len) = open_limited(path, Limit::LOCK)?;
        let source = Source::File {
            file: Section::new(file, 0, len),
            path: path.to_path_buf(),
            lock_file: true,
        };
        LockIndex::of_file(source, shown, bisect_from).map(Some)
    }

    /// The lock that is bytes `start..start + len` of `file` (a bundle's lock section,
    /// inside the file as the caller checked), read as `kart.lock` is: bisected from
    /// [`BISECT_FROM`] bytes on, else scanned. `path` names the file in I/O errors,
    /// `shown` the lock in every other message.
    pub fn read_section(
        file: std::fs::File,
        path: &Path,
        start: u64,
        len: u64,
        shown: &Path,
    ) -> Result<LockIndex> {
        if len > Limit::LOCK.bytes {
            return Err(over_limit(shown, Limit::LOCK, format!("it is {len} bytes")));
        }
        let source = Source::File {
            file: Section::new(file, start, len),
            path: path.to_path_buf(),
            lock_file: false,
        };
        LockIndex::of_file(source, shown, BISECT_FROM)
    }

    fn of_file(source: Source, shown: &Path, bisect_from: u64) -> Result<LockIndex> {
        let shown = shown.to_path_buf();
        let (file, path) = match &source {
            Source::File { file, path, .. } => (file, path),
            Source::Text(text) => return LockIndex::from_text(text.clone(), &shown),
        };
        if file.len() >= bisect_from
            && let Some(bisect) = Bisect::open(file)
        {
            return Ok(LockIndex {
                source,
                shown,
                whole: OnceLock::new(),
                layout: OnceLock::new(),
                bisect: Some(bisect),
            });
        }
        let scanned =
            lockscan::scan_file(file.reader(), file.len(), Limit::LOCK.bytes).at("read", path)?;
        match scanned {
            Some(scanned) => Ok(LockIndex::laid_out(source, scanned, shown)),
            None => {
                let text = source.text(&shown)?;
                let lock = Lockfile::parse(&text, &shown)?;
                Ok(LockIndex::from_lockfile(lock, text, shown))
            }
        }
    }

    /// Indexes lock text (at most [`Limit::LOCK`] bytes, as [`read_text`] gives it).
    pub fn from_text(text: String, shown: &Path) -> Result<LockIndex> {
        let shown = shown.to_path_buf();
        if text.len() as u64 > Limit::LOCK.bytes {
            return Err(over_limit(
                &shown,
                Limit::LOCK,
                format!("it is {} bytes", text.len()),
            ));
        }
        match lockscan::scan_text(&text) {
            Some(scanned) => Ok(LockIndex::laid_out(Source::Text(text), scanned, shown)),
            None => {
                let lock = Lockfile::parse(&text, &shown)?;
                Ok(LockIndex::from_lockfile(lock, text, shown))
            }
        }
    }

    /// An index over a lock already parsed.
    pub fn parsed(lock: Lockfile) -> LockIndex {
        LockIndex::from_lockfile(
            lock,
            String::new(),
            PathBuf::from(crate::store::lockfile::LOCK_FILE),
        )
    }

    fn from_lockfile(lock: Lockfile, text: String, shown: PathBuf) -> LockIndex {
        LockIndex {
            source: Source::Text(text),
            shown,
            whole: OnceLock::from(lock),
            layout: OnceLock::from(None),
            bisect: None,
        }
    }

    fn laid_out(source: Source, scanned: Scanned, shown: PathBuf) -> LockIndex {
        LockIndex {
            source,
            shown,
            whole: OnceLock::new(),
            layout: OnceLock::from(Some(Layout::of(scanned))),
            bisect: None,
        }
    }

    /// The one-pass scan's layout, scanning the file on the first call after a
    /// bisecting open; `None` when the lock is not laid out as kart writes it (then it
    /// is parsed whole, and its errors are this call's).
    fn layout(&self) -> Result<Option<&Layout>> {
        if let Some(l) = self.layout.get() {
            return Ok(l.as_ref());
        }
        let scanned = match &self.source {
            Source::Text(text) => lockscan::scan_text(text),
            Source::File { file, path, .. } => {
                lockscan::scan_file(file.reader(), file.len(), Limit::LOCK.bytes)
                    .at("read", path)?
            }
        };
        let layout = match scanned {
            Some(scanned) => Some(Layout::of(scanned)),
            None => {
                self.whole()?;
                None
            }
        };
        Ok(self.layout.get_or_init(|| layout).as_ref())
    }

    /// Whether lookups bisect the file (and the whole text was not scanned yet).
    #[cfg(test)]
    pub(super) fn bisecting(&self) -> bool {
        self.bisect.is_some() && self.layout.get().is_none()
    }

    /// Whether every record has been parsed (at open or since).
    pub fn is_whole(&self) -> bool {
        self.whole.get().is_some()
    }

    /// The whole lock, parsed and validated on the first call.
    pub fn whole(&self) -> Result<&Lockfile> {
        if let Some(lock) = self.whole.get() {
            return Ok(lock);
        }
        let lock = match &self.source {
            Source::Text(text) => Lockfile::parse(text, &self.shown)?,
            file => Lockfile::parse(&file.text(&self.shown)?, &self.shown)?,
        };
        Ok(self.whole.get_or_init(|| lock))
    }

    /// The lock's kernels with artifacts, sorted.
    pub fn kernels(&self) -> Result<Vec<&str>> {
        Ok(match self.layout()? {
            Some(l) => l.kernels.iter().map(|k| k.name.as_str()).collect(),
            None => {
                let mut names: Vec<&str> = (self.whole()?.artifacts.iter())
                    .map(|a| a.kernel.as_str())
                    .collect();
                names.dedup();
                names
            }
        })
    }

    /// The `[launch]` of `kernel`, if the lock records one.
    pub fn launch(&self, kernel: &str) -> Option<&LaunchText> {
        let tables = match (&self.bisect, self.layout.get()) {
            (Some(b), _) => &b.tables,
            (None, Some(Some(l))) => &l.tables,
            _ => return self.whole.get().and_then(|lock| lock.launch(kernel)),
        };
        tables.iter().find(|k| k.name == kernel).map(|k| &k.launch)
    }

    /// Every record of `kernel` (empty when the lock has none), parsed on the first call.
    pub fn records(&self, kernel: &str) -> Result<&[LockedArtifact]> {
        let Some(l) = self.layout()? else {
            return Ok(self.whole()?.of_kernel(kernel));
        };
        let Some(run) = run(l, kernel) else {
            return Ok(&[]);
        };
        if let Some(all) = run.all.get() {
            return Ok(all);
        }
        match self.parse_run(l, run) {
            Some(all) => Ok(run.all.get_or_init(|| all)),
            None => Ok(self.whole()?.of_kernel(kernel)),
        }
    }

    /// The records of one (kernel, config), one per target and kind, sorted (empty
    /// when there are none): only the records whose config reads as this one's are
    /// parsed.
    pub fn of_config(&self, kernel: &str, config: &Config) -> Result<Vec<&LockedArtifact>> {
        if let Some(bisected) = self.bisected(kernel, config) {
            return Ok(match bisected {
                Bisected::Found(found) => found,
                Bisected::Missing { .. } => Vec::new(),
            });
        }
        let layout = self.layout()?;
        if let Some(l) = layout
            && let Some(found) = self.lazy_of_config(l, kernel, config)
        {
            return Ok(found);
        }
        if layout.is_some() && self.whole.get().is_none() {
            // Not found as kart writes it: the kernel's records, all parsed, decide.
            return Ok(self
                .records(kernel)?
                .iter()
                .filter(|a| a.config == *config)
                .collect());
        }
        Ok(self.whole()?.of_config(kernel, config).iter().collect())
    }

    /// For a lock read by bisection, what the bisection finds for (kernel, config): its
    /// records, or the records around where it would be. `None` for a lock read whole
    /// or scanned, or when a record read is not laid out as kart writes it.
    pub fn bisected(&self, kernel: &str, config: &Config) -> Option<Bisected<'_>> {
        match (&self.bisect, &self.source) {
            (Some(bisect), Source::File { file, .. }) => bisect.of_config(file, kernel, config),
            _ => None,
        }
    }

    /// The record of this identity.
    pub fn find(
        &self,
        kernel: &str,
        config: &Config,
        target: &str,
        kind: ArtifactKind,
    ) -> Result<Option<&LockedArtifact>> {
        Ok(self
            .of_config(kernel, config)?
            .into_iter()
            .find(|a| a.target == target && a.kind == kind))
    }

    /// The text of `range`; `None` when it cannot be read as UTF-8 text (the caller
    /// falls back to the whole parse, which says what is wrong).
    fn text(&self, range: Range<u64>) -> Option<Cow<'_, str>> {
        match &self.source {
            Source::Text(text) => text
                .get(range.start as usize..range.end as usize)
                .map(Cow::Borrowed),
            Source::File { file, .. } => {
                let bytes = file.read_exact(range.start, range.end - range.start).ok()?;
                String::from_utf8(bytes).ok().map(Cow::Owned)
            }
        }
    }

    /// Record `i`, parsed and validated; `None` when it does not read as one record
    /// of its kernel (the caller falls back to the whole parse).
    fn record<'a>(
        &'a self,
        l: &'a Layout,
        run: &KernelRun,
        i: usize,
    ) -> Option<&'a LockedArtifact> {
        if let Some(a) = l.records[i].get() {
            return Some(a);
        }
        let mut parsed = self.parse_records(record_range(l, i))?;
        if parsed.len() != 1 || parsed[0].kernel != run.name {
            return None;
        }
        let a = parsed.pop()?;
        Some(l.records[i].get_or_init(|| Box::new(a)))
    }

    fn parse_records(&self, range: Range<u64>) -> Option<Vec<LockedArtifact>> {
        parse_records(&self.text(range)?)
    }

    fn parse_run(&self, l: &Layout, run: &KernelRun) -> Option<Vec<LockedArtifact>> {
        if run.records.is_empty() {
            return Some(Vec::new());
        }
        let start = l.starts[run.records.start];
        let end = record_range(l, run.records.end - 1).end;
        let all = self.parse_records(start..end)?;
        let ordered = all.len() == run.records.len()
            && all.iter().all(|a| a.kernel == run.name)
            && all.windows(2).all(|w| w[0].id() < w[1].id());
        ordered.then_some(all)
    }

    fn lazy_of_config<'a>(
        &'a self,
        l: &'a Layout,
        kernel: &str,
        config: &Config,
    ) -> Option<Vec<&'a LockedArtifact>> {
        let Some(run) = run(l, kernel) else {
            return Some(Vec::new());
        };
        let key = config_hash(config_text(config)?.as_bytes());
        // The first lookups of a run scan its hashes (100,000 compares take tens of
        // microseconds); from the ninth on, a sorted index answers by binary search.
        let looked = run.lookups.fetch_add(1, Ordering::Relaxed);
        let matching: Vec<usize> = match run.by_config.get() {
            None if looked < 8 => run
                .records
                .clone()
                .filter(|&i| l.config_keys[i] == key || l.config_keys[i] == UNKNOWN)
                .collect(),
            _ => {
                let by_config = run.by_config.get_or_init(|| {
                    let mut keys: Vec<(u64, usize)> =
                        run.records.clone().map(|i| (l.config_keys[i], i)).collect();
                    keys.sort_unstable();
                    keys
                });
                [key, UNKNOWN]
                    .iter()
                    .flat_map(|&k| {
                        let from = by_config.partition_point(|&(h, _)| h < k);
                        by_config[from..]
                            .iter()
                            .take_while(move |&&(h, _)| h == k)
                            .map(|&(_, i)| i)
                    })
                    .collect()
            }
        };
        let mut found = Vec::new();
        for i in matching {
            let a = self.record(l, run, i)?;
            if a.config == *config {
                found.push(a);
            }
        }
        if found.is_empty() {
            return None;
        }
        // What the whole parse checks of these records: sorted, none repeated.
        found.sort_by(|a, b| a.id().cmp(&b.id()));
        found
            .windows(2)
            .all(|w| w[0].id() < w[1].id())
            .then_some(found)
    }
}

impl Layout {
    fn of(scanned: Scanned) -> Layout {
        let records = (0..scanned.starts.len()).map(|_| OnceLock::new()).collect();
        let kernels = scanned
            .kernels
            .into_iter()
            .map(|(name, records)| KernelRun {
                name,
                records,
                by_config: OnceLock::new(),
                lookups: AtomicUsize::new(0),
                all: OnceLock::new(),
            })
            .collect();
        Layout {
            starts: scanned.starts,
            end: scanned.end,
            config_keys: scanned.config_keys,
            kernels,
            tables: scanned.tables,
            records,
        }
    }
}

impl Source {
    /// The whole text of a lock in a file: a `kart.lock` read again by its path, a
    /// bundle's section from the file opened (UTF-8 checked, named `shown`).
    fn text(&self, shown: &Path) -> Result<String> {
        match self {
            Source::Text(text) => Ok(text.clone()),
            Source::File {
                path,
                lock_file: true,
                ..
            } => read_text(path, Limit::LOCK),
            Source::File { file, path, .. } => {
                let bytes = file.read_exact(0, file.len()).at("read", path)?;
                text_of(bytes, shown)
            }
        }
    }
}

fn run<'a>(l: &'a Layout, kernel: &str) -> Option<&'a KernelRun> {
    l.kernels
        .binary_search_by(|k| k.name.as_str().cmp(kernel))
        .ok()
        .map(|i| &l.kernels[i])
}

fn record_range(l: &Layout, i: usize) -> Range<u64> {
    l.starts[i]..l.starts.get(i + 1).copied().unwrap_or(l.end)
}

/// A config's table body as `kart build` writes it (`A = 7\nB = "x"`).
fn config_text(config: &Config) -> Option<String> {
    toml::to_string(config)
        .ok()
        .map(|t| t.trim_end().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::model::ParamValue;
    use crate::store::lockfile::LOCK_FILE;
    use crate::store::testlock::generated;

    #[test]
    fn lookups_of_a_lazily_read_lock_answer_as_the_whole_parse() {
        for seed in 1..=12 {
            let mut lock = generated(seed);
            // Pruned records after the kernel tables, or (no tables) after the artifacts.
            if seed % 2 == 0 {
                let a = &lock.artifacts[seed as usize];
                let pruned = crate::store::lockfile::PrunedArtifact::new(
                    a.kernel.clone(),
                    a.config.clone(),
                    "sm_100".into(),
                    ArtifactKind::Cubin,
                    a.key.clone(),
                    Default::default(),
                );
                lock = lock.with_pruned(vec![pruned]);
            }
            if seed % 4 == 0 {
                lock = lock.with_kernels(Vec::new());
            }
            let text = lock.to_text();
            let index = LockIndex::from_text(text.clone(), Path::new(LOCK_FILE)).unwrap();
            assert!(
                !index.is_whole(),
                "seed {seed}: kart's own layout is read lazily"
            );
            let mut names: Vec<&str> = lock.artifacts.iter().map(|a| a.kernel.as_str()).collect();
            names.dedup();
            assert_eq!(index.kernels().unwrap(), names);
            // Every config present, and configs that are not (another kernel's, a
            // param changed), asked in an order of their own.
            let mut asked: Vec<(String, Config)> = lock
                .artifacts
                .iter()
                .map(|a| (a.kernel.clone(), a.config.clone()))
                .collect();
            asked.dedup();
            let more: Vec<(String, Config)> = asked
                .iter()
                .map(|(k, c)| {
                    let mut c = c.clone();
                    c.insert("BLOCK", ParamValue::Int(3));
                    (k.clone(), c)
                })
                .chain([("none".to_string(), Config::default())])
                .collect();
            asked.extend(more);
            asked.reverse();
            for (kernel, config) in &asked {
                let lazy: Vec<&LockedArtifact> = index.of_config(kernel, config).unwrap();
                let whole: Vec<&LockedArtifact> = lock.of_config(kernel, config).iter().collect();
                assert_eq!(lazy, whole, "seed {seed}: {kernel}[{config}]");
                for a in &whole {
                    assert_eq!(
                        index.find(kernel, config, &a.target, a.kind).unwrap(),
                        Some(*a)
                    );
                }
            }
            assert!(
                !index.is_whole(),
                "seed {seed}: lookups parse only what they touch"
            );
            for kernel in ["attn", "gemm", "gemm_v2", "tiny", "nope"] {
                assert_eq!(index.records(kernel).unwrap(), lock.of_kernel(kernel));
                assert_eq!(index.launch(kernel), lock.launch(kernel));
            }
            assert_eq!(index.whole().unwrap(), &lock);
        }
    }

    #[test]
    fn locks_laid_out_otherwise_are_parsed_whole_at_open() {
        let lock = generated(7);
        let text = lock.to_text();
        let some = &lock.artifacts[3];
        // A hand edit moving a field, an older version, a multi-line string: each is
        // read whole, and answers the same.
        let first = &lock.artifacts[0];
        let moved = text.replacen(
            &format!(
                "kernel = \"{}\"\ntarget = \"{}\"\n",
                first.kernel, first.target
            ),
            &format!(
                "target = \"{}\"\nkernel = \"{}\"\n",
                first.target, first.kernel
            ),
            1,
        );
        assert_ne!(moved, text);
        let older = text.replacen("version = 3", "version = 2", 1);
        let multiline = text.replacen("nvcc = \"13.0.88\"", "nvcc = \"\"\"13.0.88\"\"\"", 1);
        for edited in [moved, older, multiline] {
            let index = LockIndex::from_text(edited, Path::new(LOCK_FILE)).unwrap();
            assert!(index.is_whole());
            let found = index.find(&some.kernel, &some.config, &some.target, some.kind);
            assert_eq!(found.unwrap(), Some(some));
        }
        // A lock the whole parse refuses is refused at open, as before.
        let unsorted = text.replacen("kernel = \"attn\"", "kernel = \"zzz\"", 1);
        let err = LockIndex::from_text(unsorted, Path::new(LOCK_FILE)).unwrap_err();
        assert!(err.to_string().contains("out of order"), "{err}");
    }

    #[test]
    fn a_malformed_record_fails_when_touched_with_its_line_and_not_elsewhere() {
        let lock = generated(3);
        let text = lock.to_text();
        let victim = lock.of_kernel("gemm")[0].clone();
        let bad_digest = format!("digest = \"{}\"", victim.digest);
        let bad = text.replacen(&bad_digest, "digest = \"../../etc/passwd\"", 1);
        let line = bad.lines().position(|l| l.contains("etc/passwd")).unwrap() + 1;
        let index = LockIndex::from_text(bad, Path::new(LOCK_FILE)).unwrap();
        // Another kernel: found, the malformed record not read.
        let other = &lock.of_kernel("tiny")[0];
        assert_eq!(
            index
                .find(&other.kernel, &other.config, &other.target, other.kind)
                .unwrap(),
            Some(other)
        );
        assert_eq!(index.records("attn").unwrap(), lock.of_kernel("attn"));
        // Its config: refused, naming the file, the record's line and what is wrong.
        let err = index.of_config("gemm", &victim.config).unwrap_err();
        let Error::InvalidFile {
            path,
            line: at,
            message,
            ..
        } = &err
        else {
            panic!("{err}")
        };
        assert_eq!(path, Path::new(LOCK_FILE));
        assert!(message.contains("64 lower-case hex"), "{message}");
        // The whole parse points at the record's `[[artifact]]` header.
        assert!(
            *at <= line && line - at < 8,
            "error at line {at}, digest at {line}"
        );
        assert!(index.records("gemm").is_err());
        assert!(index.whole().is_err());
        // A record that is not TOML: the same, with the parser's line.
        let broken = text.replacen(&bad_digest, "digest = [", 1);
        let index = LockIndex::from_text(broken, Path::new(LOCK_FILE)).unwrap();
        assert!(
            index
                .find(&other.kernel, &other.config, &other.target, other.kind)
                .is_ok()
        );
        let err = index.of_config("gemm", &victim.config).unwrap_err();
        assert!(
            matches!(err, Error::InvalidFile { line, .. } if line > 5),
            "{err}"
        );
    }

    #[test]
    fn one_record_is_read_from_a_file_as_the_whole_lock_would_find_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOCK_FILE);
        assert!(
            LockIndex::read(&path, Path::new(LOCK_FILE))
                .unwrap()
                .is_none()
        );
        let lock = generated(5);
        std::fs::write(&path, lock.to_text()).unwrap();
        let index = LockIndex::read(&path, Path::new(LOCK_FILE))
            .unwrap()
            .unwrap();
        for a in &lock.artifacts {
            assert_eq!(
                index.find(&a.kernel, &a.config, &a.target, a.kind).unwrap(),
                Some(a)
            );
        }
        let a = &lock.artifacts[0];
        assert_eq!(
            index.find(&a.kernel, &a.config, "sm_100", a.kind).unwrap(),
            None
        );
    }

    #[test]
    fn the_index_is_shared_across_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<LockIndex>();
        send_sync::<crate::runtime::Runtime>();
        let lock = generated(9);
        let index = LockIndex::from_text(lock.to_text(), Path::new(LOCK_FILE)).unwrap();
        std::thread::scope(|s| {
            for t in 0..4 {
                let (index, lock) = (&index, &lock);
                s.spawn(move || {
                    for a in lock.artifacts.iter().skip(t) {
                        let found = index.find(&a.kernel, &a.config, &a.target, a.kind);
                        assert_eq!(found.unwrap(), Some(a));
                    }
                });
            }
        });
    }
}
