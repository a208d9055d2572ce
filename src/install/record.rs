//! The record of a finished install, written last beside its folder, and what the
//! home knows of an install it finds.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{index, sets, usage};
use crate::digest::Preimage;
use crate::error::Result;
use crate::store::fsutil::write_atomic;

/// The record of a finished install, beside its folder (`toolchains/<name>.json`,
/// `libraries/<name>.json`): bump it when a field or its meaning changes. An install
/// whose files are hard links to the home's shared files has the same record as one
/// of copies: a folder of either kind is a complete install.
pub const RECORD_FORMAT: u32 = 1;

/// The record written last into a finished install.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstallRecord {
    /// [`RECORD_FORMAT`].
    pub format: u32,
    /// `toolchain` or `library`.
    pub kind: String,
    /// The release (a toolchain) or the library's name.
    pub name: String,
    /// The pins installed.
    pub requirements: Vec<String>,
    /// Each wheel's file name and sha256.
    pub wheels: Vec<(String, String)>,
    /// Files unpacked.
    pub files: usize,
    /// `kart 0.1.0`.
    pub installed_by: String,
}

/// An install found in the home.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Installed {
    /// Its folder.
    pub path: PathBuf,
    /// Its record.
    pub record: InstallRecord,
    /// Bytes on disk, a file linked twice counted once.
    pub bytes: u64,
    /// Of those, the bytes no other install shares: what removing it frees.
    pub own_bytes: u64,
    /// When it was installed (its record was written), seconds since the Unix epoch.
    pub installed_at: u64,
    /// The projects that used it, latest first.
    pub uses: Vec<usage::Use>,
}

impl Installed {
    /// What was installed beside a known release's wheels (`[toolchain] components`);
    /// for a library, its pin.
    pub fn components(&self) -> Vec<String> {
        let base: &[&str] = match sets::known(&self.record.name) {
            Some(known) if self.record.kind == "toolchain" => known.wheels,
            _ => &[],
        };
        self.record
            .requirements
            .iter()
            .filter(|r| !base.contains(&r.as_str()))
            .cloned()
            .collect()
    }

    /// The latest time anything used it: its last recorded use, else its install.
    pub fn last_used(&self) -> u64 {
        self.uses
            .iter()
            .map(|u| u.at)
            .max()
            .unwrap_or(0)
            .max(self.installed_at)
    }
}

/// A toolchain install's folder name: the release and a hash of the machine and the
/// wheels (sorted).
pub(crate) fn toolchain_install_name(release: &str, requirements: &[String]) -> Result<String> {
    let mut p = Preimage::default();
    p.push("machine", index::machine_tag()?);
    for r in requirements {
        p.push("wheel", r.clone());
    }
    Ok(format!(
        "{release}-{}",
        &p.digest("kart-toolchain-v1")[..16]
    ))
}

/// The record of the install `folder`: its name and `.json`, beside it.
pub(crate) fn record_path(folder: &Path) -> PathBuf {
    let mut name = folder.file_name().unwrap_or_default().to_os_string();
    name.push(".json");
    folder.with_file_name(name)
}

pub(crate) fn read_record(folder: &Path) -> Option<InstallRecord> {
    let parse = |path: &Path| {
        let text = kart_runtime::text::read_text(path, kart_runtime::text::Limit::CACHE).ok()?;
        let record: InstallRecord = serde_json::from_str(&text).ok()?;
        (record.format == RECORD_FORMAT && folder.is_dir()).then_some(record)
    };
    if let Some(record) = parse(&record_path(folder)) {
        return Some(record);
    }
    // Earlier versions named a toolchain's record by its name less what follows the last dot
    // (`13.json` for `13.0-…`), one file for every install of a release: taken only
    // when it describes this very folder, and moved to its own name.
    let legacy = folder.with_extension("json");
    let record = parse(&legacy)?;
    let name = folder.file_name()?.to_str()?;
    let mine = record.kind == "toolchain"
        && toolchain_install_name(&record.name, &record.requirements).ok()? == name;
    if !mine {
        return None;
    }
    if let Ok(json) = serde_json::to_string_pretty(&record) {
        let _ = write_atomic(&record_path(folder), json.as_bytes());
    }
    Some(record)
}
