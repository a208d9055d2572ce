//! What the repository's GEMM-like kernel programs share (`sgemm`, `cute_gemm`,
//! `dual_gemm_silu`), run on a GPU machine from the repository root after `kart build`:
//!
//!   PROGRAM check [KERNEL]      every config this GPU runs of the kernel and its
//!                               variants (`variant_of`; or of KERNEL alone), on the
//!                               check shapes, against a float64 CPU reference on
//!                               fresh random inputs (output poisoned first); passes
//!                               go to kart.attest (`correct`)
//!   PROGRAM tune [MxNxK ...]    the library's tuner over the kernel and its variants,
//!                               on the kernel's problems (or on these); winners go to
//!                               kart.tune
//!   PROGRAM demo                best() per problem, a checked small run, then time
//!                               and TFLOP/s
//!
//! A kernel's program supplies its inputs, launch and reference through [`Gemm`]; a
//! variant is called as its base is. Exit 1 if any check fails.

use std::path::Path;
use std::sync::Arc;

use cudarc::driver::CudaStream;
use kart::deploy::tune::{Problem, TuneBench, TuneFile, TuneSettings};
use kart::model::Config;
use kart::project::{Kernel, Project};
use kart::runtime::{Gpu, LoadedArtifact, Runtime};
use kart::store::sidecar::Sidecar as _;

pub type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// (M, N, K).
pub type Shape = (usize, usize, usize);

/// Compares `out` (M×N, row-major) with `reference(i, j)`, each element computed in
/// float64: the relative error ‖C − ref‖ / ‖ref‖ when it is under `limit`, else why not
/// (an element never written, read back as the NaN the output was poisoned with, is
/// named first).
#[allow(
    dead_code,
    reason = "dual_gemm_silu compares its FP8 output element by element"
)]
pub fn relative_error(
    out: &[f32],
    (m, n): (usize, usize),
    limit: f64,
    reference: impl Fn(usize, usize) -> f64,
) -> Result<f64, String> {
    let (mut diff, mut norm) = (0f64, 0f64);
    for i in 0..m {
        for j in 0..n {
            let want = reference(i, j);
            let got = f64::from(out[i * n + j]);
            if !got.is_finite() {
                return Err(format!("C[{i}][{j}] is {got} (never written, or NaN)"));
            }
            diff += (got - want) * (got - want);
            norm += want * want;
        }
    }
    let rel = (diff / norm.max(1e-30)).sqrt();
    if rel < limit {
        Ok(rel)
    } else {
        Err(format!("relative error {rel:.2e}"))
    }
}

/// One kernel's part of the program.
pub trait Gemm {
    /// The device buffers of one problem's inputs and output.
    type Buffers;
    /// The kernel's name in kernel.toml.
    const KERNEL: &'static str;
    /// The shapes `check` runs every config on.
    const CHECK_SHAPES: &'static [Shape];
    /// What `check` compares, for its header line.
    const CHECK_RULE: &'static str;
    /// The checked run of `demo`.
    const DEMO_CHECK: Shape;
    /// The shape the tuner checks each config on before timing it (never timed if
    /// wrong): small enough for the CPU reference.
    const TUNE_CHECK: Shape;
    /// Floating-point operations per multiply-add of M·N·K (2 for one product).
    const FLOPS_PER_MAC: f64;
    /// Runs `loaded` on fresh inputs of `shape` against float64: the error measure, or
    /// why it failed.
    fn check_once(
        gpu: &Gpu,
        loaded: &LoadedArtifact,
        shape: Shape,
        seed: &mut u64,
    ) -> Res<Result<f64, String>>;
    /// Fresh random inputs of `shape` on the device.
    fn buffers(stream: &Arc<CudaStream>, shape: Shape, seed: &mut u64) -> Res<Self::Buffers>;
    /// The bytes of one set of buffers.
    fn bytes(shape: Shape) -> usize;
    /// Launches `loaded` on `buffers` for problem `p`.
    fn launch(
        loaded: &LoadedArtifact,
        stream: &CudaStream,
        buffers: &mut Self::Buffers,
        p: &Problem,
    ) -> kart::Result<()>;
    /// The problems `tune` and `demo` run.
    fn problems() -> Vec<Problem>;
    /// A problem `demo` adds, with no record of its own (best() falls back).
    fn unseen_problem() -> Problem;
}

pub fn problem(m: usize, n: usize, k: usize) -> Problem {
    [
        ("M".to_string(), m as i64),
        ("N".to_string(), n as i64),
        ("K".to_string(), k as i64),
    ]
    .into()
}

pub fn shape(p: &Problem) -> Shape {
    let g = |k: &str| p.get(k).copied().unwrap_or(1) as usize;
    (g("M"), g("N"), g("K"))
}

/// The value of an integer param of `config` (0 when absent).
#[allow(dead_code)] // a program whose launch reads no param includes this module too
pub fn param(config: &Config, name: &str) -> u32 {
    match config.get(name) {
        Some(kart::model::ParamValue::Int(v)) => *v as u32,
        _ => 0,
    }
}

/// Inputs rotated over several sets per problem so timed runs do not hit L2.
struct Bench<'a, G: Gemm> {
    gpu: &'a Gpu,
    stream: Arc<CudaStream>,
    sets: Vec<G::Buffers>,
    shape: Shape,
    seed: u64,
}

impl<'a, G: Gemm> Bench<'a, G> {
    fn new(gpu: &'a Gpu, seed: u64) -> Self {
        Bench {
            gpu,
            stream: gpu.stream(),
            sets: Vec::new(),
            shape: (0, 0, 0),
            seed,
        }
    }

    fn prepare(&mut self, p: &Problem) -> Res<()> {
        let s = shape(p);
        if self.shape == s && !self.sets.is_empty() {
            return Ok(());
        }
        self.sets.clear();
        // Enough sets that together they are well over the L2 (50-60 MB on Hopper).
        let sets = (256_000_000 / G::bytes(s).max(1)).clamp(1, 8);
        for _ in 0..sets {
            self.sets.push(G::buffers(&self.stream, s, &mut self.seed)?);
        }
        self.shape = s;
        Ok(())
    }
}

impl<G: Gemm> TuneBench for Bench<'_, G> {
    fn check(
        &mut self,
        loaded: &LoadedArtifact,
        _: &Config,
        _: &Problem,
    ) -> kart::Result<Result<(), String>> {
        match G::check_once(self.gpu, loaded, G::TUNE_CHECK, &mut self.seed) {
            Ok(r) => Ok(r.map(|_| ())),
            Err(e) => Ok(Err(e.to_string())),
        }
    }

    fn launch(
        &mut self,
        loaded: &LoadedArtifact,
        _: &Config,
        p: &Problem,
        rotation: usize,
    ) -> kart::Result<()> {
        self.prepare(p).map_err(|e| kart::Error::CheckFailed {
            message: e.to_string(),
            hint: None,
        })?;
        let n = self.sets.len();
        let stream = self.gpu.stream();
        G::launch(loaded, &stream, &mut self.sets[rotation % n], p)
    }
}

fn tflops<G: Gemm>(p: &Problem, us: f64) -> f64 {
    let (m, n, k) = shape(p);
    G::FLOPS_PER_MAC * (m * n * k) as f64 / (us * 1e-6) / 1e12
}

/// Every config of the family's kernels that this GPU runs, as (kernel, config), the
/// base's first.
fn configs_for(rt: &Runtime, gpu: &Gpu, family: &[&Kernel]) -> Res<Vec<(String, Config)>> {
    let lock = rt.lock()?;
    let mut all = Vec::new();
    for kernel in family {
        let name = kernel.name.as_str();
        let mut configs: Vec<Config> = lock
            .artifacts
            .iter()
            .filter(|a| a.kernel == name)
            .filter(|a| {
                kart::deploy::tune::artifact_for(lock, name, &a.config, gpu.capability).is_some()
            })
            .map(|a| a.config.clone())
            .collect();
        configs.sort();
        configs.dedup();
        all.extend(configs.into_iter().map(|c| (name.to_string(), c)));
    }
    Ok(all)
}

/// A config as the program prints it: the base's as it is, a variant's after its
/// kernel's name.
fn label<G: Gemm>(kernel: &str, config: &Config) -> String {
    if kernel == G::KERNEL {
        config.to_string()
    } else {
        format!("{kernel}[{config}]")
    }
}

fn check<G: Gemm>(rt: &Runtime, gpu: &Gpu, family: &[&Kernel]) -> Res<bool> {
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut passed = Vec::new();
    let mut failed = 0;
    println!(
        "correctness against float64 on the CPU, shapes (M, N, K) {:?}, {}",
        G::CHECK_SHAPES,
        G::CHECK_RULE
    );
    for (kernel, config) in configs_for(rt, gpu, family)? {
        let loaded = gpu.kernel(rt, &kernel, &config)?;
        let mut worst = 0f64;
        let mut failure = None;
        for &s in G::CHECK_SHAPES {
            match G::check_once(gpu, &loaded, s, &mut seed) {
                Ok(Ok(rel)) => worst = worst.max(rel),
                Ok(Err(why)) => failure = Some(format!("{s:?}: {why}")),
                Err(e) => failure = Some(format!("{s:?}: {e}")),
            }
            if failure.is_some() {
                break;
            }
        }
        match failure {
            None => {
                println!(
                    "  ok    {}  worst {worst:.2e}",
                    label::<G>(&kernel, &config)
                );
                passed.push(loaded.artifact.clone());
            }
            Some(why) => {
                failed += 1;
                println!("  FAIL  {}  {why}", label::<G>(&kernel, &config));
            }
        }
    }
    kart::deploy::attest::record_all(
        Path::new("."),
        rt.lock()?,
        gpu,
        &passed,
        kart::deploy::attest::Check::Correct,
    )?;
    println!(
        "{} configs correct, {failed} failed on {}; recorded in kart.attest",
        passed.len(),
        gpu.name
    );
    Ok(failed == 0)
}

fn tune<G: Gemm>(rt: &Runtime, gpu: &Gpu, family: &[&Kernel], problems: Vec<Problem>) -> Res<()> {
    let mut bench = Bench::<G>::new(gpu, 42);
    let mut records = Vec::new();
    for problem in problems {
        let (trials, record) = kart::deploy::tune::tune_problem(
            rt,
            gpu,
            family,
            &problem,
            TuneSettings::default(),
            &mut bench,
        )?;
        let mut timed: Vec<(f64, String)> = trials
            .iter()
            .filter_map(|t| {
                let us = t.result.as_ref().ok()?;
                Some((*us, label::<G>(&t.kernel, &t.config)))
            })
            .collect();
        timed.sort_by(|a, b| a.0.total_cmp(&b.0));
        let wrong = trials.iter().filter(|t| t.result.is_err()).count();
        println!(
            "problem {problem:?}: {} configs timed, {wrong} not (wrong or failed); the five fastest and the slowest:",
            timed.len()
        );
        for (us, config) in timed.iter().take(5).chain(timed.last()) {
            println!(
                "  {us:>10.1} µs  {:>6.2} TFLOP/s  {config}",
                tflops::<G>(&problem, *us)
            );
        }
        for t in trials.iter().filter(|t| t.runoff_us.is_some()) {
            let us = t.runoff_us.unwrap_or(f64::NAN);
            println!(
                "  run-off {us:>8.1} µs  {}",
                label::<G>(&t.kernel, &t.config)
            );
        }
        if let Some(r) = record {
            println!(
                "  best: {} ({:.1} µs, {:.2} TFLOP/s)",
                label::<G>(r.implementation(), &r.config),
                r.median_us,
                tflops::<G>(&problem, r.median_us)
            );
            records.push(r);
        }
    }
    kart::deploy::tune::save_records(Path::new("."), records)?;
    println!("kart.tune written");
    Ok(())
}

fn demo<G: Gemm>(rt: &Runtime, gpu: &Gpu, family: &[&Kernel]) -> Res<bool> {
    let path = Path::new(kart::deploy::tune::TUNE_FILE);
    let tune = TuneFile::read(path, path)?;
    let mut bench = Bench::<G>::new(gpu, 7);
    let mut ok = true;
    for problem in G::problems().into_iter().chain([G::unseen_problem()]) {
        let t0 = std::time::Instant::now();
        let kart::deploy::tune::Choice {
            kernel,
            config,
            source,
        } = kart::deploy::tune::best(
            &tune,
            rt.lock()?,
            family,
            &gpu.name,
            gpu.capability,
            &problem,
        )?;
        let lookup = t0.elapsed();
        let loaded = gpu.kernel(rt, &kernel, &config)?;
        let correct = G::check_once(gpu, &loaded, G::DEMO_CHECK, &mut bench.seed)?;
        ok &= correct.is_ok();
        let us = kart::deploy::tune::median_time_us(gpu, TuneSettings::default(), &mut |i| {
            bench.launch(&loaded, &config, &problem, i)
        })?;
        println!(
            "{problem:?}: best() {:.1} µs -> {} ({source:?}); check {}; {us:.1} µs, {:.2} TFLOP/s",
            lookup.as_secs_f64() * 1e6,
            label::<G>(&kernel, &config),
            match &correct {
                Ok(rel) => format!("ok ({rel:.1e})"),
                Err(why) => format!("FAILED ({why})"),
            },
            tflops::<G>(&problem, us)
        );
    }
    Ok(ok)
}

/// A problem written `MxNxK` (`128x2048x7168`).
fn parse_problem(text: &str) -> Res<Problem> {
    let sizes: Vec<usize> = text
        .split('x')
        .map(|v| v.parse::<usize>().ok().filter(|v| *v > 0))
        .collect::<Option<_>>()
        .ok_or_else(|| {
            format!("problem `{text}`: want MxNxK with positive integers, e.g. 128x2048x7168")
        })?;
    match sizes[..] {
        [m, n, k] => Ok(problem(m, n, k)),
        _ => Err(format!("problem `{text}`: want three sizes MxNxK, e.g. 128x2048x7168").into()),
    }
}

/// The command line: `check [KERNEL]`, `tune [MxNxK ...]` or `demo`.
pub fn main<G: Gemm>() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let command = args.first().cloned().unwrap_or_default();
    let rest = args.get(1..).unwrap_or_default();
    let project = Project::discover(Path::new("."))?;
    let mut family = project.family(G::KERNEL)?;
    if command == "check"
        && let Some(only) = rest.first()
    {
        if !family.iter().any(|k| &k.name == only) {
            let names: Vec<&str> = family.iter().map(|k| k.name.as_str()).collect();
            return Err(format!(
                "check {only}: not a kernel of {}'s family; name one of {}",
                G::KERNEL,
                names.join(", ")
            )
            .into());
        }
        family.retain(|k| &k.name == only);
    }
    let rt = Runtime::open(Path::new("."))?;
    let gpu = Gpu::open(0)?;
    println!(
        "{} (compute capability {}), kart {}",
        gpu.name,
        gpu.capability,
        env!("CARGO_PKG_VERSION")
    );
    let ok = match command.as_str() {
        "check" => check::<G>(&rt, &gpu, &family)?,
        "tune" => {
            let problems = if rest.is_empty() {
                G::problems()
            } else {
                rest.iter()
                    .map(|p| parse_problem(p))
                    .collect::<Res<Vec<_>>>()?
            };
            tune::<G>(&rt, &gpu, &family, problems)?;
            true
        }
        "demo" => demo::<G>(&rt, &gpu, &family)?,
        _ => {
            eprintln!(
                "usage: {} check [KERNEL] | tune [MxNxK ...] | demo (from the repository root, after `kart build`)",
                G::KERNEL
            );
            std::process::exit(2);
        }
    };
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
