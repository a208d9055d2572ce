//! The CuTe Hopper GEMM's own program (kernels/cute_gemm: C = A·Bᵀ, fp16 in, fp32
//! out, wgmma fed by TMA), run on an H100/H200 from the repository root after
//! `kart build`:
//!
//!   cute_gemm check   every config this GPU runs, on shapes with tails in M, N and K,
//!                     against a float64 CPU reference on fresh random inputs (output
//!                     poisoned with NaN first); passes go to kart.attest (`correct`)
//!   cute_gemm tune    the library's tuner over a few (M, N, K); winners to kart.tune
//!   cute_gemm demo    best() per problem, a checked small run, then time and TFLOP/s
//!
//! Each launch passes two TMA descriptors that kart encodes (`TensorMap::tiled`, boxes
//! of the config's BM x BK and BN x BK with the 128-byte swizzle) and takes its grid,
//! block and shared memory from kernel.toml's [launch]. Exit 1 if any check fails.

use std::path::Path;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use kart::manifest::{Config, Kernel, Project};
use kart::runtime::tma::{Swizzle, TensorMap, TmaType};
use kart::runtime::{Gpu, KernelArg, LoadedArtifact, Runtime};
use kart::tune::{Problem, TuneBench, TuneFile, TuneSettings};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const KERNEL: &str = "cute_gemm";
const ENTRY: &str = "cute_gemm";

/// Random values in [-1, 1) (never all zeros) from a xorshift stream.
fn random(n: usize, seed: &mut u64) -> Vec<f32> {
    (0..n)
        .map(|_| {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn problem(m: usize, n: usize, k: usize) -> Problem {
    [
        ("M".to_string(), m as i64),
        ("N".to_string(), n as i64),
        ("K".to_string(), k as i64),
    ]
    .into()
}

fn shape(p: &Problem) -> (usize, usize, usize) {
    let g = |k: &str| p.get(k).copied().unwrap_or(1) as usize;
    (g("M"), g("N"), g("K"))
}

/// fp16 bits of each value (round to nearest even).
fn halves(v: &[f32]) -> Vec<u16> {
    v.iter()
        .map(|x| half::f16::from_f32(*x).to_bits())
        .collect()
}

/// The values fp16 holds of each (what the kernel multiplies).
fn rounded(v: &[f32]) -> Vec<f32> {
    v.iter().map(|x| half::f16::from_f32(*x).to_f32()).collect()
}

/// Device buffers of one problem: A (M x K) and B (N x K) fp16, C (M x N) fp32.
struct Buffers {
    a: CudaSlice<u16>,
    b: CudaSlice<u16>,
    c: CudaSlice<f32>,
}

fn param(config: &Config, name: &str) -> u32 {
    match config.0.get(name) {
        Some(kart::manifest::ParamValue::Int(v)) => *v as u32,
        _ => 0,
    }
}

fn launch(
    loaded: &LoadedArtifact,
    stream: &CudaStream,
    bufs: &mut Buffers,
    p: &Problem,
) -> kart::Result<()> {
    let (m, n, k) = shape(p);
    let cfg = &loaded.artifact.config;
    let (bm, bn, bk) = (param(cfg, "BM"), param(cfg, "BN"), param(cfg, "BK"));
    let (a, _a) = bufs.a.device_ptr(stream);
    let (b, _b) = bufs.b.device_ptr(stream);
    let (c, _c) = bufs.c.device_ptr_mut(stream);
    let (m64, n64, k64) = (m as u64, n as u64, k as u64);
    let ta = TensorMap::tiled(
        TmaType::F16,
        a,
        &[m64, k64],
        &[k64, 1],
        &[bm, bk],
        Swizzle::B128,
    )?;
    let tb = TensorMap::tiled(
        TmaType::F16,
        b,
        &[n64, k64],
        &[k64, 1],
        &[bn, bk],
        Swizzle::B128,
    )?;
    loaded.launch_problem(
        ENTRY,
        p,
        stream,
        &[
            KernelArg::TensorMap(ta),
            KernelArg::TensorMap(tb),
            KernelArg::Ptr(c),
            KernelArg::I32(m as i32),
            KernelArg::I32(n as i32),
            KernelArg::I32(k as i32),
        ],
    )
}

/// Runs `loaded` on fresh inputs of (m, n, k) and compares with float64 on the CPU:
/// the relative error ‖C − ref‖ / ‖ref‖, or why it failed.
fn check_once(
    gpu: &Gpu,
    loaded: &LoadedArtifact,
    (m, n, k): (usize, usize, usize),
    seed: &mut u64,
) -> Res<Result<f64, String>> {
    let stream = gpu.stream();
    let (a, b) = (rounded(&random(m * k, seed)), rounded(&random(n * k, seed)));
    let mut bufs = Buffers {
        a: stream.clone_htod(&halves(&a))?,
        b: stream.clone_htod(&halves(&b))?,
        // Poisoned: an element the kernel never writes reads back as NaN.
        c: stream.clone_htod(&vec![f32::NAN; m * n])?,
    };
    launch(loaded, &stream, &mut bufs, &problem(m, n, k))?;
    let out = stream.clone_dtoh(&bufs.c)?;
    let (mut diff, mut norm) = (0f64, 0f64);
    for i in 0..m {
        for j in 0..n {
            let want: f64 = (0..k)
                .map(|t| f64::from(a[i * k + t]) * f64::from(b[j * k + t]))
                .sum();
            let got = f64::from(out[i * n + j]);
            if !got.is_finite() {
                return Ok(Err(format!("C[{i}][{j}] is {got} (never written, or NaN)")));
            }
            diff += (got - want) * (got - want);
            norm += want * want;
        }
    }
    let rel = (diff / norm.max(1e-30)).sqrt();
    Ok(if rel < 1e-5 {
        Ok(rel)
    } else {
        Err(format!("relative error {rel:.2e}"))
    })
}

fn configs_for(rt: &Runtime, gpu: &Gpu) -> Vec<Config> {
    let mut configs: Vec<Config> = rt
        .lock()
        .artifacts
        .iter()
        .filter(|a| a.kernel == KERNEL)
        .filter(|a| {
            kart::tune::artifact_for(rt.lock(), KERNEL, &a.config, gpu.capability).is_some()
        })
        .map(|a| a.config.clone())
        .collect();
    configs.sort();
    configs.dedup();
    configs
}

/// Shapes with tails in M, N and K (K a multiple of 8: TMA's 16-byte rows), and one
/// of whole tiles.
const CHECK_SHAPES: [(usize, usize, usize); 4] =
    [(1, 1, 8), (67, 45, 40), (256, 256, 64), (333, 129, 264)];

fn check(rt: &Runtime, gpu: &Gpu) -> Res<bool> {
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut passed = Vec::new();
    let mut failed = 0;
    println!(
        "correctness against float64 on the CPU, shapes (M, N, K) {CHECK_SHAPES:?}, rel. error limit 1e-5"
    );
    for config in configs_for(rt, gpu) {
        let loaded = gpu.kernel(rt, KERNEL, &config)?;
        let mut worst = 0f64;
        let mut failure = None;
        for s in CHECK_SHAPES {
            match check_once(gpu, &loaded, s, &mut seed) {
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
    kart::attest::record_all(
        Path::new("."),
        rt.lock(),
        gpu,
        &passed,
        kart::attest::Check::Correct,
    )?;
    println!(
        "{} configs correct, {failed} failed on {}; recorded in kart.attest",
        passed.len(),
        gpu.name
    );
    Ok(failed == 0)
}

/// Inputs rotated over several sets per problem so timed runs do not hit L2.
struct Bench<'a> {
    gpu: &'a Gpu,
    stream: Arc<CudaStream>,
    sets: Vec<Buffers>,
    shape: (usize, usize, usize),
    seed: u64,
}

impl Bench<'_> {
    fn prepare(&mut self, p: &Problem) -> Res<()> {
        let (m, n, k) = shape(p);
        if self.shape == (m, n, k) && !self.sets.is_empty() {
            return Ok(());
        }
        self.sets.clear();
        let bytes = (m * k + k * n) * 2 + m * n * 4;
        // Enough sets that together they are well over the L2 (50-60 MB on Hopper).
        let sets = (256_000_000 / bytes).clamp(1, 8);
        for _ in 0..sets {
            let (a, b) = (random(m * k, &mut self.seed), random(k * n, &mut self.seed));
            self.sets.push(Buffers {
                a: self.stream.clone_htod(&halves(&a))?,
                b: self.stream.clone_htod(&halves(&b))?,
                c: self.stream.alloc_zeros(m * n)?,
            });
        }
        self.shape = (m, n, k);
        Ok(())
    }
}

impl TuneBench for Bench<'_> {
    fn check(
        &mut self,
        loaded: &LoadedArtifact,
        _: &Config,
        _: &Problem,
    ) -> kart::Result<Result<(), String>> {
        // A shape with tails, small enough for the CPU reference; never timed if wrong.
        match check_once(self.gpu, loaded, (67, 45, 40), &mut self.seed) {
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
        launch(loaded, &stream, &mut self.sets[rotation % n], p)
    }
}

fn problems() -> Vec<Problem> {
    vec![
        problem(1024, 1024, 1024),
        problem(4096, 4096, 4096),
        problem(256, 4096, 2048),
    ]
}

fn tflops(p: &Problem, us: f64) -> f64 {
    let (m, n, k) = shape(p);
    2.0 * (m * n * k) as f64 / (us * 1e-6) / 1e12
}

fn bench<'a>(gpu: &'a Gpu, seed: u64) -> Bench<'a> {
    Bench {
        gpu,
        stream: gpu.stream(),
        sets: Vec::new(),
        shape: (0, 0, 0),
        seed,
    }
}

fn tune(rt: &Runtime, gpu: &Gpu, kernel: &Kernel) -> Res<()> {
    let mut bench = bench(gpu, 42);
    let mut records = Vec::new();
    for problem in problems() {
        let (trials, record) = kart::tune::tune_problem(
            rt,
            gpu,
            kernel,
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
                tflops(&problem, *us)
            );
        }
        if let Some(r) = record {
            println!(
                "  best: {} ({:.1} µs, {:.2} TFLOP/s)",
                r.config,
                r.median_us,
                tflops(&problem, r.median_us)
            );
            records.push(r);
        }
    }
    kart::tune::save_records(Path::new("."), records)?;
    println!("kart.tune written");
    Ok(())
}

fn demo(rt: &Runtime, gpu: &Gpu, kernel: &Kernel) -> Res<bool> {
    let path = Path::new(kart::tune::TUNE_FILE);
    let tune = TuneFile::read(path, path)?;
    let mut bench = bench(gpu, 7);
    let mut ok = true;
    for problem in problems().into_iter().chain([problem(2048, 2048, 2048)]) {
        let t0 = std::time::Instant::now();
        let (config, source) = kart::tune::best(
            &tune,
            rt.lock(),
            kernel,
            &gpu.name,
            gpu.capability,
            &problem,
        )?;
        let lookup = t0.elapsed();
        let loaded = gpu.kernel(rt, KERNEL, &config)?;
        let correct = check_once(gpu, &loaded, (333, 129, 264), &mut bench.seed)?;
        ok &= correct.is_ok();
        let us = kart::tune::median_time_us(gpu, TuneSettings::default(), &mut |i| {
            bench.launch(&loaded, &config, &problem, i)
        })?;
        println!(
            "{problem:?}: best() {:.1} µs -> {config} ({source:?}); check {}; {us:.1} µs, {:.2} TFLOP/s",
            lookup.as_secs_f64() * 1e6,
            match &correct {
                Ok(rel) => format!("ok ({rel:.1e})"),
                Err(why) => format!("FAILED ({why})"),
            },
            tflops(&problem, us)
        );
    }
    Ok(ok)
}

fn main() -> Res<()> {
    let command = std::env::args().nth(1).unwrap_or_default();
    let project = Project::discover(Path::new("."))?;
    let kernel = project.kernel(KERNEL)?.clone();
    let rt = Runtime::open(Path::new("."))?;
    let gpu = Gpu::open(0)?;
    println!(
        "{} (compute capability {}), kart {}",
        gpu.name,
        gpu.capability,
        env!("CARGO_PKG_VERSION")
    );
    let ok = match command.as_str() {
        "check" => check(&rt, &gpu)?,
        "tune" => {
            tune(&rt, &gpu, &kernel)?;
            true
        }
        "demo" => demo(&rt, &gpu, &kernel)?,
        _ => {
            eprintln!(
                "usage: cute_gemm check|tune|demo (from the repository root, after `kart build`)"
            );
            std::process::exit(2);
        }
    };
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
