//! Moving artifacts between the local store and the remote: `kart fetch`, `kart push`,
//! and the build's read-through (take what a remote has before compiling) and
//! write-through (`--push`).
//!
//! Trust follows the lock: from any remote kart takes only blobs whose digest the lock
//! names (checked byte for byte); only a trusted remote's action entries may stand in
//! for compiling, and they are validated first.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::error::{Error, RemoteFailure, Result};
use crate::model::Config;
use crate::pool::parallel_map;
use crate::project::Project;
use crate::remote::layered::Layered;
use crate::remote::{REMOTE_ENV, Remote, RemoteSettings};
use crate::resolve::{Capability, JitPolicy};
use crate::store::lockfile::{LockedArtifact, Lockfile};
use crate::store::{ActionEntry, Store};
use crate::target::TargetArch;

/// Progress of a transfer, drawn by the CLI (or ignored).
pub trait TransferReporter: Sync {
    /// The work: how many items and bytes will move.
    fn start(&self, _items: usize, _bytes: u64) {}
    /// One item moved.
    fn moved(&self, _bytes: u64) {}
}

/// A reporter that shows nothing.
impl TransferReporter for crate::pool::Silent {}

/// The remote's settings from `--remote`/`KART_REMOTE` (`url`) or `kart.toml`. A URL
/// given on the command line or in the environment inherits `trusted` and `read_only`
/// only when it is kart.toml's URL: trust belongs to a server, not to a variable.
pub fn remote_settings(project: &Project, url: Option<&str>) -> Option<RemoteSettings> {
    let configured = project.remote.as_ref();
    let url = url
        .map(str::to_string)
        .or_else(|| configured.map(|r| r.url.clone()))?;
    let mut settings = RemoteSettings::new(url.clone());
    // The clocks are the project's, whichever URL is used; trust is the server's.
    if let Some(c) = configured {
        let t = &mut settings.timeouts;
        t.connect = c.connect_timeout.unwrap_or(t.connect);
        t.first_byte = c.first_byte_timeout.unwrap_or(t.first_byte);
        t.stall = c.stall_timeout.unwrap_or(t.stall);
        settings.give_up_after = c.give_up_after.unwrap_or(settings.give_up_after);
        t.min_rate = c.min_rate.unwrap_or(t.min_rate);
        settings.budget = c.budget.unwrap_or(settings.budget);
    }
    if let Some(c) = configured
        && c.url.trim_end_matches('/') == url.trim_end_matches('/')
    {
        settings.trusted = c.trusted;
        settings.read_only = c.read_only;
    }
    Some(settings)
}

/// The hint for commands that need a remote and have none.
pub fn no_remote_error() -> Error {
    Error::usage(
        "no remote cache configured",
        Some(format!(
            "add `[remote] url = \"http://host:port/path\"` to kart.toml, set {REMOTE_ENV}, or pass --remote"
        )),
    )
}

/// What `kart fetch` did.
#[derive(Debug, Default, Serialize)]
pub struct FetchReport {
    /// Distinct blobs selected.
    pub wanted: usize,
    /// Already in the store.
    pub present: usize,
    /// Downloaded and verified now.
    pub fetched: usize,
    /// Bytes downloaded.
    pub bytes: u64,
    /// Digests the remote does not have.
    pub missing: Vec<String>,
    /// Digests that failed (with why).
    pub failed: Vec<String>,
    /// Why the remote was given up (unreachable, timed out, refusing), if it was.
    pub remote_error: Option<String>,
    /// Digests not fetched because the remote was given up.
    pub not_fetched: Vec<String>,
}

/// The artifacts of `lock` to fetch: those of `kernels` (all when empty), for
/// `targets` (all when empty), and, with `device`, only the one each (kernel, config)
/// would load on a GPU of that capability.
pub fn fetch_selection<'a>(
    lock: &'a Lockfile,
    kernels: &[String],
    targets: &[TargetArch],
    device: Option<Capability>,
) -> Vec<&'a LockedArtifact> {
    let wanted: Vec<&LockedArtifact> = lock
        .artifacts
        .iter()
        .filter(|a| kernels.is_empty() || kernels.contains(&a.kernel))
        .filter(|a| targets.is_empty() || targets.iter().any(|t| t.to_string() == a.target))
        .collect();
    let Some(capability) = device else {
        return wanted;
    };
    let mut groups: BTreeMap<(&str, &Config), Vec<&LockedArtifact>> = BTreeMap::new();
    for a in wanted {
        groups.entry((&a.kernel, &a.config)).or_default().push(a);
    }
    groups
        .into_values()
        .filter_map(|group| crate::store::lockfile::pick(&group, capability, JitPolicy::Forbid))
        .collect()
}

/// Downloads every blob of `artifacts` the store lacks, verifies each against the
/// lock's digest and size, and stores it. Stops early when the remote is unreachable,
/// times out or refuses, and says which digests it did not fetch.
pub fn fetch(
    store: &Store,
    remote: &Remote,
    artifacts: &[&LockedArtifact],
    reporter: &dyn TransferReporter,
) -> Result<FetchReport> {
    let mut sizes: BTreeMap<&str, u64> = BTreeMap::new();
    for a in artifacts {
        sizes.insert(&a.digest, a.size);
    }
    let mut report = FetchReport {
        wanted: sizes.len(),
        ..FetchReport::default()
    };
    let todo: Vec<(&str, u64)> = sizes
        .into_iter()
        .filter(|(d, _)| !store.has_blob(d))
        .collect();
    report.present = report.wanted - todo.len();
    reporter.start(todo.len(), todo.iter().map(|(_, s)| s).sum());
    let dead: Mutex<Option<Error>> = Mutex::new(None);
    let stop = AtomicBool::new(false);
    let bytes = AtomicU64::new(0);
    let outcomes = parallel_map(&todo, remote.jobs, |&(digest, size)| {
        if stop.load(Ordering::Relaxed) {
            return Outcome::Skipped;
        }
        let result = Layered::new(store, remote).fill_blob(digest, Some(size));
        match result {
            Ok(true) => {
                bytes.fetch_add(size, Ordering::Relaxed);
                reporter.moved(size);
                Outcome::Done
            }
            Ok(false) => Outcome::Missing,
            Err(e) => {
                // A dead or refusing server fails every request alike: stop at the
                // first, rather than print it once per blob.
                if matches!(
                    e,
                    Error::Remote {
                        failure: RemoteFailure::Unreachable | RemoteFailure::Refused,
                        ..
                    }
                ) {
                    stop.store(true, Ordering::Relaxed);
                    if let Ok(mut d) = dead.lock() {
                        d.get_or_insert(e);
                    }
                    return Outcome::Skipped;
                }
                Outcome::Failed(e.with_causes())
            }
        }
    });
    report.remote_error = dead
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .map(|e| e.with_causes());
    for ((digest, _), outcome) in todo.iter().zip(outcomes) {
        match outcome {
            Outcome::Done => report.fetched += 1,
            Outcome::Missing => report.missing.push(digest.to_string()),
            Outcome::Failed(why) => report.failed.push(why),
            Outcome::Skipped => report.not_fetched.push(digest.to_string()),
        }
    }
    report.bytes = bytes.into_inner();
    Ok(report)
}

enum Outcome {
    Done,
    Missing,
    Failed(String),
    Skipped,
}

/// What `kart push` (or `build --push`) did.
#[derive(Debug, Default, Serialize)]
pub struct PushReport {
    /// Blobs uploaded now.
    pub blobs_uploaded: usize,
    /// Blobs the remote already had.
    pub blobs_present: usize,
    /// Action entries uploaded now.
    pub entries_uploaded: usize,
    /// Action entries the remote already had.
    pub entries_present: usize,
    /// Bytes uploaded.
    pub bytes: u64,
    /// Lock digests not in the local store (nothing to push).
    pub not_local: Vec<String>,
}

/// Uploads every blob the lock names and every action entry of its keys that the
/// local store has and the remote lacks (HEAD first, then PUT).
pub fn push(
    store: &Store,
    remote: &Remote,
    lock: &Lockfile,
    reporter: &dyn TransferReporter,
) -> Result<PushReport> {
    let keys: Vec<(&str, &str)> = lock
        .artifacts
        .iter()
        .map(|a| (a.key.as_str(), a.digest.as_str()))
        .collect();
    push_keys(store, remote, &keys, reporter)
}

/// Uploads the blobs and action entries of (key, digest) pairs.
pub fn push_keys(
    store: &Store,
    remote: &Remote,
    keys: &[(&str, &str)],
    reporter: &dyn TransferReporter,
) -> Result<PushReport> {
    if remote.read_only {
        return Err(Error::usage(
            format!("remote {} is read-only", remote.url()),
            Some("drop --read-only / `read_only = true` to push".into()),
        ));
    }
    let digests: BTreeSet<&str> = keys.iter().map(|(_, d)| *d).collect();
    let entries: BTreeSet<&str> = keys.iter().map(|(k, _)| *k).collect();
    let mut report = PushReport::default();
    let (local, absent): (Vec<&str>, Vec<&str>) =
        digests.into_iter().partition(|d| store.has_blob(d));
    report.not_local = absent.into_iter().map(str::to_string).collect();
    let stored_entries: Vec<ActionEntry> = entries
        .into_iter()
        .filter_map(|k| store.get_entry(k).ok().flatten())
        .collect();
    let total_bytes: u64 = local.iter().filter_map(|d| store.stored_size(d)).sum();
    reporter.start(local.len() + stored_entries.len(), total_bytes);
    let uploaded_bytes = AtomicU64::new(0);
    let blobs = parallel_map(&local, remote.jobs, |digest| -> Result<bool> {
        if remote.has_blob(digest)? {
            reporter.moved(0);
            return Ok(false);
        }
        let bytes = store.read_blob(digest, None)?;
        remote.put_blob(digest, &bytes)?;
        uploaded_bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        reporter.moved(bytes.len() as u64);
        Ok(true)
    });
    for r in blobs {
        if r? {
            report.blobs_uploaded += 1;
        } else {
            report.blobs_present += 1;
        }
    }
    // Entries after blobs: a reader that finds an entry can then always find its blob.
    let uploaded = parallel_map(&stored_entries, remote.jobs, |entry| -> Result<bool> {
        reporter.moved(0);
        if remote.has_entry(&entry.key)? {
            return Ok(false);
        }
        remote.put_entry(entry)?;
        Ok(true)
    });
    for r in uploaded {
        if r? {
            report.entries_uploaded += 1;
        } else {
            report.entries_present += 1;
        }
    }
    report.bytes = uploaded_bytes.into_inner();
    Ok(report)
}

/// What the build's read-through found.
#[derive(Debug, Default)]
pub struct Pulled {
    /// Keys now satisfied, with the entry to write into the lock.
    pub entries: HashMap<String, ActionEntry>,
    /// Blobs downloaded.
    pub blobs: usize,
}

/// An artifact the build wants: its key and what the entry behind it must describe.
#[derive(Clone, Debug)]
pub struct Wanted<'a> {
    /// The action key.
    pub key: &'a str,
    /// The kernel's name.
    pub kernel: &'a str,
    /// The config.
    pub config: &'a crate::model::Config,
    /// The target, as the lock writes it.
    pub target: String,
    /// cubin or PTX.
    pub kind: crate::model::ArtifactKind,
}

impl Wanted<'_> {
    /// Why `entry` is not this artifact's, if it is not.
    fn mismatch(&self, entry: &ActionEntry) -> Option<String> {
        let same = entry.kernel == self.kernel
            && entry.config == *self.config
            && entry.target == self.target
            && entry.kind == self.kind;
        (!same).then(|| {
            format!(
                "the remote's action entry for key {} describes {}, not {}; ignored",
                &self.key[..12.min(self.key.len())],
                crate::store::lockfile::describe(
                    &entry.kernel,
                    &entry.config,
                    &entry.target,
                    entry.kind
                ),
                crate::store::lockfile::describe(self.kernel, self.config, &self.target, self.kind),
            )
        })
    }
}

/// Before compiling: asks the remote for each missing artifact. A trusted remote's
/// action entry (validated) stands in for compiling, and its blob is downloaded and
/// checked unless `entries_only`; from an untrusted remote only blobs whose digest
/// `lock` names for the same key are taken. An unreachable remote is reported once and
/// the rest is compiled locally.
pub fn pull_missing(
    store: &Store,
    remote: &Remote,
    missing: &[Wanted<'_>],
    lock: &Lockfile,
    entries_only: bool,
    note: &(dyn Fn(&str) + Sync),
) -> Pulled {
    let layered = Layered::new(store, remote);
    let gone = AtomicBool::new(false);
    let warned = AtomicUsize::new(0);
    let blobs = AtomicUsize::new(0);
    let warn = |e: &Error| {
        let unreachable = matches!(
            e,
            Error::Remote {
                failure: RemoteFailure::Unreachable,
                ..
            }
        );
        if unreachable {
            if !gone.swap(true, Ordering::Relaxed) {
                note(&format!(
                    "warning: {}; compiling locally without the remote",
                    e.with_causes()
                ));
            }
        } else if warned.fetch_add(1, Ordering::Relaxed) < 10 {
            note(&format!("warning: {}", e.with_causes()));
        }
    };
    let found = parallel_map(
        missing,
        remote.jobs,
        |wanted| -> Option<(String, ActionEntry)> {
            if gone.load(Ordering::Relaxed) {
                return None;
            }
            let key = wanted.key;
            let result = (|| -> Result<Option<ActionEntry>> {
                if remote.trusted {
                    let Some(entry) = remote.get_entry(key)? else {
                        return Ok(None);
                    };
                    // The entry must be exactly the planned artifact: a key field that
                    // matches is not enough to take another config's blob.
                    if let Some(why) = wanted.mismatch(&entry) {
                        if warned.fetch_add(1, Ordering::Relaxed) < 10 {
                            note(&format!("warning: {why}"));
                        }
                        return Ok(None);
                    }
                    if !entries_only && !store.has_blob(&entry.digest) {
                        if !layered.fill_blob(&entry.digest, Some(entry.size))? {
                            return Ok(None);
                        }
                        blobs.fetch_add(1, Ordering::Relaxed);
                    }
                    if !entries_only {
                        store.put_entry(&entry)?;
                    }
                    return Ok(Some(entry));
                }
                let locked = lock
                    .find(wanted.kernel, wanted.config, &wanted.target, wanted.kind)
                    .filter(|a| a.key == key);
                let Some(locked) = locked else {
                    return Ok(None);
                };
                if entries_only || store.has_blob(&locked.digest) {
                    return Ok(None);
                }
                if layered.fill_blob(&locked.digest, Some(locked.size))? {
                    blobs.fetch_add(1, Ordering::Relaxed);
                }
                // The lock is the trust root: with its blob present, its entry stands.
                Ok(None)
            })();
            match result {
                Ok(entry) => entry.map(|e| (key.to_string(), e)),
                Err(e) => {
                    warn(&e);
                    None
                }
            }
        },
    );
    Pulled {
        entries: found.into_iter().flatten().collect(),
        blobs: blobs.into_inner(),
    }
}

/// Shared handle on an opened remote, as build options carry it.
pub type SharedRemote = Arc<Remote>;
