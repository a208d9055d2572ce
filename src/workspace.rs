//! A project with its store: what every command opens first, and what the build and the
//! transfers share.

use std::path::Path;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::project::Project;
use crate::store::lockfile::{LOCK_FILE, Lockfile, lock_path};
use crate::store::{Checked, LockMode, Store};
use crate::toolchain::{Toolchain, find_nvcc, refuse_hostile_env};

/// A project with its store and toolchain, ready for any command.
pub struct Workspace {
    /// The project.
    pub project: Project,
    /// The store, held shared (or exclusive).
    pub store: Store,
}

impl Workspace {
    /// Opens the store of `project`.
    pub fn open(project: Project, mode: LockMode, lock_timeout: Duration) -> Result<Workspace> {
        let store = Store::open_sweeping(&project.store_dir, mode, lock_timeout, &[&project.root])?;
        // Every project that opens a store says so, so that a gc from another project
        // sharing it keeps this one's blobs. A read-only store cannot be collected.
        if !store.is_read_only() {
            crate::store::projects::register(
                &store.projects_dir(),
                &project.root,
                &lock_path(&project.root),
            )?;
        }
        Ok(Workspace { project, store })
    }

    /// Finds and fingerprints nvcc, and checks its release against `kart.toml`.
    pub fn toolchain(&self, nvcc: Option<&Path>) -> Result<Toolchain> {
        refuse_hostile_env()?;
        let home = crate::install::Home::from_env().ok();
        let pins = crate::install::ToolchainPins::of(&self.project);
        let installed = self.installed_nvcc();
        let path = match find_nvcc(nvcc, &self.project.root, installed.clone()) {
            Ok(path) => path,
            Err(e) => {
                let explicit =
                    nvcc.is_some() || std::env::var_os("KART_NVCC").is_some_and(|v| !v.is_empty());
                // nvcc was looked for everywhere and kart.toml pins a release kart
                // installs: say what exactly is not installed.
                return Err(match (&home, &pins) {
                    (Some(home), Some(pins))
                        if !explicit && installed.is_none() && pins.known().is_ok() =>
                    {
                        crate::install::not_installed(home, pins)
                    }
                    _ => e,
                });
            }
        };
        // The project uses its pinned install (directly, or through a link in
        // `.toolchain/`): record it, so a gc elsewhere keeps it.
        if let (Some(home), Some(pins)) = (&home, &pins)
            && let Ok(folder) = home.toolchain_folder(pins)
            && std::fs::canonicalize(&folder).is_ok_and(|f| path.starts_with(f))
        {
            crate::install::record_use(home, &folder, &self.project.root);
        }
        let cache = crate::toolchain::stamp::CacheDirs::new(self.store.toolchain_cache_dir());
        let mut toolchain = Toolchain::load(&path, &cache)?;
        toolchain.check_release(self.project.nvcc_release.as_deref())?;
        crate::toolchain::library::check_components(&toolchain.root, &self.project.components)?;
        toolchain.packages = self.project.components.clone();
        for (name, library) in &self.project.libraries {
            match crate::toolchain::library::pin(&self.project.root, library, &cache, home.as_ref())
            {
                Ok(pin) => {
                    if let Some(home) = &home
                        && let Some(folder) = crate::install::installed_library(home, library)
                    {
                        crate::install::record_use(home, &folder, &self.project.root);
                    }
                    toolchain.libraries.insert(name.clone(), pin);
                }
                // Needed only by the kernels that list it: kept for their builds.
                Err(Error::Environment { message, hint }) => {
                    toolchain
                        .unavailable_libraries
                        .insert(name.clone(), (message, hint));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(toolchain)
    }

    /// The nvcc of the pinned release (and components) in kart's home, when
    /// `kart toolchain install` installed it.
    pub fn installed_nvcc(&self) -> Option<std::path::PathBuf> {
        let home = crate::install::Home::from_env().ok()?;
        crate::install::installed_nvcc(&home, &crate::install::ToolchainPins::of(&self.project)?)
    }

    /// The lock, or an empty one.
    pub fn lock(&self) -> Result<Lockfile> {
        Ok(
            Lockfile::read(&lock_path(&self.project.root), Path::new(LOCK_FILE))?
                .unwrap_or_default(),
        )
    }
}

/// How the lock's key → digest bindings compare with the action entries that exist.
#[derive(Debug, Default, serde::Serialize)]
pub struct DigestCheck {
    /// Artifacts whose lock digest equals their key's action entry.
    pub matched: usize,
    /// Artifacts with no action entry to compare with (a fresh clone with no store and
    /// no trusted remote): their digests are taken on the lock's word.
    pub unchecked: usize,
    /// Artifacts whose lock digest disagrees with their key's entry.
    pub mismatches: Vec<DigestMismatch>,
}

/// A lock record whose digest is not the one its key's action entry names.
#[derive(Debug, serde::Serialize)]
pub struct DigestMismatch {
    /// `kernel[config] target`.
    pub artifact: String,
    /// The action key.
    pub key: String,
    /// What kart.lock says.
    pub lock_digest: String,
    /// What the entry says.
    pub entry_digest: String,
    /// Where the entry is: `the store` or the remote's URL.
    pub entry_from: String,
}

impl std::fmt::Display for DigestMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: kart.lock names blob {} for key {}, but the action entry in {} names {}",
            self.artifact,
            &self.lock_digest[..12],
            &self.key[..12],
            self.entry_from,
            &self.entry_digest[..12]
        )
    }
}

impl Workspace {
    /// Compares the digest of each of `artifacts` with the action entry of its key: the
    /// local store's, else (for keys the store has no entry of) a trusted remote's. An
    /// entry that also names another kernel, config, target or kind counts as a
    /// mismatch: a lock or entry bound to the wrong artifact.
    ///
    /// With `checked`, a record found to agree with its entry before, whose entry file
    /// is unchanged since, counts as matched without reading the entry; agreements
    /// found now are recorded there.
    pub fn check_lock_digests(
        &self,
        artifacts: &[&crate::store::lockfile::LockedArtifact],
        remote: Option<&crate::remote::Remote>,
        mut checked: Option<&mut Checked>,
    ) -> DigestCheck {
        let mut check = DigestCheck::default();
        let mut ask_remote = Vec::new();
        for a in artifacts {
            let binding = checked.as_ref().map(|_| crate::store::checked::binding(a));
            if let (Some(known), Some(b)) = (checked.as_deref_mut(), &binding)
                && self
                    .store
                    .entry_state(&a.key)
                    .is_some_and(|state| known.agrees(b, state))
            {
                check.matched += 1;
                continue;
            }
            match self.store.get_entry_with_state(&a.key) {
                Ok(Some((entry, state))) => {
                    let agrees = check.compare(a, &entry, "the store");
                    if let (Some(known), Some(b)) = (checked.as_deref_mut(), binding) {
                        if agrees {
                            known.record(b, state);
                        } else {
                            known.forget(&b);
                        }
                    }
                }
                // A corrupt entry was quarantined by the read; nothing to compare.
                Ok(None) | Err(_) => ask_remote.push(*a),
            }
        }
        match remote.filter(|r| r.trusted) {
            Some(remote) => {
                let found = crate::pool::parallel_map(&ask_remote, remote.jobs, |a| {
                    crate::store::Storage::get_entry(remote, &a.key)
                        .ok()
                        .flatten()
                });
                for (a, entry) in ask_remote.iter().zip(found) {
                    match entry {
                        Some(entry) => {
                            check.compare(
                                a,
                                &entry,
                                &crate::remote::strip_credentials(remote.url()),
                            );
                        }
                        None => check.unchecked += 1,
                    }
                }
            }
            None => check.unchecked += ask_remote.len(),
        }
        check
    }
}

impl DigestCheck {
    /// Counts `a` as matched, or records the mismatch; whether it matched.
    fn compare(
        &mut self,
        a: &crate::store::lockfile::LockedArtifact,
        entry: &crate::store::ActionEntry,
        from: &str,
    ) -> bool {
        let same_artifact = same_artifact(a, entry);
        if entry.digest == a.digest && same_artifact {
            self.matched += 1;
            true
        } else {
            self.mismatches.push(DigestMismatch {
                artifact: a.describe(),
                key: a.key.clone(),
                lock_digest: a.digest.clone(),
                entry_digest: entry.digest.clone(),
                entry_from: if same_artifact {
                    from.to_string()
                } else {
                    format!(
                        "{from} (and it describes {})",
                        crate::store::lockfile::describe(
                            &entry.kernel,
                            &entry.config,
                            &entry.target,
                            entry.kind
                        )
                    )
                },
            });
            false
        }
    }
}

/// Whether an action entry names the same kernel, config, target and kind as a lock
/// record (a key bound to another artifact is a mismatch whatever its digest).
pub fn same_artifact(
    a: &crate::store::lockfile::LockedArtifact,
    entry: &crate::store::ActionEntry,
) -> bool {
    entry.kernel == a.kernel
        && same_compiled_config(&a.config, entry)
        && entry.target == a.target
        && entry.kind == a.kind
}

/// Whether `config` is the entry's config up to params its key leaves out (launch-only
/// params, which every config sharing the compile has its own value of): the params
/// are the same, and each one the entry's preimage keys has the same value.
fn same_compiled_config(config: &crate::model::Config, entry: &crate::store::ActionEntry) -> bool {
    if entry.config == *config {
        return true;
    }
    let keyed: std::collections::BTreeSet<&str> = entry
        .preimage
        .0
        .iter()
        .filter_map(|(name, _)| name.strip_prefix("param "))
        .collect();
    !entry.preimage.0.is_empty()
        && config.keys().eq(entry.config.keys())
        && entry
            .config
            .iter()
            .all(|(k, v)| !keyed.contains(k) || config.get(k) == Some(v))
}
