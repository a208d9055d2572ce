//! `kart fetch` and `kart push`.

use std::process::ExitCode;
use std::time::Instant;

use kart::error::{Error, Result};
use kart::store::lockfile::{LOCK_FILE, Lockfile, lock_path};
use kart::target::TargetArch;
use kart::workspace::Workspace;

use serde::Serialize;

use super::args::Cli;
use super::output::print_json;
use super::progress::TransferBar;
use super::remote::open_remote;

/// `kart fetch`.
pub fn fetch(
    cli: &Cli,
    ws: &Workspace,
    kernels: &[String],
    targets: &[TargetArch],
    device: bool,
    jobs: usize,
    json: bool,
) -> Result<ExitCode> {
    let remote = open_remote(cli, ws, jobs)?.ok_or_else(kart::remote::transfer::no_remote_error)?;
    let lock = Lockfile::read(
        &lock_path(&ws.project.root),
        std::path::Path::new(LOCK_FILE),
    )?
    .ok_or_else(|| {
        Error::usage(
            "no kart.lock: fetch downloads what the lock names",
            Some("commit kart.lock from a build, or run `kart build`".into()),
        )
    })?;
    for k in kernels {
        if lock.of_kernel(k).is_empty() {
            return Err(Error::usage(format!("kart.lock has no kernel `{k}`"), None));
        }
    }
    let capability = if device {
        Some(kart::runtime::Gpu::open(0)?.capability)
    } else {
        None
    };
    let selected = kart::remote::transfer::fetch_selection(&lock, kernels, targets, capability);
    let start = Instant::now();
    let bar = TransferBar::new(cli.quiet, "fetch");
    let report = kart::remote::transfer::fetch(&ws.store, &remote, &selected, &bar)?;
    drop(bar);
    let secs = start.elapsed().as_secs_f64();
    let ok = report.failed.is_empty()
        && report.missing.is_empty()
        && report.remote_error.is_none()
        && report.not_fetched.is_empty();
    if json {
        print_json(&WithRemote {
            remote: remote.url(),
            seconds: secs,
            report: &report,
        });
    }
    if !cli.quiet {
        eprintln!(
            "fetch from {}: {} blobs wanted, {} already here, {} downloaded and verified ({:.1} MB in {secs:.2} s, {:.1} MB/s)",
            remote.url(),
            report.wanted,
            report.present,
            report.fetched,
            report.bytes as f64 / 1e6,
            report.bytes as f64 / 1e6 / secs.max(1e-9)
        );
    }
    for why in &report.failed {
        eprintln!("error: {why}");
    }
    if !report.missing.is_empty() {
        eprintln!(
            "error: the remote lacks {} blobs kart.lock names: {}",
            report.missing.len(),
            report.missing.join(", ")
        );
        eprintln!("hint: run `kart push` where they were built, or `kart build` here");
    }
    if let Some(why) = &report.remote_error {
        eprintln!("error: {why}");
        if !report.not_fetched.is_empty() {
            eprintln!(
                "error: {} blobs of kart.lock were not fetched: {}",
                report.not_fetched.len(),
                report.not_fetched.join(", ")
            );
        }
        eprintln!(
            "hint: check that the cache server is up and the URL is right; rerun `kart fetch` to take the rest, or `kart build` to compile them here"
        );
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `kart push`.
pub fn push(cli: &Cli, ws: &Workspace, jobs: usize, json: bool) -> Result<ExitCode> {
    let remote = open_remote(cli, ws, jobs)?.ok_or_else(kart::remote::transfer::no_remote_error)?;
    let lock = ws.lock()?;
    let start = Instant::now();
    let bar = TransferBar::new(cli.quiet, "push");
    let report = kart::remote::transfer::push(&ws.store, &remote, &lock, &bar)?;
    drop(bar);
    if json {
        print_json(&WithRemote {
            remote: remote.url(),
            seconds: start.elapsed().as_secs_f64(),
            report: &report,
        });
    }
    if !cli.quiet {
        eprintln!(
            "push to {}: {} blobs uploaded ({:.1} MB), {} already there; {} action entries uploaded, {} already there, in {:.2} s",
            remote.url(),
            report.blobs_uploaded,
            report.bytes as f64 / 1e6,
            report.blobs_present,
            report.entries_uploaded,
            report.entries_present,
            start.elapsed().as_secs_f64()
        );
        if !report.not_local.is_empty() {
            eprintln!(
                "note: {} blobs of kart.lock are not in the local store and were not pushed",
                report.not_local.len()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A transfer report with the remote's URL and the seconds it took, for `--json`.
#[derive(Serialize)]
struct WithRemote<'a, T: Serialize> {
    remote: &'a str,
    seconds: f64,
    #[serde(flatten)]
    report: &'a T,
}
