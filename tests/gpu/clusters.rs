//! `[launch] cluster` and `pdl` on the GPU: a kernel that reports each block's cluster
//! (its id, the cluster's size and the block's rank in it) launched by `[launch]`
//! alone, in clusters of 2 and 4, from Rust and from the exported Python module
//! (`launch()`, `torch_op`, CUDA graph capture); and two dependent launches with
//! programmatic dependent launch that must still see each other's writes.

use std::time::Duration;

use kart::pipeline::{BuildOptions, build};
use kart::pool::Silent;
use kart::project::Project;
use kart::runtime::{Gpu, KernelArg, Runtime};
use kart::store::LockMode;
use kart::workspace::Workspace;

use crate::python::run_python_check;
use crate::{Fixture, SKIP, TestResult, config, run_kart};

/// Each block writes `clusterid.x * 65536 + cluster size * 256 + rank in cluster`.
const RANKS_CU: &str = r#"
extern "C" __global__ void ranks(int* out, int n) {
    unsigned rank, size, id;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(size));
    asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(id));
    if (threadIdx.x == 0 && (int)blockIdx.x < n) out[blockIdx.x] = (int)(id * 65536 + size * 256 + rank);
}
"#;

/// `y = x + 1`, waiting for the previous kernel of the stream before reading `x` and
/// letting the next one start early.
const CHAIN_CU: &str = r#"
extern "C" __global__ void chain(const float* x, float* y, int n) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + 1.0f;
    asm volatile("griddepcontrol.launch_dependents;");
}
"#;

const RANKS_TOML: &str = "name = \"ranks\"\nsources = [\"ranks.cu\"]\nentry = [\"ranks\"]\ntargets = [\"sm_90\"]\ndefault = { CLUSTER = 2 }\n[params]\nCLUSTER = [2, 4]\n[signature]\nranks = [\"ptr\", \"i32\"]\n[launch]\ngrid = [\"N\"]\nblock = [\"32\"]\ncluster = [\"CLUSTER\", 1, 1]\nproblem = [\"N\"]\n";

const CHAIN_TOML: &str = "name = \"chain\"\nsources = [\"chain.cu\"]\nentry = [\"chain\"]\ntargets = [\"sm_90\"]\n[signature]\nchain = [\"ptr\", \"ptr\", \"i32\"]\n[launch]\ngrid = [\"cdiv(N, 256)\"]\nblock = [\"256\"]\npdl = true\nproblem = [\"N\"]\n";

/// What block `b` of a launch in clusters of `c` writes.
pub(crate) fn want_rank(b: usize, c: usize) -> i32 {
    ((b / c) * 65536 + c * 256 + b % c) as i32
}

/// The two kernels built with kart in a project of their own.
fn project() -> Result<tempfile::TempDir, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let w = |rel: &str, text: &str| -> Result<(), String> {
        let p = dir.path().join(rel);
        std::fs::create_dir_all(p.parent().ok_or("path")?).map_err(|e| e.to_string())?;
        std::fs::write(p, text).map_err(|e| e.to_string())
    };
    w(
        "kart.toml",
        "[project]\ntargets = [\"sm_90\"]\n[toolchain]\nnvcc = \"13.0\"\n",
    )?;
    w("kernels/ranks/ranks.cu", RANKS_CU)?;
    w("kernels/ranks/kernel.toml", RANKS_TOML)?;
    w("kernels/chain/chain.cu", CHAIN_CU)?;
    w("kernels/chain/kernel.toml", CHAIN_TOML)?;
    let project = Project::load(dir.path()).map_err(|e| e.to_string())?;
    let ws = Workspace::open(project, LockMode::Shared, Duration::from_secs(10))
        .map_err(|e| e.to_string())?;
    build(&ws, &BuildOptions::default(), &Silent).map_err(|e| format!("build: {e}"))?;
    Ok(dir)
}

/// Rust: `launch_problem` launches in the clusters `[launch]` names (no cluster passed
/// by the caller), refuses a grid that is not a whole number of them, and chains two
/// launches with programmatic dependent launch. Then the exported module does the same
/// through `launch()`, `torch_op` and a CUDA graph (`tests/python/gpu_clusters.py`).
pub(crate) fn cluster_and_pdl_launches_from_launch_rules(_: &Fixture, gpu: &Gpu) -> TestResult {
    use cudarc::driver::{DevicePtr, DevicePtrMut};
    if gpu.capability.major < 9 {
        return Err(format!(
            "{SKIP}clusters and programmatic dependent launch need compute capability 9.0 or later, not {}",
            gpu.capability
        ));
    }
    let dir = project()?;
    let rt = Runtime::open(dir.path()).map_err(|e| e.to_string())?;
    let e = |e: kart::error::Error| e.to_string();
    let d = |e: cudarc::driver::DriverError| e.to_string();
    let stream = gpu.stream();
    let n = 16usize;
    for c in [2usize, 4] {
        let cfg = config(&[("CLUSTER", c as i64)]);
        let loaded = gpu.kernel(&rt, "ranks", &cfg).map_err(e)?;
        let mut out = stream.clone_htod(&vec![-1i32; n]).map_err(d)?;
        let (op, guard) = out.device_ptr_mut(&stream);
        let problem: kart::model::Problem = [("N".to_string(), n as i64)].into();
        let geometry = loaded.geometry(&problem).map_err(e)?;
        if geometry.cluster != Some((c as u32, 1, 1)) {
            return Err(format!("CLUSTER={c}: geometry {geometry:?}"));
        }
        loaded
            .launch_problem(
                "ranks",
                &problem,
                &stream,
                &[KernelArg::Ptr(op), KernelArg::I32(n as i32)],
            )
            .map_err(e)?;
        let odd: kart::model::Problem = [("N".to_string(), (c + 1) as i64)].into();
        match loaded.launch_problem(
            "ranks",
            &odd,
            &stream,
            &[KernelArg::Ptr(op), KernelArg::I32(n as i32)],
        ) {
            Ok(()) => {
                return Err(format!(
                    "CLUSTER={c}: a grid of {} blocks was launched",
                    c + 1
                ));
            }
            Err(err) => {
                let msg = err.to_string();
                let want = format!(
                    "grid ({}, 1, 1) is not a whole number of clusters ({c}, 1, 1)",
                    c + 1
                );
                if !msg.contains(&want) || !msg.contains(&format!("ranks[CLUSTER={c}]")) {
                    return Err(format!("CLUSTER={c}: the error says {msg}, want {want}"));
                }
            }
        }
        drop(guard);
        let got = stream.clone_dtoh(&out).map_err(d)?;
        let want: Vec<i32> = (0..n).map(|b| want_rank(b, c)).collect();
        if got != want {
            return Err(format!("CLUSTER={c}: blocks wrote {got:?}, want {want:?}"));
        }
    }
    // Two launches with programmatic dependent launch: z = (x + 1) + 1.
    let loaded = gpu.kernel(&rt, "chain", &config(&[])).map_err(e)?;
    let count = 1usize << 20;
    let x: Vec<f32> = (0..count).map(|i| (i % 1000) as f32).collect();
    let xd = stream.clone_htod(&x).map_err(d)?;
    let mut yd = stream.clone_htod(&vec![f32::NAN; count]).map_err(d)?;
    let mut zd = stream.clone_htod(&vec![f32::NAN; count]).map_err(d)?;
    let problem: kart::model::Problem = [("N".to_string(), count as i64)].into();
    if !loaded.geometry(&problem).map_err(e)?.pdl {
        return Err("chain's [launch] pdl = true is not in its geometry".into());
    }
    {
        let (xp, _gx) = xd.device_ptr(&stream);
        let (yp, _gy) = yd.device_ptr_mut(&stream);
        let (zp, _gz) = zd.device_ptr_mut(&stream);
        let n = KernelArg::I32(count as i32);
        for (from, to) in [(xp, yp), (yp, zp)] {
            loaded
                .launch_problem(
                    "chain",
                    &problem,
                    &stream,
                    &[KernelArg::Ptr(from), KernelArg::Ptr(to), n.clone()],
                )
                .map_err(e)?;
        }
    }
    let z = stream.clone_dtoh(&zd).map_err(d)?;
    if let Some(i) = (0..count).find(|&i| z[i] != x[i] + 2.0) {
        return Err(format!("pdl chain: z[{i}] = {}, want {}", z[i], x[i] + 2.0));
    }

    let module = dir.path().join("cluster_kernels.py");
    let (code, out) = run_kart(
        dir.path(),
        &[
            "export",
            "--python",
            "-o",
            module.to_str().ok_or("path")?,
            "ranks:CLUSTER=2",
            "ranks:CLUSTER=4",
            "chain",
        ],
        &[],
    );
    if code != 0 {
        return Err(format!("export failed: {out}"));
    }
    run_python_check(
        "tests/python/gpu_clusters.py",
        &module,
        "all cluster checks passed",
        "the exported module's cluster and pdl launches failed",
    )
}
