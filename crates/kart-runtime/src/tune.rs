//! `kart.tune` and `best()`. Tuning (the `kart` crate's `tune` module) times every
//! config of the lock a GPU can run for a problem and records the winner in the
//! committed `kart.tune`; at run time `best(kernel, problem)` answers
//! from the records instantly (nothing is timed at run time).
//!
//! A problem is a map of named integers (`B`, `H`, `S`, `D`, `causal`). The kernel's
//! `[tune]` table says which keys a config must match exactly, through a param
//! (`HEAD_DIM = "D"`), and which match the nearest recorded value. Records are keyed by
//! kernel, problem and GPU name, and carry the winning artifact's digest: when the
//! artifact changes the record is stale and ignored.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
pub use crate::model::Problem;
use crate::model::{Config, ParamValue, TuneSpec};
use crate::resolve::{Capability, JitPolicy};
use crate::store::lockfile::{LockedArtifact, Lockfile};
use crate::store::sidecar::{BadRecord, Sidecar};

/// The sidecar's file name, beside `kart.lock`.
pub const TUNE_FILE: &str = "kart.tune";

/// Bump when a field is added, removed or changes meaning (2 added `variant`).
pub const TUNE_VERSION: u32 = 2;

const HEADER: &str = "# kart.tune: the fastest config per kernel, problem and GPU, measured offline.\n\
# Written by the kernels' tuning programs; commit it beside kart.lock; do not edit.\n\n";

/// The winner of one (kernel, problem, GPU).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TuneRecord {
    /// The kernel.
    pub kernel: String,
    /// The GPU's name (`NVIDIA H200`).
    pub gpu: String,
    /// The problem.
    pub problem: Problem,
    /// The fastest correct config.
    pub config: Config,
    /// The variant of `kernel` (a kernel whose `variant_of` names it) the config
    /// belongs to, when the winner is not `kernel`'s own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// The target of the winning cubin on that GPU.
    pub target: String,
    /// Its digest: the record is stale once the lock names another.
    pub digest: String,
    /// Its median time, microseconds.
    pub median_us: f64,
    /// The runner-up's median, microseconds (how close the race was).
    pub runner_up_us: Option<f64>,
    /// Configs timed (correct ones).
    pub timed: usize,
}

/// The whole file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TuneFile {
    /// [`TUNE_VERSION`].
    pub version: u32,
    /// Records sorted by kernel, GPU and problem.
    #[serde(default, rename = "record")]
    pub records: Vec<TuneRecord>,
}

impl TuneRecord {
    /// Checks every field beyond its type: names are C identifiers, the digest is hex,
    /// the target parses, times are finite and not negative.
    pub fn validate(&self) -> std::result::Result<(), String> {
        use crate::untrusted::{identifier, label};
        identifier("kernel", &self.kernel)?;
        if let Some(v) = &self.variant {
            identifier("variant", v)?;
        }
        label("gpu", &self.gpu)?;
        for key in self.problem.keys() {
            identifier("problem key", key)?;
        }
        if !crate::digest::is_sha256_hex(&self.digest) {
            return Err("the digest is not 64 lower-case hex digits".into());
        }
        self.target
            .parse::<crate::target::TargetArch>()
            .map_err(|e| e.0)?;
        let time_ok = |t: f64| t.is_finite() && t >= 0.0;
        if !time_ok(self.median_us) || !self.runner_up_us.is_none_or(time_ok) {
            return Err("a time is not a finite number of microseconds".into());
        }
        Ok(())
    }

    /// The kernel whose config won: the variant, else the kernel.
    pub fn implementation(&self) -> &str {
        self.variant.as_deref().unwrap_or(&self.kernel)
    }

    /// Whether `lock` no longer names the artifact this record timed (its kernel
    /// changed since): [`best`] skips such a record until the problem is tuned again.
    pub fn is_stale(&self, lock: &Lockfile) -> bool {
        !lock
            .of_config(self.implementation(), &self.config)
            .iter()
            .any(|a| a.digest == self.digest)
    }
}

impl Sidecar for TuneFile {
    const VERSION: u32 = TUNE_VERSION;
    // Version 1 had no `variant`: every record names its own kernel's config.
    const READS_FROM: u32 = 1;
    const HEADER: &'static str = HEADER;
    const WHAT: &'static str = "tuning file";
    const REGENERATE: &'static str = "rerun the kernels' tuning programs with this kart";

    fn empty() -> TuneFile {
        TuneFile {
            version: TUNE_VERSION,
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
                message: format!(
                    "record of {}: {message}",
                    crate::untrusted::quoted(&r.kernel)
                ),
                hint: "rerun the tuning program, or delete the record",
            })?;
        }
        Ok(())
    }
}

impl TuneFile {
    /// The tuning records a bundle holds (none when it holds none).
    pub fn from_bundle(bundle: &crate::store::bundle::Bundle) -> Result<TuneFile> {
        let text = &bundle.index().tune;
        if text.trim().is_empty() {
            return Ok(TuneFile::empty());
        }
        let shown = std::path::PathBuf::from(format!("{}:kart.tune", bundle.path().display()));
        crate::store::sidecar::parse(text, &shown)
    }

    /// Adds records, each replacing the one of the same kernel, GPU and problem.
    pub fn merge(&mut self, new: Vec<TuneRecord>) {
        for r in new {
            self.records
                .retain(|o| !(o.kernel == r.kernel && o.gpu == r.gpu && o.problem == r.problem));
            self.records.push(r);
        }
        self.version = TUNE_VERSION;
        self.records
            .sort_by(|a, b| (&a.kernel, &a.gpu, &a.problem).cmp(&(&b.kernel, &b.gpu, &b.problem)));
    }
}

/// Merges `records` into the project's `kart.tune` (under `root`): the last step of a
/// kernel's own tuning program. Whether the file changed.
pub fn save_records(root: &Path, records: Vec<TuneRecord>) -> Result<bool> {
    let path = root.join(TUNE_FILE);
    let mut file = TuneFile::read(&path, Path::new(TUNE_FILE))?;
    file.merge(records);
    file.write(&path)
}

/// What `best()` needs to know of a kernel: its name, its `[tune]` table and its
/// declared default. The `kart` crate's `Kernel` (from kernel.toml) is one; a program
/// that has no kernel.toml at hand builds a [`KernelTuning`].
pub trait TunedKernel {
    /// The kernel's name.
    fn name(&self) -> &str;
    /// Its `[tune]` table, if it is tuned.
    fn tune_spec(&self) -> Option<&TuneSpec>;
    /// Its `default = { … }`, if it declares one.
    fn default_config(&self) -> Option<&Config>;
}

impl<T: TunedKernel + ?Sized> TunedKernel for &T {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn tune_spec(&self) -> Option<&TuneSpec> {
        (**self).tune_spec()
    }
    fn default_config(&self) -> Option<&Config> {
        (**self).default_config()
    }
}

/// A kernel's tuning description as plain data.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelTuning {
    /// The kernel's name.
    pub name: String,
    /// Its `[tune]` table.
    pub tune: Option<TuneSpec>,
    /// Its default config.
    pub default: Option<Config>,
}

impl TunedKernel for KernelTuning {
    fn name(&self) -> &str {
        &self.name
    }
    fn tune_spec(&self) -> Option<&TuneSpec> {
        self.tune.as_ref()
    }
    fn default_config(&self) -> Option<&Config> {
        self.default.as_ref()
    }
}

/// Whether `config` fits `problem` on the keys `kernel` declares exact.
pub fn matches_exact<K: TunedKernel + ?Sized>(
    kernel: &K,
    config: &Config,
    problem: &Problem,
) -> bool {
    let Some(spec) = kernel.tune_spec() else {
        return true;
    };
    spec.exact.iter().all(|(param, key)| {
        matches!((config.get(param), problem.get(key)), (Some(ParamValue::Int(v)), Some(p)) if v == p)
    })
}

/// The artifact of `config` a GPU of `capability` would load.
pub fn artifact_for<'a>(
    lock: &'a Lockfile,
    kernel: &str,
    config: &Config,
    capability: Capability,
) -> Option<&'a LockedArtifact> {
    let group: Vec<&LockedArtifact> = lock.of_config(kernel, config).iter().collect();
    crate::store::lockfile::pick(&group, capability, JitPolicy::Forbid)
}

/// Where `best()`'s answer came from.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// A record for exactly this problem.
    Exact,
    /// The record nearest on the non-exact keys.
    Nearest(Problem),
    /// No usable record: the kernel's `default`, with its exact params set from the
    /// problem (of the variant whose cubin this GPU prefers).
    Default,
}

/// `best()`'s answer: which kernel of the family to load, with which config.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    /// The kernel: the one asked for, or one of its variants.
    pub kernel: String,
    /// Its config.
    pub config: Config,
    /// Where the answer came from.
    pub source: Source,
}

/// The kernel and config to run `problem` with on this GPU, among `family` (a kernel
/// and its variants, base first: the `kart` crate's `Project::family`):
/// the recorded winner for the problem, else the nearest recorded problem (same exact
/// keys; distance over the other keys in log scale), else a declared default adjusted
/// to the exact keys, of the kernel whose cubin this GPU prefers (the resolution rules:
/// an exact `sm_90a` before `sm_90` on 9.0). Stale records (the lock now names
/// another digest) are skipped.
pub fn best<K: TunedKernel + ?Sized>(
    tune: &TuneFile,
    lock: &Lockfile,
    family: &[&K],
    gpu_name: &str,
    capability: Capability,
    problem: &Problem,
) -> Result<Choice> {
    best_of(&tune.records, lock, family, gpu_name, capability, problem)
}

/// [`best`] over a slice of records (all of `kart.tune`, or the ones an index picked).
fn best_of<K: TunedKernel + ?Sized>(
    records: &[TuneRecord],
    lock: &Lockfile,
    family: &[&K],
    gpu_name: &str,
    capability: Capability,
    problem: &Problem,
) -> Result<Choice> {
    let Some(base) = family.first() else {
        return Err(Error::usage("best() of an empty family of kernels", None));
    };
    let exact_keys: Vec<&String> = base
        .tune_spec()
        .map(|t| t.exact.values().collect())
        .unwrap_or_default();
    let usable = records.iter().filter(|r| {
        r.kernel == base.name()
            && r.gpu == gpu_name
            && family.iter().any(|k| k.name() == r.implementation())
            && exact_keys
                .iter()
                .all(|k| r.problem.get(*k) == problem.get(*k))
            && artifact_for(lock, r.implementation(), &r.config, capability)
                .is_some_and(|a| a.digest == r.digest)
    });
    let distance = |p: &Problem| -> f64 {
        let nearest = base
            .tune_spec()
            .map(|t| t.nearest.as_slice())
            .unwrap_or(&[]);
        nearest
            .iter()
            .map(|k| {
                let (a, b) = (
                    p.get(k).copied().unwrap_or(1),
                    problem.get(k).copied().unwrap_or(1),
                );
                ((a.max(1) as f64).ln() - (b.max(1) as f64).ln()).abs()
            })
            .sum()
    };
    if let Some(r) = usable
        .map(|r| (distance(&r.problem), r))
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, r)| r)
    {
        let source = if &r.problem == problem {
            Source::Exact
        } else {
            Source::Nearest(r.problem.clone())
        };
        let choice = Choice {
            kernel: r.implementation().to_string(),
            config: r.config.clone(),
            source,
        };
        trace_fallback(base.name(), problem, gpu_name, capability, &choice);
        return Ok(choice);
    }
    // No record: each member's default for this GPU, and of those the one whose
    // cubin the resolution rules prefer.
    let mut defaults = Vec::new();
    let mut first_error = None;
    for kernel in family {
        match default_for(lock, *kernel, gpu_name, capability, problem) {
            Ok((config, artifact)) => defaults.push((kernel, config, artifact)),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    let available: Vec<_> = defaults
        .iter()
        .filter_map(|(_, _, a)| a.target.parse().ok().map(|t| (t, a.kind)))
        .collect();
    let preferred = crate::resolve::resolve(capability, &available, JitPolicy::Forbid);
    let chosen = defaults
        .into_iter()
        .find(|(_, _, a)| preferred.is_some_and(|(t, k)| a.kind == k && a.target == t.to_string()));
    match (chosen, first_error) {
        (Some((kernel, config, _)), _) => {
            let choice = Choice {
                kernel: kernel.name().to_string(),
                config,
                source: Source::Default,
            };
            trace_fallback(base.name(), problem, gpu_name, capability, &choice);
            Ok(choice)
        }
        (None, Some(e)) => Err(e),
        (None, None) => Err(Error::NotLoadable {
            message: format!("no kernel of `{}`'s family fits this GPU", base.name()),
            hint: Some(format!("run `kart build {}`", base.name())),
        }),
    }
}

/// Writes a `best()` answer that is not an exact record to the trace, if one is on.
fn trace_fallback(
    kernel: &str,
    problem: &Problem,
    gpu_name: &str,
    capability: Capability,
    choice: &Choice,
) {
    let source = match choice.source {
        Source::Exact => return,
        Source::Nearest(_) => "nearest",
        Source::Default => "default",
    };
    if let Some(tracer) = crate::trace::tracer() {
        tracer.fallback(crate::trace::TraceRecord::Fallback {
            kernel: kernel.to_string(),
            problem: problem.clone(),
            gpu: gpu_name.to_string(),
            capability: capability.to_string(),
            chose: choice.kernel.clone(),
            config: choice.config.clone(),
            source: source.into(),
        });
    }
}

/// `kernel`'s declared default with its exact params set from the problem, and the
/// artifact this GPU would load for it.
fn default_for<'a, K: TunedKernel + ?Sized>(
    lock: &'a Lockfile,
    kernel: &K,
    gpu_name: &str,
    capability: Capability,
    problem: &Problem,
) -> Result<(Config, &'a LockedArtifact)> {
    // A kernel without params has one config, the empty one: it is its own default.
    let only = Config::default();
    let default = match kernel.default_config() {
        Some(default) => Some(default),
        None => artifact_for(lock, kernel.name(), &only, capability).map(|_| &only),
    };
    let Some(default) = default else {
        return Err(Error::NotLoadable {
            message: format!(
                "no tuning record of `{}` for this GPU ({gpu_name}) fits the problem, and the kernel declares no `default`",
                kernel.name()
            ),
            hint: Some(
                "run the kernel's tuning program on this GPU, or add `default` to its kernel.toml"
                    .into(),
            ),
        });
    };
    let mut config = default.clone();
    if let Some(spec) = kernel.tune_spec() {
        for (param, key) in &spec.exact {
            if let Some(v) = problem.get(key) {
                config.insert(param, ParamValue::Int(*v));
            }
        }
    }
    if let Some(artifact) = artifact_for(lock, kernel.name(), &config, capability) {
        return Ok((config, artifact));
    }
    // The default with the problem's exact params may be outside the grid (a rule
    // removed it): take the built config with those exact params that differs from the
    // default in the fewest params.
    let exact: Vec<&String> = kernel
        .tune_spec()
        .map(|t| t.exact.keys().collect())
        .unwrap_or_default();
    let differs = |c: &Config| c.iter().filter(|(k, v)| default.get(k) != Some(*v)).count();
    let closest = lock
        .artifacts
        .iter()
        .filter(|a| a.kernel == kernel.name())
        .map(|a| &a.config)
        .filter(|c| exact.iter().all(|p| c.get(p) == config.get(p)))
        .filter_map(|c| artifact_for(lock, kernel.name(), c, capability).map(|a| (c, a)))
        .min_by_key(|(c, _)| (differs(c), (*c).clone()));
    if let Some((c, a)) = closest {
        return Ok((c.clone(), a));
    }
    Err(Error::NotLoadable {
        message: format!(
            "`{}`'s default config adjusted to the problem, {config}, has no artifact for this GPU in kart.lock",
            kernel.name()
        ),
        hint: Some(format!("run `kart build {}`", kernel.name())),
    })
}

/// [`best`] memoized for the steady state: a repeated (kernel, GPU, problem) is a map
/// lookup, no scan of the records and no check of the lock. One cache serves one pair
/// of `kart.tune` and `kart.lock` (make a new one when either is read again); it is
/// safe to share between threads.
#[derive(Debug, Default)]
pub struct BestCache {
    memo: std::sync::RwLock<std::collections::HashMap<BestKey, Choice>>,
    /// The records grouped by (kernel, GPU name), built at the first miss: a new
    /// problem is compared only with its kernel's records for its GPU.
    index: std::sync::OnceLock<std::collections::HashMap<(String, String), Vec<TuneRecord>>>,
}

type BestKey = (String, String, (u32, u32), Vec<(String, i64)>);

impl BestCache {
    /// An empty cache.
    pub fn new() -> BestCache {
        BestCache::default()
    }

    /// What [`best`] answers, computed once per (kernel, GPU, capability, problem).
    /// Errors are not cached.
    pub fn best<K: TunedKernel + ?Sized>(
        &self,
        tune: &TuneFile,
        lock: &Lockfile,
        family: &[&K],
        gpu_name: &str,
        capability: Capability,
        problem: &Problem,
    ) -> Result<Choice> {
        let name = family.first().map_or("", |k| k.name());
        let key: BestKey = (
            name.to_string(),
            gpu_name.to_string(),
            (capability.major, capability.minor),
            problem.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        );
        if let Ok(memo) = self.memo.read()
            && let Some(hit) = memo.get(&key)
        {
            return Ok(hit.clone());
        }
        let index = self.index.get_or_init(|| {
            let mut index: std::collections::HashMap<(String, String), Vec<TuneRecord>> =
                std::collections::HashMap::new();
            for r in &tune.records {
                index
                    .entry((r.kernel.clone(), r.gpu.clone()))
                    .or_default()
                    .push(r.clone());
            }
            index
        });
        let records = index
            .get(&(name.to_string(), gpu_name.to_string()))
            .map_or(&[][..], Vec::as_slice);
        let answer = best_of(records, lock, family, gpu_name, capability, problem)?;
        if let Ok(mut memo) = self.memo.write() {
            memo.insert(key, answer.clone());
        }
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(b: i64, s: i64, d: i64) -> Problem {
        [("B".into(), b), ("S".into(), s), ("D".into(), d)].into()
    }

    fn cfg(d: i64, bm: i64) -> Config {
        Config::from([
            ("HEAD_DIM", ParamValue::Int(d)),
            ("BM", ParamValue::Int(bm)),
        ])
    }

    fn setup() -> (KernelTuning, Lockfile) {
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../..")
                .join(crate::store::lockfile::LOCK_FILE),
        )
        .unwrap();
        let lock = Lockfile::parse(&text, Path::new("kart.lock")).unwrap();
        let template = lock
            .artifacts
            .iter()
            .find(|a| a.target == "sm_90")
            .unwrap()
            .clone();
        let mut artifacts = Vec::new();
        for (i, (d, bm)) in [(64, 64), (64, 128), (128, 64)].into_iter().enumerate() {
            artifacts.push(LockedArtifact {
                kernel: "fa".into(),
                config: cfg(d, bm),
                digest: format!("{i}").repeat(64),
                ..template.clone()
            });
        }
        let lock = Lockfile::new(artifacts);
        let kernel = KernelTuning {
            name: "fa".into(),
            default: Some(cfg(64, 64)),
            tune: Some(TuneSpec {
                exact: [("HEAD_DIM".into(), "D".into())].into(),
                nearest: vec!["B".into(), "S".into()],
                program: vec![],
            }),
        };
        (kernel, lock)
    }

    fn record(p: Problem, c: Config, digest: char) -> TuneRecord {
        TuneRecord {
            kernel: "fa".into(),
            gpu: "NVIDIA H200".into(),
            problem: p,
            config: c,
            variant: None,
            target: "sm_90".into(),
            digest: digest.to_string().repeat(64),
            median_us: 10.0,
            runner_up_us: None,
            timed: 3,
        }
    }

    #[test]
    fn best_takes_exact_then_nearest_then_default_and_skips_stale_records() {
        let (kernel, lock) = setup();
        let h200 = Capability { major: 9, minor: 0 };
        let mut tune = TuneFile::default();
        tune.merge(vec![
            record(problem(32, 512, 64), cfg(64, 128), '1'),
            record(problem(1, 512, 64), cfg(64, 64), '0'),
        ]);
        let ask = |p: Problem| {
            let c = best(&tune, &lock, &[&kernel], "NVIDIA H200", h200, &p).unwrap();
            (c.config, c.source)
        };
        assert_eq!(ask(problem(32, 512, 64)), (cfg(64, 128), Source::Exact));
        // B = 24 is nearer 32 than 1 (in log scale).
        assert_eq!(
            ask(problem(24, 512, 64)),
            (cfg(64, 128), Source::Nearest(problem(32, 512, 64)))
        );
        assert_eq!(ask(problem(2, 512, 64)).0, cfg(64, 64));
        // D = 128 has no record: the default with HEAD_DIM set from the problem.
        assert_eq!(ask(problem(32, 512, 128)), (cfg(128, 64), Source::Default));
        // Another GPU has no records.
        let other = best(
            &tune,
            &lock,
            &[&kernel],
            "NVIDIA H100",
            h200,
            &problem(32, 512, 64),
        );
        assert_eq!(other.unwrap().source, Source::Default);
        // A stale record (the lock names another digest now) is skipped.
        let mut stale = TuneFile::default();
        stale.merge(vec![record(problem(32, 512, 64), cfg(64, 128), '9')]);
        let got = best(
            &stale,
            &lock,
            &[&kernel],
            "NVIDIA H200",
            h200,
            &problem(32, 512, 64),
        );
        assert_eq!(got.unwrap().source, Source::Default);
        // A default whose adjusted form is not built (a rule removed HEAD_DIM 128 with
        // BM 128): the built config with HEAD_DIM 128 nearest the default.
        let wide = KernelTuning {
            default: Some(cfg(64, 128)),
            ..kernel.clone()
        };
        let got = best(
            &tune,
            &lock,
            &[&wide],
            "NVIDIA H100",
            h200,
            &problem(32, 512, 128),
        );
        let got = got.unwrap();
        assert_eq!((got.config, got.source), (cfg(128, 64), Source::Default));
    }

    #[test]
    fn a_kernel_without_params_is_its_own_default_and_one_with_params_needs_one() {
        let (kernel, lock) = setup();
        let h200 = Capability { major: 9, minor: 0 };
        let template = lock.artifacts[0].clone();
        let plain = LockedArtifact {
            kernel: "plain".into(),
            config: Config::default(),
            ..template
        };
        let mut artifacts = lock.artifacts.clone();
        artifacts.push(plain);
        let lock = Lockfile::new(artifacts);
        let tune = TuneFile::default();
        let no_default = |name: &str| KernelTuning {
            name: name.into(),
            default: None,
            tune: None,
        };
        let got = best(
            &tune,
            &lock,
            &[&no_default("plain")],
            "NVIDIA H200",
            h200,
            &Problem::new(),
        );
        let got = got.unwrap();
        assert_eq!(
            (got.config, got.source),
            (Config::default(), Source::Default)
        );
        let fa = KernelTuning {
            default: None,
            ..kernel
        };
        let err = best(
            &tune,
            &lock,
            &[&fa],
            "NVIDIA H200",
            h200,
            &problem(1, 512, 64),
        );
        assert!(
            err.unwrap_err()
                .to_string()
                .contains("declares no `default`")
        );
    }

    #[test]
    fn best_chooses_among_variants_by_record_then_by_resolution() {
        let (base, lock) = setup();
        let template = lock.artifacts[0].clone();
        let mut artifacts = lock.artifacts.clone();
        for (i, d) in [64, 128].into_iter().enumerate() {
            artifacts.push(LockedArtifact {
                kernel: "fa3".into(),
                config: cfg(d, 64),
                target: "sm_90a".into(),
                digest: format!("{}", i + 5).repeat(64),
                ..template.clone()
            });
        }
        let lock = Lockfile::new(artifacts);
        let variant = KernelTuning {
            name: "fa3".into(),
            ..base.clone()
        };
        let family = [&base, &variant];
        let h200 = Capability { major: 9, minor: 0 };
        let ask = |tune: &TuneFile, p: Problem| {
            best(tune, &lock, &family, "NVIDIA H200", h200, &p).unwrap()
        };
        // No record: on 9.0 the exact sm_90a cubin of the variant beats sm_90.
        let none = TuneFile::default();
        let got = ask(&none, problem(8, 512, 128));
        assert_eq!(
            (got.kernel.as_str(), got.config, got.source),
            ("fa3", cfg(128, 64), Source::Default)
        );
        // A record names the winner, the base's own or the variant's.
        let mut tune = TuneFile::default();
        let mut won = record(problem(32, 512, 64), cfg(64, 64), '5');
        won.variant = Some("fa3".into());
        tune.merge(vec![won, record(problem(1, 512, 64), cfg(64, 64), '0')]);
        let got = ask(&tune, problem(32, 512, 64));
        assert_eq!((got.kernel.as_str(), got.source), ("fa3", Source::Exact));
        let got = ask(&tune, problem(1, 512, 64));
        assert_eq!((got.kernel.as_str(), got.config), ("fa", cfg(64, 64)));
        // The variant alone: its records are the base's, so none apply.
        let alone = best(
            &tune,
            &lock,
            &[&variant],
            "NVIDIA H200",
            h200,
            &problem(32, 512, 64),
        )
        .unwrap();
        assert_eq!(alone.source, Source::Default);
        // A variant's record whose digest the lock no longer names is stale.
        let mut stale = TuneFile::default();
        let mut old = record(problem(32, 512, 64), cfg(64, 64), '7');
        old.variant = Some("fa3".into());
        stale.merge(vec![old]);
        assert_eq!(ask(&stale, problem(32, 512, 64)).source, Source::Default);
        // Without a cubin for the GPU in the family (compute capability 10.0).
        let b200 = Capability {
            major: 10,
            minor: 0,
        };
        assert!(best(&none, &lock, &family, "B200", b200, &problem(8, 512, 64)).is_err());
    }

    #[test]
    fn a_version_1_file_is_read_and_written_back_as_version_2() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(TUNE_FILE);
        let mut tune = TuneFile::default();
        tune.merge(vec![record(problem(1, 512, 64), cfg(64, 64), '0')]);
        let old = tune.to_text().replace("version = 2", "version = 1");
        std::fs::write(&path, old).unwrap();
        let mut read = TuneFile::read(&path, Path::new(TUNE_FILE)).unwrap();
        assert_eq!((read.version, read.records.len()), (1, 1));
        read.merge(vec![]);
        assert!(read.write(&path).unwrap());
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .contains("version = 2")
        );
        std::fs::write(&path, "version = 3\n").unwrap();
        let err = TuneFile::read(&path, Path::new(TUNE_FILE))
            .unwrap_err()
            .to_string();
        assert!(err.contains("version 3 is not 1 to 2"), "{err}");
    }

    #[test]
    fn the_file_round_trips_sorted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(TUNE_FILE);
        let mut tune = TuneFile::default();
        tune.merge(vec![
            record(problem(32, 512, 64), cfg(64, 128), '1'),
            record(problem(1, 512, 64), cfg(64, 64), '0'),
        ]);
        tune.merge(vec![record(problem(1, 512, 64), cfg(64, 128), '1')]);
        assert_eq!(tune.records.len(), 2);
        assert!(tune.write(&path).unwrap());
        assert!(!tune.write(&path).unwrap());
        assert_eq!(TuneFile::read(&path, Path::new(TUNE_FILE)).unwrap(), tune);
    }
}
