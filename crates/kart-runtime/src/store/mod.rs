//! The local content-addressed store.
//!
//! ```text
//! artifacts/
//!   CACHEDIR.TAG, .gitignore       (backup tools and git leave it alone)
//!   v1/
//!     .lock                        shared by builds and reads, exclusive for gc and sweeps
//!     blobs/ab/<sha256>.zst        zstd of an artifact; the name is the sha256 of the
//!                                  uncompressed bytes, checked on every read
//!     blobs/ab/<sha256>            an artifact of at most 64 KiB, stored as is: zstd's
//!                                  fixed cost would be most of its load time
//!     actions/ab/<key>.json        action key → digest, resources, nvcc stderr, preimage
//!     checked                      lock records found to agree with their entries, and
//!                                  the entry files' states then (a cache; see `checked`)
//!     toolchains/<id>.json         cached toolchain fingerprints
//!     smoke/<fingerprint>          toolchains that passed the smoke compile
//!     quarantine/                  blobs and entries that failed a check
//!     materialized/                verified, decompressed cubins for other runtimes
//!     projects/<sha256 of a root>  each project that uses the store: its root and lock
//!     tmp/                         scratch folders of running compiles, temp files
//! ```
//! Every write is a temp file, synced, then renamed to its real name, so a crash leaves
//! no partial file under a real name; leftovers are swept on open. Blobs and entries
//! have their temp files in `tmp/` (one small folder to sweep, not every shard), and
//! their shard folders are synced once each before a lock names what they hold; the
//! store's other files have theirs beside them.

pub mod bundle;
mod bundle_table;
pub mod checked;
pub mod entry;
pub mod fsutil;
pub mod limits;
pub mod listing;
pub mod lock_canonical;
pub mod lock_lines;
mod lock_records;
pub mod lock_stream;
mod lockbisect;
pub mod lockfile;
pub mod lockindex;
mod lockscan;
pub mod projects;
mod section;
pub mod sidecar;
#[cfg(test)]
pub(crate) mod testlock;

use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::digest::{is_sha256_hex, sha256_hex};
use crate::error::{Error, IoContext, Result};
use crate::store::fsutil::{
    UnsyncedFolders, read_bounded, sweep_temp_files, sweep_temp_files_except, write_atomic,
    write_atomic_deferred,
};
use crate::text::open_regular;
pub use checked::{Checked, EntryState};
pub use entry::{ActionEntry, ENTRY_FORMAT, is_other_format};
pub use limits::MAX_BLOB_BYTES;
use limits::decompress_bounded;
pub use listing::BlobListing;

/// The layout's folder name. Bump (to `v2`) when the layout or the entry format changes
/// incompatibly; old folders are then simply ignored.
pub const LAYOUT: &str = "v1";

/// zstd level for blobs kart compiled: cubins compress well, decompression speed does
/// not depend on the level, and nvcc takes far longer than level 12 does.
const ZSTD_LEVEL: i32 = 12;

/// zstd level for downloaded blobs: level 12 runs at about 50 MB/s and would make a
/// fetch CPU-bound; level 3 keeps up with the network for about 10% more disk.
const ZSTD_LEVEL_FETCHED: i32 = 3;

/// Blobs up to this size are stored uncompressed. Decompressing a 4 KiB cubin costs
/// about 5 µs whatever the level (table setup), as much as hashing it twice and a
/// third of the driver's load; above this size the saved disk is worth the time.
pub const RAW_BLOB_MAX: usize = 64 << 10;

/// How a store is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockMode {
    /// Builds and reads: many at once.
    Shared,
    /// gc: alone.
    Exclusive,
}

/// An open store, holding its lock until dropped.
#[derive(Debug)]
pub struct Store {
    root: PathBuf,
    dir: PathBuf,
    /// Dropped (and so synced) before the lock is released.
    unsynced: UnsyncedFolders,
    _lock: File,
}

impl Store {
    /// Opens (creating if needed) the store at `root`, waiting up to `timeout` for the
    /// lock. Sweeps temp files of killed processes when no other process holds it.
    pub fn open(root: &Path, mode: LockMode, timeout: Duration) -> Result<Store> {
        Store::open_sweeping(root, mode, timeout, &[])
    }

    /// [`Store::open`], also sweeping kart's temp files at the top of each of `also`
    /// (the project root, where `kart.lock` and the sidecars are written atomically)
    /// when no other process holds the store.
    pub fn open_sweeping(
        root: &Path,
        mode: LockMode,
        timeout: Duration,
        also: &[&Path],
    ) -> Result<Store> {
        let dir = root.join(LAYOUT);
        // A store on a read-only file system (a shared mount on a GPU server) can still
        // be read: skip the scaffolding, lock a read-only handle, never sweep.
        let read_only = dir.join("blobs").is_dir() && !writable(&dir);
        if !read_only {
            std::fs::create_dir_all(root).at("create folder", root)?;
            scaffold(root)?;
            for sub in [
                "blobs",
                "actions",
                "toolchains",
                "smoke",
                "quarantine",
                "materialized",
                "tmp",
                projects::FOLDER,
            ] {
                let p = dir.join(sub);
                std::fs::create_dir_all(&p).at("create folder", &p)?;
            }
        } else if mode == LockMode::Exclusive {
            return Err(Error::usage(
                format!("the store `{}` is read-only", root.display()),
                Some("gc and other writers need a writable store".into()),
            ));
        }
        let lock_path = dir.join(".lock");
        let lock = if read_only {
            File::open(&lock_path).at("open", &lock_path)?
        } else {
            File::options()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&lock_path)
                .at("open", &lock_path)?
        };
        // Sweep only while nobody else holds the store: a live writer's temp file is not
        // a leftover.
        if !read_only && lock.try_lock().is_ok() {
            // Blobs and entries are written through `tmp/`, so their hundreds of shard
            // folders need listing only by the rare exclusive open (gc), which also
            // catches what an older kart left beside a blob.
            if mode == LockMode::Exclusive {
                sweep_temp_files(&dir);
            } else {
                sweep_temp_files_except(&dir, &["blobs", "actions"]);
            }
            for folder in also {
                crate::store::fsutil::sweep_temp_files_shallow(folder);
            }
            if mode == LockMode::Shared {
                lock.unlock().at("unlock", &lock_path)?;
            }
        }
        let start = Instant::now();
        loop {
            let attempt = match mode {
                LockMode::Shared => lock.try_lock_shared(),
                LockMode::Exclusive => lock.try_lock(),
            };
            match attempt {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) if start.elapsed() < timeout => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(TryLockError::WouldBlock) => return Err(Error::StoreBusy { path: lock_path }),
                Err(TryLockError::Error(e)) => return Err(e).at("lock", &lock_path),
            }
        }
        Ok(Store {
            root: root.to_path_buf(),
            dir,
            unsynced: UnsyncedFolders::default(),
            _lock: lock,
        })
    }

    /// The store's root folder (`artifacts/`).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A fresh scratch folder for one compile, removed when dropped (and swept on a
    /// later open if the process was killed).
    pub fn scratch_dir(&self) -> Result<tempfile::TempDir> {
        let base = self.dir.join("tmp");
        tempfile::Builder::new()
            .prefix(crate::store::fsutil::TEMP_PREFIX)
            .tempdir_in(&base)
            .at("create a scratch folder in", &base)
    }

    /// Where cached toolchain fingerprints live.
    pub fn toolchain_cache_dir(&self) -> PathBuf {
        self.dir.join("toolchains")
    }

    /// Where each project's last settled no-op build is recorded (`kart build`'s
    /// shortcut; one small file per project).
    pub fn settled_dir(&self) -> PathBuf {
        self.dir.join("settled")
    }

    /// Where the projects that use this store are registered ([`projects`]).
    pub fn projects_dir(&self) -> PathBuf {
        self.dir.join(projects::FOLDER)
    }

    /// Whether the store was opened on a read-only file system.
    pub fn is_read_only(&self) -> bool {
        !writable(&self.dir)
    }

    /// Where verified, decompressed artifacts are written for other runtimes.
    pub fn materialized_dir(&self) -> PathBuf {
        self.dir.join("materialized")
    }

    /// The path of a blob's file: the uncompressed file where there is one, else the
    /// `.zst` (whether or not it exists).
    pub fn blob_path(&self, digest: &str) -> PathBuf {
        let raw = self.raw_blob_path(digest);
        if raw.is_file() {
            raw
        } else {
            self.zst_blob_path(digest)
        }
    }

    fn raw_blob_path(&self, digest: &str) -> PathBuf {
        self.dir.join("blobs").join(&digest[..2]).join(digest)
    }

    fn zst_blob_path(&self, digest: &str) -> PathBuf {
        self.dir
            .join("blobs")
            .join(&digest[..2])
            .join(format!("{digest}.zst"))
    }

    /// Writes `bytes` as the stored file of `digest` without checking them, in the
    /// encoding their size calls for. For fault-injection tests: a real store only
    /// gets blobs through [`Store::put_blob`].
    pub fn plant_blob_unchecked(&self, digest: &str, bytes: &[u8]) -> Result<()> {
        let _ = std::fs::remove_file(self.raw_blob_path(digest));
        let _ = std::fs::remove_file(self.zst_blob_path(digest));
        if bytes.len() <= RAW_BLOB_MAX {
            self.write_sharded(&self.raw_blob_path(digest), bytes)
        } else {
            let path = self.zst_blob_path(digest);
            let compressed = zstd::bulk::compress(bytes, 1).at("compress", &path)?;
            self.write_sharded(&path, &compressed)
        }
    }

    fn entry_path(&self, key: &str) -> PathBuf {
        self.dir
            .join("actions")
            .join(&key[..2])
            .join(format!("{key}.json"))
    }

    /// Whether a blob file exists (its bytes are not checked).
    pub fn has_blob(&self, digest: &str) -> bool {
        // One stat for a raw blob, two for a compressed one (not blob_path's two and three).
        is_sha256_hex(digest)
            && (self.raw_blob_path(digest).is_file() || self.zst_blob_path(digest).is_file())
    }

    /// Lists every blob folder once ([`BlobListing`]), to ask about thousands of blobs.
    pub fn list_blobs(&self) -> BlobListing {
        BlobListing::read(&self.dir.join("blobs"))
    }

    /// Which of `digests` are stored: a stat each for a few, one listing of the blob
    /// folders for thousands.
    pub fn have_blobs(&self, digests: &[&str]) -> Vec<bool> {
        const LIST_PAST: usize = 2048;
        if digests.len() <= LIST_PAST {
            return digests.iter().map(|d| self.has_blob(d)).collect();
        }
        let listing = self.list_blobs();
        digests
            .iter()
            .map(|d| listing.has(d, |d| self.has_blob(d)))
            .collect()
    }

    /// The size of a blob's stored file (compressed or not), if it is there.
    pub fn stored_size(&self, digest: &str) -> Option<u64> {
        std::fs::metadata(self.blob_path(digest))
            .ok()
            .map(|m| m.len())
    }

    /// Stores `bytes` under their sha256 and returns it. Identical bytes are stored once.
    pub fn put_blob(&self, bytes: &[u8]) -> Result<String> {
        let digest = sha256_hex(bytes);
        self.store_blob(&digest, bytes, ZSTD_LEVEL)?;
        Ok(digest)
    }

    /// Stores `bytes` that came from elsewhere (a remote, a bundle) under `digest`,
    /// hashing them first: bytes that are not blob `digest` are refused and nothing is
    /// stored. They are compressed at a faster level than what the build stores.
    pub fn put_named_blob(&self, digest: &str, bytes: &[u8]) -> Result<()> {
        let actual = sha256_hex(bytes);
        if actual != digest {
            return Err(misnamed_blob(
                &self.dir.display().to_string(),
                digest,
                &actual,
            ));
        }
        self.store_blob(digest, bytes, ZSTD_LEVEL_FETCHED)
    }

    fn store_blob(&self, digest: &str, bytes: &[u8], level: i32) -> Result<()> {
        if !is_sha256_hex(digest) {
            return Err(Error::CorruptEntry {
                path: self.dir.clone(),
                message: format!("`{digest}` is not a sha256 digest"),
            });
        }
        if self.has_blob(digest) {
            return Ok(());
        }
        if bytes.len() <= RAW_BLOB_MAX {
            self.write_sharded(&self.raw_blob_path(digest), bytes)
        } else {
            let path = self.zst_blob_path(digest);
            let compressed = zstd::bulk::compress(bytes, level).at("compress", &path)?;
            self.write_sharded(&path, &compressed)
        }
    }

    /// Reads, decompresses and verifies a blob. A blob whose bytes do not hash to its
    /// digest is moved to the quarantine and reported; its bytes are never returned.
    /// `expected_size` (from the lock) bounds decompression.
    pub fn read_blob(&self, digest: &str, expected_size: Option<u64>) -> Result<Vec<u8>> {
        if !is_sha256_hex(digest) {
            return Err(Error::CorruptEntry {
                path: self.dir.clone(),
                message: format!("`{digest}` is not a sha256 digest"),
            });
        }
        let limit = expected_size.unwrap_or(MAX_BLOB_BYTES);
        let raw = self.raw_blob_path(digest);
        // Only regular files are read (a FIFO would block, a device never end); one of
        // another type under a blob's name is corrupt like wrong bytes.
        let (path, decoded) = match open_regular(&raw) {
            Ok(file) => (raw, read_bounded(file, limit)),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => (raw, Err(e.to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let path = self.zst_blob_path(digest);
                let decoded = match open_regular(&path) {
                    Ok(file) => {
                        let bound = zstd::zstd_safe::compress_bound(limit as usize) as u64;
                        read_bounded(file, bound)
                            .and_then(|frame| decompress_bounded(&frame, expected_size))
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => Err(e.to_string()),
                    Err(e) => return Err(e).at("read blob", &path),
                };
                (path, decoded)
            }
            Err(e) => return Err(e).at("read blob", &raw),
        };
        let actual = match decoded {
            Ok(bytes) => {
                let actual = sha256_hex(&bytes);
                if actual == digest {
                    return Ok(bytes);
                }
                format!("its bytes hash to {actual}")
            }
            Err(why) => why,
        };
        let quarantined = self.quarantine(&path);
        Err(Error::CorruptBlob {
            digest: digest.to_string(),
            actual,
            path: quarantined,
        })
    }

    /// Moves a file into the quarantine and returns its new path.
    pub fn quarantine(&self, path: &Path) -> PathBuf {
        let name = path
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_default();
        let dest = self.dir.join("quarantine").join(name);
        match std::fs::rename(path, &dest) {
            Ok(()) => dest,
            Err(_) => path.to_path_buf(),
        }
    }

    /// Writes an action entry.
    pub fn put_entry(&self, entry: &ActionEntry) -> Result<()> {
        let path = self.entry_path(&entry.key);
        let json = serde_json::to_vec_pretty(entry).map_err(|e| Error::CorruptEntry {
            path: path.clone(),
            message: e.to_string(),
        })?;
        self.write_sharded(&path, &json)
    }

    /// Writes a file of a shard folder (a blob, an entry) with its temp file in `tmp/`;
    /// the folder is synced by [`Store::sync_folders`] (or when the store is dropped).
    fn write_sharded(&self, path: &Path, bytes: &[u8]) -> Result<()> {
        write_atomic_deferred(&self.dir.join("tmp"), path, bytes, &self.unsynced)
    }

    /// Syncs each shard folder written since the last call, once: before a lock that
    /// names new blobs and entries is written ([`fsutil::UnsyncedFolders`]).
    pub fn sync_folders(&self) {
        self.unsynced.sync();
    }

    /// Reads the action entry of `key`, if any. An unreadable entry is quarantined and
    /// reported as an error (callers treat it as a miss and say so).
    pub fn get_entry(&self, key: &str) -> Result<Option<ActionEntry>> {
        Ok(self.get_entry_with_state(key)?.map(|(entry, _)| entry))
    }

    /// [`Store::get_entry`], with the state of the file the entry was read from (taken
    /// from the open file, so it is the state of exactly those bytes).
    pub fn get_entry_with_state(&self, key: &str) -> Result<Option<(ActionEntry, EntryState)>> {
        if !is_sha256_hex(key) {
            return Ok(None);
        }
        let path = self.entry_path(key);
        let read = match crate::text::open_regular(&path) {
            Ok(file) => {
                let state = EntryState::of(&file.metadata().at("read", &path)?);
                read_bounded(file, crate::text::Limit::ENTRY.bytes).map(|bytes| (bytes, state))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => Err(e.to_string()),
            Err(e) => return Err(e).at("read", &path),
        };
        let parsed = read.and_then(|(bytes, state)| {
            ActionEntry::parse(&bytes, key).map(|entry| entry.map(|e| (e, state)))
        });
        match parsed {
            Ok(entry) => Ok(entry),
            Err(message) => {
                let quarantined = self.quarantine(&path);
                Err(Error::CorruptEntry {
                    path: quarantined,
                    message,
                })
            }
        }
    }

    /// The state of `key`'s entry file, if there is one (one `stat`, nothing read).
    pub fn entry_state(&self, key: &str) -> Option<EntryState> {
        if !is_sha256_hex(key) {
            return None;
        }
        std::fs::metadata(self.entry_path(key))
            .ok()
            .map(|m| EntryState::of(&m))
    }

    /// The records of lock bindings already found to agree with their entries.
    pub fn checked(&self) -> Checked {
        Checked::read(self.dir.join(checked::CHECKED_FILE))
    }

    /// Digests of every blob file in the store.
    pub fn blob_digests(&self) -> Result<Vec<String>> {
        let mut digests = self.list("blobs", ".zst")?;
        digests.extend(self.list("blobs", "")?);
        digests.sort();
        digests.dedup();
        Ok(digests)
    }

    /// Keys of every action entry in the store.
    pub fn entry_keys(&self) -> Result<Vec<String>> {
        self.list("actions", ".json")
    }

    fn list(&self, sub: &str, suffix: &str) -> Result<Vec<String>> {
        let base = self.dir.join(sub);
        let mut out = Vec::new();
        for shard in std::fs::read_dir(&base).at("list", &base)?.flatten() {
            let Ok(files) = std::fs::read_dir(shard.path()) else {
                continue;
            };
            for f in files.flatten() {
                let name = f.file_name().to_string_lossy().into_owned();
                if let Some(stem) = name.strip_suffix(suffix)
                    && is_sha256_hex(stem)
                {
                    out.push(stem.to_string());
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// Removes a blob (both forms, where both exist); returns the bytes freed.
    pub fn remove_blob(&self, digest: &str) -> Result<u64> {
        let mut freed = 0;
        for path in [self.raw_blob_path(digest), self.zst_blob_path(digest)] {
            if let Ok(meta) = std::fs::metadata(&path) {
                std::fs::remove_file(&path).at("remove", &path)?;
                freed += meta.len();
            }
        }
        Ok(freed)
    }

    /// Removes an action entry.
    pub fn remove_entry(&self, key: &str) -> Result<()> {
        let path = self.entry_path(key);
        std::fs::remove_file(&path).at("remove", &path)
    }

    /// Whether this toolchain already compiled the smoke kernel in this store.
    pub fn smoke_passed(&self, fingerprint: &str) -> bool {
        self.dir.join("smoke").join(fingerprint).is_file()
    }

    /// Records that this toolchain compiled the smoke kernel.
    pub fn mark_smoke_passed(&self, fingerprint: &str, note: &str) -> Result<()> {
        write_atomic(&self.dir.join("smoke").join(fingerprint), note.as_bytes())
    }
}

/// Marks the store as a cache for backup tools and git.
/// Whether files can be created in `dir` (false on a read-only mount, or without
/// permission).
fn writable(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: access(2) on a NUL-terminated path.
    let ok = unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0;
    // access() ignores a read-only mount for root on some systems: ask statvfs too.
    // SAFETY: statvfs fills the struct from a NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let ro = unsafe { libc::statvfs(c.as_ptr(), &mut st) } == 0 && st.f_flag & libc::ST_RDONLY != 0;
    ok && !ro
}

fn scaffold(root: &Path) -> Result<()> {
    let tag = root.join("CACHEDIR.TAG");
    // Mark only a folder that is a store or new: `store` pointed at a folder of other
    // things (a home folder, a source tree) must not get a tag that makes backup tools
    // skip it and a `.gitignore` that hides it from git.
    // `.gitkeep`: a repository that tracks the empty store folder; a temp file: another
    // kart process writing this folder's tag at the same moment.
    let ours = |name: &std::ffi::OsStr| {
        let name = name.to_str().unwrap_or("");
        ["CACHEDIR.TAG", ".gitignore", ".gitkeep", LAYOUT].contains(&name)
            || name.starts_with(crate::store::fsutil::TEMP_PREFIX)
    };
    let foreign: Vec<String> = std::fs::read_dir(root)
        .at("list", root)?
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| !ours(n))
        .map(|n| n.to_string_lossy().into_owned())
        .take(3)
        .collect();
    if !tag.exists() && !foreign.is_empty() {
        return Err(Error::usage(
            format!(
                "`{}` is not a kart store and not empty (it holds {}…): kart will not make it one",
                root.display(),
                foreign.join(", ")
            ),
            Some("point `store` in kart.toml at a new folder".into()),
        ));
    }
    if !tag.exists() {
        write_atomic(
            &tag,
            b"Signature: 8a477f597d28d172789f06886806bc55\n# This folder is a kart artifact store; `kart build` recreates it.\n",
        )?;
    }
    let ignore = root.join(".gitignore");
    if !ignore.exists() {
        write_atomic(&ignore, b"*\n")?;
    }
    Ok(())
}

/// The verbs every place that keeps artifacts shares: this local store, and in the
/// `kart` crate's `remote` module an HTTP cache, a shared folder, S3-compatible object
/// storage, a Remote Execution API server, and one storage layered in front of another.
///
/// Every implementation checks bytes against their digest both ways: `get_blob` returns
/// only bytes that hash to the digest asked for (and have the size asked for, where
/// given), and `put_blob` hashes what it is handed and refuses a mismatch, so nothing a
/// caller or a server gets wrong can reach a store under the wrong name. A blob's size
/// is given wherever the caller knows it (the lock and action entries carry it): some
/// servers (the Remote Execution API's CAS) name blobs by digest and size together.
pub trait Storage: Send + Sync {
    /// Where it is, for messages (never with credentials).
    fn location(&self) -> String;
    /// Whether it holds blob `digest` (of `size` bytes, where known).
    fn has_blob(&self, digest: &str, size: Option<u64>) -> Result<bool>;
    /// Which of `blobs` (digest, size) it lacks, in their order. One question for many
    /// where the server can answer that way; by default, one `has_blob` each.
    fn missing_blobs(&self, blobs: &[(&str, u64)]) -> Result<Vec<String>> {
        let mut missing = Vec::new();
        for &(digest, size) in blobs {
            if !self.has_blob(digest, Some(size))? {
                missing.push(digest.to_string());
            }
        }
        Ok(missing)
    }
    /// Blob `digest`, checked against it (and against `size` where known); `Ok(None)`
    /// when it is not there.
    fn get_blob(&self, digest: &str, size: Option<u64>) -> Result<Option<Vec<u8>>>;
    /// Keeps `bytes` as blob `digest`: they are hashed as they are stored, and bytes
    /// that do not hash to `digest` are refused with nothing kept.
    fn put_blob(&self, digest: &str, bytes: &[u8]) -> Result<()>;
    /// Whether it holds the action entry of `key`.
    fn has_entry(&self, key: &str) -> Result<bool> {
        Ok(self.get_entry(key)?.is_some())
    }
    /// The action entry of `key`, validated; `Ok(None)` when absent.
    fn get_entry(&self, key: &str) -> Result<Option<ActionEntry>>;
    /// Keeps an action entry.
    fn put_entry(&self, entry: &ActionEntry) -> Result<()>;
}

/// The error of a `put_blob` handed bytes that are not the blob it names.
pub fn misnamed_blob(location: &str, digest: &str, actual: &str) -> Error {
    Error::Remote {
        url: location.to_string(),
        message: format!("refused to store bytes hashing to {actual} as blob {digest}"),
        failure: crate::error::RemoteFailure::Corrupt,
        hint: Some("nothing was stored under that name".into()),
    }
}

impl Storage for Store {
    fn location(&self) -> String {
        self.root().display().to_string()
    }
    fn has_blob(&self, digest: &str, _size: Option<u64>) -> Result<bool> {
        Ok(Store::has_blob(self, digest))
    }
    fn get_blob(&self, digest: &str, size: Option<u64>) -> Result<Option<Vec<u8>>> {
        if !Store::has_blob(self, digest) {
            return Ok(None);
        }
        self.read_blob(digest, size).map(Some)
    }
    fn put_blob(&self, digest: &str, bytes: &[u8]) -> Result<()> {
        self.put_named_blob(digest, bytes)
    }
    fn has_entry(&self, key: &str) -> Result<bool> {
        Ok(is_sha256_hex(key) && self.entry_path(key).is_file())
    }
    fn get_entry(&self, key: &str) -> Result<Option<ActionEntry>> {
        Store::get_entry(self, key)
    }
    fn put_entry(&self, entry: &ActionEntry) -> Result<()> {
        Store::put_entry(self, entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(dir: &Path) -> Store {
        Store::open(dir, LockMode::Shared, Duration::from_secs(1)).unwrap()
    }

    #[test]
    fn blob_round_trip_and_dedup() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let d1 = store.put_blob(b"hello cubin").unwrap();
        let d2 = store.put_blob(b"hello cubin").unwrap();
        assert_eq!(d1, d2);
        assert_eq!(store.blob_digests().unwrap(), vec![d1.clone()]);
        assert_eq!(store.read_blob(&d1, Some(11)).unwrap(), b"hello cubin");
    }

    #[test]
    fn corrupt_blob_is_refused_and_quarantined() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let good = store.put_blob(b"good bytes").unwrap();
        let other = zstd::bulk::compress(b"evil bytes", 3).unwrap();
        std::fs::write(store.blob_path(&good), other).unwrap();
        let err = store.read_blob(&good, None).unwrap_err();
        assert!(matches!(err, Error::CorruptBlob { .. }), "{err}");
        assert!(!store.has_blob(&good));
        std::fs::write(store.blob_path(&store.put_blob(b"x").unwrap()), b"not zstd").unwrap();
        assert!(store.read_blob(&sha256_hex(b"x"), None).is_err());
    }

    #[test]
    fn a_frame_larger_than_the_lock_says_is_refused_without_inflating() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let big: Vec<u8> = (0..100_000u32).map(|i| (i * 7919 % 251) as u8).collect();
        let digest = store.put_blob(&big).unwrap();
        assert!(store.blob_path(&digest).to_string_lossy().ends_with(".zst"));
        // 64 MiB of zeros compress to a few KiB: a bomb for a reader without a bound.
        let bomb = zstd::bulk::compress(&vec![0u8; 64 << 20], 3).unwrap();
        std::fs::write(store.blob_path(&digest), bomb).unwrap();
        let err = store.read_blob(&digest, Some(100_000)).unwrap_err();
        assert!(
            err.to_string().contains("larger than 100000 bytes"),
            "{err}"
        );
        assert!(!store.has_blob(&digest));
    }

    #[test]
    fn small_blobs_are_stored_as_is_and_still_checked() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let digest = store.put_blob(b"small cubin").unwrap();
        let path = store.blob_path(&digest);
        assert_eq!(std::fs::read(&path).unwrap(), b"small cubin");
        assert_eq!(store.blob_digests().unwrap(), vec![digest.clone()]);
        // Asked one by one or through the listing of their folders, the same answer.
        let big = store.put_blob(&[7u8; 64 << 10]).unwrap();
        let absent = "0".repeat(64);
        let asked = [digest.as_str(), &absent, big.as_str(), "not hex"];
        assert_eq!(store.have_blobs(&asked), [true, false, true, false]);
        let many: Vec<&str> = asked.iter().copied().cycle().take(4 * 1024).collect();
        let expected: Vec<bool> = many.iter().map(|d| store.has_blob(d)).collect();
        assert_eq!(store.have_blobs(&many), expected);
        assert_eq!(expected.iter().filter(|&&b| b).count(), 2 * 1024);
        store.remove_blob(&big).unwrap();
        std::fs::write(&path, b"small cubin, grown").unwrap();
        let err = store.read_blob(&digest, Some(11)).unwrap_err();
        assert!(err.to_string().contains("larger than 11 bytes"), "{err}");
        store.put_blob(b"small cubin").unwrap();
        std::fs::write(&path, b"SMALL CUBIN").unwrap();
        assert!(matches!(
            store.read_blob(&digest, Some(11)),
            Err(Error::CorruptBlob { .. })
        ));
        assert_eq!(
            store.remove_blob(&store.put_blob(b"x").unwrap()).unwrap(),
            1
        );
    }

    #[test]
    fn exclusive_waits_for_shared_and_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let _shared = open(dir.path());
        let start = std::time::Instant::now();
        let err =
            Store::open(dir.path(), LockMode::Exclusive, Duration::from_millis(200)).unwrap_err();
        assert!(matches!(err, Error::StoreBusy { .. }));
        // It waited for the shared holder the whole timeout before giving up.
        assert!(
            start.elapsed() >= Duration::from_millis(200),
            "{:?}",
            start.elapsed()
        );
    }
}
