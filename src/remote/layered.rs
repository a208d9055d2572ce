//! One storage in front of another, as one [`Storage`]: reads look in the front (the
//! local store) first, then ask the one behind (a remote) and keep what it sends, checked,
//! in front; writes go to the front (uploading is `push`'s). `fetch` and the build's
//! read-through both take blobs through it.

use crate::error::Result;
use crate::store::{ActionEntry, Storage};

/// One storage in front of another: the local store, and the remote behind it if there
/// is one.
#[derive(Clone, Copy)]
pub struct Layered<'a> {
    /// Looked at first, and filled.
    pub local: &'a dyn Storage,
    /// Asked for what the local storage lacks.
    pub remote: Option<&'a dyn Storage>,
}

impl<'a> Layered<'a> {
    /// `local` with `remote` behind it.
    pub fn new(local: &'a dyn Storage, remote: &'a dyn Storage) -> Layered<'a> {
        Layered {
            local,
            remote: Some(remote),
        }
    }

    /// Makes sure blob `digest` is in the local storage: `Ok(true)` when it is (it was,
    /// or the remote sent it and it checked out), `Ok(false)` when neither has it.
    pub fn fill_blob(&self, digest: &str, size: Option<u64>) -> Result<bool> {
        if self.local.has_blob(digest, size)? {
            return Ok(true);
        }
        let Some(remote) = self.remote else {
            return Ok(false);
        };
        crate::failpoint::hit("fetch.download", digest);
        let Some(blob) = remote.get_blob(digest, size)? else {
            return Ok(false);
        };
        crate::failpoint::hit("fetch.store", digest);
        self.local.put_blob(digest, &blob)?;
        Ok(true)
    }
}

impl Storage for Layered<'_> {
    fn location(&self) -> String {
        match self.remote {
            Some(r) => format!("{} (then {})", self.local.location(), r.location()),
            None => self.local.location(),
        }
    }
    fn has_blob(&self, digest: &str, size: Option<u64>) -> Result<bool> {
        if self.local.has_blob(digest, size)? {
            return Ok(true);
        }
        self.remote.map_or(Ok(false), |r| r.has_blob(digest, size))
    }
    fn get_blob(&self, digest: &str, size: Option<u64>) -> Result<Option<Vec<u8>>> {
        if !self.fill_blob(digest, size)? {
            return Ok(None);
        }
        self.local.get_blob(digest, size)
    }
    fn put_blob(&self, digest: &str, bytes: &[u8]) -> Result<()> {
        self.local.put_blob(digest, bytes)
    }
    fn has_entry(&self, key: &str) -> Result<bool> {
        if self.local.has_entry(key)? {
            return Ok(true);
        }
        self.remote.map_or(Ok(false), |r| r.has_entry(key))
    }
    fn get_entry(&self, key: &str) -> Result<Option<ActionEntry>> {
        if let Some(entry) = self.local.get_entry(key)? {
            return Ok(Some(entry));
        }
        self.remote.map_or(Ok(None), |r| r.get_entry(key))
    }
    fn put_entry(&self, entry: &ActionEntry) -> Result<()> {
        self.local.put_entry(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::{Remote, RemoteSettings};
    use crate::store::{LockMode, Store};
    use std::time::Duration;

    /// A folder remote behind a store: a read fills the store, a corrupt remote blob
    /// is refused and stores nothing, a blob neither has is `None`.
    #[test]
    fn reads_fill_the_store_from_the_remote_and_check_every_byte() {
        let dir = tempfile::tempdir().unwrap();
        let remote_dir = dir.path().join("remote");
        std::fs::create_dir_all(remote_dir.join("cas")).unwrap();
        std::fs::create_dir_all(remote_dir.join("ac")).unwrap();
        let remote = Remote::open(
            &RemoteSettings::new(format!("file://{}", remote_dir.display())),
            None,
        )
        .unwrap();
        let store = Store::open(
            &dir.path().join("store"),
            LockMode::Shared,
            Duration::from_secs(1),
        )
        .unwrap();
        let layered = Layered::new(&store, &remote);
        let bytes = b"a cubin".to_vec();
        let digest = crate::digest::sha256_hex(&bytes);
        Storage::put_blob(&remote, &digest, &bytes).unwrap();
        assert!(!store.has_blob(&digest));
        assert_eq!(layered.get_blob(&digest, Some(7)).unwrap(), Some(bytes));
        assert!(store.has_blob(&digest), "the read filled the store");

        let other = crate::digest::sha256_hex(b"other");
        std::fs::write(remote_dir.join("cas").join(&other), b"not other").unwrap();
        assert!(layered.get_blob(&other, None).is_err());
        assert!(!store.has_blob(&other), "a corrupt blob stored nothing");
        let absent = crate::digest::sha256_hex(b"absent");
        assert_eq!(layered.get_blob(&absent, None).unwrap(), None);
    }
}
