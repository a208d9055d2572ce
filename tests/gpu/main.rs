//! GPU tests: the runtime on a real device. Built here (`cargo test --release --no-run
//! --test gpu`), run on the GPU machine with KART_REQUIRE_GPU=1 and `kart` on the PATH.
//! Elsewhere they print `skipped: no CUDA GPU (N tests)`.
//!
//! Over 600 lines on purpose: every GPU test in one binary with its own small harness,
//! so that a machine without a GPU prints one `skipped: no CUDA GPU` line for all of
//! them and the GPU machine runs one staged file.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kart::model::{Config, ParamValue};
use kart::pipeline::{BuildOptions, build};
use kart::pool::Silent;
use kart::project::Project;
use kart::runtime::{Gpu, Runtime};
use kart::store::LockMode;
use kart::store::sidecar::Sidecar as _;
use kart::workspace::Workspace;

type TestResult = Result<(), String>;

/// A project built once for all tests: a grid kernel for sm_80, sm_90 and sm_90a, a
/// kernel using 64 KiB of dynamic shared memory, and one built only for sm_80.
struct Fixture {
    dir: tempfile::TempDir,
}

const GRID_CU: &str = r#"
extern "C" __global__ void scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * FACTOR + OFFSET;
}
extern "C" __global__ void fill(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = FACTOR;
}
"#;

const SMEM_CU: &str = r#"
// Stages the input through dynamic shared memory larger than the 48 KiB default.
extern "C" __global__ void big_smem(const float* x, float* y, int n) {
    extern __shared__ float buf[];
    int per_block = n / gridDim.x;
    for (int i = threadIdx.x; i < per_block; i += blockDim.x) buf[i] = x[blockIdx.x * per_block + i];
    __syncthreads();
    for (int i = threadIdx.x; i < per_block; i += blockDim.x)
        y[blockIdx.x * per_block + i] = buf[per_block - 1 - i];
}
"#;

// A template entry taking a struct by value (12 bytes, aligned to 4).
const AFFINE_CU: &str = r#"
struct Affine { float scale; float shift; int n; };
template <int UNROLL>
__global__ void affine(const float* x, float* y, Affine p) {
    int base = (blockIdx.x * blockDim.x + threadIdx.x) * UNROLL;
    for (int u = 0; u < UNROLL; ++u)
        if (base + u < p.n) y[base + u] = x[base + u] * p.scale + p.shift;
}
"#;

impl Fixture {
    fn build() -> Result<Fixture, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let w = |rel: &str, text: &str| {
            let p = dir.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        w(
            "kart.toml",
            "[project]\ntargets = [\"sm_80\", \"sm_90\", \"sm_90a\"]\n[toolchain]\nnvcc = \"13.0\"\n",
        );
        w("kernels/scale/scale.cu", GRID_CU);
        w(
            "kernels/scale/kernel.toml",
            "name = \"scale\"\nsources = [\"scale.cu\"]\nentry = [\"scale\", \"fill\"]\n[params]\nFACTOR = [2, 3]\nOFFSET = [0, 1]\n",
        );
        w("kernels/smem/smem.cu", SMEM_CU);
        w(
            "kernels/smem/kernel.toml",
            "name = \"smem\"\nsources = [\"smem.cu\"]\nentry = [\"big_smem\"]\ntargets = [\"sm_90\"]\n[signature]\nbig_smem = [\"ptr\", \"ptr\", \"i32\"]\n[launch]\ngrid = [\"min(cdiv(N, 16384), SMS)\"]\nblock = [\"256\"]\nproblem = [\"N\"]\nshared_mem = \"65536\"\n",
        );
        w("kernels/affine/affine.cu", AFFINE_CU);
        w(
            "kernels/affine/kernel.toml",
            "name = \"affine\"\nsources = [\"affine.cu\"]\nentry = [\"affine<UNROLL>\"]\ntargets = [\"sm_90\"]\n[params]\nUNROLL = [1, 2]\n[signature]\naffine = [\"ptr\", \"ptr\", \"struct:12:4\"]\n",
        );
        w(
            "kernels/old/old.cu",
            "extern \"C\" __global__ void old(float* y) { y[0] = 1; }\n",
        );
        w(
            "kernels/old/kernel.toml",
            "name = \"old\"\nsources = [\"old.cu\"]\nentry = [\"old\"]\ntargets = [\"sm_80\"]\n",
        );
        let project = Project::load(dir.path()).map_err(|e| e.to_string())?;
        let ws = Workspace::open(project, LockMode::Shared, Duration::from_secs(10))
            .map_err(|e| e.to_string())?;
        build(&ws, &BuildOptions::default(), &Silent).map_err(|e| format!("fixture build: {e}"))?;
        Ok(Fixture { dir })
    }

    fn runtime(&self) -> Runtime {
        Runtime::open(self.dir.path()).expect("open runtime")
    }
}

fn config(pairs: &[(&str, i64)]) -> Config {
    Config(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), ParamValue::Int(*v)))
            .collect(),
    )
}

fn smoke_end_to_end(_: &Fixture, gpu: &Gpu) -> TestResult {
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

fn every_entry_of_every_9x_artifact_resolves(f: &Fixture, gpu: &Gpu) -> TestResult {
    let rt = f.runtime();
    let mut n = 0;
    for a in rt.lock().artifacts.iter().filter(|a| a.kernel == "scale") {
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
    for a in rt.lock().artifacts.iter().filter(|a| a.target == "sm_90") {
        let bytes = store
            .read_blob(&a.digest, Some(a.size))
            .map_err(|e| e.to_string())?;
        gpu.load_verified(a.clone(), bytes, Duration::ZERO)
            .map_err(|e| format!("{}: {e}", a.describe()))?;
    }
    Ok(())
}

fn launch_checks_results(f: &Fixture, gpu: &Gpu) -> TestResult {
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
fn a_struct_by_value_reaches_a_template_entry(f: &Fixture, gpu: &Gpu) -> TestResult {
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

fn an_sm80_cubin_on_a_9x_gpu_is_a_clear_error(f: &Fixture, gpu: &Gpu) -> TestResult {
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

fn a_corrupt_blob_is_refused_before_the_driver(f: &Fixture, _: &Gpu) -> TestResult {
    let rt = f.runtime();
    let a = rt
        .lock()
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

/// `kart bundle` for this GPU, then a runtime over the bundle alone: the kernel loads
/// and computes; one flipped byte of its blob is refused before the driver sees it.
fn a_bundle_loads_and_a_flipped_byte_is_refused(f: &Fixture, gpu: &Gpu) -> TestResult {
    use cudarc::driver::{LaunchConfig, PushKernelArg};
    let dir = f.dir.path();
    let fleet = dir.join("fleet.toml");
    std::fs::write(
        &fleet,
        format!(
            "[[fleet]]\nname = \"{}\"\ncapability = \"{}\"\n",
            gpu.name, gpu.capability
        ),
    )
    .map_err(|e| e.to_string())?;
    let path = dir.join("scale.kartbundle");
    let (code, out) = run_kart(
        dir,
        &[
            "bundle",
            "scale",
            "--fleet",
            fleet.to_str().ok_or("path")?,
            "-o",
            path.to_str().ok_or("path")?,
        ],
        &[],
    );
    if code != 0 {
        return Err(format!("kart bundle: {out}"));
    }
    let rt = Runtime::open_bundle(&path).map_err(|e| e.to_string())?;
    let c = config(&[("FACTOR", 3), ("OFFSET", 1)]);
    // A fresh context cache: the shared one holds this config from the store already.
    let fresh = Gpu::open(0).map_err(|e| e.to_string())?;
    let k = fresh.kernel(&rt, "scale", &c).map_err(|e| e.to_string())?;
    let n = 4099usize;
    let x: Vec<f32> = (0..n).map(|i| (i % 97) as f32 - 40.0).collect();
    let stream = fresh.stream();
    let xd = stream.clone_htod(&x).map_err(|e| e.to_string())?;
    let mut yd = stream
        .clone_htod(&vec![f32::NAN; n])
        .map_err(|e| e.to_string())?;
    let n_arg = n as i32;
    let mut l = stream.launch_builder(k.function("scale").map_err(|e| e.to_string())?);
    l.arg(&xd).arg(&mut yd).arg(&n_arg);
    unsafe { l.launch(LaunchConfig::for_num_elems(n as u32)) }.map_err(|e| e.to_string())?;
    let y = stream.clone_dtoh(&yd).map_err(|e| e.to_string())?;
    if let Some(i) = (0..n).find(|&i| (y[i] - (x[i] * 3.0 + 1.0)).abs() > 1e-4) {
        return Err(format!(
            "from the bundle: y[{i}] = {}, want {}",
            y[i],
            x[i] * 3.0 + 1.0
        ));
    }
    // Flip one byte inside that blob's stored bytes.
    let digest = k.artifact.digest.clone();
    let mut bytes = std::fs::read(&path).map_err(|e| e.to_string())?;
    let index_len = u64::from_le_bytes(bytes[12..20].try_into().map_err(|_| "header")?);
    let blob = rt
        .bundle()
        .ok_or("no bundle")?
        .index()
        .blobs
        .iter()
        .find(|b| b.digest == digest)
        .ok_or("blob not in the bundle")?
        .clone();
    let at = (20 + index_len + blob.offset + blob.stored / 2) as usize;
    bytes[at] ^= 0x10;
    std::fs::write(&path, &bytes).map_err(|e| e.to_string())?;
    let rt = Runtime::open_bundle(&path).map_err(|e| e.to_string())?;
    let again = Gpu::open(0).map_err(|e| e.to_string())?;
    match again.kernel(&rt, "scale", &c) {
        Err(kart::Error::CorruptBundle { .. }) => Ok(()),
        Err(e) => Err(format!("wrong error: {e}")),
        Ok(_) => Err("a corrupt blob was loaded from the bundle".into()),
    }
}

fn more_than_48k_of_shared_memory_launches(f: &Fixture, gpu: &Gpu) -> TestResult {
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

fn cached_lookup_returns_the_loaded_module(f: &Fixture, gpu: &Gpu) -> TestResult {
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

fn a_driver_too_old_for_the_cubin_is_refused_before_loading(f: &Fixture, gpu: &Gpu) -> TestResult {
    let rt = f.runtime();
    let mut a = rt.lock().artifacts[0].clone();
    a.nvcc = "99.0.1".into();
    match gpu.check_driver_floor(&a) {
        Err(e) if e.to_string().contains("needs a driver for CUDA 99.0") => Ok(()),
        other => Err(format!("{:?}", other.err().map(|e| e.to_string()))),
    }
}

type Test = (&'static str, fn(&Fixture, &Gpu) -> TestResult);

const TESTS: &[Test] = &[
    ("smoke_end_to_end", smoke_end_to_end),
    (
        "every_entry_of_every_9x_artifact_resolves",
        every_entry_of_every_9x_artifact_resolves,
    ),
    ("launch_checks_results", launch_checks_results),
    (
        "a_bundle_loads_and_a_flipped_byte_is_refused",
        a_bundle_loads_and_a_flipped_byte_is_refused,
    ),
    (
        "a_struct_by_value_reaches_a_template_entry",
        a_struct_by_value_reaches_a_template_entry,
    ),
    (
        "tma_template_entry_and_cluster_launch_from_rust",
        tma_template_entry_and_cluster_launch_from_rust,
    ),
    (
        "an_sm80_cubin_on_a_9x_gpu_is_a_clear_error",
        an_sm80_cubin_on_a_9x_gpu_is_a_clear_error,
    ),
    (
        "a_corrupt_blob_is_refused_before_the_driver",
        a_corrupt_blob_is_refused_before_the_driver,
    ),
    (
        "more_than_48k_of_shared_memory_launches",
        more_than_48k_of_shared_memory_launches,
    ),
    (
        "a_driver_too_old_for_the_cubin_is_refused_before_loading",
        a_driver_too_old_for_the_cubin_is_refused_before_loading,
    ),
    (
        "cached_lookup_returns_the_loaded_module",
        cached_lookup_returns_the_loaded_module,
    ),
    (
        "python_export_launches_with_torch_and_cupy",
        python_export_launches_with_torch_and_cupy,
    ),
    (
        "smoke_all_attests_every_loadable_cubin_and_survives_a_crash",
        smoke_all_attests_every_loadable_cubin_and_survives_a_crash,
    ),
    (
        "python_module_in_cuda_graphs_and_torch_compile",
        python_module_in_cuda_graphs_and_torch_compile,
    ),
    (
        "a_variant_is_called_as_its_base_and_chosen_on_hopper",
        a_variant_is_called_as_its_base_and_chosen_on_hopper,
    ),
    (
        "python_variants_are_called_alike_and_chosen_by_best",
        python_variants_are_called_alike_and_chosen_by_best,
    ),
    ("python_repository_sgemm", python_repository_sgemm),
    ("python_repository_flash_attn", python_repository_flash_attn),
    ("python_repository_cute_gemm", python_repository_cute_gemm),
    ("python_two_devices", python_two_devices),
];

/// A test's way of saying it cannot run on this machine (not a pass, not a failure):
/// `Err` with this prefix.
const SKIP: &str = "skipped: ";

/// Exports `selectors` of the repository's own kernels (its kart.lock and store) to a
/// module in a temporary folder and runs `script` on it.
fn repository_check(selectors: &[&str], script: &str, passed: &str) -> TestResult {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let module = dir.path().join("repo_kernels.py");
    let mut args = vec!["export", "--python", "-o", module.to_str().ok_or("path")?];
    args.extend_from_slice(selectors);
    let (code, out) = run_kart(&repo_root(), &args, &[]);
    if code != 0 {
        return Err(format!(
            "export of the repository's {selectors:?} failed: {out}"
        ));
    }
    run_python_check(script, &module, passed, &format!("{script} failed"))
}

/// `tests/python/gpu_sgemm.py`: the tuned SGEMM through best() and [launch].
fn python_repository_sgemm(_: &Fixture, _: &Gpu) -> TestResult {
    repository_check(
        &["sgemm"],
        "tests/python/gpu_sgemm.py",
        "all sgemm checks passed",
    )
}

/// `tests/python/gpu_flash_attn.py`: every FlashAttention config for sm_90 against
/// PyTorch's attention.
fn python_repository_flash_attn(_: &Fixture, gpu: &Gpu) -> TestResult {
    if gpu.capability.major != 9 {
        return Err(format!(
            "{SKIP}the check exports sm_90 cubins; this GPU is {}",
            gpu.capability
        ));
    }
    repository_check(
        &["flash_attn", "--all-configs", "--target", "sm_90"],
        "tests/python/gpu_flash_attn.py",
        "all FlashAttention checks passed",
    )
}

/// `tests/python/gpu_cute_gemm.py`: the CuTe Hopper GEMM with tensor maps and clusters.
fn python_repository_cute_gemm(_: &Fixture, gpu: &Gpu) -> TestResult {
    if gpu.capability.major != 9 {
        return Err(format!(
            "{SKIP}cute_gemm is built for sm_90a; this GPU is {}",
            gpu.capability
        ));
    }
    repository_check(
        &["cute_gemm", "--all-configs"],
        "tests/python/gpu_cute_gemm.py",
        "all cute_gemm checks passed",
    )
}

/// `tests/python/gpu_two_devices.py`: launches refused on the wrong device; needs two
/// GPUs, and says it skipped on fewer.
fn python_two_devices(_: &Fixture, _: &Gpu) -> TestResult {
    if kart::runtime::device_count() < 2 {
        return Err(format!(
            "{SKIP}one GPU here; the check needs two (run on a machine with two)"
        ));
    }
    repository_check(
        &["smoke"],
        "tests/python/gpu_two_devices.py",
        "all two-device checks passed",
    )
}

/// The kart binary: the one cargo built here, else `kart` on PATH (the staged copy on
/// the GPU machine).
fn kart_bin() -> PathBuf {
    option_env!("CARGO_BIN_EXE_kart")
        .map(PathBuf::from)
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("kart"))
}

fn run_kart(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut cmd = std::process::Command::new(kart_bin());
    cmd.arg("-C").arg(dir).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    match cmd.output() {
        Ok(out) => (
            out.status.code().unwrap_or(-1),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        ),
        Err(e) => (-1, format!("cannot run {}: {e}", kart_bin().display())),
    }
}

fn smoke_all_attests_every_loadable_cubin_and_survives_a_crash(
    f: &Fixture,
    gpu: &Gpu,
) -> TestResult {
    let rt = f.runtime();
    let loadable = kart::deploy::attest::loadable_cubins(rt.lock(), gpu.capability);
    let victim = loadable
        .iter()
        .find(|a| a.kernel == "smem")
        .ok_or("no smem cubin")?;
    let attest_path = f.dir.path().join(kart::deploy::attest::ATTEST_FILE);
    let _ = std::fs::remove_file(&attest_path);
    // A worker that aborts on one blob, as a crashing driver would.
    let failpoint = format!("attest-worker:{}", victim.digest);
    let (code, out) = run_kart(
        f.dir.path(),
        &["smoke", "--all"],
        &[("KART_FAILPOINT", failpoint.as_str())],
    );
    println!("{}", out.trim_end().replace('\n', "\n    "));
    if code != 1 || !out.contains("FAILED  smem") {
        return Err(format!(
            "a crashing worker must fail only its blob (exit {code})"
        ));
    }
    let read = || {
        kart::deploy::attest::AttestFile::read(&attest_path, std::path::Path::new("kart.attest"))
            .map_err(|e| e.to_string())
    };
    let first = read()?;
    if first.records.len() != loadable.len() - 1
        || first.records.iter().any(|r| r.digest == victim.digest)
    {
        return Err(format!(
            "after the crash, want every other blob attested: {first:?}"
        ));
    }
    let (code, out) = run_kart(f.dir.path(), &["smoke", "--all"], &[]);
    if code != 0 {
        return Err(format!("smoke --all failed (exit {code}): {out}"));
    }
    let second = read()?;
    if second.records.len() != loadable.len() {
        return Err(format!("want {} records: {second:?}", loadable.len()));
    }
    let (code, ls) = run_kart(f.dir.path(), &["ls"], &[]);
    let short = gpu.name.strip_prefix("NVIDIA ").unwrap_or(&gpu.name);
    // ATTESTED ends the line, or precedes ENTRIES (shown for template entries).
    let attested_rows = ls
        .lines()
        .filter(|l| l.ends_with(short) || l.contains(&format!(" {short}  ")))
        .count();
    let sm80_rows = ls.lines().filter(|l| l.contains(" sm_80 ")).count();
    if code != 0 || attested_rows < loadable.len() || sm80_rows == 0 {
        return Err(format!("kart ls does not show the attestations:\n{ls}"));
    }
    Ok(())
}

fn python_export_launches_with_torch_and_cupy(f: &Fixture, _: &Gpu) -> TestResult {
    let module = f.dir.path().join("fixture_kernels.py");
    let (code, out) = run_kart(
        f.dir.path(),
        &[
            "export",
            "--python",
            "-o",
            module.to_str().ok_or("path")?,
            "scale:FACTOR=2,OFFSET=1",
            "smem",
            "old",
            "affine:UNROLL=2",
        ],
        &[],
    );
    if code != 0 {
        return Err(format!("export failed: {out}"));
    }
    run_python_check(
        "tests/python/gpu_export.py",
        &module,
        "all GPU checks passed",
        "the exported module failed on the GPU",
    )
}

/// Runs a Python check of an exported module, prints its output indented, and fails
/// unless it exits 0 and prints `passed`.
fn run_python_check(
    script: &str,
    module: &std::path::Path,
    passed: &str,
    failure: &str,
) -> TestResult {
    let output = std::process::Command::new("python3")
        .arg(repo_root().join(script))
        .arg(module)
        .output()
        .map_err(|e| format!("cannot run python3: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        println!("    {line}");
    }
    if !output.status.success() || !text.contains(passed) {
        return Err(failure.into());
    }
    Ok(())
}

/// The repository's smoke and FlashAttention kernels (FlashAttention's default config
/// for sm_90 only, to keep the build short) exported and run by
/// `tests/python/gpu_torch.py`: CUDA-graph capture and replay before and after
/// `preload()`, a launch-cost sanity bound, and `torch_op` under
/// `torch.compile(fullgraph=True)`, with and without CUDA graphs.
fn python_module_in_cuda_graphs_and_torch_compile(_: &Fixture, _: &Gpu) -> TestResult {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let repo = repo_root();
    std::fs::write(
        dir.path().join("kart.toml"),
        "[project]\ntargets = [\"sm_90\"]\n[toolchain]\nnvcc = \"13.0\"\n",
    )
    .map_err(|e| e.to_string())?;
    for kernel in ["smoke", "flash_attn"] {
        let to = dir.path().join("kernels").join(kernel);
        std::fs::create_dir_all(&to).map_err(|e| e.to_string())?;
        // The kernel's files (its folder also holds results/, which a build never reads).
        for f in std::fs::read_dir(repo.join("kernels").join(kernel)).map_err(|e| e.to_string())? {
            let f = f.map_err(|e| e.to_string())?;
            if f.path().is_file() {
                std::fs::copy(f.path(), to.join(f.file_name())).map_err(|e| e.to_string())?;
            }
        }
    }
    let default = [
        "-p",
        "HEAD_DIM=64",
        "-p",
        "CAUSAL=0",
        "-p",
        "BLOCK_M=128",
        "-p",
        "BLOCK_N=64",
        "-p",
        "NUM_WARPS=4",
    ];
    let mut build = vec!["build", "-q", "--target", "sm_90", "flash_attn"];
    build.extend(default);
    for args in [&["build", "-q", "smoke"][..], &build[..]] {
        let (code, out) = run_kart(dir.path(), args, &[]);
        if code != 0 {
            return Err(format!("kart {args:?} failed: {out}"));
        }
    }
    let module = dir.path().join("bk.py");
    let (code, out) = run_kart(
        dir.path(),
        &[
            "export",
            "--python",
            "-o",
            module.to_str().ok_or("path")?,
            "smoke",
            "flash_attn",
        ],
        &[],
    );
    if code != 0 {
        return Err(format!("export failed: {out}"));
    }
    run_python_check(
        "tests/python/gpu_torch.py",
        &module,
        "all torch checks passed",
        "the exported module failed with CUDA graphs or torch.compile",
    )
}

/// The repository's CuTe GEMM (a template entry, two TMA descriptors kart encodes) on a
/// problem with M and N off the tiles, against a float64 reference; then the cluster
/// check launched in clusters of 2 through `cuLaunchKernelEx`.
fn tma_template_entry_and_cluster_launch_from_rust(_: &Fixture, gpu: &Gpu) -> TestResult {
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
fn a_variant_is_called_as_its_base_and_chosen_on_hopper(_: &Fixture, gpu: &Gpu) -> TestResult {
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
        rt.lock(),
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
        rt.lock(),
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

/// `tests/python/gpu_variants.py` on the repository's own FlashAttention family,
/// exported from its lock and store.
fn python_variants_are_called_alike_and_chosen_by_best(_: &Fixture, gpu: &Gpu) -> TestResult {
    if gpu.capability.major != 9 {
        return Err(format!(
            "{SKIP}the family's Hopper variant runs on compute capability 9.0 only, not {}",
            gpu.capability
        ));
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let module = dir.path().join("fa.py");
    let repo = repo_root();
    let (code, out) = run_kart(
        &repo,
        &[
            "export",
            "--python",
            "-o",
            module.to_str().ok_or("path")?,
            "flash_attn",
            "--all-configs",
            "--target",
            "sm_90",
            "--target",
            "sm_90a",
        ],
        &[],
    );
    if code != 0 {
        return Err(format!("export failed: {out}"));
    }
    run_python_check(
        "tests/python/gpu_variants.py",
        &module,
        "all variant checks passed",
        "the exported FlashAttention family failed",
    )
}

fn repo_root() -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into()))
}

fn main() {
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let selected: Vec<&Test> = TESTS
        .iter()
        .filter(|(n, _)| filter.as_ref().is_none_or(|f| n.contains(f.as_str())))
        .collect();
    let require = std::env::var("KART_REQUIRE_GPU").is_ok_and(|v| v == "1");
    let gpu = match Gpu::open(0) {
        Ok(g) => g,
        Err(e) => {
            println!("skipped: no CUDA GPU ({} tests): {e}", selected.len());
            if require {
                println!("KART_REQUIRE_GPU=1: a GPU was required");
                std::process::exit(1);
            }
            return;
        }
    };
    println!(
        "gpu: {} (compute capability {}), driver CUDA {}",
        gpu.name, gpu.capability, gpu.driver_version
    );
    let fixture = match Fixture::build() {
        Ok(f) => f,
        Err(e) => {
            println!("fixture failed: {e}");
            std::process::exit(1);
        }
    };
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for (name, test) in selected {
        let t0 = std::time::Instant::now();
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| test(&fixture, &gpu)))
                .unwrap_or_else(|_| Err("panicked".into()));
        match result {
            Ok(()) => {
                passed += 1;
                println!(
                    "test {name} ... ok ({:.1} ms)",
                    t0.elapsed().as_secs_f64() * 1e3
                );
            }
            Err(e) if e.starts_with(SKIP) => {
                skipped += 1;
                println!("test {name} ... {e}");
            }
            Err(e) => {
                failed += 1;
                println!("test {name} ... FAILED: {e}");
            }
        }
    }
    println!("{passed} passed, {failed} failed, {skipped} skipped");
    if failed > 0 {
        std::process::exit(1);
    }
}
