//! What the installs of one home share: the wheels they were unpacked from, and the
//! files they hold.
//!
//! - `wheels/v1/<sha256>.whl`: every wheel downloaded, named by the sha256 the index
//!   (or kart's pin) gives for it, checked when it is downloaded and hashed again each
//!   time an install takes it, so a second component set downloads only the wheels the
//!   home does not have. A gc removes the wheels no install's record names.
//! - `files/v1/ab/<sha256>-r` (or `-x`, executable): one read-only copy of every file
//!   an install holds, named by the sha256 of its bytes. An install's files are hard
//!   links to these, so identical files of two installs (the nvcc wheels under every
//!   component set) are one copy on disk; where a link cannot be made (the install on
//!   another file system, a file system without hard links, too many links) the file
//!   is copied instead. A gc removes the files no install links any more.
//!
//! Both are written as the rest of the home is: a temporary file beside them, synced,
//! renamed into place; a file reused is hashed again first, and one that does not hold
//! the bytes of its name is replaced.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::digest::sha256_file;
use crate::error::{IoContext, Result};
use crate::store::fsutil::{TEMP_PREFIX, sweep_temp_files_shallow, sync_dir};

/// The wheel cache, under the home. `v1`: a wheel is named by the lower-case hex
/// sha256 of its bytes and `.whl`; a change of the naming or of what a file holds
/// must use another folder (`v2`), never reuse this one.
pub const WHEELS: &str = "wheels/v1";

/// The shared files, under the home. `v1`: `<first two hex digits>/<sha256>-r` or
/// `-x`, the sha256 of the file's bytes and whether it is executable (mode 0444 or
/// 0555); a change of the naming, the modes or what a file holds must use another
/// folder (`v2`), never reuse this one.
pub const FILES: &str = "files/v1";

/// The cached wheel of sha256 `sha256` (a checked lower-case hex digest).
pub fn wheel_path(home: &Path, sha256: &str) -> PathBuf {
    home.join(WHEELS).join(format!("{sha256}.whl"))
}

/// Whether the cached wheel `path` holds the bytes of `sha256`; one that does not is
/// removed.
pub fn cached_wheel_ok(path: &Path, sha256: &str) -> bool {
    if !std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file()) {
        return false;
    }
    if sha256_file(path).is_ok_and(|got| got == sha256) {
        return true;
    }
    let _ = std::fs::remove_file(path);
    false
}

/// Makes a wheel just downloaded into the cache read-only.
pub fn seal_wheel(path: &Path) -> Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o444))
        .at("set the mode of", path)
}

/// What unpacking into an install wrote and shared.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Sharing {
    /// Files placed in the install.
    pub files: usize,
    /// Bytes of files new to the home (stored once).
    pub new_bytes: u64,
    /// Bytes of files the home already held (linked, not written).
    pub shared_bytes: u64,
    /// Files copied because a hard link could not be made.
    pub copied: usize,
}

/// One member stored: where its shared copy is, or the bytes it really held when that
/// is not the size announced (nothing is stored then).
pub enum Put {
    /// The shared copy.
    Stored(PathBuf),
    /// The member held this many bytes, not the size announced.
    WrongSize(u64),
}

/// The shared files of a home, open for an install (the home's lock is held).
pub struct FileStore {
    root: PathBuf,
    /// Folders a file was renamed into, synced before the install is.
    touched: BTreeSet<PathBuf>,
    /// What was written and shared so far.
    pub sharing: Sharing,
}

impl FileStore {
    /// The store of the home `home`, created if missing; leftovers of a killed install
    /// are removed.
    pub fn open(home: &Path) -> Result<FileStore> {
        let root = home.join(FILES);
        std::fs::create_dir_all(&root).at("create", &root)?;
        sweep_temp_files_shallow(&root);
        Ok(FileStore {
            root,
            touched: BTreeSet::new(),
            sharing: Sharing::default(),
        })
    }

    /// Stores what `reader` yields, which must be `size` bytes (at most `size + 1`
    /// are read), as one shared file: hashed as it is written to a temporary file,
    /// which is dropped when the store already holds those bytes (checked by hashing
    /// the stored file again) and else synced, made read-only and renamed into place.
    pub fn put(&mut self, reader: &mut dyn Read, size: u64, executable: bool) -> Result<Put> {
        let mut tmp = tempfile::Builder::new()
            .prefix(TEMP_PREFIX)
            .tempfile_in(&self.root)
            .at("create a temporary file in", &self.root)?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        let mut copied = 0u64;
        let mut limited = reader.take(size + 1);
        loop {
            let n = limited.read(&mut buf).at("unpack to", tmp.path())?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            tmp.write_all(&buf[..n]).at("write", tmp.path())?;
            copied += n as u64;
        }
        if copied != size {
            return Ok(Put::WrongSize(copied));
        }
        let sha = crate::digest::hex(&hasher.finalize());
        let dir = self.root.join(&sha[..2]);
        let path = dir.join(format!("{sha}-{}", if executable { 'x' } else { 'r' }));
        let held = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file() && m.len() == size)
            && sha256_file(&path).is_ok_and(|got| got == sha);
        if held {
            self.sharing.shared_bytes += size;
            return Ok(Put::Stored(path));
        }
        std::fs::create_dir_all(&dir).at("create", &dir)?;
        let mode = if executable { 0o555 } else { 0o444 };
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(mode))
            .at("set the mode of", tmp.path())?;
        tmp.as_file().sync_all().at("sync", tmp.path())?;
        // Over a file that did not hold its name's bytes, if there was one.
        tmp.persist(&path)
            .map_err(|e| e.error)
            .at("rename a temporary file to", &path)?;
        self.touched.insert(dir);
        self.sharing.new_bytes += size;
        Ok(Put::Stored(path))
    }

    /// Places the shared file `stored` at `dest` in an install: a hard link, else a
    /// copy. Whatever `dest` was is replaced, never written through.
    pub fn place(&mut self, stored: &Path, dest: &Path) -> Result<()> {
        let _ = std::fs::remove_file(dest);
        if std::fs::hard_link(stored, dest).is_err() {
            std::fs::copy(stored, dest).at("copy to", dest)?;
            self.sharing.copied += 1;
        }
        self.sharing.files += 1;
        Ok(())
    }

    /// Syncs every folder a shared file was renamed into.
    pub fn sync(&self) {
        for dir in &self.touched {
            sync_dir(dir);
        }
        sync_dir(&self.root);
    }
}

/// Syncs `dir` and every folder below it (the entries of an install about to be
/// renamed into place).
pub fn sync_tree(dir: &Path) {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        if let Ok(entries) = std::fs::read_dir(&d) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
        sync_dir(&d);
    }
}

/// The bytes of an install's folder: all of them, a file linked twice counted once
/// (as `du` does), and its own (held by no other install: removing the install and
/// then a gc frees these).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FolderBytes {
    /// Every file's bytes, each inode once.
    pub total: u64,
    /// The bytes of the files no other install links.
    pub own: u64,
}

/// [`FolderBytes`] of `dir`. A file is the install's own when its links are the ones
/// inside `dir` and at most one more (its shared copy).
pub fn folder_bytes(dir: &Path) -> FolderBytes {
    // (device, inode) → (links in all, links inside `dir`, size)
    let mut inodes: BTreeMap<(u64, u64), (u64, u64, u64)> = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file()
                && let Ok(m) = e.metadata()
            {
                let slot = inodes
                    .entry((m.dev(), m.ino()))
                    .or_insert((m.nlink(), 0, m.len()));
                slot.1 += 1;
            }
        }
    }
    let mut out = FolderBytes::default();
    for (links, inside, size) in inodes.into_values() {
        out.total += size;
        if links <= inside + 1 {
            out.own += size;
        }
    }
    out
}

/// What a gc of the shared parts removed (or would remove): how many, and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Freed {
    /// Cached wheels no install names.
    pub wheels: usize,
    /// Their bytes.
    pub wheel_bytes: u64,
    /// Shared files no install links.
    pub files: usize,
    /// Their bytes.
    pub file_bytes: u64,
}

/// The cached wheels of `home` whose sha256 is not in `used`, with their sizes.
pub fn unused_wheels(home: &Path, used: &BTreeSet<String>) -> Vec<(PathBuf, u64)> {
    let Ok(entries) = std::fs::read_dir(home.join(WHEELS)) else {
        return Vec::new();
    };
    let mut out: Vec<(PathBuf, u64)> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            !name.starts_with(TEMP_PREFIX)
                && !name
                    .strip_suffix(".whl")
                    .is_some_and(|sha| used.contains(sha))
        })
        .map(|e| (e.path(), e.metadata().map_or(0, |m| m.len())))
        .collect();
    out.sort();
    out
}

/// Removes the cached wheels whose sha256 is not in `used` and the shared files no
/// install links any more (their only link is their own), and leftovers of killed
/// installs. Only under the home's lock: an install links its files after storing
/// them.
pub fn gc(home: &Path, used: &BTreeSet<String>) -> Result<Freed> {
    let mut freed = Freed::default();
    let wheels = home.join(WHEELS);
    sweep_temp_files_shallow(&wheels);
    for (path, bytes) in unused_wheels(home, used) {
        remove(&path)?;
        freed.wheels += 1;
        freed.wheel_bytes += bytes;
    }
    let root = home.join(FILES);
    sweep_temp_files_shallow(&root);
    let Ok(fans) = std::fs::read_dir(&root) else {
        return Ok(freed);
    };
    for fan in fans.flatten() {
        let Ok(entries) = std::fs::read_dir(fan.path()) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.is_file() && m.nlink() <= 1 {
                remove(&e.path())?;
                freed.files += 1;
                freed.file_bytes += m.len();
            }
        }
        // Empty now: gone too (fails, harmlessly, while it holds files).
        let _ = std::fs::remove_dir(fan.path());
    }
    Ok(freed)
}

fn remove(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e).at("remove", path),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(store: &mut FileStore, bytes: &[u8], executable: bool) -> PathBuf {
        match store
            .put(&mut &bytes[..], bytes.len() as u64, executable)
            .unwrap()
        {
            Put::Stored(path) => path,
            Put::WrongSize(n) => panic!("wrong size {n}"),
        }
    }

    #[test]
    fn identical_files_are_stored_once_read_only_and_freed_when_no_install_links_them() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        let mut store = FileStore::open(home).unwrap();
        let a = put(&mut store, b"header\n", false);
        let again = put(&mut store, b"header\n", false);
        let exe = put(&mut store, b"header\n", true);
        assert_eq!(a, again);
        assert_ne!(a, exe, "the mode is part of a shared file's name");
        assert_eq!(
            std::fs::metadata(&a).unwrap().permissions().mode() & 0o777,
            0o444
        );
        assert_eq!(
            std::fs::metadata(&exe).unwrap().permissions().mode() & 0o777,
            0o555
        );
        assert_eq!(store.sharing.new_bytes, 14);
        assert_eq!(store.sharing.shared_bytes, 7);
        // A member shorter or longer than announced is not stored.
        assert!(matches!(
            store.put(&mut &b"abc"[..], 5, false).unwrap(),
            Put::WrongSize(3)
        ));
        assert!(matches!(
            store.put(&mut &b"abcdef"[..], 5, false).unwrap(),
            Put::WrongSize(6)
        ));

        // Two installs link one copy; an install's bytes count it once, and as its
        // own only while no other install links it.
        for install in ["one", "two"] {
            let folder = home.join(install);
            std::fs::create_dir_all(folder.join("include")).unwrap();
            store.place(&a, &folder.join("include/a.h")).unwrap();
            store.place(&a, &folder.join("include/b.h")).unwrap();
        }
        assert_eq!(store.sharing.copied, 0);
        assert_eq!(std::fs::metadata(&a).unwrap().nlink(), 5);
        let bytes = folder_bytes(&home.join("one"));
        assert_eq!(bytes, FolderBytes { total: 7, own: 0 });

        // A stored file that no longer holds its name's bytes is replaced; the
        // installs that linked it keep what they had.
        std::fs::remove_dir_all(home.join("two")).unwrap();
        assert_eq!(
            folder_bytes(&home.join("one")),
            FolderBytes { total: 7, own: 7 }
        );
        std::fs::remove_file(&exe).unwrap();
        std::fs::write(&exe, b"HEADER\n").unwrap();
        let fixed = put(&mut store, b"header\n", true);
        assert_eq!(fixed, exe);
        assert_eq!(std::fs::read(&exe).unwrap(), b"header\n");

        // gc: the executable copy has no install, the other one has.
        let freed = gc(home, &BTreeSet::new()).unwrap();
        assert_eq!((freed.files, freed.file_bytes), (1, 7));
        assert!(a.is_file() && !exe.exists());
        std::fs::remove_dir_all(home.join("one")).unwrap();
        assert_eq!(gc(home, &BTreeSet::new()).unwrap().files, 1);
        assert!(!a.exists());
    }

    #[test]
    fn a_cached_wheel_is_kept_only_while_it_holds_its_bytes_and_an_install_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        let sha = crate::digest::sha256_hex(b"wheel");
        let path = wheel_path(home, &sha);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"wheel").unwrap();
        assert!(cached_wheel_ok(&path, &sha));
        let other = wheel_path(home, &crate::digest::sha256_hex(b"other"));
        std::fs::write(&other, b"not other").unwrap();
        assert!(!cached_wheel_ok(
            &other,
            &crate::digest::sha256_hex(b"other")
        ));
        assert!(!other.exists(), "a wheel that fails its hash is removed");

        let used: BTreeSet<String> = [sha.clone()].into();
        assert!(unused_wheels(home, &used).is_empty());
        let freed = gc(home, &BTreeSet::new()).unwrap();
        assert_eq!((freed.wheels, freed.wheel_bytes), (1, 5));
        assert!(!path.exists());
    }

    #[test]
    fn a_file_that_cannot_be_linked_is_copied() {
        // The store and the install on two file systems when the machine has a tmpfs
        // apart from the temporary folder's; else a link, as on one file system.
        let dir = tempfile::tempdir().unwrap();
        let mut store = FileStore::open(dir.path()).unwrap();
        let stored = put(&mut store, b"kernel\n", false);
        let shm = Path::new("/dev/shm");
        let other_fs = shm.is_dir()
            && std::fs::metadata(shm).unwrap().dev()
                != std::fs::metadata(dir.path()).unwrap().dev()
            && tempfile::tempdir_in(shm).is_ok();
        let target = if other_fs {
            tempfile::tempdir_in(shm).unwrap()
        } else {
            tempfile::tempdir_in(dir.path()).unwrap()
        };
        let dest = target.path().join("k.h");
        store.place(&stored, &dest).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"kernel\n");
        let linked =
            std::fs::metadata(&dest).unwrap().ino() == std::fs::metadata(&stored).unwrap().ino();
        assert_eq!(linked, !other_fs);
        assert_eq!(store.sharing.copied, usize::from(other_fs));
    }
}
