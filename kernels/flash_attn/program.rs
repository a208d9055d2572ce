//! The FlashAttention kernel's own program (kernels/flash_attn and its variant
//! kernels/flash_attn_hopper, called alike), run on a GPU machine from the repository
//! root after `kart build`:
//!
//!   flash_attn check   every config of the family's kernels this GPU runs, on S in {1,
//!                      17, 128, 500, 512, 2048} (batch x heads 3) and S = 500 with batch
//!                      x heads 80 (each block of a persistent grid takes several work
//!                      items), D in {64, 128}, causal or not, against a float64 CPU
//!                      reference on random inputs (one set per shape;
//!                      output poisoned with NaN before each run: every element must be
//!                      written); passes go to kart.attest (`correct`)
//!   flash_attn tune    the library's tuner over the family's kernels, B x H in {32x32,
//!                      8x16, 1x8} at S = 512, {8x16, 1x8} at S = 2048 and 2x16 at
//!                      S = 4096, D in {64, 128}, causal or not; the winner of each goes
//!                      to kart.tune
//!   flash_attn demo    attention through the kart runtime with best(): a small shape
//!                      checked against the CPU, then time and TFLOP/s per problem
//!
//! The family is kernels/flash_attn and its variants; `--kernel NAME[,NAME...]` after
//! the command keeps only those of its kernels (`flash_attn check --kernel
//! flash_attn_hopper2` checks one variant; a tune so restricted records the best of
//! those kernels only).
//!
//! Exit 1 if any check fails.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use half::f16;
use kart::deploy::tune::{Problem, TuneBench, TuneFile, TuneSettings};
use kart::model::Config;
use kart::project::{Kernel, Project};
use kart::runtime::{Gpu, KernelArg, LoadedArtifact, Runtime};
use kart::store::sidecar::Sidecar as _;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const KERNEL: &str = "flash_attn";
const ENTRY: &str = "kart_flash_attn_fwd";

/// Random fp16 values in [-1, 1) (never zeros) from a xorshift stream.
fn random_f16(n: usize, seed: &mut u64) -> Vec<f16> {
    (0..n)
        .map(|_| {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            f16::from_f32(((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0)
        })
        .collect()
}

/// Attention in float64 on the CPU, each (batch, head) on a thread of its own (the
/// 2 x 16 x 4096 problems take seconds per head).
fn reference(
    q: &[f16],
    k: &[f16],
    v: &[f16],
    bh: usize,
    s: usize,
    d: usize,
    causal: bool,
) -> Vec<f64> {
    let wide = |x: &[f16]| x.iter().map(|h| h.to_f64()).collect::<Vec<f64>>();
    let (q, k, v) = (wide(q), wide(k), wide(v));
    let mut out = vec![0f64; bh * s * d];
    let scale = 1.0 / (d as f64).sqrt();
    std::thread::scope(|scope| {
        for (h, out) in out.chunks_mut((s * d).max(1)).enumerate() {
            let base = h * s * d;
            let (q, k, v) = (
                &q[base..base + s * d],
                &k[base..base + s * d],
                &v[base..base + s * d],
            );
            scope.spawn(move || {
                let mut scores = vec![0f64; s];
                for i in 0..s {
                    let keys = if causal { i + 1 } else { s };
                    let row = &q[i * d..(i + 1) * d];
                    let mut max = f64::NEG_INFINITY;
                    for (j, score) in scores.iter_mut().enumerate().take(keys) {
                        let dot: f64 = row
                            .iter()
                            .zip(&k[j * d..(j + 1) * d])
                            .map(|(a, b)| a * b)
                            .sum();
                        *score = dot * scale;
                        max = max.max(*score);
                    }
                    let mut sum = 0f64;
                    for score in scores.iter_mut().take(keys) {
                        *score = (*score - max).exp();
                        sum += *score;
                    }
                    let o = &mut out[i * d..(i + 1) * d];
                    for j in 0..keys {
                        let p = scores[j] / sum;
                        for (o, v) in o.iter_mut().zip(&v[j * d..(j + 1) * d]) {
                            *o += p * v;
                        }
                    }
                }
            });
        }
    });
    out
}

/// Device buffers of one problem (fp16 held as its bits).
struct Buffers {
    q: CudaSlice<u16>,
    k: CudaSlice<u16>,
    v: CudaSlice<u16>,
    o: CudaSlice<u16>,
}

fn bits(x: &[f16]) -> Vec<u16> {
    x.iter().map(|h| h.to_bits()).collect()
}

fn upload(stream: &Arc<CudaStream>, q: &[f16], k: &[f16], v: &[f16]) -> Res<Buffers> {
    Ok(Buffers {
        q: stream.clone_htod(&bits(q))?,
        k: stream.clone_htod(&bits(k))?,
        v: stream.clone_htod(&bits(v))?,
        // Poisoned: an element the kernel never writes reads back as NaN.
        o: stream.clone_htod(&vec![f16::NAN.to_bits(); q.len()])?,
    })
}

fn launch(
    loaded: &LoadedArtifact,
    stream: &CudaStream,
    b: &mut Buffers,
    bh: u32,
    seq: u32,
) -> kart::Result<()> {
    // Grid, block and shared memory come from kernel.toml's [launch] (recorded in
    // kart.lock): the batch and heads fold into one axis, so B = bh and H = 1.
    let problem: kart::model::Problem = [
        ("B".to_string(), i64::from(bh)),
        ("H".to_string(), 1),
        ("S".to_string(), i64::from(seq)),
    ]
    .into();
    let (q, _a) = b.q.device_ptr(stream);
    let (k, _b) = b.k.device_ptr(stream);
    let (v, _c) = b.v.device_ptr(stream);
    let (o, _d) = b.o.device_ptr_mut(stream);
    loaded.launch_problem(
        ENTRY,
        &problem,
        stream,
        &[
            KernelArg::Ptr(q),
            KernelArg::Ptr(k),
            KernelArg::Ptr(v),
            KernelArg::Ptr(o),
            KernelArg::I32(seq as i32),
        ],
    )
}

/// Random inputs of one shape and their float64 reference, made once and run by every
/// config of that shape.
struct Case {
    q: Vec<f16>,
    k: Vec<f16>,
    v: Vec<f16>,
    want: Vec<f64>,
    bh: usize,
    s: usize,
}

impl Case {
    fn new(bh: usize, s: usize, d: usize, causal: bool, seed: &mut u64) -> Case {
        let n = bh * s * d;
        let (q, k, v) = (
            random_f16(n, seed),
            random_f16(n, seed),
            random_f16(n, seed),
        );
        let want = reference(&q, &k, &v, bh, s, d, causal);
        Case {
            q,
            k,
            v,
            want,
            bh,
            s,
        }
    }
}

/// Runs `loaded` on a case (output poisoned first) and compares with its reference: the
/// relative error ‖out − ref‖ / ‖ref‖, or why it failed (NaN, an element never written).
fn check_once(gpu: &Gpu, loaded: &LoadedArtifact, case: &Case) -> Res<Result<f64, String>> {
    let stream = gpu.stream();
    let mut b = upload(&stream, &case.q, &case.k, &case.v)?;
    launch(loaded, &stream, &mut b, case.bh as u32, case.s as u32)?;
    let out: Vec<f16> = stream
        .clone_dtoh(&b.o)?
        .into_iter()
        .map(f16::from_bits)
        .collect();
    let (mut diff, mut norm) = (0f64, 0f64);
    for (i, (got, want)) in out.iter().zip(&case.want).enumerate() {
        let got = got.to_f64();
        if !got.is_finite() {
            return Ok(Err(format!("element {i} is {got} (never written, or NaN)")));
        }
        diff += (got - want) * (got - want);
        norm += want * want;
    }
    let rel = (diff / norm.max(1e-30)).sqrt();
    Ok(if rel < 2e-3 {
        Ok(rel)
    } else {
        Err(format!("relative error {rel:.2e}"))
    })
}

/// The configs of every kernel of the family with this head dim and causality that
/// this GPU runs, as (kernel, config).
fn configs_for(
    rt: &Runtime,
    gpu: &Gpu,
    family: &[&Kernel],
    d: i64,
    causal: i64,
) -> Res<Vec<(String, Config)>> {
    let lock = rt.lock()?;
    let problem: Problem = [("D".into(), d), ("causal".into(), causal)].into();
    let mut configs: Vec<(String, Config)> = Vec::new();
    for kernel in family {
        let mut own: Vec<Config> = lock
            .artifacts
            .iter()
            .filter(|a| {
                a.kernel == kernel.name
                    && kart::deploy::tune::matches_exact(kernel, &a.config, &problem)
                    && kart::deploy::tune::artifact_for(
                        lock,
                        &kernel.name,
                        &a.config,
                        gpu.capability,
                    )
                    .is_some()
            })
            .map(|a| a.config.clone())
            .collect();
        own.sort();
        own.dedup();
        configs.extend(own.into_iter().map(|c| (kernel.name.clone(), c)));
    }
    Ok(configs)
}

fn check(rt: &Runtime, gpu: &Gpu, family: &[&Kernel]) -> Res<bool> {
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut all_ok = true;
    let mut passed = Vec::new();
    println!(
        "correctness against float64 on the CPU, batch x heads = 3 (and 80 at S = 500: more work items than a persistent grid has blocks), rel. error limit 2e-3"
    );
    for d in [64i64, 128] {
        for causal in [0i64, 1] {
            let cases: Vec<Case> = [1usize, 17, 128, 500, 512, 2048]
                .into_iter()
                .map(|s| (3, s))
                .chain([(80, 500)])
                .map(|(bh, s)| Case::new(bh, s, d as usize, causal == 1, &mut seed))
                .collect();
            for (name, config) in configs_for(rt, gpu, family, d, causal)? {
                let loaded = gpu.kernel(rt, &name, &config)?;
                let mut worst = 0f64;
                let mut failure = None;
                for case in &cases {
                    let (bh, s) = (case.bh, case.s);
                    match check_once(gpu, &loaded, case) {
                        Ok(Ok(rel)) => worst = worst.max(rel),
                        Ok(Err(why)) => failure = Some(format!("B*H={bh} S={s}: {why}")),
                        Err(e) => failure = Some(format!("B*H={bh} S={s}: {e}")),
                    }
                    if failure.is_some() {
                        break;
                    }
                }
                match failure {
                    None => {
                        println!("  ok    {name}[{config}]  worst {worst:.2e}");
                        passed.push(loaded.artifact.clone());
                    }
                    Some(why) => {
                        all_ok = false;
                        println!("  FAIL  {name}[{config}]  {why}");
                    }
                }
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
        "{} configs correct on {}; recorded in kart.attest",
        passed.len(),
        gpu.name
    );
    Ok(all_ok)
}

/// Inputs rotated over several sets per problem so timed runs do not hit L2.
struct Bench<'a> {
    gpu: &'a Gpu,
    sets: Vec<Buffers>,
    shape: (usize, usize, usize),
    seed: u64,
    /// Check cases by (S, D, causal), shared by every config of a problem.
    cases: HashMap<(usize, usize, bool), Case>,
}

impl Bench<'_> {
    fn prepare(&mut self, problem: &Problem) -> Res<()> {
        let get = |k: &str| problem.get(k).copied().unwrap_or(1) as usize;
        let shape = (get("B") * get("H"), get("S"), get("D"));
        if self.shape == shape && !self.sets.is_empty() {
            return Ok(());
        }
        self.sets.clear();
        let n = shape.0 * shape.1 * shape.2;
        // Enough sets that together they are well over the L2 (50-60 MB on Hopper).
        let sets = (256_000_000 / (n * 8)).clamp(2, 8);
        let stream = self.gpu.stream();
        for _ in 0..sets {
            let (q, k, v) = (
                random_f16(n, &mut self.seed),
                random_f16(n, &mut self.seed),
                random_f16(n, &mut self.seed),
            );
            self.sets.push(upload(&stream, &q, &k, &v)?);
        }
        self.shape = shape;
        Ok(())
    }
}

impl TuneBench for Bench<'_> {
    fn check(
        &mut self,
        loaded: &LoadedArtifact,
        _: &Config,
        problem: &Problem,
    ) -> kart::Result<Result<(), String>> {
        // Checked on a small batch of the same S, D and causality (the CPU reference of
        // the full problem would take minutes); never timed if wrong.
        let s = problem.get("S").copied().unwrap_or(1) as usize;
        let d = problem.get("D").copied().unwrap_or(64) as usize;
        let causal = problem.get("causal") == Some(&1);
        let seed = &mut self.seed;
        let case = self
            .cases
            .entry((s, d, causal))
            .or_insert_with(|| Case::new(2, s, d, causal, seed));
        match check_once(self.gpu, loaded, case) {
            Ok(r) => Ok(r.map(|_| ())),
            Err(e) => Ok(Err(e.to_string())),
        }
    }

    fn launch(
        &mut self,
        loaded: &LoadedArtifact,
        _: &Config,
        problem: &Problem,
        rotation: usize,
    ) -> kart::Result<()> {
        self.prepare(problem)
            .map_err(|e| kart::Error::CheckFailed {
                message: e.to_string(),
                hint: None,
            })?;
        let (bh, s, _) = self.shape;
        let n = self.sets.len();
        let stream = self.gpu.stream();
        launch(
            loaded,
            &stream,
            &mut self.sets[rotation % n],
            bh as u32,
            s as u32,
        )
    }
}

fn problems() -> Vec<Problem> {
    let mut out = Vec::new();
    for (b, h, s) in [
        (32i64, 32i64, 512i64),
        (8, 16, 512),
        (1, 8, 512),
        (8, 16, 2048),
        (1, 8, 2048),
        (2, 16, 4096),
    ] {
        for d in [64i64, 128] {
            for causal in [0i64, 1] {
                out.push(
                    [
                        ("B".into(), b),
                        ("H".into(), h),
                        ("S".into(), s),
                        ("D".into(), d),
                        ("causal".into(), causal),
                    ]
                    .into_iter()
                    .collect::<BTreeMap<String, i64>>(),
                );
            }
        }
    }
    out
}

fn tflops(p: &Problem, us: f64) -> f64 {
    let g = |k: &str| p.get(k).copied().unwrap_or(1) as f64;
    let flops = 4.0 * g("B") * g("H") * g("S") * g("S") * g("D")
        / if g("causal") == 1.0 { 2.0 } else { 1.0 };
    flops / (us * 1e-6) / 1e12
}

fn tune(rt: &Runtime, gpu: &Gpu, family: &[&Kernel]) -> Res<()> {
    let mut bench = Bench {
        gpu,
        sets: Vec::new(),
        shape: (0, 0, 0),
        seed: 42,
        cases: HashMap::new(),
    };
    let mut records = Vec::new();
    for problem in problems() {
        let (trials, record) = kart::deploy::tune::tune_problem(
            rt,
            gpu,
            family,
            &problem,
            TuneSettings::default(),
            &mut bench,
        )?;
        println!("problem {problem:?}:");
        for t in &trials {
            match &t.result {
                Ok(us) => println!(
                    "  {:>9.1} µs  {:>6.1} TFLOP/s  {}[{}]",
                    us,
                    tflops(&problem, *us),
                    t.kernel,
                    t.config
                ),
                Err(why) => println!(
                    "  {:>9}     {:>13}  {}[{}]  ({why})",
                    "-", "-", t.kernel, t.config
                ),
            }
        }
        for t in trials.iter().filter(|t| t.runoff_us.is_some()) {
            let us = t.runoff_us.unwrap_or(f64::NAN);
            println!("  run-off {us:>9.1} µs  {}[{}]", t.kernel, t.config);
        }
        if let Some(r) = record {
            println!(
                "  best: {}[{}] ({:.1} µs, {:.1} TFLOP/s; runner-up {})",
                r.implementation(),
                r.config,
                r.median_us,
                tflops(&problem, r.median_us),
                r.runner_up_us
                    .map_or("-".to_string(), |u| format!("{u:.1} µs"))
            );
            records.push(r);
        }
    }
    kart::deploy::tune::save_records(Path::new("."), records)?;
    println!("kart.tune written");
    Ok(())
}

fn demo(rt: &Runtime, gpu: &Gpu, family: &[&Kernel]) -> Res<bool> {
    let path = Path::new(kart::deploy::tune::TUNE_FILE);
    let tune = TuneFile::read(path, path)?;
    let mut bench = Bench {
        gpu,
        sets: Vec::new(),
        shape: (0, 0, 0),
        seed: 7,
        cases: HashMap::new(),
    };
    let mut ok = true;
    for problem in problems() {
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
        let d = problem["D"] as usize;
        let case = Case::new(2, 128, d, problem["causal"] == 1, &mut bench.seed);
        let correct = check_once(gpu, &loaded, &case)?;
        ok &= correct.is_ok();
        let record = kart::deploy::tune::median_time_us(gpu, TuneSettings::default(), &mut |i| {
            bench.launch(&loaded, &config, &problem, i)
        })?;
        println!(
            "{problem:?}: best() {:.1} µs -> {kernel}[{config}] ({source:?}); small-shape check {}; {:.1} µs, {:.1} TFLOP/s",
            lookup.as_secs_f64() * 1e6,
            match &correct {
                Ok(rel) => format!("ok ({rel:.1e})"),
                Err(why) => format!("FAILED ({why})"),
            },
            record,
            tflops(&problem, record)
        );
    }
    Ok(ok)
}

/// The family's kernels named by `--kernel NAME[,NAME...]` in `args` (all without it),
/// or why not: a missing list, or a name that is not one of the family's.
fn select<'a>(family: Vec<&'a Kernel>, args: &[String]) -> Result<Vec<&'a Kernel>, String> {
    let Some(at) = args.iter().position(|a| a == "--kernel") else {
        return match args.first() {
            Some(other) => Err(format!("unknown argument `{other}`")),
            None => Ok(family),
        };
    };
    let names: Vec<&str> = family.iter().map(|k| k.name.as_str()).collect();
    let Some(list) = args.get(at + 1) else {
        return Err(format!(
            "--kernel needs a name (the family: {})",
            names.join(", ")
        ));
    };
    if let Some(extra) = args
        .iter()
        .enumerate()
        .find(|(i, _)| *i != at && *i != at + 1)
    {
        return Err(format!("unknown argument `{}`", extra.1));
    }
    let wanted: Vec<&str> = list.split(',').filter(|n| !n.is_empty()).collect();
    if let Some(unknown) = wanted.iter().find(|n| !names.contains(n)) {
        return Err(format!(
            "`{unknown}` is not a kernel of the {KERNEL} family ({})",
            names.join(", ")
        ));
    }
    if wanted.is_empty() {
        return Err(format!(
            "--kernel needs a name (the family: {})",
            names.join(", ")
        ));
    }
    Ok(family
        .into_iter()
        .filter(|k| wanted.contains(&k.name.as_str()))
        .collect())
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let command = args.first().cloned().unwrap_or_default();
    let project = Project::discover(Path::new("."))?;
    let family = match select(project.family(KERNEL)?, args.get(1..).unwrap_or(&[])) {
        Ok(family) => family,
        Err(why) => {
            eprintln!("error: {why}");
            eprintln!(
                "usage: flash_attn check | tune | demo [--kernel NAME[,NAME...]] (from the repository root)"
            );
            std::process::exit(2);
        }
    };
    let rt = Runtime::open(Path::new("."))?;
    let gpu = Gpu::open(0)?;
    println!(
        "{} (compute capability {}), kart {}",
        gpu.name,
        gpu.capability,
        env!("CARGO_PKG_VERSION")
    );
    let ok = match command.as_str() {
        "check" => check(&rt, &gpu, &family)?,
        "tune" => {
            tune(&rt, &gpu, &family)?;
            true
        }
        "demo" => demo(&rt, &gpu, &family)?,
        _ => {
            eprintln!(
                "usage: flash_attn check | tune | demo [--kernel NAME[,NAME...]] (from the repository root)"
            );
            std::process::exit(2);
        }
    };
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
