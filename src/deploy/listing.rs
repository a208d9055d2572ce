//! `kart ls`: the lock's records as rows, with whether each blob is in the local store
//! and the GPUs that attested it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use crate::cubin::EntryInfo;
use crate::deploy::attest::AttestFile;
use crate::error::{Error, Result};
use crate::model::{ArtifactKind, Config, ParamValue};
use crate::store::lock_lines::{EntryRef, ParamRef, RecordRef};
use crate::store::lockfile::LockedArtifact;
use crate::store::sidecar::Sidecar as _;
use crate::workspace::Workspace;

/// Past this size (about 2,000 records), `kart ls` lists the blob folders beside
/// reading kart.lock, instead of a `stat` per row after it.
const LIST_BLOBS_PAST_LOCK_BYTES: u64 = 1 << 20;

/// One row of `kart ls`, borrowed from the lock's record.
#[derive(Debug, Serialize)]
pub struct ListRow<'a> {
    /// Kernel.
    pub kernel: &'a str,
    /// Config.
    pub config: &'a Config,
    /// Target.
    pub target: &'a str,
    /// cubin or ptx.
    pub kind: ArtifactKind,
    /// Bytes.
    pub size: u64,
    /// Max registers over the entries.
    pub registers: u32,
    /// Max static shared memory over the entries.
    pub shared_bytes: u64,
    /// Spilled bytes (stores + loads) over all entries.
    pub spill_bytes: u64,
    /// Whether the blob is in the local store.
    pub local: bool,
    /// The blob digest.
    pub digest: &'a str,
    /// GPUs on which kart.attest records the blob as proven (`H200`).
    pub attested: &'a [String],
    /// The config's derived params.
    pub derived: &'a BTreeMap<String, i64>,
    /// Its entries by name, a template entry with its instance (`gemm<128, 64>`).
    pub entries: EntryNames<'a>,
}

/// An artifact's entries by name, a template entry with its instance.
#[derive(Debug, Clone, Copy)]
pub struct EntryNames<'a>(&'a [EntryInfo]);

impl<'a> EntryNames<'a> {
    /// Each entry's name or instance.
    pub fn iter(&self) -> impl Iterator<Item = &'a str> + use<'a> {
        self.0
            .iter()
            .map(|e| e.instance.as_deref().unwrap_or(&e.name))
    }

    /// Joined by `sep`.
    pub fn join(&self, sep: &str) -> String {
        self.iter().collect::<Vec<_>>().join(sep)
    }
}

impl Serialize for EntryNames<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

/// The records `kart ls` lists, with what each row says beside the record.
#[derive(Debug)]
pub struct Listing {
    /// The records listed, in the lock's order.
    records: Vec<LockedArtifact>,
    /// Whether each record's blob is in the local store.
    local: Vec<bool>,
    /// Digest → the GPUs kart.attest records it proven on (sorted, each once).
    attested: HashMap<String, Vec<String>>,
}

impl Listing {
    /// How many rows.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether there is no row.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The rows, in the lock's order.
    pub fn rows(&self) -> impl ExactSizeIterator<Item = ListRow<'_>> {
        self.records
            .iter()
            .zip(&self.local)
            .map(|(a, &local)| ListRow {
                kernel: &a.kernel,
                config: &a.config,
                target: &a.target,
                kind: a.kind,
                size: a.size,
                registers: a.entries.iter().map(|e| e.registers).max().unwrap_or(0),
                shared_bytes: a.entries.iter().map(|e| e.shared_bytes).max().unwrap_or(0),
                spill_bytes: a
                    .entries
                    .iter()
                    .map(|e| e.spill_store_bytes + e.spill_load_bytes)
                    .sum(),
                local,
                digest: &a.digest,
                attested: self
                    .attested
                    .get(a.digest.as_str())
                    .map_or(&[], Vec::as_slice),
                derived: &a.derived,
                entries: EntryNames(&a.entries),
            })
    }
}

impl Serialize for Listing {
    /// The rows as a JSON array (what `kart ls --json` prints).
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_seq(self.rows())
    }
}

/// `-p` values that match no record of the listed kernels: the values each param has
/// in the lock.
fn no_match(
    artifacts: &[LockedArtifact],
    in_kernels: &dyn Fn(&LockedArtifact) -> bool,
    wanted: &BTreeMap<String, ParamValue>,
) -> Error {
    let mut values: BTreeMap<&str, BTreeSet<&ParamValue>> = Default::default();
    for a in artifacts.iter().filter(|a| in_kernels(a)) {
        for (name, value) in a.config.iter() {
            values.entry(name).or_default().insert(value);
        }
    }
    let lines: Vec<String> = wanted
        .keys()
        .map(|name| match values.get(name.as_str()) {
            Some(v) => format!(
                "{name}: {}",
                v.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => format!(
                "{name}: not a param of the listed kernels{}",
                crate::suggest::did_you_mean(name, values.keys().copied())
                    .map(|g| format!(" ({g})"))
                    .unwrap_or_default()
            ),
        })
        .collect();
    let given: Vec<String> = wanted.iter().map(|(n, v)| format!("{n}={v}")).collect();
    Error::usage(
        format!("no artifact of kart.lock has {}", given.join(",")),
        Some(format!("values in kart.lock: {}", lines.join("; "))),
    )
}

/// The lock as rows: every artifact, or those of `kernels` whose config has every value
/// of `params`. A kernel the lock does not list is an error naming those it does.
pub fn list(
    ws: &Workspace,
    kernels: &[String],
    params: &[(String, ParamValue)],
) -> Result<Listing> {
    let attest = AttestFile::read(
        &ws.project.root.join(crate::deploy::attest::ATTEST_FILE),
        std::path::Path::new(crate::deploy::attest::ATTEST_FILE),
    )?;
    // A large lock lists thousands of blobs: the blob folders are listed on a second
    // thread while the lock is read.
    let large = std::fs::metadata(crate::store::lockfile::lock_path(&ws.project.root))
        .is_ok_and(|m| m.len() > LIST_BLOBS_PAST_LOCK_BYTES);
    let (lock, listing) = std::thread::scope(|s| {
        let listing = large.then(|| s.spawn(|| ws.store.list_blobs()));
        let lock = ws.lock();
        let listing = listing.map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        (lock, listing)
    });
    let lock = lock?;
    let listed: BTreeSet<&str> = lock.artifacts.iter().map(|a| a.kernel.as_str()).collect();
    if let Some(unknown) = kernels.iter().find(|k| !listed.contains(k.as_str())) {
        let names: Vec<&str> = listed.iter().copied().collect();
        return Err(Error::usage(
            format!(
                "kart.lock lists no kernel `{}`; it lists {}",
                crate::untrusted::for_terminal(unknown),
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ),
            Some(
                match crate::suggest::did_you_mean(unknown, listed.iter().copied()) {
                    Some(guess) => guess,
                    None => "run `kart build KERNEL` to add a kernel to the lock".into(),
                },
            ),
        ));
    }
    let wanted: BTreeMap<String, ParamValue> = params.iter().cloned().collect();
    let in_kernels = |a: &LockedArtifact| kernels.is_empty() || kernels.contains(&a.kernel);
    if !wanted.is_empty()
        && !lock
            .artifacts
            .iter()
            .any(|a| in_kernels(a) && a.config.matches(&wanted))
    {
        return Err(no_match(&lock.artifacts, &in_kernels, &wanted));
    }
    let rows: Vec<LockedArtifact> = lock
        .artifacts
        .into_iter()
        .filter(|a| in_kernels(a))
        .filter(|a| a.config.matches(&wanted))
        .collect();
    let local: Vec<bool> = match &listing {
        Some(listing) => rows
            .iter()
            .map(|a| listing.has(&a.digest, |d| ws.store.has_blob(d)))
            .collect(),
        None => {
            let digests: Vec<&str> = rows.iter().map(|a| a.digest.as_str()).collect();
            ws.store.have_blobs(&digests)
        }
    };
    let attested = attest
        .gpus_by_digest()
        .into_iter()
        .map(|(d, gpus)| {
            (
                d.to_string(),
                gpus.into_iter().map(str::to_string).collect(),
            )
        })
        .collect();
    Ok(Listing {
        records: rows,
        local,
        attested,
    })
}

/// `kart ls --json`, written while the lock is read: the rows as pretty JSON, the
/// bytes [`list`]'s listing serializes to, held only as that text (the records are
/// read one at a time, never kept).
#[derive(Debug)]
pub struct JsonRows {
    /// Each piece of the lock's rows, in order, every row as `,\n  {…}`.
    pieces: Vec<Vec<u8>>,
}

impl JsonRows {
    /// Writes the array: the rows, then a newline.
    pub fn write_to(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        let mut rows = self.pieces.iter().filter(|p| !p.is_empty());
        let Some(first) = rows.next() else {
            return out.write_all(b"[]\n");
        };
        // The first row's separator is the array's opening.
        out.write_all(b"[")?;
        out.write_all(first.get(1..).unwrap_or_default())?;
        for piece in rows {
            out.write_all(piece)?;
        }
        out.write_all(b"\n]\n")
    }
}

/// What one piece of the lock gave.
#[derive(Default)]
struct JsonPiece<'a> {
    out: Vec<u8>,
    rows: usize,
    /// The kernels of its records, each once (the lock is sorted).
    kernels: Vec<&'a str>,
    /// Whether a row could not be written (then [`list`] answers).
    failed: bool,
}

/// A row of `kart ls --json` from a record borrowed from the lock's text: the fields
/// of [`ListRow`], in its order.
#[derive(Serialize)]
struct JsonRow<'r, 'a> {
    kernel: &'a str,
    config: Pairs<'r, 'a, ParamRef<'a>>,
    target: &'a str,
    kind: ArtifactKind,
    size: u64,
    registers: u32,
    shared_bytes: u64,
    spill_bytes: u64,
    local: bool,
    digest: &'a str,
    attested: &'r [&'r str],
    derived: Pairs<'r, 'a, i64>,
    entries: Instances<'r, 'a>,
}

/// Sorted (name, value) pairs, as a map.
struct Pairs<'r, 'a, V>(&'r [(&'a str, V)]);

impl<V: Serialize> Serialize for Pairs<'_, '_, V> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

/// The entries' names or instances, as [`EntryNames`] gives them.
struct Instances<'r, 'a>(&'r [EntryRef<'a>]);

impl Serialize for Instances<'_, '_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|e| e.instance.unwrap_or(e.name)))
    }
}

/// [`list`] for `--json`, written row by row as the lock is read: the same bytes, in a
/// fraction of the time and memory at 100,000 artifacts. `None` where [`list`] must
/// answer: no lock, a lock not in the layout kart writes, any error in it, a kernel it
/// does not list, `-p` values no record has.
pub fn json(
    ws: &Workspace,
    kernels: &[String],
    params: &[(String, ParamValue)],
) -> Result<Option<JsonRows>> {
    let attest = AttestFile::read(
        &ws.project.root.join(crate::deploy::attest::ATTEST_FILE),
        std::path::Path::new(crate::deploy::attest::ATTEST_FILE),
    )?;
    let path = crate::store::lockfile::lock_path(&ws.project.root);
    let large = std::fs::metadata(&path).is_ok_and(|m| m.len() > LIST_BLOBS_PAST_LOCK_BYTES);
    // The blob folders are listed on a second thread while the lock is read.
    let (text, listing) = std::thread::scope(|s| {
        let listing = large.then(|| s.spawn(|| ws.store.list_blobs()));
        let text = crate::text::read_text(&path, crate::text::Limit::LOCK);
        let listing = listing.map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        (text, listing)
    });
    let Ok(text) = text else {
        return Ok(None);
    };
    let local = |digest: &str| match &listing {
        Some(listing) => listing.has(digest, |d| ws.store.has_blob(d)),
        None => ws.store.has_blob(digest),
    };
    let attested = attest.gpus_by_digest();
    let wanted: BTreeMap<String, ParamValue> = params.iter().cloned().collect();
    let Some(pieces) = json_pieces(&text, kernels, &wanted, &local, &attested) else {
        return Ok(None);
    };
    let listed = |k: &String| pieces.iter().any(|p| p.kernels.contains(&k.as_str()));
    let rows: usize = pieces.iter().map(|p| p.rows).sum();
    if !kernels.iter().all(listed) || (rows == 0 && !wanted.is_empty()) {
        return Ok(None);
    }
    Ok(Some(JsonRows {
        pieces: pieces.into_iter().map(|p| p.out).collect(),
    }))
}

/// The rows of `kart ls --json` for lock text `text`, in pieces read on as many
/// threads as there are cores; `None` where the general path must answer.
fn json_pieces<'t>(
    text: &'t str,
    kernels: &[String],
    wanted: &BTreeMap<String, ParamValue>,
    local: &(dyn Fn(&str) -> bool + Sync),
    attested: &HashMap<&str, Vec<&str>>,
) -> Option<Vec<JsonPiece<'t>>> {
    use serde_json::ser::{Formatter as _, PrettyFormatter};
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let capacity = text.len() / threads;
    let start = || JsonPiece {
        out: Vec::with_capacity(capacity),
        ..JsonPiece::default()
    };
    let each = |piece: &mut JsonPiece<'t>, r: &RecordRef<'t>| {
        if piece.kernels.last() != Some(&r.kernel) {
            piece.kernels.push(r.kernel);
        }
        if !(kernels.is_empty() || kernels.iter().any(|k| k == r.kernel)) || !r.matches(wanted) {
            return;
        }
        let entries = r.entries();
        let row = JsonRow {
            kernel: r.kernel,
            config: Pairs(r.config()),
            target: r.target,
            kind: r.kind,
            size: r.size,
            registers: entries.iter().map(|e| e.registers).max().unwrap_or(0),
            shared_bytes: entries.iter().map(|e| e.shared_bytes).max().unwrap_or(0),
            spill_bytes: entries
                .iter()
                .map(|e| e.spill_store_bytes + e.spill_load_bytes)
                .sum(),
            local: local(r.digest),
            digest: r.digest,
            attested: attested.get(r.digest).map_or(&[], Vec::as_slice),
            derived: Pairs(r.derived()),
            entries: Instances(entries),
        };
        // An element of the array: the formatter one level in.
        let mut formatter = PrettyFormatter::new();
        let _ = formatter.begin_array(&mut std::io::sink());
        piece.out.extend_from_slice(b",\n  ");
        let mut ser = serde_json::Serializer::with_formatter(&mut piece.out, formatter);
        piece.failed |= row.serialize(&mut ser).is_err();
        piece.rows += 1;
    };
    crate::store::lock_stream::read_checked(text, threads, start, each)
        .filter(|pieces| !pieces.iter().any(|p| p.failed))
}
