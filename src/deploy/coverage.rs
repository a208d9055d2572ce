//! Will every GPU of a fleet find what it needs without compiling? Per kernel and GPU:
//! how each config of the lock would load (a cubin of exactly its capability, a
//! compatible cubin, PTX only, nothing, or a cubin its driver is too old for), whether
//! `kart.tune` has records for that GPU (and, for listed problems, whether `best()`
//! answers from a record or falls back), and whether the blobs it would load are
//! attested on it. Pure: the lock, the sidecars and the fleet in, a report out.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use kart_runtime::model::{ArtifactKind, Config, Problem};
use kart_runtime::resolve::{JitPolicy, cubin_fit, ptx_fit, required_driver_version};
use kart_runtime::store::lockfile::{LockedArtifact, Lockfile, pick};
use kart_runtime::target::TargetArch;

use crate::deploy::attest::AttestFile;
use crate::deploy::tune::{Source, TuneFile};
use crate::project::Project;
use crate::project::fleet::{FleetGpu, cuda_of_driver, parse_capability};

/// How one config loads on one GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Load {
    /// A cubin built for exactly this capability.
    Exact,
    /// A cubin of the same major and a lower minor (or an `f` family cubin).
    Compatible,
    /// Only PTX, which the driver would JIT-compile (kart forbids it by default).
    PtxOnly,
    /// A cubin fits, but its nvcc needs a newer driver than this GPU's.
    DriverTooOld,
    /// Nothing.
    None,
}

/// What a gap is about; `--require` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Need {
    /// Every config loads a cubin.
    Cubin,
    /// `kart.tune` has records for the GPU, and every listed problem has its own.
    Tuned,
    /// Every blob the GPU would load is attested on it.
    Attested,
}

impl Load {
    /// Its name in reports (`exact`, `driver_too_old`, …).
    pub fn name(self) -> &'static str {
        match self {
            Load::Exact => "exact",
            Load::Compatible => "compatible",
            Load::PtxOnly => "ptx_only",
            Load::DriverTooOld => "driver_too_old",
            Load::None => "none",
        }
    }

    /// Whether it loads a cubin.
    pub fn is_cubin(self) -> bool {
        matches!(self, Load::Exact | Load::Compatible)
    }
}

impl std::str::FromStr for Need {
    type Err = String;
    fn from_str(s: &str) -> Result<Need, String> {
        match s.trim() {
            "cubin" => Ok(Need::Cubin),
            "tuned" => Ok(Need::Tuned),
            "attested" => Ok(Need::Attested),
            _ => Err(format!("`{s}` is not cubin, tuned or attested")),
        }
    }
}

/// How `best()` answers one problem on one GPU.
#[derive(Clone, Debug, Serialize)]
pub struct ProblemAnswer {
    /// The problem.
    pub problem: Problem,
    /// `exact`, `nearest`, `default`, or `error` (best() has no answer).
    pub source: String,
    /// The kernel and config chosen, or why none.
    pub answer: String,
}

/// One kernel on one GPU.
#[derive(Clone, Debug, Serialize)]
pub struct CoverageRow {
    /// The kernel.
    pub kernel: String,
    /// The GPU's name.
    pub gpu: String,
    /// Its compute capability.
    pub capability: String,
    /// The CUDA version its driver supports, if the fleet says.
    pub cuda: Option<String>,
    /// The kernel's configs in the lock.
    pub configs: usize,
    /// How many configs load each way.
    pub loads: BTreeMap<&'static str, usize>,
    /// How many configs load a cubin (exact or compatible).
    pub cubins: usize,
    /// Whether the kernel is tuned (`[tune]`, the base of its family).
    pub tunable: bool,
    /// Its usable tuning records for this GPU (not stale).
    pub tune_records: usize,
    /// `best()`'s answer for each listed problem.
    pub problems: Vec<ProblemAnswer>,
    /// For a kernel with `[problem_params]`: the listed problems no cubin of the lock
    /// serves on this GPU (no config with the problem's values), to build with
    /// `kart build --problems FILE` / `--trace FILE`.
    pub unbuilt: Vec<Problem>,
    /// The blobs this GPU would load.
    pub loadable: usize,
    /// Of those, how many are attested on this GPU.
    pub attested: usize,
    /// What is missing.
    pub gaps: Vec<Need>,
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct Coverage {
    /// Where the fleet came from (`kart.toml`, a file, or the sidecars).
    pub fleet_source: String,
    /// One row per kernel and GPU.
    pub rows: Vec<CoverageRow>,
}

impl Coverage {
    /// The rows with a gap among `required`.
    pub fn failing<'a>(&'a self, required: &'a [Need]) -> impl Iterator<Item = &'a CoverageRow> {
        self.rows
            .iter()
            .filter(|r| r.gaps.iter().any(|g| required.contains(g)))
    }
}

/// Refuses kernel names the lock does not have (a typo would otherwise give an empty
/// report or bundle).
pub fn check_kernels(lock: &Lockfile, kernels: &[String]) -> crate::error::Result<()> {
    for k in kernels {
        if lock.of_kernel(k).is_empty() {
            let names: BTreeSet<&str> = lock.artifacts.iter().map(|a| a.kernel.as_str()).collect();
            let hint = match crate::suggest::did_you_mean(k, names.iter().copied()) {
                Some(guess) => guess,
                None => format!("run `kart build {k}` first"),
            };
            return Err(crate::error::Error::usage(
                format!("kart.lock has no kernel `{k}`"),
                Some(hint),
            ));
        }
    }
    Ok(())
}

/// The GPUs `kart.attest` and `kart.tune` name, for a project that declares no fleet:
/// the machines its kernels were proven and tuned on.
pub fn fleet_of_records(attest: &AttestFile, tune: &TuneFile) -> Vec<FleetGpu> {
    let mut by_name: BTreeMap<String, FleetGpu> = BTreeMap::new();
    for a in &attest.records {
        let Some(capability) = parse_capability(&a.capability) else {
            continue;
        };
        let gpu = FleetGpu {
            name: a.gpu.clone(),
            capability,
            cuda: cuda_of_driver(&a.driver),
        };
        match by_name.get(&a.gpu) {
            // The newest driver seen for a name.
            Some(known) if known.cuda >= gpu.cuda => {}
            _ => {
                by_name.insert(a.gpu.clone(), gpu);
            }
        }
    }
    for r in &tune.records {
        if by_name.contains_key(&r.gpu) {
            continue;
        }
        let Ok(target) = r.target.parse::<TargetArch>() else {
            continue;
        };
        let capability = kart_runtime::resolve::Capability {
            major: target.major,
            minor: target.minor,
        };
        by_name.insert(
            r.gpu.clone(),
            FleetGpu {
                name: r.gpu.clone(),
                capability,
                cuda: None,
            },
        );
    }
    by_name.into_values().collect()
}

/// Inputs of [`coverage`].
pub struct CoverageInput<'a> {
    /// The project (kernels' `[tune]`, `default` and variants).
    pub project: &'a Project,
    /// The lock.
    pub lock: &'a Lockfile,
    /// `kart.tune`.
    pub tune: &'a TuneFile,
    /// `kart.attest`.
    pub attest: &'a AttestFile,
    /// The fleet.
    pub fleet: &'a [FleetGpu],
    /// Where it came from.
    pub fleet_source: String,
    /// Only these kernels (empty: every kernel of the lock).
    pub kernels: &'a [String],
    /// Problems to check `best()` on, per kernel (family base).
    pub problems: &'a BTreeMap<String, BTreeSet<Problem>>,
}

/// The report: every selected kernel of the lock on every GPU of the fleet.
pub fn coverage(input: &CoverageInput<'_>) -> Coverage {
    let mut by_kernel: BTreeMap<&str, BTreeMap<&Config, Vec<&LockedArtifact>>> = BTreeMap::new();
    for a in &input.lock.artifacts {
        if input.kernels.is_empty() || input.kernels.contains(&a.kernel) {
            by_kernel
                .entry(&a.kernel)
                .or_default()
                .entry(&a.config)
                .or_default()
                .push(a);
        }
    }
    let mut rows = Vec::new();
    for (kernel, configs) in &by_kernel {
        for gpu in input.fleet {
            rows.push(row(input, kernel, configs, gpu));
        }
    }
    Coverage {
        fleet_source: input.fleet_source.clone(),
        rows,
    }
}

fn row(
    input: &CoverageInput<'_>,
    kernel: &str,
    configs: &BTreeMap<&Config, Vec<&LockedArtifact>>,
    gpu: &FleetGpu,
) -> CoverageRow {
    let mut loads: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut cubins = 0;
    let mut loaded: Vec<&LockedArtifact> = Vec::new();
    for group in configs.values() {
        let (how, artifact) = load_of(group, gpu);
        if let Some(a) = artifact {
            loaded.push(a);
        }
        *loads.entry(how.name()).or_default() += 1;
        cubins += usize::from(how.is_cubin());
    }
    let attested_here: std::collections::HashSet<&str> = input
        .attest
        .records
        .iter()
        .filter(|r| r.gpu == gpu.name)
        .map(|r| r.digest.as_str())
        .collect();
    let attested = loaded
        .iter()
        .filter(|a| attested_here.contains(a.digest.as_str()))
        .count();
    let project_kernel = input.project.kernels.iter().find(|k| k.name == kernel);
    let tunable = project_kernel.is_some_and(|k| k.tune.is_some() && k.variant_of.is_none());
    let mut tune_records = 0;
    let mut problems = Vec::new();
    if tunable && let Ok(family) = input.project.family(kernel) {
        tune_records = input
            .tune
            .records
            .iter()
            .filter(|r| r.kernel == kernel && r.gpu == gpu.name && !r.is_stale(input.lock))
            .count();
        for problem in input.problems.get(kernel).into_iter().flatten() {
            let answer = crate::deploy::tune::best(
                input.tune,
                input.lock,
                &family,
                &gpu.name,
                gpu.capability,
                problem,
            );
            problems.push(match answer {
                Ok(choice) => ProblemAnswer {
                    problem: problem.clone(),
                    source: match choice.source {
                        Source::Exact => "exact",
                        Source::Nearest(_) => "nearest",
                        Source::Default => "default",
                    }
                    .into(),
                    answer: format!("{}[{}]", choice.kernel, choice.config),
                },
                Err(e) => ProblemAnswer {
                    problem: problem.clone(),
                    source: "error".into(),
                    answer: e.to_string(),
                },
            });
        }
    }
    let unbuilt = match project_kernel {
        Some(k) if !k.problem_params.is_empty() => unbuilt_problems(input, k, configs, gpu),
        _ => Vec::new(),
    };
    let mut gaps = Vec::new();
    if cubins < configs.len() || !unbuilt.is_empty() {
        gaps.push(Need::Cubin);
    }
    if tunable && (tune_records == 0 || problems.iter().any(|p| p.source != "exact")) {
        gaps.push(Need::Tuned);
    }
    // Nothing to load is the cubin gap, not also an attestation one.
    if attested < loaded.len() {
        gaps.push(Need::Attested);
    }
    CoverageRow {
        kernel: kernel.to_string(),
        gpu: gpu.name.clone(),
        capability: gpu.capability.to_string(),
        cuda: gpu.cuda.map(kart_runtime::resolve::format_cuda_version),
        configs: configs.len(),
        loads,
        cubins,
        tunable,
        tune_records,
        problems,
        unbuilt,
        loadable: loaded.len(),
        attested,
        gaps,
    }
}

/// The problems of a kernel with `[problem_params]` (those of its family base) that no
/// config of the lock serves with a cubin on `gpu`.
fn unbuilt_problems(
    input: &CoverageInput<'_>,
    kernel: &crate::project::Kernel,
    configs: &BTreeMap<&Config, Vec<&LockedArtifact>>,
    gpu: &FleetGpu,
) -> Vec<Problem> {
    let base = kernel
        .variant_of
        .as_ref()
        .map_or(kernel.name.as_str(), |v| v.base.as_str());
    let mut out = Vec::new();
    for problem in input.problems.get(base).into_iter().flatten() {
        let wanted: Option<BTreeMap<String, kart_runtime::model::ParamValue>> = kernel
            .problem_params
            .iter()
            .map(|(param, key)| {
                problem
                    .get(key)
                    .map(|v| (param.clone(), kart_runtime::model::ParamValue::Int(*v)))
            })
            .collect();
        let served = wanted.is_some_and(|wanted| {
            configs
                .iter()
                .any(|(config, group)| config.matches(&wanted) && load_of(group, gpu).0.is_cubin())
        });
        if !served {
            out.push(problem.clone());
        }
    }
    out
}

/// How the artifacts of one config load on `gpu`, and the cubin it loads if any.
pub fn load_of<'a>(
    group: &[&'a LockedArtifact],
    gpu: &FleetGpu,
) -> (Load, Option<&'a LockedArtifact>) {
    let Some(cubin) = pick(group, gpu.capability, JitPolicy::Forbid) else {
        let ptx = group.iter().any(|a| {
            a.kind == ArtifactKind::Ptx
                && a.target
                    .parse::<TargetArch>()
                    .is_ok_and(|t| ptx_fit(t, gpu.capability).is_some())
        });
        return (if ptx { Load::PtxOnly } else { Load::None }, None);
    };
    if let (Some(cuda), Some(required)) = (gpu.cuda, required_driver_version(&cubin.nvcc))
        && cuda < required
    {
        return (Load::DriverTooOld, None);
    }
    let exact = cubin
        .target
        .parse::<TargetArch>()
        .is_ok_and(|t| cubin_fit(t, gpu.capability).is_some() && t.minor == gpu.capability.minor);
    (
        if exact { Load::Exact } else { Load::Compatible },
        Some(cubin),
    )
}

/// The artifacts the fleet's GPUs load: for each config of the selected kernels (all
/// when `kernels` is empty), the cubin each GPU picks by the resolution rules and
/// whose nvcc its driver supports. Sorted, each once.
pub fn fleet_artifacts<'a>(
    lock: &'a Lockfile,
    fleet: &[FleetGpu],
    wanted: &dyn Fn(&LockedArtifact) -> bool,
) -> Vec<&'a LockedArtifact> {
    let mut groups: BTreeMap<(&str, &Config), Vec<&LockedArtifact>> = BTreeMap::new();
    for a in lock.artifacts.iter().filter(|a| wanted(a)) {
        groups.entry((&a.kernel, &a.config)).or_default().push(a);
    }
    let mut out: Vec<&LockedArtifact> = Vec::new();
    for group in groups.values() {
        for gpu in fleet {
            if let (_, Some(a)) = load_of(group, gpu) {
                out.push(a);
            }
        }
    }
    out.sort_by(|a, b| a.id().cmp(&b.id()));
    out.dedup_by(|a, b| a.id() == b.id());
    out
}
