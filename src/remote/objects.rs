//! The remotes that keep plain named objects: the HTTP server, the shared folder and
//! the object stores all hold `cas/{sha256}` (a blob's raw bytes) and `ac/{key}` (an
//! action entry's JSON), and differ only in how one object is asked about, read and
//! written. [`Objects`] turns those three operations into a [`Storage`] with the same
//! checks for every backend: a blob read is checked against its digest and the size the
//! lock gives, a blob written is hashed first, an entry read is validated.

use super::check::{MAX_BLOB_BYTES, MAX_ENTRY_BYTES, check_blob, encode_entry, parse_entry};
use crate::error::Result;
use crate::store::{ActionEntry, Storage, misnamed_blob};

/// Where blobs live in the layout.
pub(super) const BLOBS: &str = "cas";

/// Where action entries live in the layout.
pub(super) const ENTRIES: &str = "ac";

/// One backend's access to named objects. `kind` is [`BLOBS`] or [`ENTRIES`]; `name` is
/// a digest or a key, which the backend checks before it builds a path or URL from it.
pub(super) trait ObjectRemote: Send + Sync {
    /// Where it is, for messages (no credentials).
    fn shown(&self) -> &str;
    /// Whether object `kind/name` exists.
    fn exists(&self, kind: &str, name: &str) -> Result<bool>;
    /// Object `kind/name`, at most `limit` bytes (more is an error); `Ok(None)` when
    /// there is none.
    fn read(&self, kind: &str, name: &str, limit: u64) -> Result<Option<Vec<u8>>>;
    /// Writes object `kind/name`. The name is the content's digest or an action key, so
    /// an object that exists already may be kept as it is.
    fn write(&self, kind: &str, name: &str, bytes: &[u8]) -> Result<()>;
}

/// A [`Storage`] over an [`ObjectRemote`].
pub(super) struct Objects<R>(pub R);

impl<R: ObjectRemote> Storage for Objects<R> {
    fn location(&self) -> String {
        self.0.shown().to_string()
    }
    fn has_blob(&self, digest: &str, _size: Option<u64>) -> Result<bool> {
        self.0.exists(BLOBS, digest)
    }
    fn get_blob(&self, digest: &str, size: Option<u64>) -> Result<Option<Vec<u8>>> {
        let limit = size.unwrap_or(MAX_BLOB_BYTES);
        let Some(bytes) = self.0.read(BLOBS, digest, limit)? else {
            return Ok(None);
        };
        let url = format!("{}/{BLOBS}/{digest}", self.0.shown());
        check_blob(&url, digest, size, &bytes)?;
        Ok(Some(bytes))
    }
    fn put_blob(&self, digest: &str, bytes: &[u8]) -> Result<()> {
        let actual = crate::digest::sha256_hex(bytes);
        if actual != digest {
            return Err(misnamed_blob(self.0.shown(), digest, &actual));
        }
        self.0.write(BLOBS, digest, bytes)
    }
    fn has_entry(&self, key: &str) -> Result<bool> {
        self.0.exists(ENTRIES, key)
    }
    fn get_entry(&self, key: &str) -> Result<Option<ActionEntry>> {
        match self.0.read(ENTRIES, key, MAX_ENTRY_BYTES)? {
            Some(b) => parse_entry(&format!("{}/{ENTRIES}/{key}", self.0.shown()), key, &b),
            None => Ok(None),
        }
    }
    fn put_entry(&self, entry: &ActionEntry) -> Result<()> {
        let json = encode_entry(self.0.shown(), entry)?;
        self.0.write(ENTRIES, &entry.key, &json)
    }
}
