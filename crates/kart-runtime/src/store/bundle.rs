//! A bundle: the artifacts a deployment loads, in one file, with their lock records and
//! the tuning and attestation records that name them. A program opens it instead of a
//! project's `kart.lock` and store ([`crate::Runtime::open_bundle`], or `KART_BUNDLE`);
//! `kart bundle` writes it.
//!
//! ```text
//! offset 0   "KARTBNDL"                  magic
//!        8   u32 little-endian           BUNDLE_FORMAT
//!       12   u64 little-endian           length L of the index
//!       20   L bytes of JSON             BundleIndex: the lock's text, the sidecars'
//!                                        texts, and where each blob lies
//!   20 + L   the blobs, back to back     each a zstd frame (or the bytes as is, where
//!                                        zstd does not shrink them), at its `offset`
//!                                        from here
//! ```
//! Everything in it is checked as if a stranger wrote it: the index's every field, the
//! lock as `kart.lock` is checked (its records when a lookup touches them, as the
//! runtime reads `kart.lock`), each blob's size and sha256 on every read (and the whole
//! lock and every blob when the bundle is made and by `kart bundle --inspect`). Opening
//! a bundle of 10,000 configs reads its index and no blob.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::digest::{is_sha256_hex, sha256_hex};
use crate::error::{Error, IoContext as _, Result};
use crate::store::limits::MAX_BLOB_BYTES;
use crate::store::lockfile::Lockfile;
use crate::store::lockindex::LockIndex;

/// The first bytes of every bundle.
pub const BUNDLE_MAGIC: &[u8; 8] = b"KARTBNDL";
/// Bump with any incompatible change of the layout or of [`BundleIndex`].
pub const BUNDLE_FORMAT: u32 = 1;
/// The most index bytes kart reads: far above any lock, far below a memory problem.
const MAX_INDEX_BYTES: u64 = 256 << 20;
/// zstd level of bundled blobs: a bundle is made once and shipped to every node, so
/// a high level pays (decompression speed does not depend on it).
const ZSTD_LEVEL: i32 = 19;
const HEADER_BYTES: u64 = 20;

/// The bundle's table of contents.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct BundleIndex {
    /// [`BUNDLE_FORMAT`].
    pub format: u32,
    /// The kart version that wrote it.
    pub kart: String,
    /// What it was made for (the GPUs of the fleet, a trace), for `--inspect`.
    pub made_for: Vec<String>,
    /// `kart.lock`'s text, of the bundled artifacts only (moved into
    /// [`Bundle::lock_index`] when the bundle is opened).
    pub lock: String,
    /// `kart.tune`'s text, of the records naming bundled blobs (empty: none).
    pub tune: String,
    /// `kart.attest`'s text, of the records naming bundled blobs (empty: none).
    pub attest: String,
    /// Every blob, by digest.
    pub blobs: Vec<BundledBlob>,
}

/// Where one blob lies in the bundle.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct BundledBlob {
    /// sha256 of its bytes (uncompressed).
    pub digest: String,
    /// Its size, uncompressed.
    pub size: u64,
    /// Its first byte, counted from the end of the index.
    pub offset: u64,
    /// Its bytes in the bundle.
    pub stored: u64,
    /// Whether those are a zstd frame.
    pub zstd: bool,
}

/// What goes into a bundle besides the blobs, which come from `read_blob` by digest
/// (already checked against it by the store they come from).
pub struct BundleInput<'a> {
    /// The lock of exactly the bundled artifacts.
    pub lock: &'a Lockfile,
    /// `kart.tune`'s text for them.
    pub tune: String,
    /// `kart.attest`'s text for them.
    pub attest: String,
    /// What it is made for.
    pub made_for: Vec<String>,
    /// The writing kart's version.
    pub kart: String,
}

/// Writes a bundle to `path` (atomically: a temp file renamed), then opens it again and
/// checks every blob against its digest (so bytes `read_blob` got wrong are caught
/// there). Returns the bundle as read back.
pub fn write_bundle(
    path: &Path,
    input: &BundleInput<'_>,
    read_blob: &(dyn Fn(&str, u64) -> Result<Vec<u8>> + Sync),
) -> Result<Bundle> {
    let mut digests: Vec<(&str, u64)> = input
        .lock
        .artifacts
        .iter()
        .map(|a| (a.digest.as_str(), a.size))
        .collect();
    digests.sort();
    digests.dedup();
    let mut data = Vec::new();
    let mut blobs = Vec::new();
    for (digest, size) in digests {
        let bytes = read_blob(digest, size)?;
        // Every blob compressed (what is shipped is what counts; the first load of a
        // small blob pays a few microseconds more), unless zstd does not shrink it.
        let frame = zstd::bulk::compress(&bytes, ZSTD_LEVEL).at("compress", path)?;
        let (stored, zstd) = if frame.len() < bytes.len() {
            (frame, true)
        } else {
            (bytes, false)
        };
        blobs.push(BundledBlob {
            digest: digest.to_string(),
            size,
            offset: data.len() as u64,
            stored: stored.len() as u64,
            zstd,
        });
        data.extend_from_slice(&stored);
    }
    let index = BundleIndex {
        format: BUNDLE_FORMAT,
        kart: input.kart.clone(),
        made_for: input.made_for.clone(),
        lock: input.lock.to_text(),
        tune: input.tune.clone(),
        attest: input.attest.clone(),
        blobs,
    };
    let json = serde_json::to_vec(&index).map_err(|e| Error::CorruptBundle {
        path: path.to_path_buf(),
        message: format!("cannot write the index: {e}"),
    })?;
    let mut out = Vec::with_capacity(HEADER_BYTES as usize + json.len() + data.len());
    out.extend_from_slice(BUNDLE_MAGIC);
    out.extend_from_slice(&BUNDLE_FORMAT.to_le_bytes());
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(&data);
    crate::store::fsutil::write_atomic(path, &out)?;
    let checked = Bundle::open(path).and_then(|b| b.verify_all().map(|()| b));
    if checked.is_err() {
        // A bundle that fails its own check is never left for a deployment to pick up.
        let _ = std::fs::remove_file(path);
    }
    checked
}

/// An open bundle: its index checked, its lock indexed (records parsed on first use);
/// blobs are read (and checked) on demand.
#[derive(Debug)]
pub struct Bundle {
    path: PathBuf,
    file: File,
    data_start: u64,
    index: BundleIndex,
    lock: Arc<LockIndex>,
    by_digest: HashMap<String, usize>,
}

impl Bundle {
    /// Opens `path` and checks everything but the blobs' bytes and the lock's records:
    /// the magic, the format, the index (every digest hex, every blob inside the file,
    /// sizes within what kart reads), and the lock's layout as the runtime checks
    /// `kart.lock` at open. A record is checked when a lookup touches it, and its blob's
    /// presence and size when it is read; [`Bundle::verify_all`] checks everything.
    pub fn open(path: &Path) -> Result<Bundle> {
        let file = File::open(path).at("open bundle", path)?;
        let len = file.metadata().at("read bundle", path)?.len();
        let bad = |message: String| Error::CorruptBundle {
            path: path.to_path_buf(),
            message,
        };
        let mut header = [0u8; HEADER_BYTES as usize];
        let start = &mut header[..(len.min(HEADER_BYTES) as usize)];
        file.read_exact_at(start, 0).at("read bundle", path)?;
        if len < 8 || &header[..8] != BUNDLE_MAGIC {
            return Err(bad("not a kart bundle (no KARTBNDL at its start)".into()));
        }
        if len < HEADER_BYTES {
            return Err(bad(format!("{len} bytes: too short to be a bundle")));
        }
        let format = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
        if format != BUNDLE_FORMAT {
            return Err(bad(format!(
                "bundle format {format} (this kart reads {BUNDLE_FORMAT}); make it with this kart"
            )));
        }
        let mut n = [0u8; 8];
        n.copy_from_slice(&header[12..20]);
        let index_len = u64::from_le_bytes(n);
        if index_len > MAX_INDEX_BYTES || index_len > len - HEADER_BYTES {
            return Err(bad(format!(
                "its index claims {index_len} bytes, the file has {len}"
            )));
        }
        let mut json = vec![0u8; index_len as usize];
        file.read_exact_at(&mut json, HEADER_BYTES)
            .at("read bundle", path)?;
        let mut index: BundleIndex =
            serde_json::from_slice(&json).map_err(|e| bad(format!("its index: {e}")))?;
        let data_start = HEADER_BYTES + index_len;
        let data_len = len - data_start;
        let mut by_digest = HashMap::new();
        for (i, b) in index.blobs.iter().enumerate() {
            check_blob_record(b, data_len).map_err(|why| bad(format!("blob {i}: {why}")))?;
            if by_digest.insert(b.digest.clone(), i).is_some() {
                return Err(bad(format!("blob {} is listed twice", b.digest)));
            }
        }
        crate::untrusted::label("kart version", &index.kart).map_err(bad)?;
        for what in &index.made_for {
            crate::untrusted::label("made for", what).map_err(bad)?;
        }
        let shown = PathBuf::from(format!("{}:kart.lock", path.display()));
        let lock = Arc::new(LockIndex::from_text(
            std::mem::take(&mut index.lock),
            &shown,
        )?);
        Ok(Bundle {
            path: path.to_path_buf(),
            file,
            data_start,
            index,
            lock,
            by_digest,
        })
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its lock: the bundled artifacts, every record parsed and validated on the
    /// first call.
    pub fn lock(&self) -> Result<&Lockfile> {
        self.lock.whole()
    }

    /// Its lock's index, parsed as far as lookups have needed.
    pub fn lock_index(&self) -> &Arc<LockIndex> {
        &self.lock
    }

    /// Checks the whole lock and that every artifact it names has its blob here, of
    /// its size (not the blobs' bytes).
    pub fn check_lock(&self) -> Result<()> {
        let bad = |message: String| Error::CorruptBundle {
            path: self.path.clone(),
            message,
        };
        for a in &self.lock()?.artifacts {
            match self.by_digest.get(&a.digest).map(|&i| &self.index.blobs[i]) {
                None => {
                    return Err(bad(format!(
                        "its lock names {} ({}), which it does not hold",
                        a.digest,
                        a.describe()
                    )));
                }
                Some(b) if b.size != a.size => {
                    return Err(bad(format!(
                        "blob {} is {} bytes, its lock says {}",
                        a.digest, b.size, a.size
                    )));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Its index (its `lock` text moved to [`Bundle::lock_index`]).
    pub fn index(&self) -> &BundleIndex {
        &self.index
    }

    /// Whether it holds blob `digest`.
    pub fn has_blob(&self, digest: &str) -> bool {
        self.by_digest.contains_key(digest)
    }

    /// Blob `digest`'s bytes, decompressed and checked against the digest (and against
    /// `expected_size` where given). A blob that fails is an error; nothing of it is
    /// returned.
    pub fn read_blob(&self, digest: &str, expected_size: Option<u64>) -> Result<Vec<u8>> {
        let bad = |message: String| Error::CorruptBundle {
            path: self.path.clone(),
            message,
        };
        let b = self
            .by_digest
            .get(digest)
            .map(|&i| &self.index.blobs[i])
            .ok_or_else(|| bad(format!("it holds no blob {digest}")))?;
        if expected_size.is_some_and(|s| s != b.size) {
            return Err(bad(format!(
                "blob {digest} is {} bytes, {} expected",
                b.size,
                expected_size.unwrap_or_default()
            )));
        }
        let mut stored = vec![0u8; b.stored as usize];
        self.file
            .read_exact_at(&mut stored, self.data_start + b.offset)
            .at("read bundle", &self.path)?;
        let bytes = if b.zstd {
            crate::store::limits::decompress_bounded(&stored, Some(b.size))
                .map_err(|why| bad(format!("blob {digest} is corrupt: {why}")))?
        } else {
            stored
        };
        let actual = sha256_hex(&bytes);
        if actual != digest || bytes.len() as u64 != b.size {
            return Err(bad(format!(
                "blob {digest} is corrupt: its bytes hash to {actual}"
            )));
        }
        Ok(bytes)
    }

    /// Checks the whole lock ([`Bundle::check_lock`]), then reads and checks every blob.
    pub fn verify_all(&self) -> Result<()> {
        self.check_lock()?;
        for b in &self.index.blobs {
            self.read_blob(&b.digest, Some(b.size))?;
        }
        Ok(())
    }
}

/// The checks of one blob record against the data's length.
fn check_blob_record(b: &BundledBlob, data_len: u64) -> std::result::Result<(), String> {
    if !is_sha256_hex(&b.digest) {
        return Err("its digest is not 64 lower-case hex digits".into());
    }
    if b.size > MAX_BLOB_BYTES {
        return Err(format!("size {} is more than kart reads", b.size));
    }
    let bound = zstd::zstd_safe::compress_bound(b.size as usize) as u64;
    if b.stored > bound.max(b.size) || (!b.zstd && b.stored != b.size) {
        return Err(format!(
            "{} stored bytes for {} bytes of blob",
            b.stored, b.size
        ));
    }
    match b.offset.checked_add(b.stored) {
        Some(end) if end <= data_len => Ok(()),
        _ => Err(format!(
            "bytes {}..+{} lie outside the file's {data_len} bytes of blobs",
            b.offset, b.stored
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_records_outside_the_file_or_oversized_are_refused() {
        let ok = BundledBlob {
            digest: "a".repeat(64),
            size: 10,
            offset: 0,
            stored: 10,
            zstd: false,
        };
        assert!(check_blob_record(&ok, 10).is_ok());
        assert!(check_blob_record(&ok, 9).is_err());
        let past = BundledBlob {
            offset: u64::MAX,
            ..ok.clone()
        };
        assert!(check_blob_record(&past, 10).is_err());
        let raw_mismatch = BundledBlob {
            stored: 9,
            ..ok.clone()
        };
        assert!(check_blob_record(&raw_mismatch, 10).is_err());
        let huge = BundledBlob {
            size: MAX_BLOB_BYTES + 1,
            ..ok.clone()
        };
        assert!(check_blob_record(&huge, u64::MAX).is_err());
        let upper = BundledBlob {
            digest: "A".repeat(64),
            ..ok
        };
        assert!(check_blob_record(&upper, 10).is_err());
    }

    #[test]
    fn a_lock_expression_100000_levels_deep_is_refused_not_a_stack_overflow() {
        let deep = format!("{}1{}", "(".repeat(100_000), ")".repeat(100_000));
        let lock = format!(
            "version = 3\n\n[[kernel]]\nname = \"k\"\n\n[kernel.launch]\ngrid = [\"{deep}\"]\nblock = [\"1\"]\nshared_mem = \"0\"\n"
        );
        let index = BundleIndex {
            format: BUNDLE_FORMAT,
            kart: "0.1.0".into(),
            made_for: Vec::new(),
            lock,
            tune: String::new(),
            attest: String::new(),
            blobs: Vec::new(),
        };
        let json = serde_json::to_vec(&index).unwrap();
        let mut bytes = BUNDLE_MAGIC.to_vec();
        bytes.extend_from_slice(&BUNDLE_FORMAT.to_le_bytes());
        bytes.extend_from_slice(&(json.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&json);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("deep.kartbundle");
        std::fs::write(&path, bytes).unwrap();
        let err = Bundle::open(&path).expect_err("a lock too deep to read");
        assert!(err.to_string().contains("nests more than"), "{err}");
    }
}
