//! `kart gc`: remove what the lock no longer names.

use std::process::ExitCode;

use kart::deploy::maintain;
use kart::error::Result;
use kart::workspace::Workspace;

use super::output::print_json;

/// `kart gc`.
pub fn run(ws: &Workspace, dry_run: bool, all_unreferenced: bool, json: bool) -> Result<ExitCode> {
    let report = maintain::gc(ws, dry_run, all_unreferenced)?;
    if json {
        print_json(&report);
        return Ok(ExitCode::SUCCESS);
    }
    let verb = if dry_run { "would remove" } else { "removed" };
    for root in &report.shared_with {
        println!(
            "kept the blobs of {}, which shares this store",
            kart::untrusted::for_terminal(&root.display().to_string())
        );
    }
    for root in &report.forgotten {
        println!(
            "{} the store's record of {}: that project no longer exists",
            if dry_run { "would drop" } else { "dropped" },
            kart::untrusted::for_terminal(&root.display().to_string())
        );
    }
    println!(
        "{verb} {} blobs ({:.1} KiB) and {} action entries not named by kart.lock{}",
        report.blobs.len(),
        report.bytes as f64 / 1024.0,
        report.entries.len(),
        if report.shared_with.is_empty() {
            ""
        } else {
            " or the locks of the projects sharing the store"
        }
    );
    if report.kept > 0 {
        println!(
            "{verb} {} folder(s) of failed compiles kept by --keep-temps",
            report.kept
        );
    }
    Ok(ExitCode::SUCCESS)
}
