//! Stat caches: a hash of files outside the project (a toolkit, a header library)
//! remembered with the state of those files, so that it is computed once per machine,
//! not once per store or per build.
//!
//! A [`Stamp`] is what `stat` says of one path: size, mtime, ctime, inode and device.
//! A cached answer is used only while every stamp taken now equals the stamp recorded
//! with it. Why that is safe, as for the stat caches of build systems (git's index,
//! make, ninja):
//! - The bytes of a file change only through its inode (a write, a truncate), which
//!   sets its mtime and its ctime, or by another inode taking its name (a rename over
//!   it, a delete and a create), which changes the inode number or, when the number is
//!   reused, the ctime, set to the new inode's creation. A folder gains or loses a
//!   name the same way, which sets its mtime and ctime.
//! - Tools that restore an mtime (`cp -p`, `tar -x`, `rsync -t`, `touch -d`) cannot
//!   restore a ctime: no system call sets it, and the call that sets the mtime sets the
//!   ctime to now. Size and mtime alone would take an install copied over another one
//!   with its original mtimes for the old one; the ctime and the inode do not.
//! - A file changed within the clock's granularity of when its stamp was taken can keep
//!   both times ("racy" stamps): an answer is not recorded while any stamp is younger
//!   than [`SETTLE_NS`]; it is computed again next time instead.
//! - A stamp is taken before the hashing: a change during the hash leaves a stamp
//!   that differs from the next one, so the answer is computed again.
//!
//! What a stamp cannot see is the same as for those tools: a file whose bytes are
//! changed by writing the block device underneath, or whose times are reset by
//! someone who sets the clock back. The cache files are read as untrusted: bounded,
//! parsed, checked for their own consistency by the caller, and ignored (then
//! rewritten) when any of that fails; a cached answer is never used without its stamps
//! matching.
//!
//! The files live in kart's home (`KART_HOME`, per user, `fingerprints/`), so a fresh
//! store or a second project on the same toolkit finds them; without a home, in the
//! store's `toolchains/` folder as before.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::store::fsutil::write_atomic;

/// How old every stamp must be for an answer to be recorded: a file changed again
/// within the file system clock's granularity could keep its times.
pub const SETTLE_NS: i128 = 2_000_000_000;

/// What `stat` says of one path (followed through links). A path that cannot be
/// stat'ed has size `u64::MAX` and zeros: equal only to another that cannot be.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq, Debug)]
pub struct Stamp {
    /// The path, as the caller names it (absolute, or relative to a folder it hashes).
    pub path: PathBuf,
    /// Bytes.
    pub size: u64,
    /// Last change of the bytes, ns since the epoch.
    pub mtime_ns: i128,
    /// Last change of the bytes or of the inode (links, mode, times), ns since the
    /// epoch; not settable from user space.
    pub ctime_ns: i128,
    /// The inode number.
    pub ino: u64,
    /// The device the inode is on.
    pub dev: u64,
}

impl Stamp {
    /// The stamp of `path`; `name` is what the stamp records as its path.
    pub fn of(path: &Path, name: PathBuf) -> Stamp {
        match std::fs::metadata(path) {
            Ok(m) => Stamp {
                path: name,
                size: m.len(),
                mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
                ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
                ino: m.ino(),
                dev: m.dev(),
            },
            Err(_) => Stamp {
                path: name,
                size: u64::MAX,
                mtime_ns: 0,
                ctime_ns: 0,
                ino: 0,
                dev: 0,
            },
        }
    }

    /// Whether this stamp is too recent to be trusted later ([`SETTLE_NS`]).
    fn is_racy(&self, now_ns: i128) -> bool {
        now_ns - self.mtime_ns.max(self.ctime_ns) < SETTLE_NS
    }
}

/// The folders a stat cache is read from, first hit wins, and the first it is written
/// to: kart's home, then the store's own folder.
#[derive(Clone, Debug)]
pub struct CacheDirs(pub Vec<PathBuf>);

impl CacheDirs {
    /// kart's home (when it can be named) and then `store_dir`.
    pub fn new(store_dir: PathBuf) -> CacheDirs {
        let mut dirs = Vec::new();
        if let Ok(home) = crate::install::Home::from_env() {
            dirs.push(home.fingerprints());
        }
        dirs.push(store_dir);
        CacheDirs(dirs)
    }

    /// The first cache file named `name` that parses as a `T` and that `valid` accepts.
    /// Anything else (absent, too large, not JSON, stale, inconsistent) is passed over.
    pub fn read<T: DeserializeOwned>(&self, name: &str, valid: impl Fn(&T) -> bool) -> Option<T> {
        self.0.iter().find_map(|dir| {
            let text =
                kart_runtime::text::read_text(&dir.join(name), kart_runtime::text::Limit::CACHE)
                    .ok()?;
            serde_json::from_str::<T>(&text)
                .ok()
                .filter(|value| valid(value))
        })
    }

    /// Records `value` as cache file `name` in the first folder that takes it, unless a
    /// stamp among `stamps` is too recent to be trusted later. The cache is an
    /// optimisation: a failed write does not fail the command.
    pub fn write<T: Serialize>(&self, name: &str, value: &T, stamps: &[Stamp]) {
        let now_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128);
        if stamps.iter().any(|s| s.is_racy(now_ns)) {
            return;
        }
        let Ok(json) = serde_json::to_vec(value) else {
            return;
        };
        for dir in &self.0 {
            if std::fs::create_dir_all(dir).is_ok() && write_atomic(&dir.join(name), &json).is_ok()
            {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_file_with_its_old_size_and_mtime_gets_another_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ptxas");
        std::fs::write(&path, b"one").unwrap();
        let old = std::fs::metadata(&path).unwrap().modified().unwrap();
        let before = Stamp::of(&path, "ptxas".into());
        // Same size, mtime set back: what `cp -p` or `rsync -t` of another file leaves.
        let other = dir.path().join("new");
        std::fs::write(&other, b"two").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&other)
            .unwrap()
            .set_modified(old)
            .unwrap();
        std::fs::rename(&other, &path).unwrap();
        let after = Stamp::of(&path, "ptxas".into());
        assert_eq!((before.size, before.mtime_ns), (after.size, after.mtime_ns));
        assert_ne!(before, after);
        // Bytes rewritten in place, mtime set back: the ctime still moves.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&path, b"333").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let rewritten = Stamp::of(&path, "ptxas".into());
        assert_eq!(rewritten.ino, after.ino);
        assert_ne!(rewritten, after);
    }

    #[test]
    fn a_missing_path_has_a_stamp_of_its_own_and_fresh_stamps_are_not_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let missing = Stamp::of(&dir.path().join("absent"), "absent".into());
        assert_eq!(missing.size, u64::MAX);
        let file = dir.path().join("fresh");
        std::fs::write(&file, b"x").unwrap();
        let fresh = Stamp::of(&file, "fresh".into());
        let cache = CacheDirs(vec![dir.path().join("cache")]);
        cache.write("answer.json", &1u32, std::slice::from_ref(&fresh));
        assert!(!dir.path().join("cache/answer.json").exists());
        cache.write("answer.json", &1u32, &[missing]);
        assert_eq!(cache.read::<u32>("answer.json", |_| true), Some(1));
        assert_eq!(cache.read::<u32>("answer.json", |v| *v == 2), None);
    }
}
