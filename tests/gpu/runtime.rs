//! The runtime on the fixture project: resolving, loading and launching (the smoke
//! kernel, a grid, a struct by value, large shared memory), the cache of loaded
//! modules, and the errors before the driver (wrong capability, corrupt blob, old
//! driver).

use std::sync::Arc;
use std::time::Duration;

use kart::model::Config;
use kart::runtime::Gpu;
use kart::store::LockMode;

use crate::{Fixture, SKIP, TestResult, config, repo_root};

pub(crate) fn smoke_end_to_end(_: &Fixture, gpu: &Gpu) -> TestResult {
    let store_dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let store =
        kart::store::Store::open(store_dir.path(), LockMode::Shared, Duration::from_secs(5))
            .map_err(|e| e.to_string())?;
    let report = kart::pipeline::smoke::run_smoke(
        &store,
        None,
        &repo_root(),
        None,
        "sm_90".parse().unwrap(),
    )
    .map_err(|e| e.to_string())?;
    for s in &report.stages {
        println!("    {:10} {:9.3} ms  {}", s.stage, s.ms, s.detail);
    }
    if report.skipped_no_gpu || report.gpu.as_deref() != Some(gpu.name.as_str()) {
        return Err(format!("smoke did not reach the GPU: {report:?}"));
    }
    let stages: Vec<&str> = report.stages.iter().map(|s| s.stage).collect();
    if stages
        != [
            "toolchain",
            "driver",
            "compile",
            "store",
            "verify",
            "load",
            "launch",
        ]
    {
        return Err(format!("stages: {stages:?}"));
    }
    Ok(())
}

pub(crate) fn every_entry_of_every_9x_artifact_resolves(f: &Fixture, gpu: &Gpu) -> TestResult {
    let rt = f.runtime();
    let mut n = 0;
    for a in rt
        .lock()
        .map_err(|e| e.to_string())?
        .artifacts
        .iter()
        .filter(|a| a.kernel == "scale")
    {
        let loaded = gpu
            .kernel(&rt, &a.kernel, &a.config)
            .map_err(|e| e.to_string())?;
        if gpu.capability.major == 9 && loaded.artifact.target != "sm_90a" {
            return Err(format!(
                "{} resolved to {}, not sm_90a",
                a.describe(),
                loaded.artifact.target
            ));
        }
        for e in &a.entries {
            loaded.function(&e.name).map_err(|e| e.to_string())?;
        }
        n += 1;
    }
    if n != 12 {
        return Err(format!("expected 12 scale artifacts, saw {n}"));
    }
    // The plain sm_90 cubins load too (resolution chose sm_90a; load sm_90 directly).
    let store = rt.blobs();
    for a in rt
        .lock()
        .map_err(|e| e.to_string())?
        .artifacts
        .iter()
        .filter(|a| a.target == "sm_90")
    {
        let bytes = store
            .read_blob(&a.digest, Some(a.size))
            .map_err(|e| e.to_string())?;
        gpu.load_verified(a.clone(), bytes, Duration::ZERO)
            .map_err(|e| format!("{}: {e}", a.describe()))?;
    }
    Ok(())
}

pub(crate) fn launch_checks_results(f: &Fixture, gpu: &Gpu) -> TestResult {
    use cudarc::driver::{LaunchConfig, PushKernelArg};
    let rt = f.runtime();
    let k = gpu
        .kernel(&rt, "scale", &config(&[("FACTOR", 3), ("OFFSET", 1)]))
        .map_err(|e| e.to_string())?;
    let n = 100_003usize;
    let x: Vec<f32> = (0..n)
        .map(|i| ((i * 7919) % 1000) as f32 / 37.0 - 13.0)
        .collect();
    let stream = gpu.stream();
    let xd = stream.clone_htod(&x).map_err(|e| e.to_string())?;
    let mut yd = stream
        .clone_htod(&vec![f32::NAN; n])
        .map_err(|e| e.to_string())?;
    let n_arg = n as i32;
    let mut l = stream.launch_builder(k.function("scale").map_err(|e| e.to_string())?);
    l.arg(&xd).arg(&mut yd).arg(&n_arg);
    unsafe { l.launch(LaunchConfig::for_num_elems(n as u32)) }.map_err(|e| e.to_string())?;
    let y = stream.clone_dtoh(&yd).map_err(|e| e.to_string())?;
    for i in 0..n {
        let want = x[i] * 3.0 + 1.0;
        if (y[i] - want).abs() > 1e-5 * want.abs().max(1.0) {
            return Err(format!("y[{i}] = {}, want {want}", y[i]));
        }
    }
    Ok(())
}

/// A template entry found by its name, with a struct passed by value.
pub(crate) fn a_struct_by_value_reaches_a_template_entry(f: &Fixture, gpu: &Gpu) -> TestResult {
    use cudarc::driver::{DevicePtr, DevicePtrMut};
    use kart::runtime::{KernelArg, LaunchDims};
    let rt = f.runtime();
    let k = gpu
        .kernel(&rt, "affine", &config(&[("UNROLL", 2)]))
        .map_err(|e| e.to_string())?;
    let n = 10_001usize;
    let x: Vec<f32> = (0..n).map(|i| (i % 97) as f32 - 48.0).collect();
    let stream = gpu.stream();
    let xd = stream.clone_htod(&x).map_err(|e| e.to_string())?;
    let mut yd = stream
        .clone_htod(&vec![f32::NAN; n])
        .map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&3.0f32.to_le_bytes());
    bytes.extend_from_slice(&0.5f32.to_le_bytes());
    bytes.extend_from_slice(&(n as i32).to_le_bytes());
    {
        let (xp, _gx) = xd.device_ptr(&stream);
        let (yp, _gy) = yd.device_ptr_mut(&stream);
        let dims = LaunchDims {
            grid: ((n as u32).div_ceil(2 * 128), 1, 1),
            block: (128, 1, 1),
            shared_bytes: 0,
        };
        k.launch(
            "affine",
            dims,
            &stream,
            &[
                KernelArg::Ptr(xp),
                KernelArg::Ptr(yp),
                KernelArg::Struct(bytes.clone()),
            ],
        )
        .map_err(|e| e.to_string())?;
        // 8 bytes where 12 belong: refused before the driver.
        if k.launch(
            "affine",
            dims,
            &stream,
            &[
                KernelArg::Ptr(xp),
                KernelArg::Ptr(yp),
                KernelArg::Struct(bytes[..8].to_vec()),
            ],
        )
        .is_ok()
        {
            return Err("a struct of the wrong size was not refused".into());
        }
    }
    let y = stream.clone_dtoh(&yd).map_err(|e| e.to_string())?;
    for i in 0..n {
        if y[i] != x[i] * 3.0 + 0.5 {
            return Err(format!("y[{i}] = {}, want {}", y[i], x[i] * 3.0 + 0.5));
        }
    }
    let symbol = k.artifact.entries[0].symbol.clone().unwrap_or_default();
    if !symbol.starts_with("_Z6affineILi2EEvPKfPf6Affine") {
        return Err(format!("unexpected symbol {symbol}"));
    }
    Ok(())
}

pub(crate) fn an_sm80_cubin_on_a_9x_gpu_is_a_clear_error(f: &Fixture, gpu: &Gpu) -> TestResult {
    let rt = f.runtime();
    match gpu.kernel(&rt, "old", &Config::default()) {
        Ok(_) if gpu.capability.major == 8 => Err(format!(
            "{SKIP}an sm_80 cubin loads on this {} GPU: the error path needs a GPU of another major",
            gpu.capability
        )),
        Ok(_) => Err("an sm_80 cubin was loaded on a different major".into()),
        Err(e) => {
            let text = format!("{e} / hint: {}", e.hint().unwrap_or_default());
            println!("    {text}");
            for want in ["old[-]", "sm_80", "kart build old --target sm_"] {
                if !text.contains(want) {
                    return Err(format!("message lacks `{want}`: {text}"));
                }
            }
            Ok(())
        }
    }
}

pub(crate) fn a_corrupt_blob_is_refused_before_the_driver(f: &Fixture, _: &Gpu) -> TestResult {
    let rt = f.runtime();
    let a = rt
        .lock()
        .map_err(|e| e.to_string())?
        .artifacts
        .iter()
        .find(|a| a.kernel == "scale" && a.target == "sm_90a")
        .ok_or("no sm_90a artifact")?
        .clone();
    let bytes = rt
        .blobs()
        .read_blob(&a.digest, Some(a.size))
        .map_err(|e| e.to_string())?;
    // Flip 4 bytes in the middle (the driver itself would load this and run it).
    let mut evil = bytes.clone();
    for b in &mut evil[bytes.len() / 2..bytes.len() / 2 + 4] {
        *b ^= 0xff;
    }
    rt.store()
        .ok_or("no store")?
        .plant_blob_unchecked(&a.digest, &evil)
        .map_err(|e| e.to_string())?;
    let fresh = Gpu::open(0).map_err(|e| e.to_string())?;
    let result = fresh.kernel(&rt, &a.kernel, &a.config);
    // Put the good blob back for the other tests.
    rt.store()
        .ok_or("no store")?
        .put_blob(&bytes)
        .map_err(|e| e.to_string())?;
    match result {
        Err(kart::Error::CorruptBlob { .. }) => Ok(()),
        Err(e) => Err(format!("wrong error: {e}")),
        Ok(_) => Err("a corrupt blob was loaded".into()),
    }
}

pub(crate) fn more_than_48k_of_shared_memory_launches(f: &Fixture, gpu: &Gpu) -> TestResult {
    use cudarc::driver::{DevicePtr, DevicePtrMut};
    use kart::runtime::{KernelArg, LaunchDims};
    let rt = f.runtime();
    let k = gpu
        .kernel(&rt, "smem", &Config::default())
        .map_err(|e| e.to_string())?;
    let per_block = 16 * 1024; // floats: 64 KiB of shared memory per block
    let blocks = 8;
    let n = per_block * blocks;
    let smem = (per_block * 4) as u32;
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 7.0).collect();
    let stream = gpu.stream();
    let xd = stream.clone_htod(&x).map_err(|e| e.to_string())?;
    let mut yd = stream
        .clone_htod(&vec![f32::NAN; n])
        .map_err(|e| e.to_string())?;
    let dims = LaunchDims {
        grid: (blocks as u32, 1, 1),
        block: (256, 1, 1),
        shared_bytes: smem,
    };
    // [launch] sees SMS, the GPU's multiprocessors, unless the problem names it.
    let problem = |pairs: &[(&str, i64)]| -> kart::model::Problem {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    };
    let from_gpu = k
        .dims(&problem(&[("N", 1 << 30)]))
        .map_err(|e| e.to_string())?;
    if gpu.multiprocessors == 0 || from_gpu.grid.0 != gpu.multiprocessors {
        return Err(format!(
            "grid {:?} from SMS, the GPU has {} multiprocessors",
            from_gpu.grid, gpu.multiprocessors
        ));
    }
    let named = k
        .dims(&problem(&[("N", n as i64), ("SMS", 3)]))
        .map_err(|e| e.to_string())?;
    let own = k
        .dims(&problem(&[("N", n as i64)]))
        .map_err(|e| e.to_string())?;
    if named.grid.0 != 3 || own.grid.0 != blocks as u32 || own.shared_bytes != smem {
        return Err(format!(
            "SMS named: grid {:?}; N only: {:?}",
            named.grid, own
        ));
    }
    {
        let (xp, _x) = xd.device_ptr(&stream);
        let (yp, _y) = yd.device_ptr_mut(&stream);
        // The declared signature is (ptr, ptr, i32): a float for n is refused.
        let wrong = k.launch(
            "big_smem",
            dims,
            &stream,
            &[KernelArg::Ptr(xp), KernelArg::Ptr(yp), KernelArg::F32(1.0)],
        );
        if wrong.is_ok() {
            return Err("a launch with the wrong argument kinds was accepted".into());
        }
        // The checked launch raises the dynamic shared-memory limit itself.
        k.launch(
            "big_smem",
            dims,
            &stream,
            &[
                KernelArg::Ptr(xp),
                KernelArg::Ptr(yp),
                KernelArg::I32(n as i32),
            ],
        )
        .map_err(|e| e.to_string())?;
    }
    let y = stream.clone_dtoh(&yd).map_err(|e| e.to_string())?;
    for b in 0..blocks {
        for i in 0..per_block {
            if y[b * per_block + i] != x[b * per_block + per_block - 1 - i] {
                return Err(format!("block {b} element {i} wrong"));
            }
        }
    }
    Ok(())
}

pub(crate) fn cached_lookup_returns_the_loaded_module(f: &Fixture, gpu: &Gpu) -> TestResult {
    let rt = f.runtime();
    let c = config(&[("FACTOR", 2), ("OFFSET", 0)]);
    let first = gpu.kernel(&rt, "scale", &c).map_err(|e| e.to_string())?;
    // Move the blob away: a cached lookup must not read it again.
    let path = rt
        .store()
        .ok_or("no store")?
        .blob_path(&first.artifact.digest);
    let aside = path.with_extension("aside");
    std::fs::rename(&path, &aside).map_err(|e| e.to_string())?;
    let second = gpu.kernel(&rt, "scale", &c);
    std::fs::rename(&aside, &path).map_err(|e| e.to_string())?;
    let second = second.map_err(|e| e.to_string())?;
    if !Arc::ptr_eq(&first, &second) {
        return Err("second lookup loaded again".into());
    }
    Ok(())
}

pub(crate) fn a_driver_too_old_for_the_cubin_is_refused_before_loading(
    f: &Fixture,
    gpu: &Gpu,
) -> TestResult {
    let rt = f.runtime();
    let mut a = rt.lock().map_err(|e| e.to_string())?.artifacts[0].clone();
    a.nvcc = "99.0.1".into();
    match gpu.check_driver_floor(&a) {
        Err(e) if e.to_string().contains("needs a driver for CUDA 99.0") => Ok(()),
        other => Err(format!("{:?}", other.err().map(|e| e.to_string()))),
    }
}
