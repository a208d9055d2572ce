//! `kart build --locked`: the lock checked against the sources and the toolchain without
//! compiling — every key recomputed and compared, every digest compared with its key's
//! action entry where one exists — and the words for what changed.

use std::path::Path;

use crate::digest::Preimage;
use crate::error::{Error, Result};
use crate::pipeline::key::diff_preimages;
use crate::pipeline::plan::Planned;
use crate::pipeline::workspace::Workspace;
use crate::store::lockfile::{LOCK_FILE, Lockfile, lock_path};

/// `--locked`: every selected artifact's key must equal the lock's, and each digest the
/// action entry of its key (where the store or a trusted remote has one).
pub(super) fn check_locked(
    ws: &Workspace,
    selected: &[&Planned],
    whole: bool,
    remote: Option<&crate::remote::Remote>,
) -> Result<crate::pipeline::workspace::DigestCheck> {
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
    for p in selected {
        let name = p.describe(&ws.project);
        let kernel = &ws.project.kernels[p.kernel].name;
        match lock.find(kernel, &p.config, &p.target.to_string(), p.kind) {
            None => problems.push(format!("{name}: not in kart.lock")),
            Some(locked) if locked.key == p.key => same_key.push(locked),
            Some(locked) => {
                let group = changed.entry(kernel.as_str()).or_default();
                group.0.push(name);
                for line in explain_change(ws, &locked.key, &p.preimage) {
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
    if whole {
        for a in &lock.artifacts {
            let known = selected.iter().any(|p| {
                ws.project.kernels[p.kernel].name == a.kernel
                    && p.config == a.config
                    && p.target.to_string() == a.target
                    && p.kind == a.kind
            });
            if !known {
                problems.push(format!(
                    "{}: in kart.lock but no longer in the manifests",
                    a.describe()
                ));
            }
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
    let digests = ws.check_lock_digests(&same_key, remote);
    if !digests.mismatches.is_empty() {
        return Err(digest_mismatch_error(&digests.mismatches));
    }
    Ok(digests)
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
pub(super) fn digest_mismatch_error(
    mismatches: &[crate::pipeline::workspace::DigestMismatch],
) -> Error {
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
