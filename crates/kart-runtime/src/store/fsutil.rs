//! Crash-safe file writes: a temp file in the destination folder, synced, then renamed.

use std::io::Write;
use std::path::Path;

use crate::error::{IoContext, Result};

/// Prefix of kart's temp files, so that leftovers of a killed process can be swept.
pub const TEMP_PREFIX: &str = ".tmp-kart-";

/// Writes `bytes` to `path` so that a crash at any moment leaves either the old file or
/// the new one, never a partial one: temp file beside it, `fsync`, rename, `fsync` of
/// the folder (so the rename itself survives a power loss).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic_via(path.parent().unwrap_or(Path::new(".")), path, bytes)
}

/// [`write_atomic`] with the temp file in `temp_dir`, which must be on the same file
/// system as `path`. The store writes its blobs and entries this way, so that a killed
/// write leaves its temp file in one small folder that every open sweeps, not in one
/// of hundreds of shard folders that would each have to be listed.
pub fn write_atomic_via(temp_dir: &Path, path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic_into(temp_dir, path, bytes, None)
}

/// Folders that gained files whose renames are not synced yet. The store's blob and
/// entry writes note their shard folder here instead of syncing it at once; the
/// build syncs each noted folder once, before it writes the lock that names those
/// files ([`UnsyncedFolders::sync`]), and whatever is left is synced when the store is
/// dropped.
///
/// Why that is enough: the sync of a folder only makes a rename survive a power loss
/// (a killed process loses nothing the kernel holds). Each file's own bytes are still
/// synced before its rename, so a name never points at bytes that are not on disk; a
/// rename lost to a power loss before its folder's sync leaves the blob or entry
/// absent, which every reader takes as a miss, as after `gc` (an entry whose blob is
/// absent is not a hit). What the lock names is on disk before the lock is.
#[derive(Debug, Default)]
pub struct UnsyncedFolders(std::sync::Mutex<std::collections::BTreeSet<std::path::PathBuf>>);

impl UnsyncedFolders {
    fn note(&self, dir: &Path) {
        if let Ok(mut dirs) = self.0.lock()
            && !dirs.contains(dir)
        {
            dirs.insert(dir.to_path_buf());
        }
    }

    /// Syncs every folder noted since the last call, once each.
    pub fn sync(&self) {
        let dirs = match self.0.lock() {
            Ok(mut dirs) => std::mem::take(&mut *dirs),
            Err(_) => return,
        };
        if !dirs.is_empty() {
            crate::failpoint::hit("write-atomic.before-folder-sync", "");
        }
        for dir in dirs {
            sync_dir(&dir);
        }
    }
}

impl Drop for UnsyncedFolders {
    fn drop(&mut self) {
        self.sync();
    }
}

/// [`write_atomic_via`] that notes the destination folder in `unsynced` instead of
/// syncing it (see [`UnsyncedFolders`]).
pub fn write_atomic_deferred(
    temp_dir: &Path,
    path: &Path,
    bytes: &[u8],
    unsynced: &UnsyncedFolders,
) -> Result<()> {
    write_atomic_into(temp_dir, path, bytes, Some(unsynced))
}

fn write_atomic_into(
    temp_dir: &Path,
    path: &Path,
    bytes: &[u8],
    unsynced: Option<&UnsyncedFolders>,
) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    // 0666 less the umask, as any tool's new file: tempfile's default 0600 would make
    // kart.lock or an exported module unreadable to the rest of a team or a container
    // build running as another user.
    let temp = || {
        tempfile::Builder::new()
            .prefix(TEMP_PREFIX)
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
            .tempfile_in(temp_dir)
    };
    // Folders are made when missing, not asked for on every write (a store writes
    // thousands of files into a few hundred folders that exist).
    let mut tmp = match temp() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(temp_dir).at("create folder", temp_dir)?;
            temp()
        }
        made => made,
    }
    .at("create a temp file in", temp_dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    tmp.write_all(bytes).at("write", tmp.path())?;
    crate::failpoint::hit("write-atomic.after-write", &name);
    tmp.as_file().sync_all().at("sync", tmp.path())?;
    crate::failpoint::hit("write-atomic.before-rename", &name);
    let retry = match tmp.persist(path) {
        Ok(_) => None,
        Err(e) if e.error.kind() == std::io::ErrorKind::NotFound && !dir.is_dir() => {
            std::fs::create_dir_all(dir).at("create folder", dir)?;
            Some(e.file)
        }
        Err(e) => return Err(e.error).at("rename a temp file to", path),
    };
    if let Some(tmp) = retry {
        tmp.persist(path)
            .map_err(|e| e.error)
            .at("rename a temp file to", path)?;
    }
    crate::failpoint::hit("write-atomic.after-rename", &name);
    match unsynced {
        Some(unsynced) => unsynced.note(dir),
        None => sync_dir(dir),
    }
    Ok(())
}

/// `Some(message)` when the file system holding `dir` has (almost) no space left: a
/// tool writing there may "succeed" with a truncated file, which must not be blamed on
/// the tool.
pub fn disk_full(dir: &Path) -> Option<String> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs fills the struct from a NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let free = st.f_bavail as u64 * st.f_frsize as u64;
    (free < 64 * 1024).then(|| {
        format!(
            "No space left on device: the file system holding `{}` has {free} bytes free",
            dir.display()
        )
    })
}

/// Writes `text` to `path` atomically, only if the file does not already hold exactly
/// that (committed files keep their mtime, and an unchanged lock is not rewritten).
/// Returns whether it wrote.
pub fn write_if_changed(path: &Path, text: &str) -> Result<bool> {
    let old = crate::text::open_regular(path).and_then(|f| {
        let mut old = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(f, text.len() as u64 + 1), &mut old)
            .map(|_| old)
    });
    if old.is_ok_and(|old| old == text.as_bytes()) {
        return Ok(false);
    }
    write_atomic(path, text.as_bytes())?;
    Ok(true)
}

/// Reads a whole file that must not be longer than `limit` bytes (checked before
/// anything is allocated, and again while reading, in case it grows). The error is a
/// description for a corruption report.
pub fn read_bounded(file: std::fs::File, limit: u64) -> std::result::Result<Vec<u8>, String> {
    use std::io::Read;
    let len = file.metadata().map_err(|e| e.to_string())?.len();
    if len > limit {
        return Err(format!("larger than {limit} bytes ({len})"));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("unreadable ({e})"))?;
    if bytes.len() as u64 > limit {
        return Err(format!("larger than {limit} bytes"));
    }
    Ok(bytes)
}

/// Syncs a folder's entries to disk. Best effort: not every file system supports it.
pub fn sync_dir(dir: &Path) {
    if let Ok(f) = std::fs::File::open(dir) {
        let _ = f.sync_all();
    }
}

/// Removes kart temp files under `dir` (recursively): the leftovers of killed processes.
/// Only call this while holding the store exclusively, or live writers lose their files.
pub fn sweep_temp_files(dir: &Path) -> usize {
    sweep_temp_files_except(dir, &[])
}

/// [`sweep_temp_files`], not descending into the folders of `dir` named in `skip`.
pub fn sweep_temp_files_except(dir: &Path, skip: &[&str]) -> usize {
    let mut removed = 0;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let ours = entry.file_name().to_string_lossy().starts_with(TEMP_PREFIX);
        if ours {
            let gone = if kind.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed += usize::from(gone.is_ok());
        } else if kind.is_dir() && !skip.iter().any(|s| entry.file_name() == **s) {
            removed += sweep_temp_files(&path);
        }
    }
    removed
}

/// Removes kart temp files directly in `dir` (not below it): a killed atomic write of
/// `kart.lock` or a sidecar leaves one in the project root.
pub fn sweep_temp_files_shallow(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(TEMP_PREFIX))
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter(|e| std::fs::remove_file(e.path()).is_ok())
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/b.txt");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(p.parent().unwrap()).unwrap().collect();
        assert_eq!(names.len(), 1);
        std::fs::write(dir.path().join(format!("a/{TEMP_PREFIX}x")), b"junk").unwrap();
        assert_eq!(sweep_temp_files(dir.path()), 1);
    }
}
