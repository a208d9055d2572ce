//! `kart smoke` (and `--all`, with its child `attest-worker` processes).

use std::process::ExitCode;

use kart::error::{IoContext, Result};
use kart::workspace::Workspace;

use super::args::Cli;
use super::output::print_json;

/// `kart smoke`.
pub fn run(cli: &Cli, ws: &Workspace, allow_no_gpu: bool, json: bool) -> Result<ExitCode> {
    let fallback = ws.project.targets[0];
    let report = kart::pipeline::smoke::run_smoke(
        &ws.store,
        cli.nvcc.as_deref(),
        &ws.project.root,
        ws.installed_nvcc(),
        fallback,
    )?;
    if json {
        print_json(&report);
    } else {
        for s in &report.stages {
            println!("{:10} {:9.3} ms  {}", s.stage, s.ms, s.detail);
        }
    }
    if report.skipped_no_gpu {
        println!("skipped: no CUDA GPU (load and launch stages not run)");
        return Ok(if allow_no_gpu {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(3)
        });
    }
    println!("smoke: ok on {}", report.gpu.unwrap_or_default());
    Ok(ExitCode::SUCCESS)
}

/// `kart smoke --all`: attest every loadable cubin of the lock.
pub fn attest(cli: &Cli, ws: &Workspace) -> Result<ExitCode> {
    use kart::deploy::attest::{ATTEST_FILE, Outcome, check_in_children, loadable_cubins};
    let lock = ws.lock()?;
    let gpu = kart::runtime::Gpu::open(0)?;
    let candidates = loadable_cubins(&lock, gpu.capability);
    println!(
        "attest: {} of {} artifacts of kart.lock are cubins {} can run",
        candidates.len(),
        lock.artifacts.len(),
        gpu.name
    );
    let exe =
        std::env::current_exe().at("find the kart executable", std::path::Path::new("kart"))?;
    let outcomes = check_in_children(&candidates, |digests| {
        let mut cmd = std::process::Command::new(&exe);
        cmd.arg("-C")
            .arg(&ws.project.root)
            .arg("--lock-timeout")
            .arg(cli.lock_timeout.to_string())
            .arg("attest-worker")
            .args(digests);
        cmd
    })?;
    let mut records = Vec::new();
    let mut failed = 0;
    for (artifact, outcome) in candidates.iter().zip(outcomes) {
        match outcome {
            Outcome::Passed(check) => {
                println!("  {:?}  {}", check, artifact.describe());
                records.push(kart::deploy::attest::record(artifact, &gpu, check));
            }
            Outcome::Failed(why) | Outcome::Crashed(why) => {
                failed += 1;
                println!("  FAILED  {}: {why}", artifact.describe());
            }
        }
    }
    let passed = records.len();
    let changed = kart::deploy::attest::save_records(&ws.project.root, records, &lock)?;
    println!(
        "attest: {passed} passed, {failed} failed on {}; {ATTEST_FILE} {}",
        gpu.name,
        if changed { "updated" } else { "unchanged" }
    );
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The hidden `kart attest-worker`: checks blobs on GPU 0, one JSON line each.
pub fn attest_worker(root: &std::path::Path, digests: &[String]) -> Result<ExitCode> {
    use std::io::Write;
    let rt = kart::runtime::Runtime::open(root)?;
    let gpu = kart::runtime::Gpu::open(0)?;
    let mut out = std::io::stdout().lock();
    for digest in digests {
        kart::failpoint::hit("attest-worker", digest);
        let report = kart::deploy::attest::check_blob(&rt, &gpu, digest);
        let line = serde_json::to_string(&report).unwrap_or_default();
        // The parent reads each line as it comes; a lost stdout ends the work.
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            return Ok(ExitCode::from(1));
        }
    }
    Ok(ExitCode::SUCCESS)
}
