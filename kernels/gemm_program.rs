//! What the repository's GEMM-like kernel programs share (`sgemm`, `cute_gemm`,
//! `dual_gemm_silu`), run on a GPU machine from the repository root after `kart build`:
//!
//!   PROGRAM check   every config this GPU runs, on the kernel's check shapes, against a
//!                   float64 CPU reference on fresh random inputs (output poisoned
//!                   first); passes go to kart.attest (`correct`)
//!   PROGRAM tune    the library's tuner over the kernel's problems; winners go to
//!                   kart.tune
//!   PROGRAM demo    best() per problem, a checked small run, then time and TFLOP/s
//!
//! A kernel's program supplies its inputs, launch and reference through [`Gemm`].
//! Exit 1 if any check fails.

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
    match config.0.get(name) {
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

/// Every config of the kernel that this GPU runs.
fn configs_for<G: Gemm>(rt: &Runtime, gpu: &Gpu) -> Vec<Config> {
    let mut configs: Vec<Config> = rt
        .lock()
        .artifacts
        .iter()
        .filter(|a| a.kernel == G::KERNEL)
        .filter(|a| {
            kart::deploy::tune::artifact_for(rt.lock(), G::KERNEL, &a.config, gpu.capability)
                .is_some()
        })
        .map(|a| a.config.clone())
        .collect();
    configs.sort();
    configs.dedup();
    configs
}

fn check<G: Gemm>(rt: &Runtime, gpu: &Gpu) -> Res<bool> {
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut passed = Vec::new();
    let mut failed = 0;
    println!(
        "correctness against float64 on the CPU, shapes (M, N, K) {:?}, {}",
        G::CHECK_SHAPES,
        G::CHECK_RULE
    );
    for config in configs_for::<G>(rt, gpu) {
        let loaded = gpu.kernel(rt, G::KERNEL, &config)?;
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
                println!("  ok    {config}  worst {worst:.2e}");
                passed.push(loaded.artifact.clone());
            }
            Some(why) => {
                failed += 1;
                println!("  FAIL  {config}  {why}");
            }
        }
    }
    kart::deploy::attest::record_all(
        Path::new("."),
        rt.lock(),
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

fn tune<G: Gemm>(rt: &Runtime, gpu: &Gpu, kernel: &Kernel) -> Res<()> {
    let mut bench = Bench::<G>::new(gpu, 42);
    let mut records = Vec::new();
    for problem in G::problems() {
        let (trials, record) = kart::deploy::tune::tune_problem(
            rt,
            gpu,
            &[kernel],
            &problem,
            TuneSettings::default(),
            &mut bench,
        )?;
        let mut timed: Vec<(f64, &Config)> = trials
            .iter()
            .filter_map(|t| t.result.as_ref().ok().map(|us| (*us, &t.config)))
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
        if let Some(r) = record {
            println!(
                "  best: {} ({:.1} µs, {:.2} TFLOP/s)",
                r.config,
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

fn demo<G: Gemm>(rt: &Runtime, gpu: &Gpu, kernel: &Kernel) -> Res<bool> {
    let path = Path::new(kart::deploy::tune::TUNE_FILE);
    let tune = TuneFile::read(path, path)?;
    let mut bench = Bench::<G>::new(gpu, 7);
    let mut ok = true;
    for problem in G::problems().into_iter().chain([G::unseen_problem()]) {
        let t0 = std::time::Instant::now();
        let kart::deploy::tune::Choice { config, source, .. } = kart::deploy::tune::best(
            &tune,
            rt.lock(),
            &[kernel],
            &gpu.name,
            gpu.capability,
            &problem,
        )?;
        let lookup = t0.elapsed();
        let loaded = gpu.kernel(rt, G::KERNEL, &config)?;
        let correct = G::check_once(gpu, &loaded, G::DEMO_CHECK, &mut bench.seed)?;
        ok &= correct.is_ok();
        let us = kart::deploy::tune::median_time_us(gpu, TuneSettings::default(), &mut |i| {
            bench.launch(&loaded, &config, &problem, i)
        })?;
        println!(
            "{problem:?}: best() {:.1} µs -> {config} ({source:?}); check {}; {us:.1} µs, {:.2} TFLOP/s",
            lookup.as_secs_f64() * 1e6,
            match &correct {
                Ok(rel) => format!("ok ({rel:.1e})"),
                Err(why) => format!("FAILED ({why})"),
            },
            tflops::<G>(&problem, us)
        );
    }
    Ok(ok)
}

/// The command line: `check`, `tune` or `demo`.
pub fn main<G: Gemm>() -> Res<()> {
    let command = std::env::args().nth(1).unwrap_or_default();
    let project = Project::discover(Path::new("."))?;
    let kernel = project.kernel(G::KERNEL)?.clone();
    let rt = Runtime::open(Path::new("."))?;
    let gpu = Gpu::open(0)?;
    println!(
        "{} (compute capability {}), kart {}",
        gpu.name,
        gpu.capability,
        env!("CARGO_PKG_VERSION")
    );
    let ok = match command.as_str() {
        "check" => check::<G>(&rt, &gpu)?,
        "tune" => {
            tune::<G>(&rt, &gpu, &kernel)?;
            true
        }
        "demo" => demo::<G>(&rt, &gpu, &kernel)?,
        _ => {
            eprintln!(
                "usage: {} check|tune|demo (from the repository root, after `kart build`)",
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
