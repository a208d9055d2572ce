//! What `kart doctor` finds for one GPU: which artifacts of the lock it can load, the
//! one it would pick for each (kernel, config), and, grouped by reason, why it cannot
//! load the others. The CLI prints one line per reason; `--json` and `-v` give all.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::ArtifactKind;
use crate::model::Config;
use crate::resolve::{Capability, JitPolicy, cubin_fit, required_driver_version};
use crate::store::Store;
use crate::store::lockfile::{LockedArtifact, Lockfile, pick};
use crate::target::{ArchVariant, TargetArch};

/// Why a GPU cannot load an artifact.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum NotLoadable {
    /// A cubin for another major (never loaded across majors).
    OtherMajor {
        /// The artifact's major.
        major: u32,
    },
    /// An `a` target for another minor of the same major.
    OtherMinorSpecific,
    /// A plain or `f` target for a higher minor.
    HigherMinor,
    /// PTX: loaded only under an explicit JIT policy.
    Ptx,
    /// Built by an nvcc release newer than the driver supports.
    DriverTooOld {
        /// The release.
        nvcc: String,
    },
    /// Loadable, but its blob is not in the local store.
    BlobMissing,
    /// The lock names a target kart cannot parse.
    BadTarget,
}

impl NotLoadable {
    /// One line for `count` artifacts of this reason, on `capability`.
    pub fn summary(&self, count: usize, capability: Capability) -> String {
        let (are, these) = if count == 1 {
            ("is", "artifact")
        } else {
            ("are", "artifacts")
        };
        match self {
            NotLoadable::OtherMajor { major } => format!(
                "{count} {these} {are} for compute capability {major}.x (never loaded across majors)"
            ),
            NotLoadable::OtherMinorSpecific => format!(
                "{count} {these} {are} `a` targets of another {}.x minor (an `a` cubin runs only on exactly its capability)",
                capability.major
            ),
            NotLoadable::HigherMinor => {
                format!("{count} {these} need a minor above {}", capability.minor)
            }
            NotLoadable::Ptx => {
                format!("{count} PTX {these} load only with an explicit JIT policy")
            }
            NotLoadable::DriverTooOld { nvcc } => format!(
                "{count} {these} {are} built by nvcc {nvcc}, newer than this driver supports (update the driver)"
            ),
            NotLoadable::BlobMissing => format!(
                "{count} loadable {these} have no blob in the local store (`kart fetch --device` or `kart build`)"
            ),
            NotLoadable::BadTarget => {
                format!("{count} {these} name a target kart cannot read (rebuild kart.lock)")
            }
        }
    }
}

/// Why one artifact cannot load on a device, or `None` when it can. `driver` is the
/// driver's CUDA version where known.
pub fn why_not(
    artifact: &LockedArtifact,
    capability: Capability,
    driver: Option<i32>,
    store: &Store,
) -> Option<NotLoadable> {
    let Ok(target) = artifact.target.parse::<TargetArch>() else {
        return Some(NotLoadable::BadTarget);
    };
    if artifact.kind == ArtifactKind::Ptx {
        return Some(NotLoadable::Ptx);
    }
    if cubin_fit(target, capability).is_none() {
        return Some(if target.major != capability.major {
            NotLoadable::OtherMajor {
                major: target.major,
            }
        } else if target.variant == ArchVariant::Specific {
            NotLoadable::OtherMinorSpecific
        } else {
            NotLoadable::HigherMinor
        });
    }
    if let (Some(v), Some(required)) = (driver, required_driver_version(&artifact.nvcc))
        && v < required
    {
        return Some(NotLoadable::DriverTooOld {
            nvcc: artifact.nvcc.clone(),
        });
    }
    if !store.has_blob(&artifact.digest) {
        return Some(NotLoadable::BlobMissing);
    }
    None
}

/// The artifact a device picks for one (kernel, config).
#[derive(Clone, Debug, Serialize)]
pub struct Pick {
    /// The kernel.
    pub kernel: String,
    /// The config.
    pub config: Config,
    /// The target of the cubin it loads.
    pub target: String,
    /// Its digest.
    pub digest: String,
}

/// One reason, how many artifacts it covers, and which.
#[derive(Clone, Debug, Serialize)]
pub struct ReasonCount {
    /// The reason.
    #[serde(flatten)]
    pub reason: NotLoadable,
    /// The line a person reads.
    pub message: String,
    /// The artifacts (`kernel[config] target`).
    pub artifacts: Vec<String>,
}

/// What one GPU can do with the lock.
#[derive(Clone, Debug, Serialize)]
pub struct Loadability {
    /// Artifacts in the lock.
    pub total: usize,
    /// Artifacts this GPU can load now.
    pub loadable: usize,
    /// For each (kernel, config) with a loadable artifact, the one it picks.
    pub picks: Vec<Pick>,
    /// The others, grouped by reason.
    pub not_loadable: Vec<ReasonCount>,
}

impl Loadability {
    /// How many picks each kernel has, and the targets they use, for a short summary:
    /// `(kernel, configs picked, targets)`.
    pub fn picks_by_kernel(&self) -> Vec<(String, usize, Vec<String>)> {
        let mut by_kernel: BTreeMap<&str, (usize, Vec<String>)> = BTreeMap::new();
        for p in &self.picks {
            let entry = by_kernel.entry(&p.kernel).or_default();
            entry.0 += 1;
            if !entry.1.contains(&p.target) {
                entry.1.push(p.target.clone());
            }
        }
        by_kernel
            .into_iter()
            .map(|(k, (n, mut targets))| {
                targets.sort();
                (k.to_string(), n, targets)
            })
            .collect()
    }
}

/// Checks every artifact of `lock` against a device of `capability`.
pub fn loadability(
    lock: &Lockfile,
    capability: Capability,
    driver: Option<i32>,
    store: &Store,
) -> Loadability {
    let mut reasons: BTreeMap<NotLoadable, Vec<String>> = BTreeMap::new();
    let mut groups: BTreeMap<(&str, &Config), Vec<&LockedArtifact>> = BTreeMap::new();
    let mut loadable = 0;
    for a in &lock.artifacts {
        match why_not(a, capability, driver, store) {
            None => {
                loadable += 1;
                groups.entry((&a.kernel, &a.config)).or_default().push(a);
            }
            Some(reason) => reasons.entry(reason).or_default().push(a.describe()),
        }
    }
    let picks = groups
        .into_values()
        .filter_map(|group| pick(&group, capability, JitPolicy::Forbid))
        .map(|a| Pick {
            kernel: a.kernel.clone(),
            config: a.config.clone(),
            target: a.target.clone(),
            digest: a.digest.clone(),
        })
        .collect();
    let not_loadable = reasons
        .into_iter()
        .map(|(reason, artifacts)| ReasonCount {
            message: reason.summary(artifacts.len(), capability),
            reason,
            artifacts,
        })
        .collect();
    Loadability {
        total: lock.artifacts.len(),
        loadable,
        picks,
        not_loadable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::LockMode;

    /// The stand-in bytes of an artifact (the test needs blobs, not real cubins).
    fn bytes(a: &LockedArtifact) -> Vec<u8> {
        format!("{} {} {} {}", a.kernel, a.config, a.target, a.kind).into_bytes()
    }

    fn artifact(kernel: &str, block: i64, target: &str, kind: ArtifactKind) -> LockedArtifact {
        let mut a = LockedArtifact {
            kernel: kernel.into(),
            config: Config::from([("BLOCK".to_string(), crate::model::ParamValue::Int(block))]),
            target: target.into(),
            kind,
            key: String::new(),
            digest: String::new(),
            size: 0,
            nvcc: "13.0".into(),
            entries: Vec::new(),
            derived: Default::default(),
        };
        let bytes = bytes(&a);
        a.digest = crate::digest::sha256_hex(&bytes);
        a.key = a.digest.clone();
        a.size = bytes.len() as u64;
        a
    }

    #[test]
    fn reasons_are_counted_once_each_and_picks_follow_resolution() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(
            &dir.path().join("artifacts"),
            LockMode::Shared,
            std::time::Duration::from_secs(5),
        )
        .unwrap();
        let mut artifacts = Vec::new();
        for block in [64, 128, 256] {
            for target in ["sm_80", "sm_89", "sm_90", "sm_90a"] {
                artifacts.push(artifact("k", block, target, ArtifactKind::Cubin));
            }
            artifacts.push(artifact("k", block, "sm_90", ArtifactKind::Ptx));
        }
        let lock = Lockfile::new(artifacts);
        // Only the sm_90 blobs (not the sm_90a ones) are in the store.
        for a in lock.artifacts.iter().filter(|a| a.target == "sm_90") {
            store.put_named_blob(&a.digest, &bytes(a)).unwrap();
        }
        let h100 = Capability { major: 9, minor: 0 };
        let report = loadability(&lock, h100, Some(13000), &store);
        assert_eq!(report.total, 15);
        let counts: Vec<(NotLoadable, usize)> = report
            .not_loadable
            .iter()
            .map(|r| (r.reason.clone(), r.artifacts.len()))
            .collect();
        assert_eq!(
            counts,
            vec![
                (NotLoadable::OtherMajor { major: 8 }, 6),
                (NotLoadable::Ptx, 3),
                (NotLoadable::BlobMissing, 3),
            ],
            "{report:#?}"
        );
        assert!(
            report.not_loadable[0]
                .message
                .starts_with("6 artifacts are for compute capability 8.x")
        );
        assert_eq!(report.picks.len(), 3);
        assert!(report.picks.iter().all(|p| p.target == "sm_90"));
        assert_eq!(
            report.picks_by_kernel(),
            vec![("k".to_string(), 3, vec!["sm_90".to_string()])]
        );
        // An 8.6 device: sm_80 loads, sm_89 needs a higher minor, 9.x never.
        let a6000 = Capability { major: 8, minor: 6 };
        let report = loadability(&lock, a6000, Some(13000), &store);
        assert!(
            report
                .not_loadable
                .iter()
                .any(|r| r.reason == NotLoadable::HigherMinor && r.artifacts.len() == 3)
        );
    }
}
