//! A project with its store: what every command opens first, and what the build and the
//! transfers share.

use std::path::Path;
use std::time::Duration;

use crate::build::manifest::Project;
use crate::build::toolchain::{Toolchain, find_nvcc, refuse_hostile_env};
use crate::error::Result;
use crate::store::lockfile::{LOCK_FILE, Lockfile, lock_path};
use crate::store::{LockMode, Store};

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
        let store = Store::open(&project.store_dir, mode, lock_timeout)?;
        Ok(Workspace { project, store })
    }

    /// Finds and fingerprints nvcc, and checks its release against `kart.toml`.
    pub fn toolchain(&self, nvcc: Option<&Path>) -> Result<Toolchain> {
        refuse_hostile_env()?;
        let path = find_nvcc(nvcc, &self.project.root)?;
        let cache = self.store.toolchain_cache_dir();
        let mut toolchain = Toolchain::load(&path, &cache)?;
        toolchain.check_release(self.project.nvcc_release.as_deref())?;
        crate::build::library::check_components(&toolchain.root, &self.project.components)?;
        toolchain.packages = self.project.components.clone();
        for (name, library) in &self.project.libraries {
            let pin = crate::build::library::pin(&self.project.root, library, &cache)?;
            toolchain.libraries.insert(name.clone(), pin);
        }
        Ok(toolchain)
    }

    /// The lock, or an empty one.
    pub fn lock(&self) -> Result<Lockfile> {
        Ok(
            Lockfile::read(&lock_path(&self.project.root), Path::new(LOCK_FILE))?
                .unwrap_or_default(),
        )
    }
}
