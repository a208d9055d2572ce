//! `kart export --python`.

use std::process::ExitCode;

use kart::error::{Error, Result};
use kart::store::lockfile::{LOCK_FILE, Lockfile, lock_path};
use kart::target::TargetArch;
use kart::workspace::Workspace;

use super::args::Cli;
use kart::store::sidecar::Sidecar as _;

/// `kart export`.
pub fn run(
    cli: &Cli,
    ws: &Workspace,
    selectors: &[kart::export::Selector],
    output: &std::path::Path,
    targets: &[TargetArch],
    all_configs: bool,
    fleet: Option<&std::path::Path>,
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
    let tune_path = ws.project.root.join(kart::deploy::tune::TUNE_FILE);
    let tune = kart::deploy::tune::TuneFile::read(
        &tune_path,
        std::path::Path::new(kart::deploy::tune::TUNE_FILE),
    )?;
    let mut chosen = kart::export::select(&ws.project, &lock, &tune, &options)?;
    if let Some(file) = fleet {
        // The fleet's selection: of the chosen cubins, those some GPU of it loads.
        let gpus = kart::project::fleet::read_fleet_file(file, file)?;
        let chosen_ids: std::collections::HashSet<_> = chosen.iter().map(|c| c.id()).collect();
        let loaded = kart::deploy::coverage::fleet_artifacts(&lock, &gpus, &|a| {
            chosen_ids.contains(&a.id())
        });
        if loaded.is_empty() {
            return Err(Error::usage(
                "no cubin of the selection loads on the fleet's GPUs",
                Some("`kart coverage --fleet FILE` shows what each GPU would load".into()),
            ));
        }
        chosen = loaded;
    }
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
    kart::store::fsutil::write_atomic(output, text.as_bytes())?;
    if !cli.quiet {
        eprintln!(
            "wrote {} ({} cubins, {:.1} KiB)",
            output.display(),
            chosen.len(),
            text.len() as f64 / 1024.0
        );
        // After a kernel changes, its records time artifacts the lock no longer has and
        // best() quietly answers with defaults: say so where the module is made.
        let exported: std::collections::BTreeSet<&str> =
            chosen.iter().map(|a| a.kernel.as_str()).collect();
        let stale = tune
            .records
            .iter()
            .filter(|r| {
                exported.contains(r.implementation()) || exported.contains(r.kernel.as_str())
            })
            .filter(|r| r.is_stale(&lock))
            .count();
        if stale > 0 {
            eprintln!(
                "warning: {stale} record(s) of {} time blobs kart.lock no longer names for their configs (the kernel, its flags or the \
                 toolchain changed, or kart.lock was rebuilt); \
                 best() answers those problems with defaults until they are tuned again (`kart tune` marks them stale)",
                kart::deploy::tune::TUNE_FILE
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
