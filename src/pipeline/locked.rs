//! `kart build --locked`: the lock checked against the sources and the toolchain without
//! compiling — every key recomputed and compared, every digest compared with its key's
//! action entry where one exists — and the words for what changed.

use std::path::Path;

use crate::digest::Preimage;
use crate::error::{Error, Result};
use crate::pipeline::key::diff_preimages;
use crate::pipeline::plan::Planned;
use crate::pipeline::prune::{Listed, check_decisions};
use crate::store::lockfile::{
    LOCK_FILE, LockedArtifact, Lockfile, PrunedArtifact, Resources, lock_path,
};
use crate::workspace::Workspace;

/// `--locked`: every selected artifact's key must equal the lock's, and each digest the
/// action entry of its key (where the store or a trusted remote has one).
pub(super) fn check_locked(
    ws: &Workspace,
    toolchain: &crate::toolchain::Toolchain,
    selected: &[&Planned],
    whole: bool,
    remote: Option<&crate::remote::Remote>,
) -> Result<crate::workspace::DigestCheck> {
    let path = lock_path(&ws.project.root);
    let Some(lock) = Lockfile::read(&path, Path::new(LOCK_FILE))? else {
        return Err(Error::CheckFailed {
            message: "there is no kart.lock".into(),
            hint: Some("run `kart build` and commit kart.lock".into()),
        });
    };
    let mut problems = Vec::new();
    let mut same_key = Vec::new();
    // Kernel → (artifacts whose key changed, the changed inputs in first-seen order).
    let mut changed: std::collections::BTreeMap<&str, (Vec<String>, Vec<String>)> =
        std::collections::BTreeMap::new();
    let targets: Vec<String> = selected.iter().map(|p| p.target.to_string()).collect();
    // The lock's records of artifacts and of pruned artifacts, one identity each.
    let (records, unplanned) = pair_with_lock(
        lock.artifacts
            .iter()
            .map(|a| (a.id(), Record::Listed(a)))
            .chain(lock.pruned.iter().map(|a| (a.id(), Record::Pruned(a)))),
        selected.iter().zip(&targets).map(|(p, target)| {
            let kernel = ws.project.kernels[p.kernel].name.as_str();
            (kernel, &p.config, target.as_str(), p.kind)
        }),
    );
    let mut decisions = Vec::new();
    for (p, record) in selected.iter().zip(records) {
        let kernel = &ws.project.kernels[p.kernel].name;
        match record {
            None => problems.push(format!("{}: not in kart.lock", p.describe(&ws.project))),
            Some(record) if record.key() == p.key => {
                decisions.push(Listed {
                    planned: p,
                    resources: record.resources(),
                    pruned: matches!(record, Record::Pruned(_)),
                });
                if let Record::Listed(locked) = record {
                    same_key.push(locked);
                }
            }
            Some(record) => {
                let locked = record;
                let group = changed.entry(kernel.as_str()).or_default();
                group.0.push(p.describe(&ws.project));
                let lines = match p.preimage(ws, toolchain) {
                    Ok(preimage) => explain_change(ws, locked.key(), &preimage),
                    Err(e) => vec![e.to_string()],
                };
                for line in lines {
                    if !group.1.contains(&line) {
                        group.1.push(line);
                    }
                }
            }
        }
    }
    // One edit changes the key of every config of a kernel: say it once per kernel,
    // with the inputs that changed (each named once), not once per artifact.
    for (kernel, (names, inputs)) in changed {
        let shown = match names.as_slice() {
            [one] => one.clone(),
            [first, rest @ ..] => format!("{first} and {} more", rest.len()),
            [] => continue,
        };
        problems.push(format!(
            "{kernel}: {} artifact(s) with changed keys ({shown})",
            names.len()
        ));
        problems.extend(inputs.into_iter().map(|l| format!("    {l}")));
    }
    problems.extend(check_decisions(ws, &decisions));
    if whole {
        for a in unplanned {
            problems.push(format!(
                "{}: in kart.lock but no longer in the manifests",
                a.describe()
            ));
        }
    }
    // Launch geometry is not part of any key, so it is compared on its own.
    let selected_kernels: std::collections::BTreeSet<usize> =
        selected.iter().map(|p| p.kernel).collect();
    for &k in &selected_kernels {
        let kernel = &ws.project.kernels[k];
        let want = kernel.launch.as_ref().map(|l| l.text());
        if lock.launch(&kernel.name) != want.as_ref() {
            problems.push(format!(
                "{}: [launch] differs from kart.lock's",
                kernel.name
            ));
        }
    }
    if !problems.is_empty() {
        return Err(Error::CheckFailed {
            message: format!("kart.lock is out of date:\n{}", problems.join("\n")),
            hint: Some("run `kart build` and commit kart.lock".into()),
        });
    }
    let mut checked = ws.store.checked();
    let digests = ws.check_lock_digests(&same_key, remote, Some(&mut checked));
    checked.save();
    if !digests.mismatches.is_empty() {
        return Err(digest_mismatch_error(&digests.mismatches));
    }
    Ok(digests)
}

/// A record of the lock: an artifact, or an artifact of a config `[prune]` left out.
#[derive(Clone, Copy)]
enum Record<'l> {
    Listed(&'l LockedArtifact),
    Pruned(&'l PrunedArtifact),
}

impl Record<'_> {
    fn key(&self) -> &str {
        match self {
            Record::Listed(a) => &a.key,
            Record::Pruned(a) => &a.key,
        }
    }

    fn resources(&self) -> Resources {
        match self {
            Record::Listed(a) => Resources::of(&a.entries),
            Record::Pruned(a) => a.resources(),
        }
    }

    fn describe(&self) -> String {
        match self {
            Record::Listed(a) => a.describe(),
            Record::Pruned(a) => format!("{} (pruned)", a.describe()),
        }
    }
}

/// Pairs the planned artifacts with the lock's records by identity: for each planned id
/// (in order), the record with that id, if any; and the records no planned id names, in
/// the lock's order. One hash per record and per planned id, so `--locked` stays
/// linear in the size of the project (it compared every pair once).
fn pair_with_lock<K: Eq + std::hash::Hash, R>(
    records: impl Iterator<Item = (K, R)>,
    planned: impl Iterator<Item = K>,
) -> (Vec<Option<R>>, Vec<R>) {
    let mut by_id: std::collections::HashMap<K, (usize, R)> = records
        .enumerate()
        .map(|(i, (id, a))| (id, (i, a)))
        .collect();
    let found = planned
        .map(|id| by_id.remove(&id).map(|(_, a)| a))
        .collect();
    let mut rest: Vec<(usize, R)> = by_id.into_values().collect();
    rest.sort_unstable_by_key(|(i, _)| *i);
    (found, rest.into_iter().map(|(_, a)| a).collect())
}

/// Lines naming what changed between the inputs of `old_key` (if its action entry is in
/// the store) and `new`.
pub fn explain_change(ws: &Workspace, old_key: &str, new: &Preimage) -> Vec<String> {
    match ws.store.get_entry(old_key) {
        Ok(Some(entry)) => diff_preimages(&entry.preimage, new),
        // No key in the line: a kernel's artifacts share it, and it is said once.
        _ => vec![
            "(the inputs of the old keys are not in this store; `kart fetch` or a build of the old commit would show them)"
                .to_string(),
        ],
    }
}

/// The error for lock records whose digest disagrees with their key's action entry.
pub(super) fn digest_mismatch_error(mismatches: &[crate::workspace::DigestMismatch]) -> Error {
    let lines: Vec<String> = mismatches.iter().map(|m| format!("  {m}")).collect();
    Error::CheckFailed {
        message: format!(
            "{} artifact(s) of kart.lock disagree with their action entries (kart.lock was left as it was for them):\n{}",
            mismatches.len(),
            lines.join("\n")
        ),
        hint: Some(
            "the same key gave other bytes: the compile is not reproducible here, or the lock or \
             the entry was altered. `kart explain KERNEL -p …` shows the key's inputs, `kart verify \
             --rebuild N` recompiles and compares; if the lock is wrong, delete its record and run \
             `kart build`"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::pair_with_lock;
    use crate::cubin::EntryInfo;
    use crate::model::{ArtifactKind, Config, ParamValue};
    use crate::store::lockfile::LockedArtifact;
    use std::cell::Cell;

    thread_local! {
        /// Hashes and comparisons of [`Counted`] ids on this test's thread.
        static OPERATIONS: Cell<u64> = const { Cell::new(0) };
    }

    /// An artifact id that counts how often it is hashed or compared.
    struct Counted(u64);

    impl PartialEq for Counted {
        fn eq(&self, other: &Counted) -> bool {
            OPERATIONS.with(|c| c.set(c.get() + 1));
            self.0 == other.0
        }
    }
    impl Eq for Counted {}
    impl std::hash::Hash for Counted {
        fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
            OPERATIONS.with(|c| c.set(c.get() + 1));
            self.0.hash(state);
        }
    }

    fn record(i: u64) -> LockedArtifact {
        LockedArtifact {
            kernel: "tiny".into(),
            config: Config::from([("A".to_string(), ParamValue::Int(i as i64))]),
            target: "sm_90".into(),
            kind: ArtifactKind::Cubin,
            key: "a".repeat(64),
            digest: "b".repeat(64),
            size: 100,
            nvcc: "13.0.88".into(),
            entries: vec![EntryInfo::default()],
            derived: Default::default(),
        }
    }

    /// Operations to pair `n` planned artifacts with a lock of `n` records, one of each
    /// side unmatched; and checks the pairing.
    fn operations(n: u64) -> u64 {
        let lock: Vec<LockedArtifact> = (0..n).map(record).collect();
        OPERATIONS.with(|c| c.set(0));
        // Planned: ids 1..=n; the lock: 0..n. Id 0 is no longer planned, id n is new.
        let (found, unplanned) = pair_with_lock(
            lock.iter().enumerate().map(|(i, a)| (Counted(i as u64), a)),
            (1..=n).map(Counted),
        );
        let spent = OPERATIONS.with(Cell::get);
        assert_eq!(found.len(), n as usize);
        assert!(found[..n as usize - 1].iter().all(Option::is_some));
        assert!(found[n as usize - 1].is_none());
        assert_eq!(unplanned.len(), 1);
        assert_eq!(unplanned[0].config, record(0).config);
        spent
    }

    #[test]
    fn pairing_with_the_lock_grows_linearly() {
        let small = operations(1_500);
        let large = operations(30_000);
        // 20 times the artifacts: about 20 times the work when linear, 400 when every
        // record is compared with every planned artifact.
        assert!(
            large <= 25 * small,
            "{large} operations for 30,000 artifacts, {small} for 1,500"
        );
    }
}
