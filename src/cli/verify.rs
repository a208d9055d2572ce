//! `kart verify`: re-hash the store, optionally rebuild a sample.

use std::process::ExitCode;

use kart::deploy::maintain;
use kart::error::Result;
use kart::workspace::Workspace;

use super::args::Cli;
use super::output::print_json;

/// `kart verify`.
pub fn run(
    cli: &Cli,
    ws: &Workspace,
    rebuild: usize,
    seed: Option<u64>,
    json: bool,
) -> Result<ExitCode> {
    let seed = seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    // Only a trusted remote's entries can vouch for (or contradict) a lock digest.
    let remote = super::remote::open_remote(cli, ws, 16)?.filter(|r| r.trusted);
    let report = maintain::verify(ws, rebuild, seed, cli.nvcc.as_deref(), remote.as_ref())?;
    if json {
        print_json(&report);
    } else {
        print_verify(&report, rebuild, seed);
    }
    Ok(if report.clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn print_verify(report: &maintain::VerifyReport, rebuild: usize, seed: u64) {
    println!(
        "{} blobs ok, {} corrupt; {} action entries ok, {} corrupt; {} locked blobs not in the store",
        report.blobs_ok,
        report.blobs_corrupt.len(),
        report.entries_ok,
        report.entries_corrupt.len(),
        report.missing.len()
    );
    let d = &report.digests;
    println!(
        "{} lock digests match their action entries, {} differ, {} unchecked (no entry to compare with)",
        d.matched,
        d.mismatches.len(),
        d.unchecked
    );
    for m in &d.mismatches {
        println!("digest mismatch: {m}");
    }
    for d in &report.blobs_corrupt {
        println!("corrupt blob {d} (quarantined)");
    }
    for k in &report.entries_corrupt {
        println!("corrupt action entry {k} (quarantined)");
    }
    if rebuild > 0 {
        println!(
            "rebuilt {} artifacts (seed {seed}): {} differ from kart.lock",
            report.rebuilt,
            report.rebuild_mismatches.len()
        );
        for (what, locked, rebuilt) in &report.rebuild_mismatches {
            println!("nondeterministic: {what}: lock {locked}, rebuilt {rebuilt}");
        }
    }
}
