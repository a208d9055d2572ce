//! The action entry: what one compile produced under one key (its blob's digest and
//! size, the preimage of the key, what the cubin says about its entries and resources,
//! nvcc's output), as the store and the remote keep it, and the checks of one read back.

use serde::{Deserialize, Serialize};

use crate::cubin::EntryInfo;
use crate::digest::{Preimage, is_sha256_hex};
use crate::model::{ArtifactKind, Config};
use crate::store::MAX_BLOB_BYTES;

/// Bump with any incompatible change of [`ActionEntry`]. Entries of another format are
/// misses (rebuilt and overwritten), not corruption. 2: entries record parameter sizes.
pub const ENTRY_FORMAT: u32 = 2;

/// Whether `json` is an action entry of another format than [`ENTRY_FORMAT`].
pub fn is_other_format(json: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(json)
        .ok()
        .and_then(|v| v.get("format").and_then(serde_json::Value::as_u64))
        .is_some_and(|f| f != u64::from(ENTRY_FORMAT))
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
        if self.format != ENTRY_FORMAT {
            return Err(format!(
                "entry format {} (this kart reads {ENTRY_FORMAT})",
                self.format
            ));
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
        Ok(())
    }
}
