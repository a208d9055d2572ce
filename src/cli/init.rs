//! `kart init [DIR]`.

use std::path::Path;
use std::process::ExitCode;

use kart::error::Result;

pub fn run(dir: &Path, quiet: bool) -> Result<ExitCode> {
    let report = kart::init::init(dir, kart::pipeline::smoke::SMOKE_SOURCE)?;
    if quiet {
        return Ok(ExitCode::SUCCESS);
    }
    if report.existing {
        eprintln!(
            "{} is already a kart project (it has a kart.toml): nothing changed",
            dir.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    for f in &report.created {
        eprintln!("created {}", f.display());
    }
    for f in &report.kept {
        eprintln!("kept    {} (it exists)", f.display());
    }
    if !report.ignored.is_empty() {
        eprintln!("added to .gitignore: {}", report.ignored.join(" "));
    }
    eprintln!(
        "next: `kart toolchain install` (the pinned nvcc, once per machine), then `kart build`"
    );
    Ok(ExitCode::SUCCESS)
}
