//! The committed sidecar files beside `kart.lock` (`kart.attest`, `kart.tune`): one
//! reader and one writer for both. Each is TOML with a version, a header comment and a
//! list of records; a missing file is an empty one; every error names the file, line and
//! column; a write happens only when the text changed.

use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Result;
use crate::text::{SourceFile, read_text};

/// A record that failed its check: where in the text, what, and what to do.
pub struct BadRecord {
    /// A piece of the file's text that locates the record (its digest, say).
    pub near: String,
    /// What is wrong.
    pub message: String,
    /// What to do.
    pub hint: &'static str,
}

/// A sidecar file format.
pub trait Sidecar: Serialize + DeserializeOwned {
    /// The format version this kart writes and reads.
    const VERSION: u32;
    /// The oldest version it still reads (a file of an older version that is a subset
    /// of the current one; it is written back as [`Self::VERSION`]).
    const READS_FROM: u32 = Self::VERSION;
    /// The comment at the top of the file.
    const HEADER: &'static str;
    /// What the file is, in messages ("attestation", "tuning file").
    const WHAT: &'static str;
    /// How to write a new one (the hint for a version mismatch).
    const REGENERATE: &'static str;

    /// An empty file of [`Self::VERSION`].
    fn empty() -> Self;
    /// The version read.
    fn version(&self) -> u32;
    /// Checks each record's fields beyond their types.
    fn check(&self) -> std::result::Result<(), BadRecord>;

    /// Reads `path` (a missing file is an empty one); `shown` names it in messages.
    fn read(path: &Path, shown: &Path) -> Result<Self> {
        read(path, shown)
    }
    /// The file's text.
    fn to_text(&self) -> String {
        to_text(self)
    }
    /// Writes the file atomically, only if its text changed; whether it did.
    fn write(&self, path: &Path) -> Result<bool> {
        write(self, path)
    }
}

/// Reads `path` (a missing file is empty); `shown` names it in messages.
pub fn read<T: Sidecar>(path: &Path, shown: &Path) -> Result<T> {
    if !path.exists() {
        return Ok(T::empty());
    }
    parse(&read_text(path, crate::text::Limit::SIDECAR)?, shown)
}

/// Parses and checks a sidecar file's `text` (read from a file or a bundle); `shown`
/// names it in messages.
pub fn parse<T: Sidecar>(text: &str, shown: &Path) -> Result<T> {
    let file = SourceFile {
        path: shown.to_path_buf(),
        text,
    };
    let parsed: T = file.parse()?;
    if !(T::READS_FROM..=T::VERSION).contains(&parsed.version()) {
        let known = if T::READS_FROM == T::VERSION {
            T::VERSION.to_string()
        } else {
            format!("{} to {}", T::READS_FROM, T::VERSION)
        };
        return Err(file.error(
            0..0,
            format!("{} version {} is not {known}", T::WHAT, parsed.version()),
            T::REGENERATE,
        ));
    }
    if let Err(bad) = parsed.check() {
        let offset = text.find(&bad.near).unwrap_or(0);
        return Err(file.error(offset..offset + bad.near.len(), bad.message, bad.hint));
    }
    Ok(parsed)
}

/// The file's text: the header, then the TOML.
pub fn to_text<T: Sidecar>(file: &T) -> String {
    // Plain structs of strings and numbers always serialize.
    format!("{}{}", T::HEADER, toml::to_string(file).unwrap_or_default())
}

/// Writes atomically, only if the text changed; whether it did.
pub fn write<T: Sidecar>(file: &T, path: &Path) -> Result<bool> {
    crate::store::fsutil::write_if_changed(path, &to_text(file))
}
