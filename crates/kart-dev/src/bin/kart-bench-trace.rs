//! What tracing (`KART_TRACE`) costs a launch. Tracing is decided once per process, so
//! the benchmark runs itself as a child with tracing off and on, alternately (off, on,
//! off, on, …), and reports per child:
//! (a) the check a launch makes, alone: `trace::tracer()` and, when on, the loaded
//!     artifact's set of problems seen (the same problem each time, the steady state),
//!     10 million times, in ns per check;
//! (b) on a GPU: `launch_problem` of an sgemm config of the repository's lock on a
//!     64×64×64 problem, 20 rounds of 10,000 launches, the median round in ns per launch
//!     (host time to enqueue, the stream synchronized after each round).
//! Then the medians over the children of each mode and the differences on − off. Run
//! from the repository root after `kart build`; prints figures, asserts nothing.
//! Usage: `kart-bench-trace [CHILDREN_PER_MODE]` (default 3)

use std::hint::black_box;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use cudarc::driver::{DevicePtr, DevicePtrMut};
use kart::model::Problem;
use kart::runtime::{Gpu, KernelArg, Runtime};

const CHECKS: u64 = 10_000_000;
const ROUNDS: usize = 20;
const LAUNCHES: usize = 10_000;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        match child() {
            Ok(line) => println!("{line}"),
            Err(e) => {
                eprintln!("child: {e}");
                std::process::exit(1);
            }
        }
        return;
    }
    let per_mode: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(3);
    let dir = tempfile::tempdir().expect("a temp folder");
    let trace = dir.path().join("trace.jsonl");
    let me = std::env::current_exe().expect("the benchmark's own path");
    let mut results: Vec<(bool, serde_json::Value)> = Vec::new();
    for i in 0..per_mode * 2 {
        let on = i % 2 == 1;
        let mut cmd = Command::new(&me);
        cmd.arg("--child").env_remove("KART_TRACE");
        if on {
            cmd.env("KART_TRACE", &trace);
        }
        let out = cmd.output().expect("run a child");
        let text = String::from_utf8_lossy(&out.stdout);
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
        let Ok(v) = serde_json::from_str::<serde_json::Value>(text.trim()) else {
            eprintln!("child {i} printed no result: {text}");
            std::process::exit(1);
        };
        println!("child {i} (tracing {}): {v}", if on { "on" } else { "off" });
        results.push((on, v));
    }
    let median = |on: bool, key: &str| -> Option<f64> {
        let mut v: Vec<f64> = results
            .iter()
            .filter(|(o, _)| *o == on)
            .filter_map(|(_, r)| r[key].as_f64())
            .collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    for (key, what) in [
        ("check_ns", "the check alone, ns per launch"),
        ("launch_ns", "launch_problem, ns per launch"),
    ] {
        match (median(false, key), median(true, key)) {
            (Some(off), Some(on)) => println!(
                "{what}: off {off:.1}, on {on:.1}, cost of tracing {:.1}",
                on - off
            ),
            _ => println!("{what}: not measured (no GPU)"),
        }
    }
    let lines = std::fs::read_to_string(&trace)
        .map(|t| t.lines().count())
        .unwrap_or(0);
    println!(
        "trace lines written by {per_mode} traced children: {lines} (one per child: each launched one distinct (kernel, config, problem, GPU))"
    );
}

fn child() -> Result<String, Box<dyn std::error::Error>> {
    let problem: Problem = [("M".into(), 64), ("N".into(), 64), ("K".into(), 64)].into();
    // (a) the check, as launch_inner makes it.
    let seen = kart::trace::Seen::default();
    let start = Instant::now();
    let mut new = 0u64;
    for _ in 0..CHECKS {
        if let Some(t) = kart::trace::tracer()
            && seen.first(Some(black_box(&problem)))
        {
            black_box(t);
            new += 1;
        }
    }
    let check_ns = start.elapsed().as_nanos() as f64 / CHECKS as f64;
    let mut out = serde_json::json!({ "check_ns": check_ns, "new": new });
    if kart::runtime::device_count() == 0 {
        return Ok(out.to_string());
    }
    // (b) real launches.
    let rt = Runtime::open(Path::new("."))?;
    let gpu = Gpu::open(0)?;
    let config = rt
        .lock()?
        .artifacts
        .iter()
        .find(|a| a.kernel == "sgemm")
        .ok_or("no sgemm in kart.lock")?
        .config
        .clone();
    let loaded = gpu.kernel(&rt, "sgemm", &config)?;
    let stream = gpu.stream();
    let a = stream.alloc_zeros::<f32>(64 * 64)?;
    let b = stream.alloc_zeros::<f32>(64 * 64)?;
    let mut c = stream.alloc_zeros::<f32>(64 * 64)?;
    let (pa, _ga) = a.device_ptr(&stream);
    let (pb, _gb) = b.device_ptr(&stream);
    let (pc, _gc) = c.device_ptr_mut(&stream);
    let args = [
        KernelArg::Ptr(pa),
        KernelArg::Ptr(pb),
        KernelArg::Ptr(pc),
        KernelArg::I32(64),
        KernelArg::I32(64),
        KernelArg::I32(64),
    ];
    let entry = loaded.artifact.entries[0].name.clone();
    for _ in 0..1000 {
        loaded.launch_problem(&entry, &problem, &stream, &args)?;
    }
    stream.synchronize()?;
    let mut rounds = Vec::new();
    for _ in 0..ROUNDS {
        let start = Instant::now();
        for _ in 0..LAUNCHES {
            loaded.launch_problem(&entry, &problem, &stream, &args)?;
        }
        rounds.push(start.elapsed().as_nanos() as f64 / LAUNCHES as f64);
        stream.synchronize()?;
    }
    rounds.sort_by(f64::total_cmp);
    out["launch_ns"] = serde_json::json!(rounds[ROUNDS / 2]);
    out["gpu"] = serde_json::json!(gpu.name);
    out["config"] = serde_json::json!(config.to_string());
    Ok(out.to_string())
}
