//! Which projects use a store: one small file per project in `v1/projects/`, named by
//! the sha256 of the project root's canonical path and holding that path and the path
//! of the file that names what the project keeps (its `kart.lock`). A store can be
//! shared (`store_outside_project`), and whatever removes things from it must keep
//! what every project still using it needs, not only what the project at hand does.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::digest::{is_sha256_hex, sha256_hex};
use crate::error::{IoContext, Result};
use crate::store::fsutil::write_atomic;
use crate::text::{Limit, read_limited};

/// The folder, under a store's layout folder.
pub const FOLDER: &str = "projects";

/// One project that uses the store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Registration {
    /// The project's root folder, canonical.
    pub root: PathBuf,
    /// The file naming what it keeps (`kart.lock`).
    pub lock: PathBuf,
}

/// A registration as found in the folder, with its file.
#[derive(Clone, Debug)]
pub struct Found {
    /// The registration file.
    pub file: PathBuf,
    /// What it says; `Err` with the reason when it cannot be read.
    pub registration: std::result::Result<Registration, String>,
}

/// The registration file of `root` in `folder`.
fn file_of(folder: &Path, root: &Path) -> PathBuf {
    folder.join(sha256_hex(root.as_os_str().as_encoded_bytes()))
}

/// Records that the project at `root` (canonical) uses the store whose registry is
/// `folder`, unless the file already says so (a store read a thousand times a day is
/// written once). Crash-safe like every store write.
pub fn register(folder: &Path, root: &Path, lock: &Path) -> Result<()> {
    let file = file_of(folder, root);
    let wanted = Registration {
        root: root.to_path_buf(),
        lock: lock.to_path_buf(),
    };
    if read(&file).is_ok_and(|r| r == wanted) {
        return Ok(());
    }
    // A path that is not UTF-8 cannot be written as JSON: such a project is not
    // registered, and a gc elsewhere treats it as any unregistered one.
    let Ok(json) = serde_json::to_vec_pretty(&wanted) else {
        return Ok(());
    };
    write_atomic(&file, &json)
}

fn read(file: &Path) -> std::result::Result<Registration, String> {
    let bytes = read_limited(file, Limit::CACHE).map_err(|e| e.to_string())?;
    serde_json::from_slice(&bytes).map_err(|e| format!("{e}"))
}

/// Every registration in `folder` (none when it does not exist).
pub fn registered(folder: &Path) -> Result<Vec<Found>> {
    let entries = match std::fs::read_dir(folder) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).at("list", folder),
    };
    let mut found: Vec<Found> = entries
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(is_sha256_hex))
        .map(|e| Found {
            registration: read(&e.path()),
            file: e.path(),
        })
        .collect();
    found.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(found)
}

/// Removes a registration (its project is gone).
pub fn forget(file: &Path) -> Result<()> {
    match std::fs::remove_file(file) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e).at("remove", file),
        _ => Ok(()),
    }
}

/// Whether `registration` is of the project at `root`.
pub fn is_of(found: &Found, root: &Path) -> bool {
    found.file == file_of(found.file.parent().unwrap_or(Path::new("")), root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_once_lists_and_forgets() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join(FOLDER);
        let a = dir.path().join("a");
        register(&folder, &a, &a.join("kart.lock")).unwrap();
        register(&folder, &a, &a.join("kart.lock")).unwrap();
        register(&folder, &dir.path().join("b"), Path::new("/b/kart.lock")).unwrap();
        std::fs::write(folder.join("notes.txt"), "not a registration").unwrap();
        let found = registered(&folder).unwrap();
        assert_eq!(found.len(), 2);
        let mine: Vec<&Found> = found.iter().filter(|f| is_of(f, &a)).collect();
        assert_eq!(mine.len(), 1);
        assert_eq!(
            mine[0].registration.as_ref().unwrap().lock,
            a.join("kart.lock")
        );
        std::fs::write(&found[0].file, "{").unwrap();
        assert!(registered(&folder).unwrap()[0].registration.is_err());
        forget(&found[0].file).unwrap();
        assert_eq!(registered(&folder).unwrap().len(), 1);
    }
}
