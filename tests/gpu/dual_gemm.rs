//! The repository's FP8 dual GEMM + SiLU and its split-K variant from Rust: called the
//! same way, the variant reduces its partial sums in a fixed order, so on inputs whose
//! sums are exact it gives the base's bits, and the same bits on every run.

use cudarc::driver::{DevicePtr, DevicePtrMut};
use kart::runtime::tma::{Swizzle, TensorMap, TmaType};
use kart::runtime::{Gpu, KernelArg, Runtime};

use crate::{Fixture, SKIP, TestResult, config, repo_root};

/// e4m3 bytes of ±0.5, ±1, ±2 and 0: every product a multiple of 1/4 and every k-tile's
/// sum of 128 of them under 2^11 quarters, so the tensor cores' partial sums, their
/// promotion into fp32 and the split's reduction are all exact, in any grouping.
fn exact_fp8(n: usize, salt: usize) -> Vec<u8> {
    const VALUES: [u8; 7] = [0x30, 0x38, 0x40, 0x00, 0xB0, 0xB8, 0xC0];
    (0..n)
        .map(|i| VALUES[(i * 31 + salt * 7 + i / 5) % 7])
        .collect()
}

fn value(b: u8) -> f64 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    match b & 0x7F {
        0x00 => 0.0,
        0x30 => 0.5 * sign,
        0x38 => sign,
        0x40 => 2.0 * sign,
        other => unreachable!("not one of the test's values: {other:#x}"),
    }
}

/// Split-K configs (M = 67 and N = 100 off every tile, N = 128 on them; K of 17 k-tiles,
/// more than one per block of every split) against the base's default config and a
/// float64 reference; each split-K config runs three times.
pub(crate) fn split_k_variant_matches_its_base_bit_for_bit(_: &Fixture, gpu: &Gpu) -> TestResult {
    if gpu.capability.major != 9 {
        return Err(format!(
            "{SKIP}the dual GEMM's sm_90a cubins run on compute capability 9.0 only, not {}",
            gpu.capability
        ));
    }
    let rt = Runtime::open(&repo_root()).map_err(|e| e.to_string())?;
    let e = |e: kart::error::Error| e.to_string();
    let d = |e: cudarc::driver::DriverError| e.to_string();
    let stream = gpu.stream();
    let base = config(&[
        ("BM", 128),
        ("BN", 64),
        ("PROMOTE", 1),
        ("STAGES", 4),
        ("STAGGER", 0),
        ("SERIAL", 0),
    ]);
    let splits = [(128, 64, 3), (64, 96, 6), (128, 96, 4), (64, 64, 2)];
    for (m, n, k) in [(67usize, 100usize, 17 * 128usize), (67, 128, 17 * 128)] {
        let (a, b1, b2) = (
            exact_fp8(m * k, 1),
            exact_fp8(n * k, 2),
            exact_fp8(n * k, 3),
        );
        // Powers of two small enough that silu(r1) * r2 stays inside fp16 (the sums reach
        // a few thousand: at scales near 1 the product overflows to inf).
        let scales = [1.0f32 / 64.0, 1.0 / 16.0, 0.25];
        let ad = stream.clone_htod(&a).map_err(d)?;
        let b1d = stream.clone_htod(&b1).map_err(d)?;
        let b2d = stream.clone_htod(&b2).map_err(d)?;
        let sd = stream.clone_htod(&scales).map_err(d)?;
        let problem: kart::model::Problem = [
            ("M".to_string(), m as i64),
            ("N".to_string(), n as i64),
            ("K".to_string(), k as i64),
        ]
        .into();
        let run = |kernel: &str, cfg: &kart::model::Config| -> Result<Vec<u16>, String> {
            let loaded = gpu.kernel(&rt, kernel, cfg).map_err(e)?;
            let param = |p: &str| match cfg.get(p) {
                Some(kart::model::ParamValue::Int(v)) => Ok(*v as u32),
                _ => Err(format!("{kernel} [{cfg}] has no integer param {p}")),
            };
            let (bm, bn) = (param("BM")?, param("BN")?);
            let mut cd = stream.clone_htod(&vec![0x7E00u16; m * n]).map_err(d)?;
            let (ap, _a) = ad.device_ptr(&stream);
            let (b1p, _b1) = b1d.device_ptr(&stream);
            let (b2p, _b2) = b2d.device_ptr(&stream);
            let (sp, _s) = sd.device_ptr(&stream);
            let (cp, _c) = cd.device_ptr_mut(&stream);
            let map = |ptr: u64, rows: usize, box_rows: u32| {
                TensorMap::tiled(
                    TmaType::U8,
                    ptr,
                    &[rows as u64, k as u64],
                    &[k as u64, 1],
                    &[box_rows, 128],
                    Swizzle::B128,
                )
                .map_err(e)
            };
            let args = [
                KernelArg::TensorMap(map(ap, m, bm)?),
                KernelArg::TensorMap(map(b1p, n, bn)?),
                KernelArg::TensorMap(map(b2p, n, bn)?),
                KernelArg::Ptr(sp),
                KernelArg::Ptr(sp + 4),
                KernelArg::Ptr(sp + 8),
                KernelArg::Ptr(cp),
                KernelArg::I32(m as i32),
                KernelArg::I32(n as i32),
                KernelArg::I32(k as i32),
            ];
            loaded
                .launch_problem("dual_gemm_silu", &problem, &stream, &args)
                .map_err(e)?;
            drop((_a, _b1, _b2, _s, _c));
            stream.clone_dtoh(&cd).map_err(d)
        };
        let want = run("dual_gemm_silu", &base)?;
        // The base against float64: the sums are exact, so only SiLU and fp16 differ.
        let (mut worst, mut largest) = (0f64, 0f64);
        for i in 0..m {
            for j in 0..n {
                let dot = |b: &[u8]| -> f64 {
                    (0..k)
                        .map(|x| value(a[i * k + x]) * value(b[j * k + x]))
                        .sum()
                };
                let (sa, sb1, sb2) = (
                    f64::from(scales[0]),
                    f64::from(scales[1]),
                    f64::from(scales[2]),
                );
                let r1 = dot(&b1) * sa * sb1;
                let r2 = dot(&b2) * sa * sb2;
                let reference = r1 / (1.0 + (-r1).exp()) * r2;
                let got = f64::from(half::f16::from_bits(want[i * n + j]).to_f32());
                if !got.is_finite() {
                    return Err(format!("base: C[{i}][{j}] = {got}, want {reference}"));
                }
                worst = worst.max((got - reference).abs());
                largest = largest.max(reference.abs());
            }
        }
        if worst > 2e-3 * largest.max(1.0) {
            return Err(format!(
                "base [{base}] on {m}x{n}x{k}: worst error {worst:.3e} of {largest:.3e}"
            ));
        }
        for (bm, bn, split) in splits {
            let cfg = config(&[("BM", bm), ("BN", bn), ("STAGES", 4), ("SPLIT", split)]);
            for attempt in 0..3 {
                let got = run("dual_gemm_silu_splitk", &cfg)?;
                if let Some(at) = (0..m * n).find(|&i| got[i] != want[i]) {
                    return Err(format!(
                        "dual_gemm_silu_splitk [{cfg}] on {m}x{n}x{k}, run {attempt}: C[{}][{}] has bits {:#06x}, the base {:#06x}",
                        at / n,
                        at % n,
                        got[at],
                        want[at]
                    ));
                }
            }
        }
        println!(
            "    {m}x{n}x{k}: base within {worst:.1e} of float64 (max |C| {largest:.1e}); {} split-K configs gave its bits 3 times each",
            splits.len()
        );
    }
    Ok(())
}
