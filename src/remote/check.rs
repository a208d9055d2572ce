//! What every backend checks in what a server sends: blob bytes against their digest
//! and size, action entries against their format, names against the one form that is
//! safe in a path or URL.

use crate::digest::{is_sha256_hex, sha256_hex};
use crate::error::{Error, RemoteFailure, Result};
use crate::store::ActionEntry;

/// Action entries carry nvcc's stderr and the key's preimage, but never this much.
pub(super) const MAX_ENTRY_BYTES: u64 = 8 << 20;

/// Blobs whose size is not known in advance are refused above this.
pub(super) const MAX_BLOB_BYTES: u64 = 1 << 30;

/// Checks bytes a remote sent at `url` as blob `digest`: exactly `size` bytes where the
/// size is known (the lock's), and hashing to `digest`. A mismatch is an error, and the
/// caller drops the bytes.
pub(super) fn check_blob(url: &str, digest: &str, size: Option<u64>, bytes: &[u8]) -> Result<()> {
    let corrupt = |message: String| {
        Error::Remote {
        url: url.to_string(),
        message,
        failure: RemoteFailure::Corrupt,
        hint: Some(
            "nothing was stored; remove the blob from the remote (its disk or cache may be damaged) and push it again".into(),
        ),
    }
    };
    if let Some(size) = size
        && bytes.len() as u64 != size
    {
        return Err(corrupt(format!(
            "sent {} bytes for blob {digest}, which kart.lock says has {size}",
            bytes.len()
        )));
    }
    let actual = sha256_hex(bytes);
    if actual != digest {
        return Err(corrupt(format!(
            "sent bytes hashing to {actual} for blob {digest}"
        )));
    }
    Ok(())
}

/// Parses and validates an action entry a remote sent at `url` for `key`; `Ok(None)` for
/// an entry of another format version (a miss).
pub(super) fn parse_entry(url: &str, key: &str, bytes: &[u8]) -> Result<Option<ActionEntry>> {
    ActionEntry::parse(bytes, key).map_err(|message| Error::Remote {
        url: url.to_string(),
        message: format!("invalid action entry: {message}"),
        failure: RemoteFailure::Corrupt,
        hint: Some("ignored; the artifact is compiled locally".into()),
    })
}

/// An action entry as remotes keep it (JSON).
pub(super) fn encode_entry(url: &str, entry: &ActionEntry) -> Result<Vec<u8>> {
    serde_json::to_vec_pretty(entry).map_err(|e| Error::Remote {
        url: url.to_string(),
        message: format!("cannot encode entry: {e}"),
        failure: RemoteFailure::Refused,
        hint: None,
    })
}

/// A digest or key that is safe to use as a file or URL path segment.
pub(super) fn checked_name(name: &str) -> Result<&str> {
    if is_sha256_hex(name) {
        Ok(name)
    } else {
        Err(Error::usage(
            format!("`{name}` is not a sha256 digest (64 lower-case hex digits)"),
            None,
        ))
    }
}

pub(super) fn too_large(shown: &str, limit: u64) -> Error {
    Error::Remote {
        url: shown.to_string(),
        message: format!("sent more than the {limit} bytes expected"),
        failure: RemoteFailure::Corrupt,
        hint: Some("nothing was stored".into()),
    }
}
