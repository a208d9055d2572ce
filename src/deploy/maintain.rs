//! `kart verify`, `kart gc` and `kart ls`: checking, pruning and listing the store
//! against the lock.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Serialize;

use crate::digest::sha256_hex;
use crate::error::{Error, Result};
use crate::pipeline::compile::{CompileJob, compile};
use crate::store::lockfile::LockedArtifact;
use crate::workspace::Workspace;

/// What `kart verify` found.
#[derive(Debug, Default, Serialize)]
pub struct VerifyReport {
    /// Blobs whose bytes match their digest.
    pub blobs_ok: usize,
    /// Corrupt blobs (now quarantined), by digest.
    pub blobs_corrupt: Vec<String>,
    /// Action entries that parse and validate.
    pub entries_ok: usize,
    /// Unreadable action entries (now quarantined).
    pub entries_corrupt: Vec<String>,
    /// Lock digests with no blob in the store.
    pub missing: Vec<String>,
    /// Rebuilt artifacts whose digest differs from the lock: (artifact, lock, rebuilt).
    pub rebuild_mismatches: Vec<(String, String, String)>,
    /// Artifacts rebuilt.
    pub rebuilt: usize,
    /// The lock's digests against the action entries of their keys.
    pub digests: crate::workspace::DigestCheck,
}

impl VerifyReport {
    /// True when nothing is corrupt or nondeterministic (missing blobs are not
    /// corruption: `kart build` or `kart fetch` brings them).
    pub fn clean(&self) -> bool {
        self.blobs_corrupt.is_empty()
            && self.entries_corrupt.is_empty()
            && self.rebuild_mismatches.is_empty()
            && self.digests.mismatches.is_empty()
    }
}

/// Re-hashes every blob and re-reads every entry, compares each lock digest with the
/// action entry of its key (the store's, else a trusted `remote`'s); with
/// `rebuild > 0`, recompiles that many artifacts of the lock (sampled with `seed`) and
/// compares digests.
pub fn verify(
    ws: &Workspace,
    rebuild: usize,
    seed: u64,
    nvcc: Option<&std::path::Path>,
    remote: Option<&crate::remote::Remote>,
) -> Result<VerifyReport> {
    let mut report = VerifyReport::default();
    for digest in ws.store.blob_digests()? {
        match ws.store.read_blob(&digest, None) {
            Ok(_) => report.blobs_ok += 1,
            Err(Error::CorruptBlob { .. }) => report.blobs_corrupt.push(digest),
            Err(e) => return Err(e),
        }
    }
    for key in ws.store.entry_keys()? {
        match ws.store.get_entry(&key) {
            Ok(_) => report.entries_ok += 1,
            Err(Error::CorruptEntry { .. }) => report.entries_corrupt.push(key),
            Err(e) => return Err(e),
        }
    }
    let lock = ws.lock()?;
    for a in &lock.artifacts {
        if !ws.store.has_blob(&a.digest) && !report.missing.contains(&a.digest) {
            report.missing.push(a.digest.clone());
        }
    }
    let all: Vec<&LockedArtifact> = lock.artifacts.iter().collect();
    // verify reads every entry again: it is what finds a changed one.
    report.digests = ws.check_lock_digests(&all, remote, None);
    if rebuild > 0 && !lock.artifacts.is_empty() {
        let toolchain = ws.toolchain(nvcc)?;
        let picked = sample(&lock.artifacts, rebuild, seed);
        toolchain.require_libraries(
            picked
                .iter()
                .filter_map(|a| ws.project.kernels.iter().find(|k| k.name == a.kernel)),
        )?;
        let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
        let results = crate::pool::parallel_map(&picked, jobs, |a| rebuild_one(ws, &toolchain, a));
        let mut failed = Vec::new();
        for (a, result) in picked.iter().zip(results) {
            match result {
                Ok(digest) => {
                    report.rebuilt += 1;
                    if digest != a.digest {
                        report
                            .rebuild_mismatches
                            .push((a.describe(), a.digest.clone(), digest));
                    }
                }
                Err(why) => failed.push(format!("  {}: {why}", a.describe())),
            }
        }
        if !failed.is_empty() {
            return Err(Error::BuildFailed {
                count: failed.len(),
                total: picked.len(),
                failed,
            });
        }
    }
    Ok(report)
}

/// Compiles one artifact of the lock in a scratch folder, stores nothing, and returns
/// the digest of what nvcc made.
fn rebuild_one(
    ws: &Workspace,
    toolchain: &crate::toolchain::Toolchain,
    a: &LockedArtifact,
) -> std::result::Result<String, String> {
    let kernel = ws.project.kernel(&a.kernel).map_err(|e| e.to_string())?;
    let target = a
        .target
        .parse()
        .map_err(|e: crate::target::BadTarget| e.0)?;
    let scratch = ws.store.scratch_dir().map_err(|e| e.to_string())?;
    let job = CompileJob {
        root: &ws.project.root,
        toolchain,
        kernel,
        config: &a.config,
        target,
        kind: a.kind,
        timeout: Duration::from_secs(600),
    };
    let out = compile(&job, scratch.path()).map_err(|f| f.to_string())?;
    Ok(sha256_hex(&out.bytes))
}

/// `n` distinct artifacts picked by a small deterministic generator from `seed`.
fn sample(artifacts: &[LockedArtifact], n: usize, seed: u64) -> Vec<&LockedArtifact> {
    let mut indices: Vec<usize> = (0..artifacts.len()).collect();
    let mut state = seed ^ 0x9E37_79B9_7F4A_7C15;
    for i in (1..indices.len()).rev() {
        // xorshift64*: enough to spread a sample, not cryptography.
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        let r = state.wrapping_mul(0x2545_F491_4F6C_DD1D);
        indices.swap(i, (r % (i as u64 + 1)) as usize);
    }
    indices.into_iter().take(n).map(|i| &artifacts[i]).collect()
}

/// What `kart gc` removed (or would remove).
#[derive(Debug, Default, Serialize)]
pub struct GcReport {
    /// Blobs no lock entry names.
    pub blobs: Vec<String>,
    /// Action entries whose key the lock does not name.
    pub entries: Vec<String>,
    /// Compressed bytes freed.
    pub bytes: u64,
    /// Folders of failed compiles kept by `kart build --keep-temps`.
    pub kept: usize,
    /// Other projects using this store whose locks' blobs were kept.
    pub shared_with: Vec<std::path::PathBuf>,
    /// Projects registered with the store that no longer exist: their registrations
    /// were dropped (or would be).
    pub forgotten: Vec<std::path::PathBuf>,
}

/// Removes every blob and entry that neither the lock nor the lock of another project
/// registered with the store names (the store must be held exclusively). With
/// `dry_run`, only reports. Without a `kart.lock`, with one that names no artifact or
/// none of this project's kernels, it refuses, unless `all_unreferenced` says to remove
/// everything no lock names (a missing or emptied lock names nothing; a checkout on the
/// wrong branch, a deleted file or another project's lock must not empty the store).
/// A registered project whose lock cannot be read stops it: its blobs are unknown.
pub fn gc(ws: &Workspace, dry_run: bool, all_unreferenced: bool) -> Result<GcReport> {
    let path = crate::store::lockfile::lock_path(&ws.project.root);
    if !path.exists() && !all_unreferenced {
        return Err(Error::usage(
            format!(
                "there is no kart.lock in {}: gc keeps what the lock names, and with no lock it would remove the whole store",
                ws.project.root.display()
            ),
            Some(
                "run `kart build` first, or `kart gc --all-unreferenced` to empty the store".into(),
            ),
        ));
    }
    let lock = ws.lock()?;
    if !all_unreferenced {
        refuse_a_lock_that_keeps_nothing(ws, &lock)?;
    }
    let mut report = GcReport::default();
    let mut keep_blobs: BTreeSet<String> =
        lock.artifacts.iter().map(|a| a.digest.clone()).collect();
    let mut keep_keys: BTreeSet<String> = lock.artifacts.iter().map(|a| a.key.clone()).collect();
    // Pruned artifacts stay too: loosening a bound brings their configs back without
    // a compile.
    let mut pruned: Vec<String> = lock.pruned.iter().map(|p| p.key.clone()).collect();
    for other in other_projects(ws, dry_run, &mut report)? {
        keep_blobs.extend(other.artifacts.iter().map(|a| a.digest.clone()));
        keep_keys.extend(other.artifacts.into_iter().map(|a| a.key));
        pruned.extend(other.pruned.into_iter().map(|p| p.key));
    }
    for key in pruned {
        if let Ok(Some(entry)) = ws.store.get_entry(&key) {
            keep_blobs.insert(entry.digest);
        }
        keep_keys.insert(key);
    }
    for digest in ws.store.blob_digests()? {
        if !keep_blobs.contains(digest.as_str()) {
            report.bytes += if dry_run {
                std::fs::metadata(ws.store.blob_path(&digest)).map_or(0, |m| m.len())
            } else {
                crate::failpoint::hit("gc.remove", &digest);
                ws.store.remove_blob(&digest)?
            };
            report.blobs.push(digest);
        }
    }
    for key in ws.store.entry_keys()? {
        if !keep_keys.contains(key.as_str()) {
            if !dry_run {
                ws.store.remove_entry(&key)?;
            }
            report.entries.push(key);
        }
    }
    let kept = ws.store.root().join("kept");
    if let Ok(folders) = std::fs::read_dir(&kept) {
        report.kept = folders.count();
        if !dry_run {
            use crate::error::IoContext as _;
            std::fs::remove_dir_all(&kept).at("remove", &kept)?;
        }
    }
    Ok(report)
}

/// A lock with no artifact, or none of this project's kernels, would have gc empty the
/// store: refused unless said with `--all-unreferenced`.
fn refuse_a_lock_that_keeps_nothing(
    ws: &Workspace,
    lock: &crate::store::lockfile::Lockfile,
) -> Result<()> {
    let hint = "run `kart build` to write this project's kart.lock, or `kart gc --all-unreferenced` to remove everything no lock names";
    if lock.artifacts.is_empty() {
        return Err(Error::usage(
            format!(
                "kart.lock in {} names no artifact: gc keeps what the lock names, and with this lock it would remove every blob of the store",
                ws.project.root.display()
            ),
            Some(hint.into()),
        ));
    }
    let ours = |k: &str| ws.project.kernels.iter().any(|p| p.name == k);
    if !ws.project.kernels.is_empty() && !lock.artifacts.iter().any(|a| ours(&a.kernel)) {
        let named: BTreeSet<&str> = lock.artifacts.iter().map(|a| a.kernel.as_str()).collect();
        return Err(Error::usage(
            format!(
                "kart.lock in {} names none of this project's kernels (it names {}): is it another project's? gc would remove this project's blobs",
                ws.project.root.display(),
                named
                    .into_iter()
                    .take(5)
                    .map(|k| crate::untrusted::for_terminal(k).into_owned())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Some(hint.into()),
        ));
    }
    Ok(())
}

/// The locks of the other projects registered with the store (a store shared through
/// `store_outside_project`). A project that no longer exists has its registration
/// dropped; one whose lock cannot be read stops gc.
fn other_projects(
    ws: &Workspace,
    dry_run: bool,
    report: &mut GcReport,
) -> Result<Vec<crate::store::lockfile::Lockfile>> {
    use crate::store::projects;
    let mut locks = Vec::new();
    for found in projects::registered(&ws.store.projects_dir())? {
        if projects::is_of(&found, &ws.project.root) {
            continue;
        }
        let registration = found.registration.map_err(|why| {
            Error::usage(
                format!(
                    "the store's record of a project using it, `{}`, cannot be read ({why}): gc cannot tell what that project keeps",
                    found.file.display()
                ),
                Some("remove that file if no other project uses this store, then run gc again".into()),
            )
        })?;
        if !registration
            .root
            .join(crate::project::PROJECT_FILE)
            .is_file()
        {
            if !dry_run {
                projects::forget(&found.file)?;
            }
            report.forgotten.push(registration.root);
            continue;
        }
        match crate::store::lockfile::Lockfile::read(&registration.lock, &registration.lock) {
            Ok(Some(lock)) => {
                locks.push(lock);
                report.shared_with.push(registration.root);
            }
            // A project with no lock yet keeps nothing.
            Ok(None) => {}
            Err(e) => {
                return Err(Error::usage(
                    format!(
                        "the project `{}` shares this store, and its lock cannot be read: {}; gc would remove blobs it may need",
                        registration.root.display(),
                        e.with_causes()
                    ),
                    Some(format!(
                        "fix that lock (`kart build` in that project), or remove `{}` if that project no longer uses this store",
                        found.file.display()
                    )),
                ));
            }
        }
    }
    Ok(locks)
}
