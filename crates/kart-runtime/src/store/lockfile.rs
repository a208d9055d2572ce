//! `kart.lock`: the committed list of every artifact, the trust root of every reader.
//!
//! Sorted by (kernel, config, target, kind), no time, no absolute path: the same inputs
//! and toolchain give the same bytes on any machine, so the file diffs cleanly.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cubin::EntryInfo;
use crate::digest::is_sha256_hex;
use crate::error::Result;
use crate::model::ArtifactKind;
use crate::model::Config;
use crate::target::TargetArch;
use crate::text::{SourceFile, read_text};

/// The lock's file name, beside `kart.toml`.
pub const LOCK_FILE: &str = "kart.lock";

/// Bump when a field is added, removed or changes meaning. Version 2 added derived
/// params (`[artifact.derived]`) and launch geometry (`[[kernel]]`); version 3 the
/// symbol, expression and instance of template entries; version 4 the artifacts of
/// configs `[prune]` left out (`[[pruned]]`). Older locks are still read.
pub const LOCK_VERSION: u32 = 4;

/// The version written for a lock without `[[pruned]]` records: the same layout, so
/// the locks of projects that do not prune keep their text (and older karts read them).
pub const LOCK_VERSION_UNPRUNED: u32 = 3;

/// The oldest version this kart reads.
pub const OLDEST_LOCK_VERSION: u32 = 1;

const HEADER: &str = "# kart.lock: every artifact of this project, written by `kart build`.\n\
# Commit it; do not edit it. Readers trust exactly the digests listed here.\n\n";

/// One artifact of the lock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockedArtifact {
    /// Kernel name.
    pub kernel: String,
    /// The config's params.
    pub config: Config,
    /// Target, `sm_90a`.
    pub target: String,
    /// cubin or PTX.
    pub kind: ArtifactKind,
    /// The action key.
    pub key: String,
    /// sha256 of the artifact's bytes.
    pub digest: String,
    /// Its size in bytes.
    pub size: u64,
    /// The nvcc release that built it (the driver must support it).
    pub nvcc: String,
    /// Entry points and their resources.
    pub entries: Vec<EntryInfo>,
    /// The config's derived params (`[derived]` of kernel.toml), computed at build time.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub derived: BTreeMap<String, i64>,
}

impl From<crate::store::lock_records::Fields> for LockedArtifact {
    fn from(f: crate::store::lock_records::Fields) -> LockedArtifact {
        LockedArtifact {
            kernel: f.kernel,
            config: f.config,
            target: f.target,
            kind: f.kind,
            key: f.key,
            digest: f.digest,
            size: f.size,
            nvcc: f.nvcc,
            entries: f.entries,
            derived: f.derived,
        }
    }
}

/// What the lock records of a kernel as a whole: its `[launch]` geometry.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockedKernel {
    /// The kernel's name.
    pub name: String,
    /// `[launch]`, as written.
    pub launch: crate::launch::LaunchText,
}

/// An artifact of a config that `[prune]` in kernel.toml left out of the lock: its
/// identity, its key, and the resources that decided it (as `kart ls` shows them), so
/// that `kart build --locked` can check the decision without the store. Never loaded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrunedArtifact {
    /// Kernel name.
    pub kernel: String,
    /// The config's params.
    pub config: Config,
    /// Target, `sm_90a`.
    pub target: String,
    /// cubin or PTX.
    pub kind: ArtifactKind,
    /// The action key.
    pub key: String,
    /// Registers per thread (the most of any entry).
    pub registers: u32,
    /// Static shared memory, bytes (the most of any entry).
    pub shared_bytes: u64,
    /// Stack frame, bytes per thread (the most of any entry).
    pub stack_bytes: u64,
    /// Bytes spilled and reloaded, all entries together.
    pub spill_bytes: u64,
}

/// An artifact's resources, as `kart ls` shows them: the most registers, static shared
/// memory and stack of any entry, and the spill bytes (stores and loads) of all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    /// Registers per thread.
    pub registers: u32,
    /// Static shared memory, bytes.
    pub shared_bytes: u64,
    /// Stack frame, bytes per thread.
    pub stack_bytes: u64,
    /// Bytes spilled to local memory and reloaded, together.
    pub spill_bytes: u64,
}

impl Resources {
    /// The resources of an artifact with these entries.
    pub fn of(entries: &[EntryInfo]) -> Resources {
        Resources {
            registers: entries.iter().map(|e| e.registers).max().unwrap_or(0),
            shared_bytes: entries.iter().map(|e| e.shared_bytes).max().unwrap_or(0),
            stack_bytes: entries.iter().map(|e| e.stack_bytes).max().unwrap_or(0),
            spill_bytes: entries
                .iter()
                .map(|e| e.spill_store_bytes.saturating_add(e.spill_load_bytes))
                .fold(0, u64::saturating_add),
        }
    }
}

impl PrunedArtifact {
    /// The record of an artifact with these resources.
    pub fn new(
        kernel: String,
        config: Config,
        target: String,
        kind: ArtifactKind,
        key: String,
        r: Resources,
    ) -> PrunedArtifact {
        PrunedArtifact {
            kernel,
            config,
            target,
            kind,
            key,
            registers: r.registers,
            shared_bytes: r.shared_bytes,
            stack_bytes: r.stack_bytes,
            spill_bytes: r.spill_bytes,
        }
    }

    /// Its resources.
    pub fn resources(&self) -> Resources {
        Resources {
            registers: self.registers,
            shared_bytes: self.shared_bytes,
            stack_bytes: self.stack_bytes,
            spill_bytes: self.spill_bytes,
        }
    }

    /// Checks every field beyond its type, as [`LockedArtifact::validate`] does.
    pub fn validate(&self) -> std::result::Result<(), String> {
        crate::untrusted::identifier("kernel", &self.kernel)?;
        if !is_sha256_hex(&self.key) {
            return Err("key must be 64 lower-case hex digits".into());
        }
        self.target.parse::<TargetArch>().map_err(|e| e.0)?;
        Ok(())
    }

    /// The sort key and identity: (kernel, config, target, kind).
    pub fn id(&self) -> (&str, &Config, &str, ArtifactKind) {
        (&self.kernel, &self.config, &self.target, self.kind)
    }

    /// `kernel[config] target (kind)`, for messages.
    pub fn describe(&self) -> String {
        describe(&self.kernel, &self.config, &self.target, self.kind)
    }
}

impl LockedArtifact {
    /// Checks every field beyond its type (what `Lockfile::parse` and a built record
    /// share): names are C identifiers, key and digest hex, the target known, the size
    /// within what kart reads, each entry well-formed.
    pub fn validate(&self) -> std::result::Result<(), String> {
        check_artifact(
            [
                &self.kernel,
                &self.key,
                &self.digest,
                &self.target,
                &self.nvcc,
            ],
            self.size,
            self.entries.iter().map(EntryInfo::validate),
            self.derived.keys().map(String::as_str),
        )
    }

    /// The sort key and identity of an artifact: (kernel, config, target, kind).
    pub fn id(&self) -> (&str, &Config, &str, ArtifactKind) {
        (&self.kernel, &self.config, &self.target, self.kind)
    }

    /// `kernel[config] target (kind)`, for messages.
    pub fn describe(&self) -> String {
        describe(&self.kernel, &self.config, &self.target, self.kind)
    }
}

/// What [`LockedArtifact::validate`] checks, on borrowed fields: kernel, key, digest,
/// target and nvcc, the size, each entry's check, the derived params' names.
pub(crate) fn check_artifact<'a>(
    [kernel, key, digest, target, nvcc]: [&str; 5],
    size: u64,
    mut entries: impl ExactSizeIterator<Item = std::result::Result<(), String>>,
    derived: impl Iterator<Item = &'a str>,
) -> std::result::Result<(), String> {
    crate::untrusted::identifier("kernel", kernel)?;
    if !is_sha256_hex(digest) || !is_sha256_hex(key) {
        return Err("key and digest must be 64 lower-case hex digits".into());
    }
    target.parse::<TargetArch>().map_err(|e| e.0)?;
    if size > crate::store::limits::MAX_BLOB_BYTES {
        return Err(format!("size {size} is more than kart reads"));
    }
    crate::untrusted::release("nvcc", nvcc)?;
    if entries.len() == 0 {
        return Err("no entries".into());
    }
    entries.try_for_each(|e| e)?;
    for name in derived {
        crate::untrusted::identifier("derived param", name)?;
    }
    Ok(())
}

/// Of the artifacts of one (kernel, config), the one a device of `capability` loads
/// under `policy` (the runtime's resolution rules), if any.
pub fn pick<'a>(
    group: &[&'a LockedArtifact],
    capability: crate::resolve::Capability,
    policy: crate::resolve::JitPolicy,
) -> Option<&'a LockedArtifact> {
    let available: Vec<(TargetArch, ArtifactKind)> = group
        .iter()
        .filter_map(|a| a.target.parse().ok().map(|t| (t, a.kind)))
        .collect();
    let (target, kind) = crate::resolve::resolve(capability, &available, policy)?;
    group
        .iter()
        .copied()
        .find(|a| a.kind == kind && a.target == target.to_string())
}

/// `kernel[config] target`, plus the kind when it is PTX.
pub fn describe(kernel: &str, config: &Config, target: &str, kind: ArtifactKind) -> String {
    let kind = match kind {
        ArtifactKind::Cubin => String::new(),
        ArtifactKind::Ptx => " (ptx)".into(),
    };
    format!("{kernel}[{config}] {target}{kind}")
}

/// The whole lock.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lockfile {
    /// [`LOCK_VERSION`].
    pub version: u32,
    /// Every artifact, sorted.
    #[serde(default, rename = "artifact")]
    pub artifacts: Vec<LockedArtifact>,
    /// Kernels with launch geometry, sorted by name.
    #[serde(default, rename = "kernel", skip_serializing_if = "Vec::is_empty")]
    pub kernels: Vec<LockedKernel>,
    /// Artifacts of configs `[prune]` left out, sorted (version 4).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pruned: Vec<PrunedArtifact>,
}

impl Lockfile {
    /// An empty lock of the current version.
    pub fn new(mut artifacts: Vec<LockedArtifact>) -> Lockfile {
        artifacts.sort_by(|a, b| a.id().cmp(&b.id()));
        artifacts.dedup_by(|a, b| a.id() == b.id());
        Lockfile {
            version: LOCK_VERSION_UNPRUNED,
            artifacts,
            kernels: Vec::new(),
            pruned: Vec::new(),
        }
    }

    /// The same lock with these records of pruned artifacts (sorted); a lock with any
    /// is version 4.
    pub fn with_pruned(mut self, mut pruned: Vec<PrunedArtifact>) -> Lockfile {
        pruned.sort_by(|a, b| a.id().cmp(&b.id()));
        pruned.dedup_by(|a, b| a.id() == b.id());
        self.version = if pruned.is_empty() {
            LOCK_VERSION_UNPRUNED
        } else {
            LOCK_VERSION
        };
        self.pruned = pruned;
        self
    }

    /// The same lock with these kernel records (sorted).
    pub fn with_kernels(mut self, mut kernels: Vec<LockedKernel>) -> Lockfile {
        kernels.sort();
        kernels.dedup_by(|a, b| a.name == b.name);
        self.kernels = kernels;
        self
    }

    /// The `[launch]` of `kernel`, parsed, if the lock records one.
    pub fn launch(&self, kernel: &str) -> Option<&crate::launch::LaunchText> {
        self.kernels
            .iter()
            .find(|k| k.name == kernel)
            .map(|k| &k.launch)
    }

    /// Reads and validates `path`; a missing file is `Ok(None)`. `shown` is the path
    /// used in messages (relative to the project).
    pub fn read(path: &Path, shown: &Path) -> Result<Option<Lockfile>> {
        if !path.exists() {
            return Ok(None);
        }
        let text = read_text(path, crate::text::Limit::LOCK)?;
        Lockfile::parse(&text, shown).map(Some)
    }

    /// Parses and validates lock text.
    pub fn parse(text: &str, shown: &Path) -> Result<Lockfile> {
        let file = SourceFile {
            path: shown.to_path_buf(),
            text,
        };
        // kart's own layout through a fast reader; anything else (and every error
        // message) through the TOML parser.
        let lock: Lockfile = match canonical(text) {
            Some(lock) => lock,
            None => file.parse()?,
        };
        let bad = |i: usize, message: String| {
            // Point at the i-th `[[artifact]]` header.
            let offset = text
                .match_indices("[[artifact]]")
                .nth(i)
                .map_or(0, |(o, _)| o);
            file.error(
                offset..offset,
                message,
                "regenerate the lock with `kart build` (and resolve merge conflicts that way)",
            )
        };
        if !(OLDEST_LOCK_VERSION..=LOCK_VERSION).contains(&lock.version) {
            return Err(file.error(
                0..0,
                format!(
                    "lock version {} is not one this kart reads ({OLDEST_LOCK_VERSION} to {LOCK_VERSION})",
                    lock.version
                ),
                "regenerate it with this kart's `kart build`, or use the kart that wrote it",
            ));
        }
        for (i, a) in lock.artifacts.iter().enumerate() {
            if let Err(why) = a.validate() {
                // The kernel's name is shown only once it is known to be safe to print.
                let who = if crate::untrusted::is_c_identifier(&a.kernel) {
                    a.describe()
                } else {
                    format!("artifact {}", i + 1)
                };
                return Err(bad(i, format!("{who}: {why}")));
            }
            if !a.derived.is_empty() && lock.version < 2 {
                return Err(bad(
                    i,
                    format!("{}: derived params need lock version 2", a.describe()),
                ));
            }
            if i > 0 && lock.artifacts[i - 1].id() >= a.id() {
                return Err(bad(
                    i,
                    format!("{} is out of order or repeated", a.describe()),
                ));
            }
        }
        for (i, p) in lock.pruned.iter().enumerate() {
            let offset = text
                .match_indices("[[pruned]]")
                .nth(i)
                .map_or(0, |(o, _)| o);
            let why = if lock.version < LOCK_VERSION {
                Err("[[pruned]] records need lock version 4".to_string())
            } else if i > 0 && lock.pruned[i - 1].id() >= p.id() {
                Err("out of order or repeated".to_string())
            } else {
                p.validate()
            };
            if let Err(why) = why {
                let who = if crate::untrusted::is_c_identifier(&p.kernel) {
                    p.describe()
                } else {
                    format!("pruned artifact {}", i + 1)
                };
                return Err(file.error(
                    offset..offset,
                    format!("{who}: {why}"),
                    "regenerate the lock with `kart build`",
                ));
            }
        }
        for k in &lock.kernels {
            if !crate::untrusted::is_c_identifier(&k.name) {
                return Err(file.error(
                    0..0,
                    format!(
                        "[[kernel]] name {} is not a C identifier",
                        crate::untrusted::quoted(&k.name)
                    ),
                    "regenerate the lock with `kart build`",
                ));
            }
            if let Err(e) = crate::launch::LaunchSpec::from_text(&k.launch) {
                let offset = text.find(&format!("name = \"{}\"", k.name)).unwrap_or(0);
                return Err(file.error(
                    offset..offset,
                    format!("[launch] of `{}`: {e}", k.name),
                    "regenerate the lock with `kart build`",
                ));
            }
        }
        Ok(lock)
    }

    /// The lock's text.
    pub fn to_text(&self) -> String {
        // Serializing plain structs of strings and integers cannot fail.
        let body = toml::to_string(self).unwrap_or_default();
        format!("{HEADER}{body}")
    }

    /// Writes the lock atomically, only if its content changed.
    pub fn write(&self, path: &Path) -> Result<bool> {
        crate::store::fsutil::write_if_changed(path, &self.to_text())
    }

    /// The artifacts of one (kernel, config), one per target and kind: a contiguous run
    /// of the sorted lock, found by binary search.
    pub fn of_config(&self, kernel: &str, config: &Config) -> &[LockedArtifact] {
        let start = self
            .artifacts
            .partition_point(|a| (a.kernel.as_str(), &a.config) < (kernel, config));
        let len = self.artifacts[start..]
            .partition_point(|a| (a.kernel.as_str(), &a.config) == (kernel, config));
        &self.artifacts[start..start + len]
    }

    /// The artifacts of one kernel, a contiguous run of the sorted lock.
    pub fn of_kernel(&self, kernel: &str) -> &[LockedArtifact] {
        let start = self
            .artifacts
            .partition_point(|a| a.kernel.as_str() < kernel);
        let len = self.artifacts[start..].partition_point(|a| a.kernel == kernel);
        &self.artifacts[start..start + len]
    }

    /// The artifact with this identity.
    pub fn find(
        &self,
        kernel: &str,
        config: &Config,
        target: &str,
        kind: ArtifactKind,
    ) -> Option<&LockedArtifact> {
        let id = (kernel, config, target, kind);
        self.artifacts
            .binary_search_by(|a| a.id().cmp(&id))
            .ok()
            .map(|i| &self.artifacts[i])
    }
}

/// `kart.lock` beside the project's `kart.toml`.
pub fn lock_path(root: &Path) -> PathBuf {
    root.join(LOCK_FILE)
}

/// Where the tables after the artifacts (`[[kernel]]`, then `[[pruned]]`) start in
/// lock text laid out as kart writes it: the first such header at a line's start.
pub(crate) fn tables_start(text: &str) -> Option<usize> {
    // memchr's search: `str::find` of these takes a tenth of reading a large lock.
    [&b"\n[[kernel]]"[..], b"\n[[pruned]]"]
        .iter()
        .filter_map(|header| memchr::memmem::find(text.as_bytes(), header))
        .min()
        .map(|at| at + 1)
}

/// The lock in the layout kart writes, through [`lock_canonical`]: the artifacts as JSON,
/// the `[[kernel]]` tables after them (few) through TOML. `None` for anything else.
///
/// [`lock_canonical`]: crate::store::lock_canonical
fn canonical(text: &str) -> Option<Lockfile> {
    /// The version (the artifacts are read one record at a time).
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Head {
        version: u32,
        #[serde(default)]
        #[allow(dead_code)]
        artifact: Vec<serde::de::IgnoredAny>,
    }
    /// The `[[kernel]]` and `[[pruned]]` tables.
    #[derive(Default, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Tail {
        #[serde(default)]
        kernel: Vec<LockedKernel>,
        #[serde(default)]
        pruned: Vec<PrunedArtifact>,
    }
    let (head, tail) = match tables_start(text) {
        Some(at) => text.split_at(at),
        None => (text, ""),
    };
    // kart's own lines straight into records; what they do not cover through JSON.
    let (version, artifacts) = match crate::store::lock_records::read(head) {
        Some(read) => read,
        None => {
            let (head, artifacts): (Head, Vec<LockedArtifact>) =
                crate::store::lock_canonical::parse_records(head)?;
            (head.version, artifacts)
        }
    };
    let tail = if tail.is_empty() {
        Tail::default()
    } else {
        toml::from_str::<Tail>(tail).ok()?
    };
    Some(Lockfile {
        version,
        artifacts,
        kernels: tail.kernel,
        pruned: tail.pruned,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::model::ParamValue;

    fn artifact(kernel: &str, block: i64) -> LockedArtifact {
        LockedArtifact {
            kernel: kernel.into(),
            config: Config::from([("BLOCK".to_string(), ParamValue::Int(block))]),
            target: "sm_90".into(),
            kind: ArtifactKind::Cubin,
            key: "a".repeat(64),
            digest: "b".repeat(64),
            size: 100,
            nvcc: "13.0.88".into(),
            entries: vec![EntryInfo {
                name: kernel.into(),
                registers: 32,
                ..EntryInfo::default()
            }],
            derived: BTreeMap::new(),
        }
    }

    #[test]
    fn round_trips_sorted() {
        let lock = Lockfile::new(vec![artifact("b", 1), artifact("a", 2), artifact("a", 1)]);
        let text = lock.to_text();
        let back = Lockfile::parse(&text, Path::new("kart.lock")).unwrap();
        assert_eq!(back, lock);
        assert_eq!(back.artifacts[0].kernel, "a");
        assert!(
            back.find("a", &artifact("a", 2).config, "sm_90", ArtifactKind::Cubin)
                .is_some()
        );
    }

    #[test]
    fn runs_of_a_kernel_and_of_a_config() {
        let mut ptx = artifact("a", 2);
        ptx.kind = ArtifactKind::Ptx;
        let lock = Lockfile::new(vec![
            artifact("b", 1),
            artifact("a", 2),
            artifact("a", 1),
            ptx,
            artifact("c", 2),
        ]);
        assert_eq!(lock.of_kernel("a").len(), 3);
        assert_eq!(lock.of_kernel("b").len(), 1);
        assert!(lock.of_kernel("ab").is_empty());
        assert!(lock.of_kernel("").is_empty());
        let two = artifact("a", 2).config;
        assert_eq!(lock.of_config("a", &two).len(), 2);
        assert!(lock.of_config("a", &two).iter().all(|a| a.config == two));
        assert!(lock.of_config("b", &two).is_empty());
        assert_eq!(lock.of_config("c", &two).len(), 1);
    }

    #[test]
    fn bad_digest_names_the_line() {
        let mut lock = Lockfile::new(vec![artifact("a", 1), artifact("b", 1)]);
        lock.artifacts[1].digest = "../../etc/passwd".into();
        let err = Lockfile::parse(&lock.to_text(), Path::new("kart.lock")).unwrap_err();
        let Error::InvalidFile { line, message, .. } = &err else {
            panic!("{err}")
        };
        assert!(message.contains("64 lower-case hex"), "{message}");
        assert!(*line > 5, "{line}");
    }

    fn canonical_artifact(kernel: &str, a: i64, target: &str, derived: bool) -> LockedArtifact {
        let mut config = BTreeMap::new();
        config.insert("A".to_string(), ParamValue::Int(a));
        config.insert("MODE".to_string(), ParamValue::Ident("lib::Mode::B".into()));
        let entry: EntryInfo = serde_json::from_value(serde_json::json!({
            "name": format!("{kernel}"),
            "symbol": "_Z4tinyILi0ELi0EEvPi",
            "template": "tiny<A, MODE>",
            "instance": "tiny<0, lib::Mode::B>",
            "registers": 6,
            "shared_bytes": 0,
            "stack_bytes": 0,
            "spill_store_bytes": 0,
            "spill_load_bytes": 0,
            "params": [8, 16],
            "signature": ["ptr", "i32"],
        }))
        .unwrap();
        LockedArtifact {
            kernel: kernel.into(),
            config: Config::from(config),
            target: target.into(),
            kind: ArtifactKind::Cubin,
            key: "a".repeat(64),
            digest: "b".repeat(64),
            size: 3240,
            nvcc: "13.0.88".into(),
            entries: vec![entry.clone(), entry],
            derived: if derived {
                [("SMEM".to_string(), -5)].into_iter().collect()
            } else {
                BTreeMap::new()
            },
        }
    }

    fn canonical_sample() -> Lockfile {
        let mut artifacts = Vec::new();
        for a in 0..20 {
            for target in ["sm_80", "sm_90a"] {
                artifacts.push(canonical_artifact("tiny", a, target, a % 3 == 0));
            }
        }
        Lockfile::new(artifacts)
    }

    #[test]
    fn the_written_layout_reads_as_toml_reads_it() {
        let lock = canonical_sample();
        let text = lock.to_text();
        let fast = canonical(&text).expect("kart's own layout is in the subset");
        let slow: Lockfile = toml::from_str(&text).unwrap();
        assert_eq!(fast, slow);
        assert_eq!(fast, lock);
        // An empty lock, and the repository's own lock (kernel tables included).
        let empty = Lockfile::new(Vec::new()).to_text();
        assert_eq!(canonical(&empty), Some(toml::from_str(&empty).unwrap()));
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../kart.lock");
        let text = std::fs::read_to_string(repo).unwrap();
        let fast = canonical(&text).expect("the repository's lock is in the subset");
        assert_eq!(fast, toml::from_str::<Lockfile>(&text).unwrap());
        assert!(!fast.kernels.is_empty());
    }

    #[test]
    fn pruned_records_round_trip_and_need_version_4() {
        let pruned = |a: i64, target: &str| {
            let c = canonical_artifact("tiny", a, target, false);
            PrunedArtifact::new(
                c.kernel,
                c.config,
                c.target,
                c.kind,
                "c".repeat(64),
                Resources {
                    registers: 255,
                    spill_bytes: 2516,
                    ..Resources::default()
                },
            )
        };
        let lock = canonical_sample().with_pruned(vec![pruned(99, "sm_90a"), pruned(99, "sm_80")]);
        assert_eq!(lock.version, LOCK_VERSION);
        let text = lock.to_text();
        assert!(text.contains("\n[[pruned]]\n"), "{text}");
        assert_eq!(canonical(&text), Some(lock.clone()));
        let back = Lockfile::parse(&text, Path::new("kart.lock")).unwrap();
        assert_eq!(back, lock);
        assert_eq!(back.pruned[0].target, "sm_80");
        assert_eq!(back.pruned[0].resources().spill_bytes, 2516);
        // Without records the lock is version 3, as before.
        let plain = lock.clone().with_pruned(Vec::new());
        assert_eq!(plain.version, LOCK_VERSION_UNPRUNED);
        assert!(!plain.to_text().contains("pruned"));
        // Records in a version 3 lock, or with a bad key, are refused.
        let old = text.replacen("version = 4", "version = 3", 1);
        let err = Lockfile::parse(&old, Path::new("kart.lock")).unwrap_err();
        assert!(err.to_string().contains("need lock version 4"), "{err}");
        let bad = text.replacen(&"c".repeat(64), "zz", 1);
        let err = Lockfile::parse(&bad, Path::new("kart.lock")).unwrap_err();
        assert!(err.to_string().contains("key must be 64"), "{err}");
    }

    #[test]
    fn anything_outside_the_subset_is_left_to_toml() {
        let text = canonical_sample().to_text();
        let edits: &[(&str, &str)] = &[
            ("nvcc = \"13.0.88\"", "nvcc = \"13.0\\u002e88\""), // an escape
            ("size = 3240", "size = 3_240"),                    // TOML's digit separators
            ("size = 3240", "size = 0x0CA8"),                   // hex
            ("size = 3240", "size = 3240 # a comment"),         // trailing comment
            ("A = 0", "\"A\" = 0"),                             // a quoted key
            ("[artifact.config]", "[artifact . config]"),       // spaced header
            ("registers = 6", "registers = 6\nregisters = 7"),  // a duplicate key
            ("params = [8, 16]", "params = [\n8, 16]"),         // a multi-line array
            ("version = 3", "version = 3\n[other]"),            // another table
        ];
        for (from, to) in edits {
            assert!(text.contains(from), "{from}");
            let edited = text.replacen(from, to, 1);
            assert_eq!(canonical(&edited), None, "{to}");
        }
        // A second `[artifact.config]` in one artifact is a TOML error: not read here.
        let twice = text.replacen(
            "[artifact.config]",
            "[artifact.config]\n[artifact.config]",
            1,
        );
        assert_eq!(canonical(&twice), None);
        // Unknown fields are refused by the same serde rules.
        assert_eq!(
            canonical(&text.replacen("size = 3240", "sizes = 3240", 1)),
            None
        );
    }
}
