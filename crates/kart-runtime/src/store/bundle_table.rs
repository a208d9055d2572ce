//! A bundle's blob table: one fixed-width row per blob, sorted by digest, so that a
//! blob is found by bisection (some 15 reads of 64 bytes at 20,000 blobs) and opening
//! a bundle builds nothing per blob.
//!
//! ```text
//! a row, 64 bytes:  0  sha256 of the blob's bytes (32 bytes, raw)
//!                  32  u64 little-endian  its size, uncompressed
//!                  40  u64 little-endian  its first byte, from the file's start
//!                  48  u64 little-endian  its bytes in the file
//!                  56  u64 little-endian  flags: 1 = a zstd frame; no other bit is set
//! ```

use std::cmp::Ordering;
use std::fs::File;
use std::os::unix::fs::FileExt as _;

use crate::digest::{hex, is_sha256_hex};
use crate::store::limits::MAX_BLOB_BYTES;

/// Bytes of one row.
pub const ROW_BYTES: u64 = 64;
const ZSTD_FLAG: u64 = 1;

/// Where one blob lies in the bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundledBlob {
    /// sha256 of its bytes (uncompressed), 64 lower-case hex digits.
    pub digest: String,
    /// Its size, uncompressed.
    pub size: u64,
    /// Its first byte, counted from the start of the file.
    pub offset: u64,
    /// Its bytes in the bundle.
    pub stored: u64,
    /// Whether those are a zstd frame.
    pub zstd: bool,
}

impl BundledBlob {
    /// Its row.
    pub fn row(&self) -> Option<[u8; ROW_BYTES as usize]> {
        let mut row = [0u8; ROW_BYTES as usize];
        row[..32].copy_from_slice(&unhex(&self.digest)?);
        row[32..40].copy_from_slice(&self.size.to_le_bytes());
        row[40..48].copy_from_slice(&self.offset.to_le_bytes());
        row[48..56].copy_from_slice(&self.stored.to_le_bytes());
        let flags = if self.zstd { ZSTD_FLAG } else { 0 };
        row[56..].copy_from_slice(&flags.to_le_bytes());
        Some(row)
    }

    /// A row read back, with the checks of [`check`]; the error says what is wrong.
    fn of_row(row: &[u8], blobs: &std::ops::Range<u64>) -> Result<BundledBlob, String> {
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&row[at..at + 8]);
            u64::from_le_bytes(w)
        };
        let flags = word(56);
        if flags & !ZSTD_FLAG != 0 {
            return Err(format!("unknown flags {flags:#x}"));
        }
        let blob = BundledBlob {
            digest: hex(&row[..32]),
            size: word(32),
            offset: word(40),
            stored: word(48),
            zstd: flags == ZSTD_FLAG,
        };
        check(&blob, blobs)?;
        Ok(blob)
    }
}

/// The checks of one blob record against where the blobs lie in the file.
pub fn check(b: &BundledBlob, blobs: &std::ops::Range<u64>) -> Result<(), String> {
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
        Some(end) if b.offset >= blobs.start && end <= blobs.end => Ok(()),
        _ => Err(format!(
            "bytes {}..+{} lie outside the blobs, bytes {}..{} of the file",
            b.offset, b.stored, blobs.start, blobs.end
        )),
    }
}

/// 64 lower-case hex digits as 32 bytes.
fn unhex(digest: &str) -> Option<[u8; 32]> {
    if !is_sha256_hex(digest) {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in digest.as_bytes().chunks(2).enumerate() {
        let nibble = |c: u8| match c {
            b'0'..=b'9' => c - b'0',
            _ => c - b'a' + 10,
        };
        out[i] = nibble(pair[0]) << 4 | nibble(pair[1]);
    }
    Some(out)
}

/// The table as it lies in the file: `rows` rows from `start`; every blob inside
/// `blobs`.
#[derive(Debug)]
pub struct Table {
    /// Its first byte in the file.
    pub start: u64,
    /// Its rows.
    pub rows: u64,
    /// Where the blobs lie in the file.
    pub blobs: std::ops::Range<u64>,
}

impl Table {
    /// Row `i`, read and checked.
    pub fn read(&self, file: &File, i: u64) -> std::io::Result<Result<BundledBlob, String>> {
        let mut row = [0u8; ROW_BYTES as usize];
        file.read_exact_at(&mut row, self.start + i * ROW_BYTES)?;
        Ok(BundledBlob::of_row(&row, &self.blobs).map_err(|why| format!("blob row {i}: {why}")))
    }

    /// The row of `digest`, found by bisection (a few reads, nothing built); `None`
    /// when the table has none. A row read that fails its checks is an error.
    pub fn find(
        &self,
        file: &File,
        digest: &str,
    ) -> std::io::Result<Result<Option<BundledBlob>, String>> {
        let Some(want) = unhex(digest) else {
            return Ok(Ok(None));
        };
        let (mut lo, mut hi) = (0, self.rows);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let mut row = [0u8; ROW_BYTES as usize];
            file.read_exact_at(&mut row, self.start + mid * ROW_BYTES)?;
            match row[..32].cmp(&want[..]) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Ok(self.read(file, mid)?.map(Some)),
            }
        }
        Ok(Ok(None))
    }

    /// Every row, read and checked, and checked sorted by digest with none twice.
    pub fn all(&self, file: &File) -> std::io::Result<Result<Vec<BundledBlob>, String>> {
        let bytes = usize::try_from(self.rows * ROW_BYTES).unwrap_or(usize::MAX);
        let mut table = vec![0u8; bytes];
        file.read_exact_at(&mut table, self.start)?;
        let mut out: Vec<BundledBlob> = Vec::with_capacity(self.rows as usize);
        for (i, row) in table.chunks_exact(ROW_BYTES as usize).enumerate() {
            let blob = match BundledBlob::of_row(row, &self.blobs) {
                Ok(b) => b,
                Err(why) => return Ok(Err(format!("blob row {i}: {why}"))),
            };
            if let Some(before) = out.last()
                && before.digest >= blob.digest
            {
                return Ok(Err(format!(
                    "blob row {i} ({}) is not after row {} ({}): the table is not sorted by digest",
                    blob.digest,
                    i - 1,
                    before.digest
                )));
            }
            out.push(blob);
        }
        Ok(Ok(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob() -> BundledBlob {
        BundledBlob {
            digest: "0a".repeat(32),
            size: 10,
            offset: 100,
            stored: 10,
            zstd: false,
        }
    }

    #[test]
    fn blob_records_outside_the_blobs_or_oversized_are_refused() {
        let ok = blob();
        assert!(check(&ok, &(100..110)).is_ok());
        assert!(check(&ok, &(100..109)).is_err());
        assert!(check(&ok, &(101..200)).is_err(), "before the blobs");
        let past = BundledBlob {
            offset: u64::MAX,
            ..ok.clone()
        };
        assert!(check(&past, &(0..u64::MAX)).is_err());
        let raw_mismatch = BundledBlob {
            stored: 9,
            ..ok.clone()
        };
        assert!(check(&raw_mismatch, &(100..110)).is_err());
        let huge = BundledBlob {
            size: MAX_BLOB_BYTES + 1,
            ..ok.clone()
        };
        assert!(check(&huge, &(0..u64::MAX)).is_err());
        let upper = BundledBlob {
            digest: "A".repeat(64),
            ..ok
        };
        assert!(check(&upper, &(100..110)).is_err());
    }

    #[test]
    fn rows_round_trip_and_unknown_flags_are_refused() {
        let b = BundledBlob {
            zstd: true,
            stored: 7,
            ..blob()
        };
        let row = b.row().unwrap();
        assert_eq!(BundledBlob::of_row(&row, &(100..200)), Ok(b.clone()));
        let mut flagged = row;
        flagged[56] = 3;
        let err = BundledBlob::of_row(&flagged, &(100..200)).unwrap_err();
        assert!(err.contains("unknown flags"), "{err}");
        assert!(
            BundledBlob {
                digest: "x".into(),
                ..b
            }
            .row()
            .is_none()
        );
    }
}
