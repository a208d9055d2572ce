//! Load benchmark (run on a GPU machine): for the smoke kernel and a large cubin, the
//! medians of (a) the raw driver load of bytes in memory, (b) sha256 of those bytes,
//! (c) kart's full path from an opened store (read, decompress, verify, load, resolve
//! every entry), (d) kart's cached lookup, (f) PTX JIT of the same kernel; with the
//! ratios c/(a+b) and c/a. Prints figures; asserts nothing.

use std::time::{Duration, Instant};

use kart::build::{BuildOptions, Silent, Workspace, build};
use kart::key::ArtifactKind;
use kart::manifest::{Config, Project};
use kart::runtime::{Gpu, Runtime};
use kart::store::LockMode;

const BIG_CU: &str = r#"
// A deliberately large kernel: a long unrolled chain of math per element.
extern "C" __global__ void big(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
#pragma unroll
    for (int k = 0; k < STEPS; ++k) {
        v = __sinf(v * 1.0001f + k) * 0.5f + __cosf(v - k * 0.001f);
        if (v > 3.0f) v = x[(i + k) % n];
    }
    y[i] = v;
}
"#;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let w = |rel: &str, text: &str| -> std::io::Result<()> {
        let p = dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap_or(dir.path()))?;
        std::fs::write(p, text)
    };
    w("kart.toml", "[project]\ntargets = [\"sm_90\"]\n")?;
    w("kernels/smoke/smoke.cu", kart::smoke::SMOKE_SOURCE)?;
    w(
        "kernels/smoke/kernel.toml",
        "name = \"smoke\"\nsources = [\"smoke.cu\"]\nentry = [\"kart_smoke_axpb\"]\nflags = [\"-O3\"]\nptx = true\n",
    )?;
    w("kernels/big/big.cu", BIG_CU)?;
    w(
        "kernels/big/kernel.toml",
        "name = \"big\"\nsources = [\"big.cu\"]\nentry = [\"big\"]\nflags = [\"-O3\"]\nptx = true\n[params]\nSTEPS = [4096]\n",
    )?;
    let project = Project::load(dir.path())?;
    let ws = Workspace::open(project, LockMode::Shared, Duration::from_secs(10))?;
    let t0 = Instant::now();
    build(&ws, &BuildOptions::default(), &Silent)?;
    println!(
        "built the benchmark kernels in {:.1} s (offline; not part of any figure)",
        t0.elapsed().as_secs_f64()
    );
    drop(ws);

    let rt = Runtime::open(dir.path())?;
    let gpu = Gpu::open(0)?;
    println!(
        "gpu: {} (compute capability {}), driver CUDA {}",
        gpu.name, gpu.capability, gpu.driver_version
    );
    println!(
        "{:8} {:>9} {:>11} {:>11} {:>11} {:>11} {:>11} {:>9} {:>7}",
        "kernel",
        "cubin B",
        "(a) load",
        "(b) sha256",
        "(c) kart",
        "(d) cached",
        "(f) PTX JIT",
        "c/(a+b)",
        "c/a"
    );
    for (kernel, config) in [
        ("smoke", Config::default()),
        (
            "big",
            Config([("STEPS".to_string(), kart::manifest::ParamValue::Int(4096))].into()),
        ),
    ] {
        let cubin = rt
            .lock()
            .artifacts
            .iter()
            .find(|a| a.kernel == kernel && a.kind == ArtifactKind::Cubin)
            .ok_or("no cubin")?
            .clone();
        let ptx = rt
            .lock()
            .artifacts
            .iter()
            .find(|a| a.kernel == kernel && a.kind == ArtifactKind::Ptx)
            .ok_or("no ptx")?
            .clone();
        let bytes = rt.store().read_blob(&cubin.digest, Some(cubin.size))?;
        let ptx_text = String::from_utf8(rt.store().read_blob(&ptx.digest, Some(ptx.size))?)?;
        let entry = cubin.entries[0].name.clone();
        let ctx = gpu.context().clone();
        let iters = 41;

        // (a) raw load + function lookup of bytes already in memory.
        let mut a = Vec::new();
        for _ in 0..iters {
            let image = cudarc::nvrtc::Ptx::from_binary(bytes.clone());
            let t = Instant::now();
            let m = ctx.load_module(image)?;
            let f = m.load_function(&entry)?;
            f.num_regs()?;
            a.push(t.elapsed());
        }
        // (b) sha256 of the bytes.
        let mut b = Vec::new();
        for _ in 0..iters {
            let t = Instant::now();
            std::hint::black_box(kart::digest::sha256_hex(&bytes));
            b.push(t.elapsed());
        }
        // (c) kart's full path: a fresh cache each time, the store already open.
        let mut c = Vec::new();
        for _ in 0..iters {
            let fresh = Gpu::open(0)?;
            let t = Instant::now();
            std::hint::black_box(fresh.kernel(&rt, kernel, &config)?);
            c.push(t.elapsed());
        }
        // (d) cached lookup.
        gpu.kernel(&rt, kernel, &config)?;
        let n = 200_000u32;
        let t = Instant::now();
        for _ in 0..n {
            std::hint::black_box(gpu.kernel(&rt, kernel, &config)?);
        }
        let d = t.elapsed() / n;
        // (f) PTX JIT of the same kernel.
        let mut f = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            let m = ctx.load_module(cudarc::nvrtc::Ptx::from_src(ptx_text.clone()))?;
            m.load_function(&entry)?.num_regs()?;
            f.push(t.elapsed());
        }
        let (a, b, c, f) = (median(a), median(b), median(c), median(f));
        println!(
            "{:8} {:>9} {:>9.1}µs {:>9.1}µs {:>9.1}µs {:>9.3}µs {:>9.1}µs {:>9.2} {:>7.2}",
            kernel,
            bytes.len(),
            us(a),
            us(b),
            us(c),
            us(d),
            us(f),
            us(c) / (us(a) + us(b)),
            us(c) / us(a)
        );
    }
    Ok(())
}
