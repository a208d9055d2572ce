//! `kart export --python`.

use std::process::ExitCode;

use kart::error::{Error, Result};
use kart::store::lockfile::{LOCK_FILE, Lockfile, lock_path};
use kart::target::TargetArch;
use kart::workspace::Workspace;

use super::Cli;

/// `kart export`.
pub fn run(
    cli: &Cli,
    ws: &Workspace,
    selectors: &[kart::export::Selector],
    output: &std::path::Path,
    targets: &[TargetArch],
    all_configs: bool,
) -> Result<ExitCode> {
    let lock_file = lock_path(&ws.project.root);
    let lock = Lockfile::read(&lock_file, std::path::Path::new(LOCK_FILE))?.ok_or_else(|| {
        Error::usage(
            "no kart.lock: export writes what the lock names",
            Some("run `kart build` first".into()),
        )
    })?;
    let options = kart::export::ExportOptions {
        selectors: selectors.to_vec(),
        targets: targets.to_vec(),
        all_configs,
    };
    let tune_path = ws.project.root.join(kart::tune::TUNE_FILE);
    let tune = kart::tune::TuneFile::read(&tune_path, std::path::Path::new(kart::tune::TUNE_FILE))?;
    let chosen = kart::export::select(&ws.project, &lock, &tune, &options)?;
    let lock_sha = kart::digest::sha256_file(&lock_file)?;
    let command: Vec<String> = std::env::args()
        .skip(1)
        .map(|a| if a.contains(' ') { format!("'{a}'") } else { a })
        .collect();
    let text = kart::export::python_module(
        &ws.store,
        &ws.project,
        &tune,
        &chosen,
        &lock_sha,
        &format!("kart {}", command.join(" ")),
    )?;
    kart::fsutil::write_atomic(output, text.as_bytes())?;
    if !cli.quiet {
        eprintln!(
            "wrote {} ({} cubins, {:.1} KiB)",
            output.display(),
            chosen.len(),
            text.len() as f64 / 1024.0
        );
    }
    Ok(ExitCode::SUCCESS)
}
