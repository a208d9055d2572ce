//! `kart bundle`: choosing what a fleet loads (optionally only what a traced workload
//! called) and writing it, with its lock, tuning and attestation records, into one
//! file the runtime crate reads ([`kart_runtime::store::bundle`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use kart_runtime::model::Config;
use kart_runtime::store::bundle::{Bundle, BundleInput, write_bundle};
use kart_runtime::store::lockfile::{LockedArtifact, LockedKernel, Lockfile};
use kart_runtime::store::sidecar::Sidecar as _;
use kart_runtime::trace::TraceRecord;

use crate::deploy::attest::AttestFile;
use crate::deploy::coverage::fleet_artifacts;
use crate::deploy::tune::TuneFile;
use crate::error::{Error, Result};
use crate::project::Project;
use crate::project::fleet::FleetGpu;
use crate::store::Store;

/// The configs a traced workload used, per kernel: every config it launched, every
/// config `best()` chose for a problem it met (on each GPU of the fleet, from the
/// records or the default), and each kernel's declared `default`.
pub fn traced_configs(
    project: &Project,
    lock: &Lockfile,
    tune: &TuneFile,
    fleet: &[FleetGpu],
    trace: &[TraceRecord],
) -> BTreeSet<(String, Config)> {
    let mut out = BTreeSet::new();
    for r in trace {
        match r {
            TraceRecord::Launch { kernel, config, .. } => {
                out.insert((kernel.clone(), config.clone()));
            }
            TraceRecord::Fallback { chose, config, .. } => {
                out.insert((chose.clone(), config.clone()));
            }
        }
    }
    for (base, problems) in crate::deploy::problems::problems_of_trace(project, trace) {
        let Ok(family) = project.family(&base) else {
            continue;
        };
        for problem in &problems {
            for gpu in fleet {
                if let Ok(choice) = crate::deploy::tune::best(
                    tune,
                    lock,
                    &family,
                    &gpu.name,
                    gpu.capability,
                    problem,
                ) {
                    out.insert((choice.kernel, choice.config));
                }
            }
        }
    }
    for k in &project.kernels {
        if let Some(default) = &k.default {
            out.insert((k.name.clone(), default.clone()));
        }
    }
    out
}

/// The artifacts to bundle: what the fleet loads of the selected kernels (all when
/// `kernels` is empty), narrowed to `configs` when a trace gave them.
pub fn select<'a>(
    lock: &'a Lockfile,
    fleet: &[FleetGpu],
    kernels: &[String],
    configs: Option<&BTreeSet<(String, Config)>>,
) -> Result<Vec<&'a LockedArtifact>> {
    crate::deploy::coverage::check_kernels(lock, kernels)?;
    let wanted = |a: &LockedArtifact| {
        (kernels.is_empty() || kernels.contains(&a.kernel))
            && configs.is_none_or(|c| c.contains(&(a.kernel.clone(), a.config.clone())))
    };
    let chosen = fleet_artifacts(lock, fleet, &wanted);
    if chosen.is_empty() {
        return Err(Error::usage(
            "no artifact of the selection loads on the fleet's GPUs",
            Some("`kart coverage` shows what each GPU would load".into()),
        ));
    }
    Ok(chosen)
}

/// Writes the bundle of `chosen` to `path`: their blobs from `store` (each checked),
/// the lock of just them (with the `[launch]` records of their kernels), the tuning
/// records that name their blobs, and the attestations of their blobs; then reads it
/// back and checks every blob.
#[allow(clippy::too_many_arguments)]
pub fn make(
    path: &Path,
    store: &Store,
    lock: &Lockfile,
    chosen: &[&LockedArtifact],
    tune: &TuneFile,
    attest: &AttestFile,
    made_for: Vec<String>,
) -> Result<Bundle> {
    let digests: BTreeSet<&str> = chosen.iter().map(|a| a.digest.as_str()).collect();
    let kernels: BTreeSet<&str> = chosen.iter().map(|a| a.kernel.as_str()).collect();
    let launch: Vec<LockedKernel> = lock
        .kernels
        .iter()
        .filter(|k| kernels.contains(k.name.as_str()))
        .cloned()
        .collect();
    let bundled_lock =
        Lockfile::new(chosen.iter().map(|a| (*a).clone()).collect()).with_kernels(launch);
    let mut bundled_tune = tune.clone();
    bundled_tune
        .records
        .retain(|r| digests.contains(r.digest.as_str()));
    let mut bundled_attest = attest.clone();
    bundled_attest
        .records
        .retain(|r| digests.contains(r.digest.as_str()));
    let missing: Vec<String> = chosen
        .iter()
        .filter(|a| !store.has_blob(&a.digest))
        .map(|a| a.describe())
        .collect();
    if !missing.is_empty() {
        return Err(Error::usage(
            format!(
                "the store lacks {} blob(s) of the bundle: {}",
                missing.len(),
                missing
                    .iter()
                    .take(5)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Some("run `kart build` (or `kart fetch`) first".into()),
        ));
    }
    let input = BundleInput {
        lock: &bundled_lock,
        tune: if bundled_tune.records.is_empty() {
            String::new()
        } else {
            bundled_tune.to_text()
        },
        attest: if bundled_attest.records.is_empty() {
            String::new()
        } else {
            bundled_attest.to_text()
        },
        made_for,
        kart: env!("CARGO_PKG_VERSION").to_string(),
    };
    write_bundle(path, &input, &|digest, size| {
        store.read_blob(digest, Some(size))
    })
}

/// One line of `kart bundle --inspect`: a kernel and target.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct InspectRow {
    /// The kernel.
    pub kernel: String,
    /// The target.
    pub target: String,
    /// Its artifacts.
    pub artifacts: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Their bytes in the bundle.
    pub stored: u64,
}

/// What a bundle holds, by kernel and target, after checking every blob.
pub fn inspect(bundle: &Bundle) -> Result<Vec<InspectRow>> {
    bundle.verify_all()?;
    let blobs = bundle.blobs()?;
    let stored: BTreeMap<&str, u64> = blobs
        .iter()
        .map(|b| (b.digest.as_str(), b.stored))
        .collect();
    let mut rows: BTreeMap<(String, String), InspectRow> = BTreeMap::new();
    let mut counted: BTreeSet<&str> = BTreeSet::new();
    for a in &bundle.lock()?.artifacts {
        let row = rows
            .entry((a.kernel.clone(), a.target.clone()))
            .or_insert_with(|| InspectRow {
                kernel: a.kernel.clone(),
                target: a.target.clone(),
                ..InspectRow::default()
            });
        row.artifacts += 1;
        row.bytes += a.size;
        // A blob two artifacts share is stored once: count its bytes once.
        if counted.insert(&a.digest) {
            row.stored += stored.get(a.digest.as_str()).copied().unwrap_or(0);
        }
    }
    Ok(rows.into_values().collect())
}
