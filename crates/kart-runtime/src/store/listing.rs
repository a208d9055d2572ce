//! Which blobs the store holds, for thousands of digests at once: each blob folder is
//! listed once (a few hundred directory reads) instead of a `stat` per digest.

use std::collections::HashMap;

use std::path::Path;

use crate::digest::is_sha256_hex;

/// The blob folders of a store as listed at one moment.
#[derive(Debug, Default)]
pub struct BlobListing {
    /// Shard (the digest's first two hex digits) → the digests stored in it, raw or
    /// compressed, sorted; `None` for a folder that exists but could not be listed.
    shards: HashMap<String, Option<Vec<String>>>,
}

impl BlobListing {
    /// Lists every shard folder of `blobs` (a store's blob folder). A folder that
    /// cannot be listed is asked blob by blob later ([`BlobListing::has`]).
    pub fn read(blobs: &Path) -> BlobListing {
        let Ok(folders) = std::fs::read_dir(blobs) else {
            return BlobListing::default();
        };
        let shards = folders
            .flatten()
            .filter_map(|folder| {
                let shard = folder.file_name().into_string().ok()?;
                let names = std::fs::read_dir(folder.path()).ok().map(|names| {
                    let mut names: Vec<String> = names
                        .flatten()
                        .filter_map(|e| {
                            let mut name = e.file_name().into_string().ok()?;
                            if name.ends_with(".zst") {
                                name.truncate(name.len() - 4);
                            }
                            (name.starts_with(&shard) && is_sha256_hex(&name)).then_some(name)
                        })
                        .collect();
                    names.sort_unstable();
                    names
                });
                Some((shard, names))
            })
            .collect();
        BlobListing { shards }
    }

    /// Whether blob `digest` was stored when the folders were listed; `stat` answers
    /// where its folder could not be listed.
    pub fn has(&self, digest: &str, stat: impl Fn(&str) -> bool) -> bool {
        if !is_sha256_hex(digest) {
            return false;
        }
        match self.shards.get(&digest[..2]) {
            Some(Some(names)) => names.binary_search_by(|n| n.as_str().cmp(digest)).is_ok(),
            Some(None) => stat(digest),
            None => false,
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
