//! Verified copies between two storages: `kart fetch` (a remote into the local store),
//! `kart push` and the build's `--push` (the local store into a remote).
//!
//! Trust follows the lock: from any remote kart takes only blobs whose digest the lock
//! names, and every storage checks bytes against their digest on the way in and out.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde::Serialize;

use crate::error::{Error, RemoteFailure, Result};
use crate::model::Config;
use crate::pool::parallel_map;
use crate::project::Project;
use crate::remote::layered::Layered;
use crate::remote::{REMOTE_ENV, Remote, RemoteSettings};
use crate::resolve::{Capability, JitPolicy};
use crate::store::lockfile::{LockedArtifact, Lockfile};
use crate::store::{ActionEntry, Storage};
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
/// (and an object store's `endpoint`, `region` and `anonymous`) only when it is
/// kart.toml's URL: trust belongs to a server, not to a variable.
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
        // Where the server is and how to ask it belong to kart.toml's URL too.
        settings.endpoint = c.endpoint.clone();
        settings.region = c.region.clone();
        settings.anonymous = c.anonymous;
    }
    Some(settings)
}

/// The hint for commands that need a remote and have none.
pub fn no_remote_error() -> Error {
    Error::usage(
        "no remote cache configured",
        Some(format!(
            "add `[remote] url = \"http://host:port/path\"` (or \"s3://bucket/prefix\") to kart.toml, set {REMOTE_ENV}, or pass --remote"
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
    store: &dyn Storage,
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
        .filter(|&(d, size)| !matches!(store.has_blob(d, Some(size)), Ok(true)))
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
/// local store has and the remote lacks.
pub fn push(
    store: &dyn Storage,
    remote: &Remote,
    lock: &Lockfile,
    reporter: &dyn TransferReporter,
) -> Result<PushReport> {
    let items: Vec<Pushed<'_>> = lock
        .artifacts
        .iter()
        .map(|a| Pushed {
            key: &a.key,
            digest: &a.digest,
            size: a.size,
        })
        .collect();
    push_items(store, remote, &items, reporter)
}

/// One artifact to push: its key, and its blob's digest and size.
#[derive(Clone, Copy, Debug)]
pub struct Pushed<'a> {
    /// The action key (its entry goes up).
    pub key: &'a str,
    /// The blob's sha256.
    pub digest: &'a str,
    /// The blob's size.
    pub size: u64,
}

/// Uploads the blobs and action entries of `items` the remote lacks: asks which blobs
/// it is missing (in batches, on `remote.jobs` threads), uploads those, then the
/// entries, so that a reader that finds an entry can always find its blob.
pub fn push_items(
    store: &dyn Storage,
    remote: &Remote,
    items: &[Pushed<'_>],
    reporter: &dyn TransferReporter,
) -> Result<PushReport> {
    remote.writable()?;
    let sizes: BTreeMap<&str, u64> = items.iter().map(|i| (i.digest, i.size)).collect();
    let entries: BTreeSet<&str> = items.iter().map(|i| i.key).collect();
    let mut report = PushReport::default();
    type Blobs<'b> = Vec<(&'b str, u64)>;
    let (local, absent): (Blobs<'_>, Blobs<'_>) = sizes
        .into_iter()
        .partition(|&(d, size)| matches!(store.has_blob(d, Some(size)), Ok(true)));
    report.not_local = absent.into_iter().map(|(d, _)| d.to_string()).collect();
    let stored_entries: Vec<ActionEntry> = entries
        .into_iter()
        .filter_map(|k| store.get_entry(k).ok().flatten())
        .collect();
    reporter.start(
        local.len() + stored_entries.len(),
        local.iter().map(|(_, s)| s).sum(),
    );
    // Which blobs the remote lacks: one question per batch where the server can answer
    // many at once, spread over the transfer threads either way.
    let batch = local.len().div_ceil(remote.jobs).clamp(1, 1000);
    let batches: Vec<&[(&str, u64)]> = local.chunks(batch).collect();
    let mut missing: BTreeSet<String> = BTreeSet::new();
    for answer in parallel_map(&batches, remote.jobs, |b| remote.missing_blobs(b)) {
        missing.extend(answer?);
    }
    report.blobs_present = local.len() - missing.len();
    for _ in 0..report.blobs_present {
        reporter.moved(0);
    }
    let missing: Vec<&String> = missing.iter().collect();
    let uploaded_bytes = AtomicU64::new(0);
    let uploads = parallel_map(&missing, remote.jobs, |digest| -> Result<()> {
        let bytes = store.get_blob(digest, None)?.ok_or_else(|| {
            Error::usage(
                format!("blob {digest} left the local store during the push"),
                None,
            )
        })?;
        remote.put_blob(digest, &bytes)?;
        uploaded_bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        reporter.moved(bytes.len() as u64);
        Ok(())
    });
    for r in uploads {
        r?;
        report.blobs_uploaded += 1;
    }
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
