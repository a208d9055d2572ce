//! `kart doctor`: toolchain, driver, GPUs, and what each GPU can load of the lock, one
//! line per reason (`-v`: every artifact; `--json`: everything); whether the remote
//! cache and the executor the project names answer.

use std::process::ExitCode;

use serde::Serialize;

use kart::error::Result;
use kart::resolve::format_cuda_version;
use kart::runtime::doctor::{Loadability, loadability};
use kart::workspace::Workspace;

use super::args::Cli;
use super::output::print_json;
use super::remote::{bearer_token, open_remote_within};

/// The variable `kart build --executor` also reads.
const EXECUTOR_ENV: &str = "KART_EXECUTOR";

#[derive(Serialize)]
struct Report {
    nvcc: Found<Nvcc>,
    driver: Found<String>,
    gpus: Vec<GpuReport>,
    lock_artifacts: usize,
    /// Of the lock's artifacts, how many have no blob in the local store.
    lock_missing: usize,
    /// The remote cache the project names, if any: whether it answers.
    remote: Option<kart::remote::probe::CacheProbe>,
    /// The executor the project names, if any: whether it runs actions.
    executor: Option<kart::remote::probe::ExecutorProbe>,
    /// What to run next, if anything.
    next: Vec<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
enum Found<T> {
    Ok(T),
    Error(String),
}

#[derive(Serialize)]
struct Nvcc {
    release: String,
    path: String,
}

#[derive(Serialize)]
struct GpuReport {
    index: usize,
    name: String,
    capability: String,
    /// What the GPU runs, as people read it (`sm_90, sm_90a`).
    runs: String,
    #[serde(flatten)]
    lock: Option<Loadability>,
    error: Option<String>,
}

/// `kart doctor`.
pub fn run(cli: &Cli, ws: &Workspace, verbose: bool, json: bool) -> Result<ExitCode> {
    let nvcc = match ws.toolchain(cli.nvcc.as_deref()) {
        Ok(tc) => Found::Ok(Nvcc {
            release: tc.release.clone(),
            path: tc.nvcc.display().to_string(),
        }),
        Err(e) => Found::Error(e.to_string()),
    };
    let driver_version = kart::runtime::driver_version();
    let driver = match &driver_version {
        Ok(v) => Found::Ok(format_cuda_version(*v)),
        Err(e) => Found::Error(e.to_string()),
    };
    let lock = ws.lock()?;
    let mut gpus = Vec::new();
    for index in 0..kart::runtime::device_count() {
        gpus.push(match kart::runtime::Gpu::open(index) {
            Ok(g) => {
                let c = g.capability;
                let runs = if c.minor > 0 {
                    format!("sm_{}0..sm_{}{}", c.major, c.major, c.minor)
                } else {
                    format!("sm_{}0", c.major)
                };
                let specific = if c.major >= 9 {
                    format!(", sm_{}{}a", c.major, c.minor)
                } else {
                    String::new()
                };
                GpuReport {
                    index,
                    name: g.name.clone(),
                    capability: c.to_string(),
                    runs: format!("{runs}{specific}"),
                    lock: Some(loadability(
                        &lock,
                        c,
                        driver_version.as_ref().ok().copied(),
                        &ws.store,
                    )),
                    error: None,
                }
            }
            Err(e) => GpuReport {
                index,
                name: String::new(),
                capability: String::new(),
                runs: String::new(),
                lock: None,
                error: Some(e.to_string()),
            },
        });
    }
    let lock_missing = lock
        .artifacts
        .iter()
        .filter(|a| !ws.store.has_blob(&a.digest))
        .count();
    let (remote, executor) = probe_servers(cli, ws)?;
    let mut next = Vec::new();
    if matches!(nvcc, Found::Error(_)) {
        next.push("kart toolchain install: the nvcc kart.toml pins, for building here".to_string());
    }
    if lock_missing > 0 {
        next.push(format!(
            "kart build: compiles the {lock_missing} missing artifact(s) (or `kart fetch` takes them from a remote)"
        ));
    }
    if gpus.is_empty() {
        next.push(
            "on a machine with a GPU: `kart doctor` shows what each GPU loads, `kart smoke` proves one launch"
                .to_string(),
        );
    } else if lock_missing == 0 {
        next.push(
            "kart smoke: compiles, loads and launches the smoke kernel on each GPU".to_string(),
        );
    }
    if remote.as_ref().is_some_and(|r| r.answer.is_err()) {
        next.push("the remote cache did not answer: check its URL (kart.toml [remote], KART_REMOTE or --remote), the server and the credentials; builds compile here meanwhile".to_string());
    }
    if executor.as_ref().is_some_and(|e| e.answer.is_err()) {
        next.push("the executor cannot run kart's compiles: check `[executor] url` (or KART_EXECUTOR) and the server; `kart build --no-executor` compiles here".to_string());
    }
    let report = Report {
        nvcc,
        driver,
        gpus,
        lock_artifacts: lock.artifacts.len(),
        lock_missing,
        remote,
        executor,
        next,
    };
    if json {
        print_json(&report);
    } else {
        print_text(&report, verbose, cli.quiet);
    }
    Ok(ExitCode::SUCCESS)
}

/// Looks at the remote cache and the executor the project names (kart.toml, the
/// environment, the command line), each within a few seconds; neither reads nor
/// writes anything.
fn probe_servers(
    cli: &Cli,
    ws: &Workspace,
) -> Result<(
    Option<kart::remote::probe::CacheProbe>,
    Option<kart::remote::probe::ExecutorProbe>,
)> {
    let budget = Some(kart::remote::probe::PROBE_BUDGET);
    let remote =
        open_remote_within(cli, ws, 1, budget)?.map(|r| kart::remote::probe::probe_cache(&r));
    let executor_url = std::env::var(EXECUTOR_ENV)
        .ok()
        .filter(|u| !u.trim().is_empty())
        .or_else(|| ws.project.executor.as_ref().map(|c| c.url.clone()));
    let executor = executor_url.map(|url| {
        let given = std::env::var(EXECUTOR_ENV).ok();
        let token = bearer_token(&url, given.as_deref(), cli.quiet);
        kart::remote::probe::probe_executor(&url, token)
    });
    Ok((remote, executor))
}

fn print_text(report: &Report, verbose: bool, quiet: bool) {
    match &report.nvcc {
        Found::Ok(n) => println!("nvcc: {} at {}", n.release, n.path),
        Found::Error(e) => println!("nvcc: {e}"),
    }
    match &report.driver {
        Found::Ok(v) => println!("driver: supports CUDA {v}"),
        Found::Error(e) => println!("driver: {e}"),
    }
    if report.gpus.is_empty() {
        println!("gpus: none (building and checking work here; loading needs a GPU)");
    }
    println!(
        "kart.lock: {} artifacts, {} of their blobs in the store{}",
        report.lock_artifacts,
        report.lock_artifacts - report.lock_missing,
        if report.lock_missing > 0 {
            format!(" ({} missing)", report.lock_missing)
        } else {
            String::new()
        }
    );
    for g in &report.gpus {
        let Some(lock) = &g.lock else {
            println!(
                "gpu {}: {}",
                g.index,
                g.error.as_deref().unwrap_or("unusable")
            );
            continue;
        };
        println!(
            "gpu {}: {} (compute capability {}): runs cubins for {}",
            g.index, g.name, g.capability, g.runs
        );
        println!(
            "  loads {} of {} artifacts; picks one for {} configs:",
            lock.loadable,
            lock.total,
            lock.picks.len()
        );
        for (kernel, configs, targets) in lock.picks_by_kernel() {
            println!(
                "    {kernel}: {configs} config{} from {}",
                if configs == 1 { "" } else { "s" },
                targets.join(", ")
            );
        }
        if verbose {
            for p in &lock.picks {
                println!("      {}[{}] {}", p.kernel, p.config, p.target);
            }
        }
        if quiet {
            continue;
        }
        for reason in &lock.not_loadable {
            println!("  {}", reason.message);
            if verbose {
                for a in &reason.artifacts {
                    println!("      {a}");
                }
            }
        }
        if !verbose && !lock.not_loadable.is_empty() {
            println!("  (-v lists them; --json gives everything)");
        }
    }
    if let Some(r) = &report.remote {
        match &r.answer {
            Ok(ms) => println!("remote cache: {} answers ({ms} ms)", r.url),
            Err(e) => println!("remote cache: {}: {e}", r.url),
        }
    }
    if let Some(x) = &report.executor {
        match &x.answer {
            Ok(o) => println!(
                "executor: {} runs actions ({} ms; batches up to {} KiB; action cache {})",
                x.url,
                o.ms,
                o.max_batch_bytes / 1024,
                if o.action_cache_update {
                    "writable"
                } else {
                    "read-only to clients"
                }
            ),
            Err(e) => println!("executor: {}: {e}", x.url),
        }
    }
    for step in &report.next {
        println!("next: {step}");
    }
}
