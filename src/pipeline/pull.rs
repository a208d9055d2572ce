//! The build's read-through: before compiling, ask the remote for what the store lacks.
//! A trusted remote's action entry (validated, and describing exactly the planned
//! artifact) stands in for compiling; from an untrusted one only blobs whose digest the
//! lock names for the same key are taken. Every read goes through [`Layered`], so each
//! blob is checked against its digest before the store keeps it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::error::{Error, RemoteFailure, Result};
use crate::pool::parallel_map;
use crate::remote::Remote;
use crate::remote::layered::Layered;
use crate::store::lockfile::Lockfile;
use crate::store::{ActionEntry, Storage, Store};

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
                        Store::put_entry(store, &entry)?;
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
