//! Blob names in the CAS ([`Digest`]: a sha256 and a size, checked when a server sends
//! one) and what a server offers ([`Capabilities`]), with the batch limits that follow.

use prost::Message;

use super::proto;
use crate::digest::{is_sha256_hex, sha256_hex};
use crate::remote::check::MAX_BLOB_BYTES;

/// The batch limit assumed when a server names none.
pub const DEFAULT_MAX_BATCH_BYTES: u64 = 4 << 20;

/// The most of a server's batch limit the client uses: a server that allows more still
/// gets batches of at most this, so no answer is larger.
pub(super) const MAX_BATCH_BYTES: u64 = 16 << 20;

/// What one blob adds to a batch message besides its bytes (digest, status, tags).
pub(super) const BLOB_OVERHEAD: u64 = 160;

/// What a batch message adds besides its blobs.
pub(super) const BATCH_OVERHEAD: u64 = 1024;
/// A blob's name in the CAS: its sha256 and its size.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest {
    /// sha256 of the bytes, 64 lower-case hex digits.
    pub hash: String,
    /// The number of bytes.
    pub size: u64,
}

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest {
            hash: sha256_hex(bytes),
            size: bytes.len() as u64,
        }
    }

    /// A message's encoding and its digest (prost encodes fields in tag order, so equal
    /// messages give equal digests).
    pub fn of_message(message: &impl Message) -> (Digest, Vec<u8>) {
        let bytes = message.encode_to_vec();
        (Digest::of(&bytes), bytes)
    }

    /// The digest as the API writes it.
    pub fn to_proto(&self) -> proto::Digest {
        proto::Digest {
            hash: self.hash.clone(),
            size_bytes: i64::try_from(self.size).unwrap_or(i64::MAX),
        }
    }

    /// A digest a server sent, checked: a sha256 and a size kart would read.
    pub fn from_proto(digest: &proto::Digest) -> std::result::Result<Digest, String> {
        if !is_sha256_hex(&digest.hash) {
            return Err(format!(
                "digest {} is not a sha256 (64 lower-case hex digits)",
                crate::untrusted::quoted(&digest.hash)
            ));
        }
        match u64::try_from(digest.size_bytes) {
            Ok(size) if size <= MAX_BLOB_BYTES => Ok(Digest {
                hash: digest.hash.clone(),
                size,
            }),
            _ => Err(format!(
                "digest {} has size {}, outside 0 to {} bytes",
                digest.hash, digest.size_bytes, MAX_BLOB_BYTES
            )),
        }
    }
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.hash, self.size)
    }
}

/// What a server said it offers (`GetCapabilities`), as far as kart uses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// The most bytes of blobs one batch request carries: the server's limit (4 MiB
    /// when it names none), at most 16 MiB. Larger blobs go through ByteStream.
    pub max_batch_bytes: u64,
    /// The largest blob the server takes, if it names a limit.
    pub max_blob_bytes: Option<u64>,
    /// Whether clients may write the action cache.
    pub action_cache_update: bool,
    /// Whether the server executes actions (with SHA256 digests).
    pub execution: bool,
}

impl Capabilities {
    /// The capabilities of a cache that uses SHA256; `Err` says why the server is not
    /// one kart can use.
    pub(super) fn from_server(
        caps: &proto::ServerCapabilities,
    ) -> std::result::Result<Capabilities, String> {
        let sha256 = proto::digest_function::Value::Sha256 as i32;
        let names = |values: &[i32]| {
            values
                .iter()
                .map(|v| {
                    proto::digest_function::Value::try_from(*v)
                        .map_or_else(|_| v.to_string(), |f| f.as_str_name().to_string())
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let cache = caps
            .cache_capabilities
            .as_ref()
            .ok_or("the server offers no content-addressable storage (no cache capabilities)")?;
        // An empty list is a server of API v2.0, which knew only SHA256.
        if !cache.digest_functions.is_empty() && !cache.digest_functions.contains(&sha256) {
            return Err(format!(
                "the server's CAS does not take SHA256 digests (it offers {}); kart names every blob by its sha256",
                names(&cache.digest_functions)
            ));
        }
        let max_batch_bytes = match u64::try_from(cache.max_batch_total_size_bytes) {
            Ok(0) | Err(_) => DEFAULT_MAX_BATCH_BYTES,
            Ok(n) => n.min(MAX_BATCH_BYTES),
        };
        let execution = caps.execution_capabilities.as_ref().is_some_and(|e| {
            e.exec_enabled
                && (e.digest_function == sha256
                    || e.digest_functions.contains(&sha256)
                    || (e.digest_function == 0 && e.digest_functions.is_empty()))
        });
        Ok(Capabilities {
            max_batch_bytes,
            max_blob_bytes: u64::try_from(cache.max_cas_blob_size_bytes)
                .ok()
                .filter(|&n| n > 0),
            action_cache_update: cache
                .action_cache_update_capabilities
                .as_ref()
                .is_some_and(|u| u.update_enabled),
            execution,
        })
    }

    /// Whether `blobs` (their sizes) fit one batch request.
    pub(super) fn fits_batch(&self, sizes: impl IntoIterator<Item = u64>) -> bool {
        let total = sizes.into_iter().fold(BATCH_OVERHEAD, |sum, s| {
            sum.saturating_add(s + BLOB_OVERHEAD)
        });
        total <= self.max_batch_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_without_sha256_are_refused_and_limits_are_bounded() {
        let mut caps = proto::ServerCapabilities {
            cache_capabilities: Some(proto::CacheCapabilities {
                digest_functions: vec![proto::digest_function::Value::Blake3 as i32],
                ..Default::default()
            }),
            ..Default::default()
        };
        let err = Capabilities::from_server(&caps).unwrap_err();
        assert!(err.contains("BLAKE3"), "{err}");
        let cache = caps.cache_capabilities.as_mut().unwrap();
        cache.digest_functions = vec![];
        cache.max_batch_total_size_bytes = 1 << 40;
        let c = Capabilities::from_server(&caps).unwrap();
        assert_eq!(c.max_batch_bytes, MAX_BATCH_BYTES);
        assert!(!c.action_cache_update && !c.execution);
        assert!(c.fits_batch([1000, 2000]));
        assert!(!c.fits_batch([MAX_BATCH_BYTES]));
        let cache = caps.cache_capabilities.as_mut().unwrap();
        cache.max_batch_total_size_bytes = 0;
        assert_eq!(
            Capabilities::from_server(&caps).unwrap().max_batch_bytes,
            DEFAULT_MAX_BATCH_BYTES
        );
        assert!(Capabilities::from_server(&proto::ServerCapabilities::default()).is_err());
    }

    #[test]
    fn digests_from_servers_are_checked() {
        let d = Digest::of(b"abc");
        assert_eq!(Digest::from_proto(&d.to_proto()).unwrap(), d);
        let mut p = d.to_proto();
        p.size_bytes = -1;
        assert!(Digest::from_proto(&p).is_err());
        p.size_bytes = 3;
        p.hash = "ABC".into();
        assert!(Digest::from_proto(&p).is_err());
    }
}
