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

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use kart::model::Problem;
use kart::runtime::tma::{Swizzle, TensorMap, TmaType};
use kart::runtime::{Gpu, KernelArg, LoadedArtifact};

#[path = "../gemm_program.rs"]
mod program;
use program::{Gemm, Res, Shape, param, problem, relative_error, shape};

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
    Ok(relative_error(&out, (m, n), 1e-5, |i, j| {
        (0..k)
            .map(|t| f64::from(a[i * k + t]) * f64::from(b[j * k + t]))
            .sum()
    }))
}

/// This kernel's part of the program; its check shapes have tails in M, N and K (K a
/// multiple of 8: TMA's 16-byte rows), and one has whole tiles.
struct CuteGemm;

impl Gemm for CuteGemm {
    type Buffers = Buffers;
    const KERNEL: &'static str = "cute_gemm";
    const CHECK_SHAPES: &'static [Shape] =
        &[(1, 1, 8), (67, 45, 40), (256, 256, 64), (333, 129, 264)];
    const CHECK_RULE: &'static str = "rel. error limit 1e-5";
    const DEMO_CHECK: Shape = (333, 129, 264);
    const TUNE_CHECK: Shape = (67, 45, 40);
    const FLOPS_PER_MAC: f64 = 2.0;

    fn check_once(
        gpu: &Gpu,
        loaded: &LoadedArtifact,
        shape: Shape,
        seed: &mut u64,
    ) -> Res<Result<f64, String>> {
        check_once(gpu, loaded, shape, seed)
    }

    fn buffers(stream: &Arc<CudaStream>, (m, n, k): Shape, seed: &mut u64) -> Res<Buffers> {
        let (a, b) = (random(m * k, seed), random(k * n, seed));
        Ok(Buffers {
            a: stream.clone_htod(&halves(&a))?,
            b: stream.clone_htod(&halves(&b))?,
            c: stream.alloc_zeros(m * n)?,
        })
    }

    fn bytes((m, n, k): Shape) -> usize {
        (m * k + k * n) * 2 + m * n * 4
    }

    fn launch(
        loaded: &LoadedArtifact,
        stream: &CudaStream,
        buffers: &mut Buffers,
        p: &Problem,
    ) -> kart::Result<()> {
        launch(loaded, stream, buffers, p)
    }

    fn problems() -> Vec<Problem> {
        vec![
            problem(1024, 1024, 1024),
            problem(4096, 4096, 4096),
            problem(256, 4096, 2048),
        ]
    }

    fn unseen_problem() -> Problem {
        problem(2048, 2048, 2048)
    }
}

fn main() -> Res<()> {
    program::main::<CuteGemm>()
}
