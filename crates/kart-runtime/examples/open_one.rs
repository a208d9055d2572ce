//! Times what a program pays to reach one artifact, up to the driver: `Runtime::open`
//! (or `Runtime::open_bundle`), `select` of one (kernel, config) for a compute
//! capability, and reading and verifying its blob, i.e. everything
//! `Gpu::kernel` does before `cuModuleLoadData`. No GPU needed. One process opens once
//! (as a program starting does); run it several times for a median. Prints
//! `open_ms select_ms read_ms total_ms peak_rss_kb`.
//!
//!     cargo run --release -p kart-runtime --example open_one -- \
//!         PROJECT_OR_BUNDLE KERNEL CAPABILITY NAME=VALUE...
//!
//! With a `.kartbundle` file as the first argument it opens the bundle instead of the
//! project. With `--gpu` first, on a machine with a GPU, it opens device 0 first (not
//! timed), then times `Runtime::open` and `Gpu::kernel` (select, read, verify, load,
//! every entry resolved) and prints `open_ms load_ms total_ms peak_rss_kb`. `bench/runtime_scale.sh` runs it at 600 and 6,000 artifacts against the
//! same program built from `main`.

use std::path::Path;
use std::time::Instant;

use kart_runtime::model::{Config, ParamValue};
use kart_runtime::resolve::{Capability, JitPolicy};
use kart_runtime::runtime::Runtime;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let gpu = args.first().is_some_and(|a| a == "--gpu");
    if gpu {
        args.remove(0);
    }
    let [place, kernel, capability, params @ ..] = &args[..] else {
        return Err("usage: open_one PROJECT_OR_BUNDLE KERNEL CAPABILITY NAME=VALUE...".into());
    };
    let (major, minor) = capability
        .split_once('.')
        .ok_or("CAPABILITY is MAJOR.MINOR, e.g. 9.0")?;
    let capability = Capability {
        major: major.parse()?,
        minor: minor.parse()?,
    };
    let mut config = Config::default();
    for p in params {
        let (name, value) = p.split_once('=').ok_or("a param is NAME=VALUE")?;
        let value = match value.parse::<i64>() {
            Ok(i) => ParamValue::Int(i),
            Err(_) => ParamValue::Ident(value.to_string()),
        };
        config.insert(name, value);
    }
    let device = if gpu {
        Some(kart_runtime::runtime::Gpu::open(0)?)
    } else {
        None
    };
    let t0 = Instant::now();
    let rt = if place.ends_with(".kartbundle") {
        Runtime::open_bundle(Path::new(place))?
    } else {
        Runtime::open(Path::new(place))?
    };
    let t1 = Instant::now();
    if let Some(device) = &device {
        let loaded = device.kernel(&rt, kernel, &config)?;
        let t2 = Instant::now();
        let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
        println!(
            "{:.3} {:.3} {:.3} {} ({})",
            ms(t0, t1),
            ms(t1, t2),
            ms(t0, t2),
            peak_rss_kb(),
            loaded.artifact.describe()
        );
        return Ok(());
    }
    let artifact = rt.select(kernel, &config, capability, JitPolicy::Forbid)?;
    let t2 = Instant::now();
    let bytes = rt
        .blobs()
        .read_blob(&artifact.digest, Some(artifact.size))?;
    let t3 = Instant::now();
    assert_eq!(bytes.len() as u64, artifact.size);
    let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
    let peak_kb = peak_rss_kb();
    println!(
        "{:.3} {:.3} {:.3} {:.3} {peak_kb}",
        ms(t0, t1),
        ms(t1, t2),
        ms(t2, t3),
        ms(t0, t3)
    );
    Ok(())
}

/// This process's peak resident set, KiB.
fn peak_rss_kb() -> i64 {
    // SAFETY: getrusage only writes the struct it is given.
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage.ru_maxrss
    }
}
