//! `kart.attest`: the committed record of which blobs were loaded, resolved (and, for
//! the smoke kernel, launched and checked) on which GPU, driver and kart.
//!
//! `kart smoke --all` writes it on a GPU machine. Each artifact is loaded in a child
//! process, so an image that crashes the driver takes down only its own check: the
//! child reports every artifact as it finishes, and the one it was working on when it
//! died is the culprit. Like the lock, the file is sorted and carries no time, so it
//! diffs cleanly; records of blobs the lock no longer names are dropped on write.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use crate::error::{Error, IoContext, Result};
use crate::model::ArtifactKind;
use crate::resolve::{Capability, cubin_fit, format_cuda_version};
use crate::runtime::{Gpu, Runtime};
use crate::smoke::{SMOKE_ENTRY, launch_smoke};
use crate::store::lockfile::{LockedArtifact, Lockfile};
use crate::store::sidecar::{BadRecord, Sidecar};
use crate::target::TargetArch;

/// The sidecar's file name, beside `kart.lock`.
pub const ATTEST_FILE: &str = "kart.attest";

/// Bump when a field is added, removed or changes meaning.
pub const ATTEST_VERSION: u32 = 1;

const HEADER: &str = "# kart.attest: blobs of kart.lock proven on real GPUs, written by `kart smoke --all`.\n\
# Commit it beside kart.lock; do not edit it.\n\n";

/// How far an artifact was proven on a GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Check {
    /// Verified, loaded by the driver, every entry resolved and loaded.
    Loaded,
    /// Also launched on random data and compared with the CPU.
    Launched,
    /// Checked by the kernel's own program against a reference on many shapes.
    Correct,
}

/// One blob proven on one GPU, driver and kart.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Attestation {
    /// sha256 of the blob.
    pub digest: String,
    /// The GPU's name (`NVIDIA H200`).
    pub gpu: String,
    /// Its compute capability (`9.0`).
    pub capability: String,
    /// The driver release (`580.159.04`), or the CUDA version it supports when the
    /// release cannot be read.
    pub driver: String,
    /// The kart version that did the check.
    pub kart: String,
    /// What the blob is, for people reading the file (`smoke[] sm_90`).
    pub artifact: String,
    /// How far it was proven.
    pub check: Check,
}

impl Attestation {
    /// Checks every field beyond its type: the digest is hex, the versions are release
    /// numbers, the names carry no control characters.
    pub fn validate(&self) -> std::result::Result<(), String> {
        use crate::untrusted::{label, release};
        if !crate::digest::is_sha256_hex(&self.digest) {
            return Err("a digest must be 64 lower-case hex digits".into());
        }
        label("gpu", &self.gpu)?;
        release("capability", &self.capability)?;
        release("driver", &self.driver)?;
        label("kart version", &self.kart)?;
        label("artifact", &self.artifact)
    }

    fn identity(&self) -> (&str, &str, &str, &str, &str) {
        (
            &self.digest,
            &self.gpu,
            &self.capability,
            &self.driver,
            &self.kart,
        )
    }

    /// The GPU's name without the vendor (`H200`), for tables.
    pub fn short_gpu(&self) -> &str {
        self.gpu.strip_prefix("NVIDIA ").unwrap_or(&self.gpu)
    }
}

/// The whole file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttestFile {
    /// [`ATTEST_VERSION`].
    pub version: u32,
    /// Every record, sorted.
    #[serde(default, rename = "attestation")]
    pub records: Vec<Attestation>,
}

impl Sidecar for AttestFile {
    const VERSION: u32 = ATTEST_VERSION;
    const HEADER: &'static str = HEADER;
    const WHAT: &'static str = "attestation";
    const REGENERATE: &'static str = "rerun `kart smoke --all` with this kart on a GPU machine";

    fn empty() -> AttestFile {
        AttestFile {
            version: ATTEST_VERSION,
            records: Vec::new(),
        }
    }

    fn version(&self) -> u32 {
        self.version
    }

    fn check(&self) -> std::result::Result<(), BadRecord> {
        for r in &self.records {
            r.validate().map_err(|message| BadRecord {
                near: r.digest.clone(),
                message,
                hint: "rerun `kart smoke --all` on a GPU machine, or delete the record",
            })?;
        }
        Ok(())
    }
}

impl AttestFile {
    /// Adds `new` records and keeps only blobs `lock` names. Of the records of one blob,
    /// GPU, capability, driver and kart, one stays, with the furthest check either
    /// made: `kart smoke --all` (loaded) after a kernel's own check program (correct)
    /// proves nothing less than before, so it must not weaken the record.
    pub fn merge(&mut self, new: Vec<Attestation>, lock: &Lockfile) {
        let named: BTreeSet<&str> = lock.artifacts.iter().map(|a| a.digest.as_str()).collect();
        self.records.retain(|r| named.contains(r.digest.as_str()));
        self.records.extend(
            new.into_iter()
                .filter(|r| named.contains(r.digest.as_str())),
        );
        self.version = ATTEST_VERSION;
        self.records.sort();
        self.records.dedup_by(|later, kept| {
            let same = later.identity() == kept.identity();
            if same && later.check > kept.check {
                kept.check = later.check;
            }
            same
        });
    }

    /// [`AttestFile::gpus_for`] of every attested digest, read in one pass over the
    /// records (not one pass per digest asked).
    pub fn gpus_by_digest(&self) -> std::collections::HashMap<&str, Vec<&str>> {
        let mut by: std::collections::HashMap<&str, Vec<&str>> = Default::default();
        for r in &self.records {
            by.entry(r.digest.as_str()).or_default().push(r.short_gpu());
        }
        for gpus in by.values_mut() {
            gpus.sort();
            gpus.dedup();
        }
        by
    }

    /// The short names of the GPUs that attested `digest`, sorted, deduplicated.
    pub fn gpus_for(&self, digest: &str) -> Vec<&str> {
        let mut gpus: Vec<&str> = self
            .records
            .iter()
            .filter(|r| r.digest == digest)
            .map(Attestation::short_gpu)
            .collect();
        gpus.sort();
        gpus.dedup();
        gpus
    }
}

/// Merges `records` into the project's `kart.attest` (under `root`), dropping records
/// of blobs `lock` no longer names, and writes it if it changed.
pub fn save_records(root: &Path, records: Vec<Attestation>, lock: &Lockfile) -> Result<bool> {
    let path = root.join(ATTEST_FILE);
    let mut file = AttestFile::read(&path, Path::new(ATTEST_FILE))?;
    file.merge(records, lock);
    file.write(&path)
}

/// The driver release, from the kernel module's version file on Linux; `None` where it
/// cannot be read.
pub fn driver_release() -> Option<String> {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu ..."
    text.lines()
        .next()?
        .split_whitespace()
        .find(|w| w.split('.').count() >= 2 && w.split('.').all(|p| p.parse::<u32>().is_ok()))
        .map(str::to_string)
}

/// What a worker process reports for one artifact, one JSON line each.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkerReport {
    /// The blob.
    pub digest: String,
    /// How far it got, when it passed.
    pub check: Option<Check>,
    /// Why it failed, when it did.
    pub error: Option<String>,
}

/// How one artifact's check ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It passed this check.
    Passed(Check),
    /// kart reported an error (corrupt blob, driver refusal).
    Failed(String),
    /// The worker process died while checking it.
    Crashed(String),
}

/// Checks `artifacts` in child processes made by `worker` (given the digests to check,
/// it returns the command; the child prints one [`WorkerReport`] line per digest, in
/// order, as each finishes). When a child dies, the digest it was working on is
/// reported as crashed and the rest go to a fresh child. Returns one outcome per
/// artifact, in order.
pub fn check_in_children(
    artifacts: &[&LockedArtifact],
    mut worker: impl FnMut(&[&str]) -> Command,
) -> Result<Vec<Outcome>> {
    let mut outcomes: Vec<Option<Outcome>> = vec![None; artifacts.len()];
    let mut next = 0;
    while next < artifacts.len() {
        let digests: Vec<&str> = artifacts[next..]
            .iter()
            .map(|a| a.digest.as_str())
            .collect();
        let mut child = worker(&digests)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .at("start the attestation worker", Path::new("kart"))?;
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        // Drain stderr on the side so a chatty child cannot block on a full pipe.
        let stderr_reader = std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut s) = stderr {
                let _ = std::io::Read::read_to_string(&mut s, &mut text);
            }
            text
        });
        if let Some(stdout) = stdout {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let Ok(report) = serde_json::from_str::<WorkerReport>(&line) else {
                    continue;
                };
                if artifacts.get(next).map(|a| a.digest.as_str()) != Some(&report.digest) {
                    continue;
                }
                outcomes[next] = Some(match (report.check, report.error) {
                    (Some(check), _) => Outcome::Passed(check),
                    (None, error) => Outcome::Failed(error.unwrap_or_default()),
                });
                next += 1;
            }
        }
        let status = child
            .wait()
            .at("wait for the attestation worker", Path::new("kart"))?;
        let stderr_text = stderr_reader.join().unwrap_or_default();
        if next < artifacts.len() {
            let last_line = stderr_text.lines().last().unwrap_or("").trim().to_string();
            let why = format!(
                "the worker process died ({status}) while checking it{}",
                if last_line.is_empty() {
                    String::new()
                } else {
                    format!(": {last_line}")
                }
            );
            if status.success() {
                // A worker that exits cleanly without reporting is a kart bug, not the
                // artifact's fault: stop rather than blame it.
                return Err(Error::CheckFailed {
                    message: format!("the attestation worker stopped early: {why}"),
                    hint: None,
                });
            }
            outcomes[next] = Some(Outcome::Crashed(why));
            next += 1;
        }
    }
    Ok(outcomes.into_iter().flatten().collect())
}

/// The worker's check of one blob of the lock on `gpu`: verify, load, resolve and load
/// every entry; a smoke kernel is also launched on random data and compared with the
/// CPU.
pub fn check_blob(rt: &Runtime, gpu: &Gpu, digest: &str) -> WorkerReport {
    let result = (|| -> Result<Check> {
        let artifact = rt
            .lock()?
            .artifacts
            .iter()
            .find(|a| a.digest == digest && a.kind == ArtifactKind::Cubin)
            .ok_or_else(|| Error::NotLoadable {
                message: format!("kart.lock names no cubin {digest}"),
                hint: None,
            })?;
        let loaded = gpu.load_artifact(rt, artifact)?;
        if artifact.entries.len() == 1 && artifact.entries[0].name == SMOKE_ENTRY {
            launch_smoke(gpu, &loaded, 1 << 16 | 5)?;
            return Ok(Check::Launched);
        }
        Ok(Check::Loaded)
    })();
    match result {
        Ok(check) => WorkerReport {
            digest: digest.into(),
            check: Some(check),
            error: None,
        },
        Err(e) => WorkerReport {
            digest: digest.into(),
            check: None,
            error: Some(e.with_causes()),
        },
    }
}

/// The cubins of `lock` a device of `capability` can run, one per distinct blob.
pub fn loadable_cubins(lock: &Lockfile, capability: Capability) -> Vec<&LockedArtifact> {
    let mut seen = BTreeSet::new();
    lock.artifacts
        .iter()
        .filter(|a| a.kind == ArtifactKind::Cubin)
        .filter(|a| {
            a.target
                .parse::<TargetArch>()
                .is_ok_and(|t| cubin_fit(t, capability).is_some())
        })
        .filter(|a| seen.insert(a.digest.as_str()))
        .collect()
}

/// Records `check` for each of `artifacts` on `gpu` in the project's `kart.attest` (under
/// `root`), merged with what is there: the last step of a kernel's own check program.
/// Whether the file changed.
pub fn record_all(
    root: &Path,
    lock: &Lockfile,
    gpu: &Gpu,
    artifacts: &[LockedArtifact],
    check: Check,
) -> Result<bool> {
    let records = artifacts.iter().map(|a| record(a, gpu, check)).collect();
    save_records(root, records, lock)
}

/// The record of a passed check of `artifact` on `gpu`.
pub fn record(artifact: &LockedArtifact, gpu: &Gpu, check: Check) -> Attestation {
    Attestation {
        digest: artifact.digest.clone(),
        gpu: gpu.name.clone(),
        capability: gpu.capability.to_string(),
        driver: driver_release()
            .unwrap_or_else(|| format!("CUDA {}", format_cuda_version(gpu.driver_version))),
        kart: env!("CARGO_PKG_VERSION").into(),
        artifact: artifact.describe(),
        check,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(digest: char, gpu: &str, check: Check) -> Attestation {
        Attestation {
            digest: digest.to_string().repeat(64),
            gpu: gpu.into(),
            capability: "9.0".into(),
            driver: "580.159.04".into(),
            kart: "0.1.0".into(),
            artifact: "smoke[] sm_90".into(),
            check,
        }
    }

    fn lock_naming(digests: &[char]) -> Lockfile {
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join(crate::store::lockfile::LOCK_FILE),
        )
        .unwrap();
        let mut lock = Lockfile::parse(&text, Path::new("kart.lock")).unwrap();
        let template = lock.artifacts[0].clone();
        lock.artifacts = digests
            .iter()
            .map(|d| LockedArtifact {
                digest: d.to_string().repeat(64),
                ..template.clone()
            })
            .collect();
        lock
    }

    #[test]
    fn merge_keeps_the_furthest_check_per_identity_and_drops_blobs_the_lock_forgot() {
        let mut file = AttestFile::default();
        file.merge(
            vec![
                record('b', "NVIDIA H200", Check::Loaded),
                record('a', "NVIDIA H100 80GB HBM3", Check::Loaded),
                record('c', "NVIDIA H200", Check::Loaded),
            ],
            &lock_naming(&['a', 'b', 'c']),
        );
        file.merge(
            vec![record('b', "NVIDIA H200", Check::Launched)],
            &lock_naming(&['a', 'b']),
        );
        // A later, weaker check of the same blob on the same GPU keeps the stronger one.
        file.merge(
            vec![record('b', "NVIDIA H200", Check::Loaded)],
            &lock_naming(&['a', 'b']),
        );
        let got: Vec<(char, &str, Check)> = file
            .records
            .iter()
            .map(|r| (r.digest.chars().next().unwrap(), r.gpu.as_str(), r.check))
            .collect();
        assert_eq!(
            got,
            vec![
                ('a', "NVIDIA H100 80GB HBM3", Check::Loaded),
                ('b', "NVIDIA H200", Check::Launched)
            ]
        );
        assert_eq!(file.gpus_for(&"a".repeat(64)), vec!["H100 80GB HBM3"]);
    }

    #[test]
    fn text_round_trips_and_is_validated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(ATTEST_FILE);
        let mut file = AttestFile::default();
        file.merge(
            vec![record('e', "NVIDIA H200", Check::Launched)],
            &lock_naming(&['e']),
        );
        assert!(file.write(&path).unwrap());
        assert!(
            !file.write(&path).unwrap(),
            "unchanged content is not rewritten"
        );
        assert_eq!(
            AttestFile::read(&path, Path::new(ATTEST_FILE)).unwrap(),
            file
        );
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace(&"e".repeat(64), "../../etc/passwd")).unwrap();
        let err = AttestFile::read(&path, Path::new(ATTEST_FILE)).unwrap_err();
        assert!(err.to_string().contains("64 lower-case hex"), "{err}");
    }

    #[test]
    fn a_crashing_worker_blames_only_the_artifact_in_progress() {
        let lock = lock_naming(&['a', 'b', 'c']);
        let artifacts: Vec<&LockedArtifact> = lock.artifacts.iter().collect();
        let crash_on = "b".repeat(64);
        let mut spawned = 0;
        // A real child process (sh) stands in for the kart worker: it reports each
        // digest as passed and kills itself on `b…`, as a crashing driver would.
        let outcomes = check_in_children(&artifacts, |digests| {
            spawned += 1;
            let mut cmd = Command::new("sh");
            cmd.arg("-c").arg(format!(
                "for d in \"$@\"; do if [ \"$d\" = {crash_on} ]; then echo dying >&2; kill -SEGV $$; fi; \
                 echo \"{{\\\"digest\\\":\\\"$d\\\",\\\"check\\\":\\\"loaded\\\",\\\"error\\\":null}}\"; done"
            ));
            cmd.arg("sh").args(digests);
            cmd
        })
        .unwrap();
        assert_eq!(spawned, 2);
        assert_eq!(outcomes[0], Outcome::Passed(Check::Loaded));
        assert!(
            matches!(&outcomes[1], Outcome::Crashed(why) if why.contains("dying")),
            "{:?}",
            outcomes[1]
        );
        assert_eq!(outcomes[2], Outcome::Passed(Check::Loaded));
    }
}
