//! The tiled fp32 GEMM's own program (kernels/sgemm), run on a GPU machine from the
//! repository root after `kart build`:
//!
//!   sgemm check   every config this GPU runs, on shapes with tails in M, N and K,
//!                 against a float64 CPU reference on fresh random inputs (output
//!                 poisoned with NaN first); passes go to kart.attest (`correct`)
//!   sgemm tune    the library's tuner over a few (M, N, K); winners go to kart.tune
//!   sgemm demo    best() per problem, a checked small run, then time and TFLOP/s
//!
//! Every launch takes its grid and block from kernel.toml's [launch] (the problem's M,
//! N, K and the config's derived THREADS). Exit 1 if any check fails.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use kart::model::Problem;
use kart::runtime::{Gpu, KernelArg, LoadedArtifact};

#[path = "../gemm_program.rs"]
mod program;
use program::{Gemm, Res, Shape, problem, relative_error, shape};

const ENTRY: &str = "kart_sgemm";

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

/// Device buffers of one problem.
struct Buffers {
    a: CudaSlice<f32>,
    b: CudaSlice<f32>,
    c: CudaSlice<f32>,
}

fn launch(
    loaded: &LoadedArtifact,
    stream: &CudaStream,
    bufs: &mut Buffers,
    p: &Problem,
) -> kart::Result<()> {
    let (m, n, k) = shape(p);
    let (a, _a) = bufs.a.device_ptr(stream);
    let (b, _b) = bufs.b.device_ptr(stream);
    let (c, _c) = bufs.c.device_ptr_mut(stream);
    loaded.launch_problem(
        ENTRY,
        p,
        stream,
        &[
            KernelArg::Ptr(a),
            KernelArg::Ptr(b),
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
    let (a, b) = (random(m * k, seed), random(k * n, seed));
    let mut bufs = Buffers {
        a: stream.clone_htod(&a)?,
        b: stream.clone_htod(&b)?,
        // Poisoned: an element the kernel never writes reads back as NaN.
        c: stream.clone_htod(&vec![f32::NAN; m * n])?,
    };
    launch(loaded, &stream, &mut bufs, &problem(m, n, k))?;
    let out = stream.clone_dtoh(&bufs.c)?;
    Ok(relative_error(&out, (m, n), 1e-5, |i, j| {
        (0..k)
            .map(|t| f64::from(a[i * k + t]) * f64::from(b[t * n + j]))
            .sum()
    }))
}

/// This kernel's part of the program; its check shapes have tails in every dimension,
/// and one has whole tiles.
struct Sgemm;

impl Gemm for Sgemm {
    type Buffers = Buffers;
    const KERNEL: &'static str = "sgemm";
    const CHECK_SHAPES: &'static [Shape] =
        &[(1, 1, 1), (67, 45, 33), (256, 256, 64), (333, 129, 257)];
    const CHECK_RULE: &'static str = "rel. error limit 1e-5";
    const DEMO_CHECK: Shape = (333, 129, 257);
    const TUNE_CHECK: Shape = (67, 45, 33);
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
            a: stream.clone_htod(&a)?,
            b: stream.clone_htod(&b)?,
            c: stream.alloc_zeros(m * n)?,
        })
    }

    fn bytes((m, n, k): Shape) -> usize {
        (m * k + k * n + m * n) * 4
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
    program::main::<Sgemm>()
}
