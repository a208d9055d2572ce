//! `kart gc`: remove what the lock no longer names.

use std::process::ExitCode;

use kart::error::Result;
use kart::maintain;
use kart::pipeline::workspace::Workspace;

use super::print_json;

/// `kart gc`.
pub fn run(ws: &Workspace, dry_run: bool, all_unreferenced: bool, json: bool) -> Result<ExitCode> {
    let report = maintain::gc(ws, dry_run, all_unreferenced)?;
    if json {
        print_json(&report);
        return Ok(ExitCode::SUCCESS);
    }
    let verb = if dry_run { "would remove" } else { "removed" };
    println!(
        "{verb} {} blobs ({:.1} KiB) and {} action entries not named by kart.lock",
        report.blobs.len(),
        report.bytes as f64 / 1024.0,
        report.entries.len()
    );
    if report.kept > 0 {
        println!(
            "{verb} {} folder(s) of failed compiles kept by --keep-temps",
            report.kept
        );
    }
    Ok(ExitCode::SUCCESS)
}
