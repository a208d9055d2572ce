//! Which blobs the store holds, for thousands of digests at once: each blob folder is
//! listed once (a few hundred directory reads) instead of a `stat` per digest.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::path::Path;

use crate::digest::is_sha256_hex;

/// The blob folders of a store as listed at one moment.
#[derive(Debug)]
pub struct BlobListing {
    /// Every digest stored in a listed folder, raw or compressed, as its two halves:
    /// one probe of a hash table per question (a sorted list costs a cache miss per
    /// step of its binary search at 100,000 blobs).
    stored: HashSet<(u128, u128), BuildHasherDefault<DigestHasher>>,
    /// Each shard's folder (by the digest's first byte): absent, listed, or there but
    /// not listed (then asked blob by blob).
    shards: Vec<Shard>,
}

/// Hashes a digest by its own bits: they are uniformly distributed already.
#[derive(Default)]
struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u128(&mut self, n: u128) {
        self.0 ^= n as u64;
    }
}

/// What the listing knows of one shard folder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shard {
    Absent,
    Listed,
    Unlisted,
}

impl Default for BlobListing {
    fn default() -> Self {
        BlobListing {
            stored: HashSet::default(),
            shards: vec![Shard::Absent; 256],
        }
    }
}

/// A digest's 64 lower-case hex digits as two big-endian halves, and its shard.
fn halves(digest: &str) -> Option<((u128, u128), usize)> {
    if !is_sha256_hex(digest) {
        return None;
    }
    let half = |hex: &[u8]| {
        hex.iter().fold(0u128, |n, &c| {
            n << 4 | u128::from(if c <= b'9' { c - b'0' } else { c - b'a' + 10 })
        })
    };
    let (high, low) = digest.as_bytes().split_at(32);
    let high = half(high);
    Some(((high, half(low)), (high >> 120) as usize))
}

impl BlobListing {
    /// Lists every shard folder of `blobs` (a store's blob folder). A folder that
    /// cannot be listed is asked blob by blob later ([`BlobListing::has`]).
    pub fn read(blobs: &Path) -> BlobListing {
        let mut listing = BlobListing::default();
        let Ok(folders) = std::fs::read_dir(blobs) else {
            return listing;
        };
        for folder in folders.flatten() {
            // Only a folder named as a digest's first two hex digits is ever asked.
            let Some((_, shard)) = folder
                .file_name()
                .to_str()
                .filter(|s| s.len() == 2)
                .and_then(|s| halves(&s.repeat(32)))
            else {
                continue;
            };
            let Ok(names) = std::fs::read_dir(folder.path()) else {
                listing.shards[shard] = Shard::Unlisted;
                continue;
            };
            listing.stored.extend(names.flatten().filter_map(|e| {
                let name = e.file_name();
                let name = name.to_str()?;
                let (digest, of) = halves(name.strip_suffix(".zst").unwrap_or(name))?;
                (of == shard).then_some(digest)
            }));
            listing.shards[shard] = Shard::Listed;
        }
        listing
    }

    /// Whether blob `digest` was stored when the folders were listed; `stat` answers
    /// where its folder could not be listed.
    pub fn has(&self, digest: &str, stat: impl Fn(&str) -> bool) -> bool {
        let Some((wanted, shard)) = halves(digest) else {
            return false;
        };
        match self.shards[shard] {
            Shard::Listed => self.stored.contains(&wanted),
            Shard::Unlisted => stat(digest),
            Shard::Absent => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::store::Store;

    #[test]
    fn a_listing_answers_as_a_stat_of_each_blob_does() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(
            dir.path(),
            crate::store::LockMode::Shared,
            std::time::Duration::from_secs(1),
        )
        .unwrap();
        let mut stored = Vec::new();
        for i in 0..40u32 {
            // Large blobs are compressed (`.zst`), small ones raw: both count.
            let bytes = if i % 2 == 0 {
                vec![i as u8; crate::store::RAW_BLOB_MAX + 1]
            } else {
                i.to_le_bytes().to_vec()
            };
            stored.push(store.put_blob(&bytes).unwrap());
        }
        let absent: Vec<String> = (0..40u32)
            .map(|i| crate::digest::sha256_hex(&(1000 + i).to_le_bytes()))
            .collect();
        let mut asked: Vec<&str> = stored.iter().chain(&absent).map(String::as_str).collect();
        asked.extend(["not hex", "", "ab"]);
        let listing = store.list_blobs();
        for d in &asked {
            assert_eq!(
                listing.has(d, |d| store.has_blob(d)),
                store.has_blob(d),
                "{d}"
            );
        }
        assert_eq!(
            stored
                .iter()
                .filter(|d| listing.has(d, |d| store.has_blob(d)))
                .count(),
            40
        );
        assert!(
            absent
                .iter()
                .all(|d| !listing.has(d, |d| store.has_blob(d)))
        );
        // Past a few thousand digests, `have_blobs` answers from a listing: the same.
        let many: Vec<&str> = asked.iter().copied().cycle().take(5000).collect();
        let want: Vec<bool> = many.iter().map(|d| store.has_blob(d)).collect();
        assert_eq!(store.have_blobs(&many), want);
    }
}
