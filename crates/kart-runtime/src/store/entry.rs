//! The action entry: what one compile produced under one key (its blob's digest and
//! size, the preimage of the key, what the cubin says about its entries and resources,
//! nvcc's output), as the store and the remote keep it, and the checks of one read back.

use serde::{Deserialize, Serialize};

use crate::cubin::EntryInfo;
use crate::digest::{Preimage, is_sha256_hex};
use crate::model::{ArtifactKind, Config};
use crate::store::limits::MAX_BLOB_BYTES;

/// Bump with any change of [`ActionEntry`]. Entries of a format this kart does not read
/// are misses (rebuilt and overwritten), not corruption. 2: entries record parameter
/// sizes; 3: and how long the compile took (`compile_ms`).
pub const ENTRY_FORMAT: u32 = 3;

/// The oldest format this kart still reads: format 2 is format 3 without `compile_ms`.
/// (A kart that reads only format 2 takes format-3 entries for misses.)
pub const OLDEST_ENTRY_FORMAT: u32 = 2;

/// Whether `json` is an action entry of a format this kart does not read.
pub fn is_other_format(json: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(json)
        .ok()
        .and_then(|v| v.get("format").and_then(serde_json::Value::as_u64))
        .is_some_and(|f| !(u64::from(OLDEST_ENTRY_FORMAT)..=u64::from(ENTRY_FORMAT)).contains(&f))
}

/// What an action key produced: stored as `actions/ab/<key>.json`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ActionEntry {
    /// [`ENTRY_FORMAT`].
    pub format: u32,
    /// The action key.
    pub key: String,
    /// The kernel it was built for (informational; the key is what counts).
    pub kernel: String,
    /// The config it was built with.
    pub config: Config,
    /// The target, `sm_90a`.
    pub target: String,
    /// cubin or PTX.
    pub kind: ArtifactKind,
    /// sha256 of the artifact's bytes.
    pub digest: String,
    /// Size of the artifact's bytes.
    pub size: u64,
    /// Resources of each entry point (zero for PTX).
    pub entries: Vec<EntryInfo>,
    /// nvcc release that built it, `13.0.88`.
    pub nvcc_release: String,
    /// Host compiler, as provenance only.
    pub host_compiler: String,
    /// nvcc's stderr (warnings and the ptxas report), replayed on a hit with `-v`.
    pub stderr: String,
    /// Every input of the key, for `kart explain`.
    pub preimage: Preimage,
    /// How long the compile took, in milliseconds of wall time (a config compiled in a
    /// batch: its share of the front end plus its own `ptxas`): `kart build` starts
    /// the kernels that compiled slowest last time first. Absent in format 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile_ms: Option<u64>,
}

impl ActionEntry {
    /// Parses and validates the stored bytes of the entry of `key`: `Ok(None)` for an
    /// entry of another format version (a miss), `Err(why)` for one that fails a check.
    /// The local store and the remote read entries through this one function.
    pub fn parse(bytes: &[u8], key: &str) -> std::result::Result<Option<ActionEntry>, String> {
        if is_other_format(bytes) {
            return Ok(None);
        }
        let entry = serde_json::from_slice::<ActionEntry>(bytes).map_err(|e| e.to_string())?;
        entry.validate()?;
        if entry.key != key {
            return Err(format!("the entry names key {}", entry.key));
        }
        Ok(Some(entry))
    }

    /// Checks the fields that name files or blobs, so a hostile entry cannot point kart
    /// anywhere but into the store.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if !(OLDEST_ENTRY_FORMAT..=ENTRY_FORMAT).contains(&self.format) {
            return Err(format!(
                "entry format {} (this kart reads {OLDEST_ENTRY_FORMAT} to {ENTRY_FORMAT})",
                self.format
            ));
        }
        if self.compile_ms.is_some_and(|ms| ms > 86_400_000) {
            return Err("a compile time of more than a day".into());
        }
        if !is_sha256_hex(&self.key) || !is_sha256_hex(&self.digest) {
            return Err("key or digest is not 64 lower-case hex digits".into());
        }
        crate::untrusted::identifier("kernel", &self.kernel)?;
        self.target
            .parse::<crate::target::TargetArch>()
            .map_err(|e| e.0)?;
        if self.size > MAX_BLOB_BYTES {
            return Err(format!("size {} is more than kart reads", self.size));
        }
        crate::untrusted::release("nvcc release", &self.nvcc_release)?;
        crate::untrusted::label("host compiler", &self.host_compiler)?;
        if self.entries.is_empty() {
            return Err("no entries".into());
        }
        for e in &self.entries {
            e.validate()?;
        }
        // `kart explain` prints the preimage: checked here so a forged entry is refused
        // whole rather than shown. (nvcc's stderr is escaped where it is replayed: a
        // compiler may well print a carriage return.)
        if self.preimage.0.len() > 100_000 {
            return Err(format!("{} key inputs", self.preimage.0.len()));
        }
        for (name, value) in &self.preimage.0 {
            crate::untrusted::label("key input name", name)?;
            crate::untrusted::multiline("key input value", value, 1 << 20)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "09d664e59bda56bd09fcfa455532d7ff1e20761883e48449228d09290ed1e428";

    #[test]
    fn format_2_entries_are_read_newer_and_older_ones_are_misses() {
        let corpus = include_str!("../../tests/data/action-entry.json");
        let two = ActionEntry::parse(corpus.as_bytes(), KEY).unwrap().unwrap();
        assert_eq!((two.format, two.compile_ms), (2, None));
        let mut value: serde_json::Value = serde_json::from_str(corpus).unwrap();
        value["format"] = 3.into();
        value["compile_ms"] = 1234.into();
        let three = ActionEntry::parse(value.to_string().as_bytes(), KEY)
            .unwrap()
            .unwrap();
        assert_eq!(three.compile_ms, Some(1234));
        for other in [1, 4] {
            value["format"] = other.into();
            assert!(
                ActionEntry::parse(value.to_string().as_bytes(), KEY)
                    .unwrap()
                    .is_none()
            );
        }
        value["format"] = 3.into();
        value["compile_ms"] = u64::MAX.into();
        assert!(ActionEntry::parse(value.to_string().as_bytes(), KEY).is_err());
    }
}
