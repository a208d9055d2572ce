//! The repository's Hopper kernels from Rust: a CuTe GEMM with tensor maps and a
//! cluster launch, and the FlashAttention variant chosen by `best()`.

use kart::project::Project;
use kart::runtime::{Gpu, Runtime};

use crate::{Fixture, SKIP, TestResult, config, repo_root};

/// The repository's CuTe GEMM (a template entry, two TMA descriptors kart encodes) on a
/// problem with M and N off the tiles, against a float64 reference; then the cluster
/// check launched in clusters of 2 through `cuLaunchKernelEx`.
pub(crate) fn tma_template_entry_and_cluster_launch_from_rust(
    _: &Fixture,
    gpu: &Gpu,
) -> TestResult {
    use cudarc::driver::{DevicePtr, DevicePtrMut};
    use kart::runtime::tma::{Swizzle, TensorMap, TmaType};
    use kart::runtime::{KernelArg, LaunchDims};
    if gpu.capability.major != 9 {
        return Err(format!(
            "{SKIP}the repository's sm_90a cubins run on compute capability 9.0 only, not {}",
            gpu.capability
        ));
    }
    let rt = Runtime::open(&repo_root()).map_err(|e| e.to_string())?;
    let e = |e: kart::error::Error| e.to_string();
    let d = |e: cudarc::driver::DriverError| e.to_string();
    let (m, n, k) = (200usize, 136usize, 264usize);
    let stream = gpu.stream();
    let a: Vec<half::f16> = (0..m * k)
        .map(|i| half::f16::from_f32(((i * 37 % 101) as f32 - 50.0) / 64.0))
        .collect();
    let b: Vec<half::f16> = (0..n * k)
        .map(|i| half::f16::from_f32(((i * 53 % 97) as f32 - 48.0) / 64.0))
        .collect();
    let bits = |v: &[half::f16]| v.iter().map(|h| h.to_bits()).collect::<Vec<u16>>();
    let ad = stream.clone_htod(&bits(&a)).map_err(d)?;
    let bd = stream.clone_htod(&bits(&b)).map_err(d)?;
    for (bm, bn, stages) in [(128, 128, 4), (64, 256, 3), (64, 64, 3)] {
        let config = config(&[("BM", bm), ("BN", bn), ("BK", 64), ("STAGES", stages)]);
        let loaded = gpu.kernel(&rt, "cute_gemm", &config).map_err(e)?;
        let mut cd = stream.clone_htod(&vec![f32::NAN; m * n]).map_err(d)?;
        let (ap, _ga) = ad.device_ptr(&stream);
        let (bp, _gb) = bd.device_ptr(&stream);
        let (cp, _gc) = cd.device_ptr_mut(&stream);
        let ta = TensorMap::tiled(
            TmaType::F16,
            ap,
            &[m as u64, k as u64],
            &[k as u64, 1],
            &[bm as u32, 64],
            Swizzle::B128,
        )
        .map_err(e)?;
        let tb = TensorMap::tiled(
            TmaType::F16,
            bp,
            &[n as u64, k as u64],
            &[k as u64, 1],
            &[bn as u32, 64],
            Swizzle::B128,
        )
        .map_err(e)?;
        let problem = [
            ("M".to_string(), m as i64),
            ("N".to_string(), n as i64),
            ("K".to_string(), k as i64),
        ]
        .into_iter()
        .collect();
        loaded
            .launch_problem(
                "cute_gemm",
                &problem,
                &stream,
                &[
                    KernelArg::TensorMap(ta),
                    KernelArg::TensorMap(tb),
                    KernelArg::Ptr(cp),
                    KernelArg::I32(m as i32),
                    KernelArg::I32(n as i32),
                    KernelArg::I32(k as i32),
                ],
            )
            .map_err(e)?;
        drop((_ga, _gb, _gc));
        let c = stream.clone_dtoh(&cd).map_err(d)?;
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k)
                    .map(|x| f64::from(a[i * k + x].to_f32()) * f64::from(b[j * k + x].to_f32()))
                    .sum();
                let got = f64::from(c[i * n + j]);
                if (got - want).abs() > 1e-3 * want.abs().max(1.0) {
                    return Err(format!("{config}: C[{i}][{j}] = {got}, want {want}"));
                }
            }
        }
        // A tensor map passed where a pointer belongs is refused before the driver.
        let wrong = loaded.launch_problem("cute_gemm", &problem, &stream, &[KernelArg::Ptr(cp)]);
        if wrong.is_ok() {
            return Err("a launch with the wrong arguments was not refused".into());
        }
    }
    // Clusters of 2 along x: each block reports its rank in its cluster and the size.
    let config = config(&[("BM", 64), ("BN", 64), ("BK", 64), ("STAGES", 3)]);
    let loaded = gpu.kernel(&rt, "cute_gemm", &config).map_err(e)?;
    let mut out = stream.clone_htod(&vec![-1i32; 8]).map_err(d)?;
    let (op, guard) = out.device_ptr_mut(&stream);
    let dims = LaunchDims {
        grid: (4, 2, 1),
        block: (32, 1, 1),
        shared_bytes: 0,
    };
    loaded
        .launch_cluster(
            "cluster_ranks",
            dims,
            (2, 1, 1),
            &stream,
            &[KernelArg::Ptr(op)],
        )
        .map_err(e)?;
    if loaded
        .launch_cluster(
            "cluster_ranks",
            LaunchDims {
                grid: (3, 1, 1),
                ..dims
            },
            (2, 1, 1),
            &stream,
            &[KernelArg::Ptr(op)],
        )
        .is_ok()
    {
        return Err("a grid of 3 blocks in clusters of 2 was not refused".into());
    }
    drop(guard);
    let ranks = stream.clone_dtoh(&out).map_err(d)?;
    let want: Vec<i32> = (0..8).map(|i| (i % 2) + 256 * 2).collect();
    if ranks != want {
        return Err(format!("cluster ranks {ranks:?}, want {want:?}"));
    }
    Ok(())
}

/// The repository's FlashAttention family: with no tuning record `best()` picks the
/// Hopper variant on a 9.0 GPU (its exact `sm_90a` cubin before `sm_90`), and both
/// kernels, launched with the same call (q, k, v, o, S) and problem, agree; kart made
/// the variant's three tensor maps and its head count from that call.
pub(crate) fn a_variant_is_called_as_its_base_and_chosen_on_hopper(
    _: &Fixture,
    gpu: &Gpu,
) -> TestResult {
    use cudarc::driver::{DevicePtr, DevicePtrMut};
    use kart::runtime::KernelArg;
    let root = repo_root();
    let rt = Runtime::open(&root).map_err(|e| e.to_string())?;
    let project = Project::discover(&root).map_err(|e| e.to_string())?;
    let family = project.family("flash_attn").map_err(|e| e.to_string())?;
    let e = |e: kart::error::Error| e.to_string();
    let d = |e: cudarc::driver::DriverError| e.to_string();
    let (b, h, s, hd) = (2usize, 3usize, 300usize, 64usize);
    let problem: kart::model::Problem = [
        ("B".to_string(), b as i64),
        ("H".to_string(), h as i64),
        ("S".to_string(), s as i64),
        ("D".to_string(), hd as i64),
        ("causal".to_string(), 1),
    ]
    .into();
    let none = kart::deploy::tune::TuneFile::default();
    let choice = kart::deploy::tune::best(
        &none,
        rt.lock().map_err(|e| e.to_string())?,
        &family,
        &gpu.name,
        gpu.capability,
        &problem,
    )
    .map_err(e)?;
    let want_kernel = if gpu.capability.major == 9 {
        "flash_attn_hopper"
    } else {
        "flash_attn"
    };
    if choice.kernel != want_kernel {
        return Err(format!(
            "best() chose {} [{}], want {want_kernel}",
            choice.kernel, choice.config
        ));
    }
    if gpu.capability.major != 9 {
        // The first half (the choice of the family's kernel) ran and passed; the
        // second needs the Hopper kernel, which only 9.0 loads.
        return Err(format!(
            "{SKIP}best() chose the portable kernel correctly; the wgmma half needs compute capability 9.0, not {}",
            gpu.capability
        ));
    }
    let mma = kart::deploy::tune::best(
        &none,
        rt.lock().map_err(|e| e.to_string())?,
        &family[..1],
        &gpu.name,
        gpu.capability,
        &problem,
    )
    .map_err(e)?;
    let stream = gpu.stream();
    let n = b * h * s * hd;
    let input = |salt: usize| -> Vec<u16> {
        (0..n)
            .map(|i| half::f16::from_f32((((i * 37 + salt) % 101) as f32 - 50.0) / 50.0).to_bits())
            .collect()
    };
    let (q, k, v) = (input(1), input(2), input(3));
    let qd = stream.clone_htod(&q).map_err(d)?;
    let kd = stream.clone_htod(&k).map_err(d)?;
    let vd = stream.clone_htod(&v).map_err(d)?;
    let mut outputs = Vec::new();
    for pick in [&choice, &mma] {
        let loaded = gpu.kernel(&rt, &pick.kernel, &pick.config).map_err(e)?;
        let mut od = stream
            .clone_htod(&vec![half::f16::NAN.to_bits(); n])
            .map_err(d)?;
        let (qp, _a) = qd.device_ptr(&stream);
        let (kp, _b) = kd.device_ptr(&stream);
        let (vp, _c) = vd.device_ptr(&stream);
        let (op, _o) = od.device_ptr_mut(&stream);
        let call = [
            KernelArg::Ptr(qp),
            KernelArg::Ptr(kp),
            KernelArg::Ptr(vp),
            KernelArg::Ptr(op),
            KernelArg::I32(s as i32),
        ];
        loaded
            .launch_problem("kart_flash_attn_fwd", &problem, &stream, &call)
            .map_err(e)?;
        if pick.kernel == "flash_attn_hopper" {
            // The kernel's own six parameters are not its call.
            let wrong = loaded.launch_problem("kart_flash_attn_fwd", &problem, &stream, &call[..4]);
            match wrong {
                Err(err) if err.to_string().contains("called with 5 arguments") => {}
                other => return Err(format!("a call with 4 arguments: {other:?}")),
            }
        }
        drop((_a, _b, _c, _o));
        let out = stream.clone_dtoh(&od).map_err(d)?;
        outputs.push((pick.kernel.clone(), out));
    }
    let (hopper_out, mma_out) = (&outputs[0].1, &outputs[1].1);
    let mut worst = 0f32;
    for (i, (x, y)) in hopper_out.iter().zip(mma_out).enumerate() {
        let (x, y) = (
            half::f16::from_bits(*x).to_f32(),
            half::f16::from_bits(*y).to_f32(),
        );
        if !x.is_finite() || !y.is_finite() {
            return Err(format!(
                "element {i}: hopper {x}, mma.sync {y} (never written?)"
            ));
        }
        worst = worst.max((x - y).abs());
    }
    println!(
        "    {} [{}] and flash_attn [{}] agree within {worst:.1e}",
        choice.kernel, choice.config, mma.config
    );
    if worst > 4e-3 {
        return Err(format!("the two kernels differ by {worst}"));
    }
    Ok(())
}

/// `kernels/flash_attn_hopper2` on a causal problem of more work items than the
/// persistent grid has blocks (4 x 20 heads, S = 1000: 640 query blocks of 128 rows;
/// with SCHED 1, three groups of heads, the last one short), against
/// `kernels/flash_attn_hopper` with the same shape of config: with LAZY 0 each order of
/// work (SCHED 0, 1, 2) computes every query block as the base does, so the outputs
/// agree bit for bit (any difference means a block computed twice, skipped or mixed
/// up); with LAZY 2 the stale maxima change only rounding (within 2e-3). At head dim
/// 128 each is run with Q in shared memory, in registers (QREG 1: the same products from
/// the other operand source) and in registers with one pipeline across items (CARRY 1:
/// O cleared by a rescale by zero instead of a fill), so LAZY 0 must still agree bit for
/// bit.
pub(crate) fn causal_orders_of_flash_attn_hopper2_match_the_first_hopper_kernel(
    _: &Fixture,
    gpu: &Gpu,
) -> TestResult {
    use cudarc::driver::{DevicePtr, DevicePtrMut};
    use kart::runtime::KernelArg;
    if gpu.capability.major != 9 {
        return Err(format!(
            "{SKIP}the Hopper kernels run on compute capability 9.0 only, not {}",
            gpu.capability
        ));
    }
    let rt = Runtime::open(&repo_root()).map_err(|e| e.to_string())?;
    let e = |e: kart::error::Error| e.to_string();
    let d = |e: cudarc::driver::DriverError| e.to_string();
    let (b, h, s) = (4usize, 20usize, 1000usize);
    let stream = gpu.stream();
    for hd in [64usize, 128] {
        let problem: kart::model::Problem = [
            ("B".to_string(), b as i64),
            ("H".to_string(), h as i64),
            ("S".to_string(), s as i64),
            ("D".to_string(), hd as i64),
            ("causal".to_string(), 1),
        ]
        .into();
        let n = b * h * s * hd;
        let input = |salt: usize| -> Vec<u16> {
            (0..n)
                .map(|i| {
                    half::f16::from_f32((((i * 37 + salt * 11) % 103) as f32 - 51.0) / 40.0)
                        .to_bits()
                })
                .collect()
        };
        let (qd, kd, vd) = (
            stream.clone_htod(&input(1)).map_err(d)?,
            stream.clone_htod(&input(2)).map_err(d)?,
            stream.clone_htod(&input(3)).map_err(d)?,
        );
        let wide = i64::from(hd == 128);
        let shape = [
            ("HEAD_DIM", hd as i64),
            ("CAUSAL", 1),
            ("BLOCK_N", 128),
            ("CONSUMERS", 2),
            ("STAGES", 3),
            ("PIPELINE", 1),
            ("PINGPONG", 1),
            ("WIDE", wide),
            ("TREE", 1),
        ];
        let run = |kernel: &str, extra: &[(&str, i64)]| -> Result<Vec<u16>, String> {
            let pairs: Vec<(&str, i64)> = shape.iter().chain(extra).copied().collect();
            let loaded = gpu.kernel(&rt, kernel, &config(&pairs)).map_err(e)?;
            let mut od = stream
                .clone_htod(&vec![half::f16::NAN.to_bits(); n])
                .map_err(d)?;
            let (qp, _a) = qd.device_ptr(&stream);
            let (kp, _b) = kd.device_ptr(&stream);
            let (vp, _c) = vd.device_ptr(&stream);
            let (op, _o) = od.device_ptr_mut(&stream);
            let call = [
                KernelArg::Ptr(qp),
                KernelArg::Ptr(kp),
                KernelArg::Ptr(vp),
                KernelArg::Ptr(op),
                KernelArg::I32(s as i32),
            ];
            loaded
                .launch_problem("kart_flash_attn_fwd", &problem, &stream, &call)
                .map_err(e)?;
            drop((_a, _b, _c, _o));
            stream.clone_dtoh(&od).map_err(d)
        };
        let base = run("flash_attn_hopper", &[("CARRY", 0)])?;
        if let Some(i) = base
            .iter()
            .position(|x| !half::f16::from_bits(*x).is_finite())
        {
            return Err(format!(
                "D={hd}: flash_attn_hopper left element {i} unwritten"
            ));
        }
        // The causal configs of the grid: LAZY 0 and 2 with each order (LAZY 1 is in the
        // grid for the non-causal rows only).
        let q_and_carry: &[(i64, i64)] = if hd == 128 {
            &[(0, 0), (1, 0), (1, 1)]
        } else {
            &[(0, 0)]
        };
        let configs = [0i64, 2].into_iter().flat_map(|lazy| {
            [0i64, 1, 2].into_iter().flat_map(move |sched| {
                q_and_carry
                    .iter()
                    .map(move |&(qreg, carry)| (lazy, sched, qreg, carry))
            })
        });
        for (lazy, sched, qreg, carry) in configs {
            let out = run(
                "flash_attn_hopper2",
                &[
                    ("LAZY", lazy),
                    ("SCHED", sched),
                    ("QREG", qreg),
                    ("CARRY", carry),
                ],
            )?;
            let (mut differ, mut worst) = (0usize, 0f32);
            for (i, (x, y)) in out.iter().zip(&base).enumerate() {
                let (xf, yf) = (
                    half::f16::from_bits(*x).to_f32(),
                    half::f16::from_bits(*y).to_f32(),
                );
                if !xf.is_finite() {
                    return Err(format!(
                        "D={hd} LAZY={lazy} SCHED={sched} QREG={qreg} CARRY={carry}: element {i} is {xf} (never written?)"
                    ));
                }
                differ += usize::from(x != y);
                worst = worst.max((xf - yf).abs());
            }
            println!(
                "    D={hd} LAZY={lazy} SCHED={sched} QREG={qreg} CARRY={carry}: {differ} of {n} elements differ from flash_attn_hopper, by at most {worst:.1e}"
            );
            if (lazy == 0 && differ > 0) || worst > 2e-3 {
                return Err(format!(
                    "D={hd} LAZY={lazy} SCHED={sched} QREG={qreg} CARRY={carry}: {differ} elements differ, by up to {worst}"
                ));
            }
        }
    }
    Ok(())
}
