//! Load benchmark (run on a GPU machine): for the smoke kernel and a large cubin, the
//! medians of (a) the raw driver load of bytes in memory, (b) sha256 of those bytes,
//! (c) kart's full path from an opened store (read, decompress, verify, load, resolve
//! every entry), (d) kart's cached lookup, (e) NVRTC compile of the same source to a
//! cubin plus its load, (f) PTX JIT of the same kernel; with the ratios c/(a+b) and
//! c/a, and where (c)'s time went. Prints figures; asserts nothing.

use std::time::{Duration, Instant};

use kart::model::ArtifactKind;
use kart::model::Config;
use kart::pipeline::{BuildOptions, build};
use kart::pool::Silent;
use kart::project::Project;
use kart::runtime::{Gpu, Runtime};
use kart::store::LockMode;
use kart::workspace::Workspace;

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

/// NVRTC: compile `src` to a cubin for `arch` (`sm_90`) with `defines`, in memory.
fn nvrtc_cubin(src: &str, arch: &str, defines: &[&str]) -> Result<Vec<u8>, String> {
    use cudarc::nvrtc::sys;
    use std::ffi::CString;
    // SAFETY: only tries to dlopen libnvrtc.
    if !unsafe { sys::is_culib_present() } {
        return Err("libnvrtc could not be loaded".into());
    }
    let src = CString::new(src).map_err(|e| e.to_string())?;
    let mut opts: Vec<CString> = vec![CString::new(format!("--gpu-architecture={arch}")).unwrap()];
    opts.extend(
        defines
            .iter()
            .map(|d| CString::new(format!("-D{d}")).unwrap()),
    );
    let ptrs: Vec<*const std::ffi::c_char> = opts.iter().map(|o| o.as_ptr()).collect();
    let check = |r: sys::nvrtcResult, what: &str| {
        if r == sys::nvrtcResult::NVRTC_SUCCESS {
            Ok(())
        } else {
            Err(format!("{what}: {r:?}"))
        }
    };
    // SAFETY: plain NVRTC calls on a program this function owns; buffers sized by NVRTC.
    unsafe {
        let mut prog = std::ptr::null_mut();
        check(
            sys::nvrtcCreateProgram(
                &mut prog,
                src.as_ptr(),
                std::ptr::null(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            ),
            "nvrtcCreateProgram",
        )?;
        let compiled = check(
            sys::nvrtcCompileProgram(prog, ptrs.len() as i32, ptrs.as_ptr()),
            "nvrtcCompileProgram",
        );
        let mut size = 0usize;
        let result = compiled
            .and_then(|()| check(sys::nvrtcGetCUBINSize(prog, &mut size), "nvrtcGetCUBINSize"))
            .and_then(|()| {
                let mut cubin = vec![0u8; size];
                check(
                    sys::nvrtcGetCUBIN(prog, cubin.as_mut_ptr().cast()),
                    "nvrtcGetCUBIN",
                )
                .map(|()| cubin)
            });
        sys::nvrtcDestroyProgram(&mut prog);
        result
    }
}

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
    w(
        "kernels/smoke/smoke.cu",
        kart::pipeline::smoke::SMOKE_SOURCE,
    )?;
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
        "{:8} {:>9} {:>11} {:>11} {:>11} {:>11} {:>13} {:>11} {:>9} {:>7}",
        "kernel",
        "cubin B",
        "(a) load",
        "(b) sha256",
        "(c) kart",
        "(d) cached",
        "(e) NVRTC",
        "(f) PTX JIT",
        "c/(a+b)",
        "c/a"
    );
    let mut breakdown = Vec::new();
    for (kernel, config, source, defines) in [
        (
            "smoke",
            Config::default(),
            kart::pipeline::smoke::SMOKE_SOURCE,
            &[][..],
        ),
        (
            "big",
            Config::from([("STEPS".to_string(), kart::model::ParamValue::Int(4096))]),
            BIG_CU,
            &["STEPS=4096"][..],
        ),
    ] {
        let cubin = rt
            .lock()?
            .artifacts
            .iter()
            .find(|a| a.kernel == kernel && a.kind == ArtifactKind::Cubin)
            .ok_or("no cubin")?
            .clone();
        let ptx = rt
            .lock()?
            .artifacts
            .iter()
            .find(|a| a.kernel == kernel && a.kind == ArtifactKind::Ptx)
            .ok_or("no ptx")?
            .clone();
        let bytes = rt.blobs().read_blob(&cubin.digest, Some(cubin.size))?;
        let ptx_text = String::from_utf8(rt.blobs().read_blob(&ptx.digest, Some(ptx.size))?)?;
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
        let (mut read, mut load, mut resolve) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..iters {
            let fresh = Gpu::open(0)?;
            let t = Instant::now();
            let loaded = std::hint::black_box(fresh.kernel(&rt, kernel, &config)?);
            c.push(t.elapsed());
            read.push(loaded.timings.read);
            load.push(loaded.timings.load);
            resolve.push(loaded.timings.resolve);
        }
        breakdown.push((kernel, median(read), median(load), median(resolve)));
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
        // (e) NVRTC compile of the same source to a cubin for this GPU, then its load.
        let arch = format!("sm_{}{}", gpu.capability.major, gpu.capability.minor);
        let mut e = Vec::new();
        let mut e_error = None;
        for _ in 0..5 {
            let t = Instant::now();
            match nvrtc_cubin(source, &arch, defines) {
                Ok(cubin) => {
                    let m = ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin))?;
                    m.load_function(&entry)?.num_regs()?;
                    e.push(t.elapsed());
                }
                Err(why) => {
                    e_error = Some(why);
                    break;
                }
            }
        }
        let e_text = match (&e_error, e.is_empty()) {
            (Some(why), _) => {
                println!("(e) NVRTC unavailable: {why}");
                "n/a".to_string()
            }
            (None, false) => format!("{:.1}ms", us(median(e.clone())) / 1e3),
            (None, true) => "n/a".to_string(),
        };
        let (a, b, c, f) = (median(a), median(b), median(c), median(f));
        println!(
            "{:8} {:>9} {:>9.1}µs {:>9.1}µs {:>9.1}µs {:>9.3}µs {:>13} {:>9.1}µs {:>9.2} {:>7.2}",
            kernel,
            bytes.len(),
            us(a),
            us(b),
            us(c),
            us(d),
            e_text,
            us(f),
            us(c) / (us(a) + us(b)),
            us(c) / us(a)
        );
    }
    println!(
        "where (c) went (medians): read = file read (+ zstd above 64 KiB) + sha256; load = cuModuleLoadData; resolve = lookup + cuFuncLoad of every entry"
    );
    for (kernel, read, load, resolve) in breakdown {
        println!(
            "{kernel:8} read {:8.1}µs  load {:8.1}µs  resolve {:6.1}µs",
            us(read),
            us(load),
            us(resolve)
        );
    }
    Ok(())
}
