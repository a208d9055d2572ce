//! The fused FP8 dual GEMM + SiLU's own program (kernels/dual_gemm_silu: C =
//! silu(A·B1ᵀ·sA·sB1) * (A·B2ᵀ·sA·sB2), e4m3 in, fp16 out, wgmma fed by TMA; and its
//! split-K variant kernels/dual_gemm_silu_splitk, called the same way), run on an
//! H100/H200 from the repository root after `kart build`:
//!
//!   dual_gemm_silu check [KERNEL]    every config this GPU runs (of both kernels, or of
//!                                    KERNEL), on shapes with tails in M and N, against a
//!                                    float64 CPU reference on fresh random inputs (output
//!                                    poisoned first); passes go to kart.attest (`correct`)
//!   dual_gemm_silu tune [MxNxK ...]  the library's tuner over both kernels, on the
//!                                    benchmark and test shapes and the small-M, long-K
//!                                    ones (or on these); winners go to kart.tune
//!   dual_gemm_silu demo              best() per problem, a checked small run, then time
//!                                    and TFLOP/s
//!
//! Each launch passes three TMA descriptors that kart encodes (bytes, boxes of the
//! config's BM x 128 and BN x 128 with the 128-byte swizzle) and takes its grid, block
//! and shared memory from kernel.toml's [launch]. Exit 1 if any check fails.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use kart::model::Problem;
use kart::runtime::tma::{Swizzle, TensorMap, TmaType};
use kart::runtime::{Gpu, KernelArg, LoadedArtifact};

#[path = "../gemm_program.rs"]
mod program;
use program::{Gemm, Res, Shape, param, problem, shape};

const ENTRY: &str = "dual_gemm_silu";

fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// Standard normal samples cast to e4m3 (as the competition makes its inputs), as
/// bytes.
fn random_fp8(n: usize, seed: &mut u64) -> Vec<u8> {
    let uniform = |seed: &mut u64| ((next(seed) >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    (0..n)
        .map(|_| {
            // Box-Muller: one normal sample from two uniform ones.
            let (u, v) = (uniform(seed), uniform(seed));
            let normal = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos();
            to_fp8(normal as f32)
        })
        .collect()
}

/// The nearest e4m3 value (ties to even), saturating at ±448.
fn to_fp8(x: f32) -> u8 {
    let sign = if x < 0.0 { 0x80 } else { 0 };
    let a = x.abs().min(448.0);
    if a < 2f32.powi(-6) {
        // Subnormal: a multiple of 2^-9; 8 of them is the smallest normal.
        let m = (a * 512.0).round_ties_even() as u8;
        return sign | m.min(8);
    }
    let mut e = a.log2().floor() as i32;
    let mut m = ((a / 2f32.powi(e) - 1.0) * 8.0).round_ties_even() as i32;
    if m == 8 {
        m = 0;
        e += 1;
    }
    if e > 8 || (e == 8 && m > 6) {
        return sign | 0x7E;
    }
    sign | (((e + 7) as u8) << 3) | m as u8
}

/// The value of an e4m3 byte (bias 7; exponent field 0 is subnormal).
fn fp8_value(b: u8) -> f64 {
    debug_assert!(b & 0x7F != 0x7F, "e4m3 NaN");
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((b >> 3) & 0xF);
    let mant = f64::from(b & 7);
    sign * if exp == 0 {
        mant / 8.0 * 2f64.powi(-6)
    } else {
        (1.0 + mant / 8.0) * 2f64.powi(exp - 7)
    }
}

/// A scale in (0, 1].
fn random_scale(seed: &mut u64) -> f32 {
    ((next(seed) >> 40) % 1000 + 1) as f32 / 1000.0
}

/// Device buffers of one problem: A (M x K), B1 and B2 (N x K) e4m3, the three scales,
/// C (M x N) fp16.
struct Buffers {
    a: CudaSlice<u8>,
    b1: CudaSlice<u8>,
    b2: CudaSlice<u8>,
    scales: CudaSlice<f32>,
    c: CudaSlice<u16>,
}

impl Buffers {
    fn new(
        stream: &Arc<CudaStream>,
        (m, n, k): (usize, usize, usize),
        seed: &mut u64,
    ) -> Res<(Buffers, Inputs)> {
        let inputs = Inputs {
            a: random_fp8(m * k, seed),
            b1: random_fp8(n * k, seed),
            b2: random_fp8(n * k, seed),
            scales: [random_scale(seed), random_scale(seed), random_scale(seed)],
        };
        let bufs = Buffers {
            a: stream.clone_htod(&inputs.a)?,
            b1: stream.clone_htod(&inputs.b1)?,
            b2: stream.clone_htod(&inputs.b2)?,
            scales: stream.clone_htod(&inputs.scales)?,
            // Poisoned: an element the kernel never writes reads back as NaN.
            c: stream.clone_htod(&vec![0x7E00u16; m * n])?,
        };
        Ok((bufs, inputs))
    }
}

/// The host copy of a problem's inputs.
struct Inputs {
    a: Vec<u8>,
    b1: Vec<u8>,
    b2: Vec<u8>,
    scales: [f32; 3],
}

fn launch(
    loaded: &LoadedArtifact,
    stream: &CudaStream,
    bufs: &mut Buffers,
    p: &Problem,
) -> kart::Result<()> {
    let (m, n, k) = shape(p);
    let cfg = &loaded.artifact.config;
    let (bm, bn) = (param(cfg, "BM"), param(cfg, "BN"));
    let (a, _a) = bufs.a.device_ptr(stream);
    let (b1, _b1) = bufs.b1.device_ptr(stream);
    let (b2, _b2) = bufs.b2.device_ptr(stream);
    let (s, _s) = bufs.scales.device_ptr(stream);
    let (c, _c) = bufs.c.device_ptr_mut(stream);
    let k64 = k as u64;
    let map = |ptr: u64, rows: usize, tile_rows: u32| {
        TensorMap::tiled(
            TmaType::U8,
            ptr,
            &[rows as u64, k64],
            &[k64, 1],
            &[tile_rows, 128],
            Swizzle::B128,
        )
    };
    loaded.launch_problem(
        ENTRY,
        p,
        stream,
        &[
            KernelArg::TensorMap(map(a, m, bm)?),
            KernelArg::TensorMap(map(b1, n, bn)?),
            KernelArg::TensorMap(map(b2, n, bn)?),
            KernelArg::Ptr(s),
            KernelArg::Ptr(s + 4),
            KernelArg::Ptr(s + 8),
            KernelArg::Ptr(c),
            KernelArg::I32(m as i32),
            KernelArg::I32(n as i32),
            KernelArg::I32(k as i32),
        ],
    )
}

/// Runs `loaded` on fresh inputs of (m, n, k) and compares with float64 on the CPU:
/// the worst |C − ref| over the largest |ref| (elements whose reference fits in fp16),
/// or why it failed. Elementwise relative errors are no test here: where A·B2ᵀ nearly
/// cancels, any fp32 accumulation is off by more than the tiny result.
fn check_once(
    gpu: &Gpu,
    loaded: &LoadedArtifact,
    (m, n, k): (usize, usize, usize),
    seed: &mut u64,
) -> Res<Result<f64, String>> {
    let stream = gpu.stream();
    let (mut bufs, inputs) = Buffers::new(&stream, (m, n, k), seed)?;
    launch(loaded, &stream, &mut bufs, &problem(m, n, k))?;
    let out = stream.clone_dtoh(&bufs.c)?;
    let value = |v: &[u8]| v.iter().map(|b| fp8_value(*b)).collect::<Vec<f64>>();
    let (a, b1, b2) = (value(&inputs.a), value(&inputs.b1), value(&inputs.b2));
    let [sa, sb1, sb2] = inputs.scales.map(f64::from);
    let dot = |x: &[f64], y: &[f64]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f64>();
    let (mut worst, mut largest) = (0f64, 0f64);
    for i in 0..m {
        let row = &a[i * k..(i + 1) * k];
        for j in 0..n {
            let r1 = dot(row, &b1[j * k..(j + 1) * k]) * sa * sb1;
            let r2 = dot(row, &b2[j * k..(j + 1) * k]) * sa * sb2;
            let want = r1 / (1.0 + (-r1).exp()) * r2;
            if want.abs() > 65000.0 {
                continue; // beyond fp16
            }
            let got = f64::from(half::f16::from_bits(out[i * n + j]).to_f32());
            if !got.is_finite() {
                return Ok(Err(format!(
                    "C[{i}][{j}] is {got} (never written, or NaN); want {want}"
                )));
            }
            worst = worst.max((got - want).abs());
            largest = largest.max(want.abs());
        }
    }
    // Outputs below 1 are judged on an absolute scale (fp16 holds them to about 1e-3).
    let scaled = worst / largest.max(1.0);
    Ok(if scaled < 2e-3 {
        Ok(scaled)
    } else {
        Err(format!(
            "worst error {worst:.3e} is {scaled:.2e} of the largest |C| ({largest:.3e})"
        ))
    })
}

/// This kernel's part of the program; its check shapes have tails in M, N and K (K a
/// multiple of 16: TMA's 16-byte rows), one has whole tiles, one the long K of the
/// benchmark.
struct DualGemmSilu;

impl Gemm for DualGemmSilu {
    type Buffers = Buffers;
    const KERNEL: &'static str = "dual_gemm_silu";
    const CHECK_SHAPES: &'static [Shape] = &[
        (1, 1, 16),
        (67, 45, 48),
        (256, 256, 512),
        (333, 129, 1040),
        (64, 64, 7168),
    ];
    const CHECK_RULE: &'static str = "worst |C - ref| / max |ref| below 2e-3";
    const DEMO_CHECK: Shape = (333, 129, 1040);
    const TUNE_CHECK: Shape = (67, 45, 7168);
    const FLOPS_PER_MAC: f64 = 4.0;

    fn check_once(
        gpu: &Gpu,
        loaded: &LoadedArtifact,
        shape: Shape,
        seed: &mut u64,
    ) -> Res<Result<f64, String>> {
        check_once(gpu, loaded, shape, seed)
    }

    fn buffers(stream: &Arc<CudaStream>, (m, n, k): Shape, seed: &mut u64) -> Res<Buffers> {
        Ok(Buffers::new(stream, (m, n, k), seed)?.0)
    }

    fn bytes((m, n, k): Shape) -> usize {
        m * k + 2 * k * n + m * n * 2
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
        // The benchmark shapes, the test shapes, then few output tiles over a long K
        // (where the split-K variant may win).
        [
            (256, 4096, 7168),
            (512, 4096, 7168),
            (256, 3072, 4096),
            (512, 3072, 7168),
            (256, 512, 256),
            (1536, 512, 7168),
            (3072, 1024, 1536),
            (7168, 1024, 256),
            (4608, 384, 7168),
            (512, 768, 7168),
            (4096, 768, 512),
            (128, 2048, 7168),
            (128, 4096, 7168),
        ]
        .into_iter()
        .map(|(m, n, k)| problem(m, n, k))
        .collect()
    }

    fn unseen_problem() -> Problem {
        problem(300, 1000, 2048)
    }
}

fn main() -> Res<()> {
    program::main::<DualGemmSilu>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fp8_round_trips() {
        for b in 0u8..=255 {
            if b & 0x7F == 0x7F {
                continue; // NaN
            }
            let v = fp8_value(b) as f32;
            let back = to_fp8(v);
            // +0 and -0 are the only two bytes of one value.
            assert!(
                back == b || (v == 0.0 && back & 0x7F == 0),
                "{b:#x} -> {v} -> {back:#x}"
            );
        }
        assert_eq!(fp8_value(to_fp8(1000.0)), 448.0);
        assert_eq!(fp8_value(to_fp8(1.0625)), 1.0); // a tie, to even
        assert_eq!(fp8_value(to_fp8(1.1875)), 1.25); // a tie, to even
    }
}
