//! Runs the smoke kernel of a kart project through `kart-runtime` alone: reads the
//! project's `kart.lock`, picks the cubin this GPU runs, checks its sha256, loads it and
//! launches `y = a * x + b`, then checks every element on the host.
//!
//! Usage: `runtime-only [PROJECT_DIR]` (default: the current folder; the project must
//! have built or fetched its `smoke` kernel). Exit 0 when the result is right, 1 when it
//! is wrong, 3 when the machine has no CUDA driver or GPU.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use kart_runtime::cudarc::driver::{DevicePtr, DevicePtrMut};
use kart_runtime::runtime::{Gpu, KernelArg, LaunchDims, Runtime};
use kart_runtime::{Config, Error};

const N: usize = 1 << 20;

fn main() -> ExitCode {
    let dir = std::env::args_os()
        .nth(1)
        .map_or_else(|| PathBuf::from("."), PathBuf::from);
    match run(&dir) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("runtime-only: {e}");
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                eprintln!("  because: {s}");
                source = s.source();
            }
            if let Some(hint) = e.hint() {
                eprintln!("  hint: {hint}");
            }
            ExitCode::from(e.exit_code() as u8)
        }
    }
}

fn run(dir: &std::path::Path) -> Result<(), Error> {
    let t = Instant::now();
    let rt = Runtime::open(dir)?;
    let opened = t.elapsed();
    let gpu = Gpu::open(0)?;
    let t = Instant::now();
    let smoke = gpu.kernel(&rt, "smoke", &Config::default())?;
    let loaded = t.elapsed();
    let artifact = &smoke.artifact;
    println!(
        "{}: smoke {} ({}) sha256 {} loaded in {:.1} µs (lock and store opened in {:.1} µs)",
        gpu.name,
        artifact.target,
        artifact.kind,
        &artifact.digest[..16],
        loaded.as_secs_f64() * 1e6,
        opened.as_secs_f64() * 1e6
    );

    let driver = |call: &'static str| {
        move |e: kart_runtime::cudarc::driver::DriverError| Error::Driver {
            call,
            message: e.to_string(),
        }
    };
    let x: Vec<f32> = (0..N).map(|i| (i % 1000) as f32 * 0.01 - 5.0).collect();
    let (a, b) = (1.5f32, -0.25f32);
    let stream = gpu.stream();
    let x_dev = stream.clone_htod(&x).map_err(driver("cuMemcpyHtoD"))?;
    let mut y_dev = stream
        .alloc_zeros::<f32>(N)
        .map_err(driver("cuMemAlloc"))?;
    {
        let (x_ptr, _x_sync) = x_dev.device_ptr(&stream);
        let (y_ptr, _y_sync) = y_dev.device_ptr_mut(&stream);
        smoke.launch(
            "kart_smoke_axpb",
            LaunchDims {
                grid: (N.div_ceil(256) as u32, 1, 1),
                block: (256, 1, 1),
                shared_bytes: 0,
            },
            &stream,
            &[
                KernelArg::Ptr(x_ptr),
                KernelArg::Ptr(y_ptr),
                KernelArg::F32(a),
                KernelArg::F32(b),
                KernelArg::I32(N as i32),
            ],
        )?;
    }
    let y = stream.clone_dtoh(&y_dev).map_err(driver("cuMemcpyDtoH"))?;
    let wrong = x
        .iter()
        .zip(&y)
        .filter(|&(&xi, &yi)| yi != a.mul_add(xi, b))
        .count();
    if wrong > 0 {
        return Err(Error::CheckFailed {
            message: format!("{wrong} of {N} elements differ from a * x + b"),
            hint: Some("the GPU, driver or cubin is broken; run `kart doctor`".into()),
        });
    }
    println!("{N} elements of y = {a} * x + {b} checked: all exact");
    Ok(())
}
