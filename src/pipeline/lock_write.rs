//! Writing kart.lock after a build: one record per planned artifact the store has,
//! every record checked against its action entry, and a failure for any artifact the
//! build made that cannot be recorded.

/// A record of the lock being written: one of the old lock, or one made now. Two words
/// where a `Cow` would be a whole record: the lock of a no-op build at 100,000 artifacts
/// is a list of references.
enum Record<'a> {
    Kept(&'a LockedArtifact),
    Made(Box<LockedArtifact>),
}

impl Record<'_> {
    fn into_owned(self) -> LockedArtifact {
        match self {
            Record::Kept(a) => a.clone(),
            Record::Made(a) => *a,
        }
    }
}

impl std::ops::Deref for Record<'_> {
    type Target = LockedArtifact;
    fn deref(&self) -> &LockedArtifact {
        match self {
            Record::Kept(a) => a,
            Record::Made(a) => a,
        }
    }
}

use crate::error::{Error, Result};
use crate::pipeline::plan::Planned;
use crate::pipeline::reporter::BuildReporter;
use crate::project::Project;
use crate::store::ActionEntry;
use crate::store::lockfile::{LockedArtifact, LockedKernel, Lockfile, PrunedArtifact, lock_path};
use crate::workspace::Workspace;

/// The lock entry of a stored action entry.
fn locked_artifact(project: &Project, p: &Planned, entry: &ActionEntry) -> LockedArtifact {
    LockedArtifact {
        kernel: project.kernels[p.kernel].name.clone(),
        config: p.config.clone(),
        target: p.target.to_string(),
        kind: p.kind,
        key: p.key.clone(),
        digest: entry.digest.clone(),
        size: entry.size,
        nvcc: entry.nvcc_release.clone(),
        entries: entry.entries.clone(),
        derived: p.derived.clone(),
    }
}

/// Writes the lock for every planned artifact the store has (or the old lock already
/// listed with the same key), and `pruned`, the records of what `[prune]` left out. A record the old lock had for the same key is kept only
/// while no action entry (the store's, or one taken from a trusted remote) names
/// another digest for it; those that do are kept too, unchanged, and pushed to
/// `mismatches`. Every artifact of `built` (what this build compiled or took from a
/// store) must be recorded: one that cannot be (its action entry unreadable, its blob
/// gone) fails the build before the lock is written, naming the artifact and why.
/// Returns how many artifacts the lock lists, whether the file changed, and how many of its records were kept
/// with an action entry in the store found to agree.
#[allow(clippy::too_many_arguments)]
pub(super) fn write_lock(
    ws: &Workspace,
    planned: &[Planned],
    built: &std::collections::HashSet<&str>,
    from_remote: &std::collections::HashMap<String, ActionEntry>,
    pruned: Vec<PrunedArtifact>,
    old: &Lockfile,
    mismatches: &mut Vec<crate::workspace::DigestMismatch>,
    reporter: &dyn BuildReporter,
) -> Result<(usize, bool, usize)> {
    // A record of a lock in the current format with the same key and identity is kept
    // as it is (the lock is the trust root), once its entry, if any, agrees. Found by
    // identity in the sorted lock (each identity once), then compared by key.
    let current = old.version >= crate::store::lockfile::LOCK_VERSION_UNPRUNED;
    let mut checked = ws.store.checked();
    // Records kept from the old lock are borrowed: a lock that does not change is never
    // copied (at 100,000 artifacts, a copy is over a hundred megabytes).
    let mut artifacts: Vec<Record<'_>> = Vec::with_capacity(planned.len());
    let mut unrecorded = Vec::new();
    let mut agreed = 0;
    for p in planned {
        let kernel = &ws.project.kernels[p.kernel].name;
        let target = p.target.to_string();
        let same = current
            .then(|| old.find(kernel, &p.config, &target, p.kind))
            .flatten()
            .filter(|a| a.key == p.key);
        if let Some(kept) = same {
            // Agreed before, with the entry file unchanged since: nothing to read.
            let binding = crate::store::checked::binding(kept);
            if ws
                .store
                .entry_state(&p.key)
                .is_some_and(|state| checked.agrees(&binding, state))
            {
                agreed += 1;
                artifacts.push(Record::Kept(kept));
                continue;
            }
            let local = ws.stored_entry_with_state(&p.key, reporter);
            if let Some((entry, state)) = &local {
                if entry.digest == kept.digest && crate::workspace::same_artifact(kept, entry) {
                    agreed += 1;
                    checked.record(binding, *state);
                } else {
                    checked.forget(&binding);
                }
            }
            let entry = local
                .map(|(e, _)| (e, "the store".to_string()))
                .or_else(|| {
                    from_remote
                        .get(&p.key)
                        .map(|e| (e.clone(), "the trusted remote".to_string()))
                });
            if let Some((entry, from)) = entry
                && entry.digest != kept.digest
            {
                mismatches.push(crate::workspace::DigestMismatch {
                    artifact: kept.describe(),
                    key: kept.key.clone(),
                    lock_digest: kept.digest.clone(),
                    entry_digest: entry.digest.clone(),
                    entry_from: from,
                });
            }
            artifacts.push(Record::Kept(kept));
            continue;
        }
        let why = match ws.recorded_entry(&p.key) {
            Ok(entry) => {
                artifacts.push(Record::Made(Box::new(locked_artifact(
                    &ws.project,
                    p,
                    &entry,
                ))));
                continue;
            }
            Err(why) => why,
        };
        if let Some(entry) = from_remote.get(&p.key) {
            artifacts.push(Record::Made(Box::new(locked_artifact(
                &ws.project,
                p,
                entry,
            ))));
        } else if let Some(kept) = old
            .find(kernel, &p.config, &p.target.to_string(), p.kind)
            .filter(|a| a.key == p.key)
        {
            artifacts.push(Record::Kept(kept));
        } else if built.contains(p.key.as_str()) {
            unrecorded.push(format!("  {}: {why}", p.describe(&ws.project)));
        }
    }
    // Never a lock with fewer records than the build produced and exit 0: every later
    // build would compile them again, and `path`/`export` would not find them.
    if !unrecorded.is_empty() {
        return Err(Error::CheckFailed {
            message: format!(
                "{} artifact(s) were built but cannot be recorded in kart.lock (kart.lock was left as it was):\n{}",
                unrecorded.len(),
                unrecorded.join("\n")
            ),
            hint: Some(
                "this is a defect of kart or a damaged store: run `kart verify`, then `kart build` \
                 again; if it repeats, report the lines above"
                    .into(),
            ),
        });
    }
    // A kernel that could not be read keeps its records as they were: fixing its
    // kernel.toml and building again is what changes them.
    let broken: std::collections::BTreeSet<&str> =
        ws.project.broken.iter().map(|b| b.name.as_str()).collect();
    let planned_listed = artifacts.len();
    artifacts.extend(
        old.artifacts
            .iter()
            .filter(|a| broken.contains(a.kernel.as_str()))
            .map(Record::Kept),
    );
    let kernels: Vec<LockedKernel> = ws
        .project
        .kernels
        .iter()
        .filter_map(|k| {
            k.launch.as_ref().map(|l| LockedKernel {
                name: k.name.clone(),
                launch: l.text(),
            })
        })
        .chain(
            old.kernels
                .iter()
                .filter(|k| broken.contains(k.name.as_str()))
                .cloned(),
        )
        .collect();
    let pruned = pruned
        .into_iter()
        .chain(
            old.pruned
                .iter()
                .filter(|p| broken.contains(p.kernel.as_str()))
                .cloned(),
        )
        .collect();
    checked.save();
    sort_records(&mut artifacts);
    let pruned = Lockfile::default().with_pruned(pruned);
    let kernels = Lockfile::default().with_kernels(kernels).kernels;
    crate::failpoint::hit("lock.write", "");
    // The same records as the lock read: nothing to copy, serialize and compare byte by
    // byte.
    let same = old.version == pruned.version
        && old.kernels == kernels
        && old.pruned == pruned.pruned
        && old.artifacts.len() == artifacts.len()
        && old.artifacts.iter().zip(&artifacts).all(|(o, a)| *o == **a);
    let listed = artifacts.len();
    let changed = !same && {
        let lock = Lockfile {
            artifacts: artifacts.into_iter().map(Record::into_owned).collect(),
            kernels,
            ..pruned
        };
        lock.write(&lock_path(&ws.project.root))?
    };
    if planned_listed < planned.len() {
        reporter.note(&format!(
            "kart.lock lists {planned_listed} of the project's {} artifacts; run `kart build` for the rest",
            planned.len()
        ));
    }
    Ok((listed, changed, agreed))
}

/// Sorts records as [`Lockfile::new`] does: by identity, each identity once.
fn sort_records(artifacts: &mut Vec<Record<'_>>) {
    artifacts.sort_by(|a, b| a.id().cmp(&b.id()));
    artifacts.dedup_by(|a, b| a.id() == b.id());
}
