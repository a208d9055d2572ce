//! A bundle: the artifacts a deployment loads, in one file, with their lock records and
//! the tuning and attestation records that name them. A program opens it instead of a
//! project's `kart.lock` and store ([`crate::Runtime::open_bundle`], or `KART_BUNDLE`);
//! `kart bundle` writes it.
//!
//! ```text
//! offset 0   "KARTBNDL"                  magic
//!        8   u32 little-endian           BUNDLE_FORMAT
//!       12   u32 little-endian           0
//!       16   5 × u64 little-endian       the lengths of the sections that follow, in
//!                                        bytes (H, L, T, A), then the rows N of the
//!                                        blob table
//!       56   H bytes of JSON             who made it: {"kart": VERSION, "made_for": [...]}
//!            L bytes                     kart.lock's text, of the bundled artifacts
//!            T bytes                     kart.tune's text, of the records naming them
//!            A bytes                     kart.attest's text, likewise
//!            N × 64 bytes                the blob table, sorted by digest
//!                                        (`store/bundle_table.rs`)
//!            the blobs, back to back     each a zstd frame (or the bytes as is, where
//!                                        zstd does not shrink them), where its row says
//! ```
//! Opening a bundle reads the header, the small JSON, the sidecars' texts and the last
//! blob row (whose blob ends the file: a bundle cut short is refused at open), and reads
//! the lock section as the runtime reads a `kart.lock` file (a large one bisected by
//! offset within the section, a few KiB per lookup); a blob is found by bisection of
//! the table. Nothing is built per artifact or per blob, so a bundle of 10,000
//! configs opens in about a millisecond.
//!
//! Everything in it is checked as if a stranger wrote it: the header (every section
//! within its limit and inside the file), the lock as `kart.lock` is checked (its
//! records when a lookup touches them), each blob row a read touches (digest, size,
//! its bytes inside the blobs' part of the file), each blob's size and sha256 on every
//! read, and the whole lock, the whole table (sorted, no digest twice) and every blob
//! when the bundle is made and by `kart bundle --inspect`.
//!
//! Format 1 (JSON index holding the lock as one string) is refused with a message
//! saying to run `kart bundle` again.

use std::fs::File;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::digest::sha256_hex;
use crate::error::{Error, IoContext as _, Result};
pub use crate::store::bundle_table::BundledBlob;
use crate::store::bundle_table::{ROW_BYTES, Table};
use crate::store::lockfile::Lockfile;
use crate::store::lockindex::LockIndex;
use crate::text::{Limit, text_of};

/// The first bytes of every bundle.
pub const BUNDLE_MAGIC: &[u8; 8] = b"KARTBNDL";
/// Bump with any incompatible change of the layout.
pub const BUNDLE_FORMAT: u32 = 2;
/// The most bytes of the JSON section kart reads (a version and a few labels).
const MAX_ABOUT_BYTES: u64 = 1 << 20;
/// zstd level of bundled blobs: a bundle is made once and shipped to every node, so
/// a high level pays (decompression speed does not depend on it).
const ZSTD_LEVEL: i32 = 19;
const HEADER_BYTES: u64 = 56;

/// What a bundle says besides its lock and blobs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleIndex {
    /// [`BUNDLE_FORMAT`].
    pub format: u32,
    /// The kart version that wrote it.
    pub kart: String,
    /// What it was made for (the GPUs of the fleet, a trace), for `--inspect`.
    pub made_for: Vec<String>,
    /// `kart.tune`'s text, of the records naming bundled blobs (empty: none).
    pub tune: String,
    /// `kart.attest`'s text, of the records naming bundled blobs (empty: none).
    pub attest: String,
}

/// The JSON section.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct About {
    kart: String,
    made_for: Vec<String>,
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

/// One blob as [`bundle_bytes`] lays it out.
pub struct BlobBytes {
    /// sha256 of its bytes, uncompressed.
    pub digest: String,
    /// Its size, uncompressed.
    pub size: u64,
    /// What the file holds: a zstd frame, or the bytes.
    pub stored: Vec<u8>,
    /// Whether `stored` is a zstd frame.
    pub zstd: bool,
}

/// A bundle's bytes, laid out as [`Bundle::open`] reads them, checking nothing (the
/// blobs are sorted by digest here; [`write_bundle`] checks what it wrote).
pub fn bundle_bytes(
    index: &BundleIndex,
    lock_text: &str,
    mut blobs: Vec<BlobBytes>,
) -> Result<Vec<u8>> {
    blobs.sort_by(|a, b| a.digest.cmp(&b.digest));
    let about = serde_json::to_vec(&About {
        kart: index.kart.clone(),
        made_for: index.made_for.clone(),
    })
    .map_err(|e| Error::usage(format!("cannot write a bundle's header: {e}"), None))?;
    let sections = [
        about.as_slice(),
        lock_text.as_bytes(),
        index.tune.as_bytes(),
        index.attest.as_bytes(),
    ];
    let table_start = HEADER_BYTES + sections.iter().map(|s| s.len() as u64).sum::<u64>();
    let mut offset = table_start + blobs.len() as u64 * ROW_BYTES;
    let data: u64 = blobs.iter().map(|b| b.stored.len() as u64).sum();
    let mut out = Vec::with_capacity((offset + data) as usize);
    out.extend_from_slice(BUNDLE_MAGIC);
    out.extend_from_slice(&index.format.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    for section in sections {
        out.extend_from_slice(&(section.len() as u64).to_le_bytes());
    }
    out.extend_from_slice(&(blobs.len() as u64).to_le_bytes());
    for section in sections {
        out.extend_from_slice(section);
    }
    for b in &blobs {
        let row = BundledBlob {
            digest: b.digest.clone(),
            size: b.size,
            offset,
            stored: b.stored.len() as u64,
            zstd: b.zstd,
        }
        .row()
        .ok_or_else(|| Error::usage(format!("`{}` is not a sha256 digest", b.digest), None))?;
        out.extend_from_slice(&row);
        offset += b.stored.len() as u64;
    }
    for b in &blobs {
        out.extend_from_slice(&b.stored);
    }
    Ok(out)
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
    let mut blobs = Vec::with_capacity(digests.len());
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
        blobs.push(BlobBytes {
            digest: digest.to_string(),
            size,
            stored,
            zstd,
        });
    }
    let index = BundleIndex {
        format: BUNDLE_FORMAT,
        kart: input.kart.clone(),
        made_for: input.made_for.clone(),
        tune: input.tune.clone(),
        attest: input.attest.clone(),
    };
    let out = bundle_bytes(&index, &input.lock.to_text(), blobs)?;
    crate::store::fsutil::write_atomic(path, &out)?;
    let checked = Bundle::open(path).and_then(|b| b.verify_all().map(|()| b));
    if checked.is_err() {
        // A bundle that fails its own check is never left for a deployment to pick up.
        let _ = std::fs::remove_file(path);
    }
    checked
}

/// An open bundle: its header checked, its lock indexed (records parsed on first
/// use); blob rows and blobs are read (and checked) on demand.
#[derive(Debug)]
pub struct Bundle {
    path: PathBuf,
    file: File,
    index: BundleIndex,
    table: Table,
    lock: Arc<LockIndex>,
}

/// Reads the 8-byte word `i` of a header.
fn word(header: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&header[at..at + 8]);
    u64::from_le_bytes(w)
}

impl Bundle {
    /// Opens `path` and checks everything but the blobs and the lock's records: the
    /// magic, the format, every section's length (within what kart reads, inside the
    /// file), the JSON section, the sidecars' texts (UTF-8), and the lock's layout as
    /// the runtime checks `kart.lock` at open. A record is checked when a lookup
    /// touches it, a blob's row and bytes when it is read; [`Bundle::verify_all`]
    /// checks everything.
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
        let format =
            (len >= 12).then(|| u32::from_le_bytes([header[8], header[9], header[10], header[11]]));
        match format {
            Some(BUNDLE_FORMAT) => {}
            Some(old) if old < BUNDLE_FORMAT => {
                return Err(bad(format!(
                    "bundle format {old}, written by an older kart; this kart reads format {BUNDLE_FORMAT}: run `kart bundle` again to make it"
                )));
            }
            Some(new) => {
                return Err(bad(format!(
                    "bundle format {new}, written by a newer kart; this kart reads format {BUNDLE_FORMAT}: make it with this kart's `kart bundle`, or update the program"
                )));
            }
            None => {}
        }
        if len < HEADER_BYTES {
            return Err(bad(format!("{len} bytes: too short to be a bundle")));
        }
        if header[12..16] != [0; 4] {
            return Err(bad("bytes 12..16 of its header are not zero".into()));
        }
        let names = [
            "its header JSON",
            "its kart.lock",
            "its kart.tune",
            "its kart.attest",
        ];
        let limits = [
            MAX_ABOUT_BYTES,
            Limit::LOCK.bytes,
            Limit::SIDECAR.bytes,
            Limit::SIDECAR.bytes,
        ];
        let mut at = HEADER_BYTES;
        let mut sections = [(0u64, 0u64); 4];
        for i in 0..4 {
            let n = word(&header, 16 + 8 * i);
            if n > limits[i] {
                return Err(bad(format!(
                    "{} claims {n} bytes, more than kart reads ({})",
                    names[i], limits[i]
                )));
            }
            sections[i] = (at, n);
            at += n;
        }
        let rows = word(&header, 48);
        let table_end = rows
            .checked_mul(ROW_BYTES)
            .and_then(|t| t.checked_add(at))
            .filter(|&end| end <= len)
            .ok_or_else(|| {
                bad(format!(
                    "its sections and a table of {rows} blobs run past its {len} bytes (cut short?)"
                ))
            })?;
        let table = Table {
            start: at,
            rows,
            blobs: table_end..len,
        };
        // kart lays the blobs out in the table's order: the last row's blob ends the
        // file, so a bundle cut short (a copy interrupted) is found here.
        if rows > 0 {
            (table.read(&file, rows - 1).at("read bundle", path)?)
                .map_err(|why| bad(format!("{why} (cut short?)")))?;
        }
        let read = |(at, n): (u64, u64)| -> Result<Vec<u8>> {
            let mut bytes = vec![0u8; n as usize];
            file.read_exact_at(&mut bytes, at).at("read bundle", path)?;
            Ok(bytes)
        };
        let about: About = serde_json::from_slice(&read(sections[0])?)
            .map_err(|e| bad(format!("its header JSON: {e}")))?;
        crate::untrusted::label("kart version", &about.kart).map_err(bad)?;
        for what in &about.made_for {
            crate::untrusted::label("made for", what).map_err(bad)?;
        }
        let shown = |name: &str| PathBuf::from(format!("{}:{name}", path.display()));
        let tune = text_of(read(sections[2])?, &shown("kart.tune"))?;
        let attest = text_of(read(sections[3])?, &shown("kart.attest"))?;
        let (lock_at, lock_len) = sections[1];
        let lock_file = file.try_clone().at("open bundle", path)?;
        let lock =
            LockIndex::read_section(lock_file, path, lock_at, lock_len, &shown("kart.lock"))?;
        Ok(Bundle {
            path: path.to_path_buf(),
            file,
            index: BundleIndex {
                format: BUNDLE_FORMAT,
                kart: about.kart,
                made_for: about.made_for,
                tune,
                attest,
            },
            table,
            lock: Arc::new(lock),
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

    fn bad(&self, message: String) -> Error {
        Error::CorruptBundle {
            path: self.path.clone(),
            message,
        }
    }

    /// Every blob row, read and checked: each inside the file, sorted by digest, none
    /// twice.
    pub fn blobs(&self) -> Result<Vec<BundledBlob>> {
        (self.table.all(&self.file).at("read bundle", &self.path)?).map_err(|why| self.bad(why))
    }

    /// The row of blob `digest` (`None`: the bundle holds none), found by bisection
    /// and checked.
    pub fn blob(&self, digest: &str) -> Result<Option<BundledBlob>> {
        (self.table.find(&self.file, digest))
            .at("read bundle", &self.path)?
            .map_err(|why| self.bad(why))
    }

    /// Checks the whole lock and that every artifact it names has its blob here, of
    /// its size (not the blobs' bytes), and the whole blob table.
    pub fn check_lock(&self) -> Result<()> {
        let blobs = self.blobs()?;
        for a in &self.lock()?.artifacts {
            let row = blobs
                .binary_search_by(|b| b.digest.cmp(&a.digest))
                .ok()
                .map(|i| &blobs[i]);
            match row {
                None => {
                    return Err(self.bad(format!(
                        "its lock names {} ({}), which it does not hold",
                        a.digest,
                        a.describe()
                    )));
                }
                Some(b) if b.size != a.size => {
                    return Err(self.bad(format!(
                        "blob {} is {} bytes, its lock says {}",
                        a.digest, b.size, a.size
                    )));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// What it says besides its lock and blobs.
    pub fn index(&self) -> &BundleIndex {
        &self.index
    }

    /// Whether it holds blob `digest` (with a row that reads as kart writes it).
    pub fn has_blob(&self, digest: &str) -> bool {
        matches!(self.blob(digest), Ok(Some(_)))
    }

    /// Blob `digest`'s bytes, decompressed and checked against the digest (and against
    /// `expected_size` where given). A blob that fails is an error; nothing of it is
    /// returned.
    pub fn read_blob(&self, digest: &str, expected_size: Option<u64>) -> Result<Vec<u8>> {
        let b = self
            .blob(digest)?
            .ok_or_else(|| self.bad(format!("it holds no blob {digest}")))?;
        self.read_row(&b, expected_size)
    }

    fn read_row(&self, b: &BundledBlob, expected_size: Option<u64>) -> Result<Vec<u8>> {
        let digest = &b.digest;
        if expected_size.is_some_and(|s| s != b.size) {
            return Err(self.bad(format!(
                "blob {digest} is {} bytes, {} expected",
                b.size,
                expected_size.unwrap_or_default()
            )));
        }
        let mut stored = vec![0u8; b.stored as usize];
        self.file
            .read_exact_at(&mut stored, b.offset)
            .at("read bundle", &self.path)?;
        let bytes = if b.zstd {
            crate::store::limits::decompress_bounded(&stored, Some(b.size))
                .map_err(|why| self.bad(format!("blob {digest} is corrupt: {why}")))?
        } else {
            stored
        };
        let actual = sha256_hex(&bytes);
        if actual != *digest || bytes.len() as u64 != b.size {
            return Err(self.bad(format!(
                "blob {digest} is corrupt: its bytes hash to {actual}"
            )));
        }
        Ok(bytes)
    }

    /// Checks the whole lock and table ([`Bundle::check_lock`]), then reads and checks
    /// every blob.
    pub fn verify_all(&self) -> Result<()> {
        self.check_lock()?;
        for b in self.blobs()? {
            self.read_row(&b, None)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index() -> BundleIndex {
        BundleIndex {
            format: BUNDLE_FORMAT,
            kart: "0.1.0".into(),
            made_for: Vec::new(),
            tune: String::new(),
            attest: String::new(),
        }
    }

    fn open(bytes: &[u8]) -> Result<Bundle> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.kartbundle");
        std::fs::write(&path, bytes).unwrap();
        Bundle::open(&path)
    }

    #[test]
    fn a_lock_expression_100000_levels_deep_is_refused_not_a_stack_overflow() {
        let deep = format!("{}1{}", "(".repeat(100_000), ")".repeat(100_000));
        let lock = format!(
            "version = 3\n\n[[kernel]]\nname = \"k\"\n\n[kernel.launch]\ngrid = [\"{deep}\"]\nblock = [\"1\"]\nshared_mem = \"0\"\n"
        );
        let bytes = bundle_bytes(&index(), &lock, Vec::new()).unwrap();
        let err = open(&bytes).expect_err("a lock too deep to read");
        assert!(err.to_string().contains("nests more than"), "{err}");
    }

    #[test]
    fn headers_claiming_too_much_or_cut_short_are_refused() {
        let good = bundle_bytes(&index(), "version = 3\n", Vec::new()).unwrap();
        assert!(open(&good).is_ok());
        for (at, value, says) in [
            (16, MAX_ABOUT_BYTES + 1, "header JSON claims"),
            (24, u64::MAX, "kart.lock claims"),
            (32, Limit::SIDECAR.bytes + 1, "kart.tune claims"),
            (48, 1, "run past"),
            (48, u64::MAX / 2, "run past"),
        ] {
            let mut bad = good.clone();
            bad[at..at + 8].copy_from_slice(&value.to_le_bytes());
            let err = open(&bad).expect_err(says).to_string();
            assert!(err.contains(says), "{says}: {err}");
        }
        let err = open(&good[..30]).unwrap_err().to_string();
        assert!(err.contains("too short"), "{err}");
    }

    /// A lock of `n` configs of `tiny`, one sm_90 cubin each, and blobs of distinct
    /// bytes under their real digests.
    fn large(n: i64) -> (Lockfile, Vec<BlobBytes>) {
        use crate::model::{ArtifactKind, Config, ParamValue};
        let mut artifacts = Vec::new();
        let mut blobs = Vec::new();
        for i in 0..n {
            let bytes = format!("the cubin of config {i}; ").repeat(3).into_bytes();
            let config = Config::from([("A", ParamValue::Int(i))]);
            let mut a =
                crate::store::testlock::artifact("tiny", config, "sm_90", ArtifactKind::Cubin);
            a.digest = sha256_hex(&bytes);
            a.size = bytes.len() as u64;
            blobs.push(BlobBytes {
                digest: a.digest.clone(),
                size: a.size,
                stored: bytes,
                zstd: false,
            });
            artifacts.push(a);
        }
        (Lockfile::new(artifacts), blobs)
    }

    fn config(a: i64) -> crate::model::Config {
        crate::model::Config::from([("A", crate::model::ParamValue::Int(a))])
    }

    #[test]
    fn a_large_bundle_bisects_its_lock_section_and_blob_table_and_answers_as_its_lock() {
        let (lock, blobs) = large(3000);
        let text = lock.to_text();
        assert!(text.len() as u64 > crate::store::lockindex::BISECT_FROM);
        let wanted: Vec<(String, Vec<u8>)> = (blobs.iter())
            .map(|b| (b.digest.clone(), b.stored.clone()))
            .collect();
        let bytes = bundle_bytes(&index(), &text, blobs).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("large.kartbundle");
        std::fs::write(&path, &bytes).unwrap();
        let bundle = Bundle::open(&path).unwrap();
        assert!(
            bundle.lock_index().bisecting(),
            "a lock section over 1 MiB is bisected"
        );
        for a in [0, 1, 7, 1499, 2998, 2999] {
            let found = bundle.lock_index().of_config("tiny", &config(a)).unwrap();
            let expected: Vec<&_> = lock.of_config("tiny", &config(a)).iter().collect();
            assert_eq!(found, expected, "A={a}");
            let blob = bundle
                .read_blob(&found[0].digest, Some(found[0].size))
                .unwrap();
            let (_, bytes) = wanted.iter().find(|(d, _)| *d == found[0].digest).unwrap();
            assert_eq!(&blob, bytes);
        }
        assert!(
            bundle.lock_index().bisecting(),
            "lookups read no whole lock"
        );
        assert!(
            bundle
                .lock_index()
                .of_config("tiny", &config(3000))
                .unwrap()
                .is_empty()
        );
        assert!(!bundle.has_blob(&"0".repeat(64)) && !bundle.has_blob("not hex"));
        bundle.verify_all().unwrap();
        assert_eq!(bundle.blobs().unwrap().len(), 3000);
        assert_eq!(bundle.lock().unwrap(), &lock);
    }

    #[test]
    fn corrupt_rows_blobs_and_lock_records_are_refused_where_they_are_read() {
        let (lock, blobs) = large(2500);
        let text = lock.to_text();
        let good = bundle_bytes(&index(), &text, blobs).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.kartbundle");
        let reopen = |bytes: &[u8]| {
            std::fs::write(&path, bytes).unwrap();
            Bundle::open(&path).unwrap()
        };
        let bundle = reopen(&good);
        let rows = bundle.blobs().unwrap();
        let table = bundle.table.start as usize;
        let row_of = |digest: &str| rows.iter().position(|b| b.digest == digest).unwrap();
        let victim = lock.of_config("tiny", &config(1200))[0].clone();
        let r = table + row_of(&victim.digest) * ROW_BYTES as usize;
        let corrupt = |err: Error, says: &str| {
            assert!(matches!(err, Error::CorruptBundle { .. }), "{err}");
            assert!(err.to_string().contains(says), "{says}: {err}");
        };

        // A row whose bytes lie past the file: refused when read, others still read.
        let mut bad = good.clone();
        bad[r + 40..r + 48].copy_from_slice(&(good.len() as u64).to_le_bytes());
        let b = reopen(&bad);
        corrupt(
            b.read_blob(&victim.digest, None).unwrap_err(),
            "lie outside",
        );
        let other = &lock.of_config("tiny", &config(5))[0];
        assert!(b.read_blob(&other.digest, Some(other.size)).is_ok());
        corrupt(b.verify_all().unwrap_err(), "lie outside");
        // Unknown flags.
        let mut bad = good.clone();
        bad[r + 56] = 4;
        corrupt(
            reopen(&bad).read_blob(&victim.digest, None).unwrap_err(),
            "unknown flags",
        );
        // A digest changed in the table: the table is no longer sorted, and the row
        // that the lock names is not found.
        let mut bad = good.clone();
        bad[r] ^= 0xff;
        let b = reopen(&bad);
        corrupt(b.verify_all().unwrap_err(), "");
        assert!(b.read_blob(&victim.digest, None).is_err());
        // A flipped byte of a blob: its sha256 check refuses it.
        let mut bad = good.clone();
        let at = rows[row_of(&victim.digest)].offset as usize + 3;
        bad[at] ^= 0x20;
        corrupt(
            reopen(&bad)
                .read_blob(&victim.digest, Some(victim.size))
                .unwrap_err(),
            "is corrupt",
        );
        // Cut inside the blobs: the last row points past the end, refused at open.
        std::fs::write(&path, &good[..good.len() - 10]).unwrap();
        corrupt(Bundle::open(&path).unwrap_err(), "cut short");
        // Cut inside the table: refused at open.
        std::fs::write(&path, &good[..table + 100]).unwrap();
        corrupt(Bundle::open(&path).unwrap_err(), "cut short");
        // A lock record made invalid inside the section (same length): a lookup of its
        // config names the line; other configs still answer.
        let mut bad = good.clone();
        let lock_at = HEADER_BYTES as usize + word(&good, 16) as usize;
        let record = text
            .find(&format!("digest = \"{}\"", victim.digest))
            .unwrap();
        bad[lock_at + record + 10] = b'X';
        let b = reopen(&bad);
        let err = b.lock_index().of_config("tiny", &config(1200)).unwrap_err();
        assert!(matches!(err, Error::InvalidFile { .. }), "{err}");
        assert!(err.to_string().contains("c.kartbundle:kart.lock"), "{err}");
        let ok = b.lock_index().of_config("tiny", &config(7)).unwrap();
        assert_eq!(ok.len(), 1);
    }

    #[test]
    fn a_format_1_bundle_is_refused_with_what_to_do() {
        let mut old = BUNDLE_MAGIC.to_vec();
        old.extend_from_slice(&1u32.to_le_bytes());
        old.extend_from_slice(&2u64.to_le_bytes());
        old.extend_from_slice(b"{}");
        let err = open(&old).unwrap_err().to_string();
        assert!(
            err.contains("bundle format 1") && err.contains("run `kart bundle` again"),
            "{err}"
        );
        let mut newer = bundle_bytes(&index(), "version = 3\n", Vec::new()).unwrap();
        newer[8..12].copy_from_slice(&9u32.to_le_bytes());
        let err = open(&newer).unwrap_err().to_string();
        assert!(err.contains("newer kart"), "{err}");
    }
}
