//! The `kart` command line: the arguments (their doc comments are `--help`), one
//! module per command, and the few helpers they share. Every command is a thin layer:
//! it calls the library and prints what it returns (data on stdout, messages on
//! stderr, JSON with `--json`).

mod args;
mod build;
pub mod complete;
mod doctor;
mod explain;
mod export;
mod fleet;
mod gc;
mod init;
mod ls;
mod output;
mod path;
mod progress;
mod remote;
mod smoke;
mod toolchain;
mod transfer;
mod tune;
mod verify;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use kart::error::{Error, Result};
use kart::project::Project;
use kart::store::LockMode;
use kart::workspace::Workspace;

pub use args::{Cli, Command, ToolchainAction};
pub use output::print_error;

/// Runs the parsed command line.
pub fn run(cli: &Cli) -> Result<ExitCode> {
    if let Command::Completions { shell } = &cli.command {
        return complete::registration(*shell);
    }
    let cwd = match &cli.directory {
        Some(d) => d.clone(),
        None => std::env::current_dir().map_err(|e| Error::Io {
            action: "read the current folder",
            path: PathBuf::from("."),
            source: e,
        })?,
    };
    if let Command::Init { dir } = &cli.command {
        return init::run(
            &cwd.join(dir.as_deref().unwrap_or(std::path::Path::new("."))),
            cli.quiet,
        );
    }
    if let Command::Toolchain {
        action: ToolchainAction::List { json },
    } = &cli.command
    {
        // Works anywhere: inside a project it also marks the project's installs.
        let project = Project::discover(&cwd).ok();
        return toolchain::list(project.as_ref(), *json);
    }
    if let Command::Bundle {
        inspect: Some(path),
        json,
        ..
    } = &cli.command
    {
        // Works anywhere: a bundle is read where it is deployed, with no project.
        return fleet::inspect(&cwd.join(path), path, json.json);
    }
    let project = Project::discover(&cwd)?;
    if let Command::Toolchain { action } = &cli.command {
        return toolchain::run(cli, &project, action);
    }
    if let Command::AttestWorker { digests } = &cli.command {
        return smoke::attest_worker(&project.root, digests);
    }
    let broken = match named_kernels(&cli.command) {
        None => project.broken.clone(),
        Some(names) => {
            // A command about a kernel that could not be read says why.
            if let Some(b) = names.iter().find_map(|n| project.broken_kernel(n)) {
                return Err(b.error.clone());
            }
            Vec::new()
        }
    };
    if !broken.is_empty()
        && let Command::Build(args) = &cli.command
        && args.locked
    {
        // `--locked` cannot check what it cannot read.
        return Err(broken[0].error.clone());
    }
    let mode = match cli.command {
        Command::Gc { .. } => LockMode::Exclusive,
        _ => LockMode::Shared,
    };
    let ws = Workspace::open(project, mode, Duration::from_secs(cli.lock_timeout))?;
    let result = run_command(cli, ws);
    if broken.is_empty() {
        return result;
    }
    match result {
        Ok(ExitCode::SUCCESS) => report_broken(&broken),
        // The command failed too: the broken kernels first, they may be why.
        other => {
            for b in &broken {
                print_error(&b.error);
            }
            other
        }
    }
}

/// Runs a command that needs the project's store.
fn run_command(cli: &Cli, mut workspace: Workspace) -> Result<ExitCode> {
    let ws = &workspace;
    match &cli.command {
        Command::Build(args) => build::run(cli, &mut workspace, args),
        Command::Ls {
            kernels,
            config,
            wide,
            json,
        } => ls::run(ws, &kernels.kernels, &config.params, *wide, *json),
        Command::Explain {
            config,
            target,
            ptx,
            json,
        } => explain::run(
            cli,
            ws,
            &config.kernel,
            &config.params,
            *target,
            *ptx,
            *json,
        ),
        Command::Verify {
            rebuild,
            seed,
            json,
        } => verify::run(cli, ws, *rebuild, *seed, *json),
        Command::Smoke {
            allow_no_gpu,
            json,
            all,
        } => {
            let code = smoke::run(cli, ws, *allow_no_gpu, *json)?;
            if *all && code == ExitCode::SUCCESS && kart::runtime::device_count() > 0 {
                return smoke::attest(cli, ws);
            }
            Ok(code)
        }
        Command::Doctor { verbose, json } => doctor::run(cli, ws, *verbose, json.json),
        Command::Path {
            config,
            target,
            json,
        } => path::run(workspace, &config.kernel, &config.params, *target, *json),
        Command::Fetch {
            kernels,
            targets,
            device,
            jobs,
            json,
        } => transfer::fetch(
            cli,
            ws,
            &kernels.kernels,
            &targets.targets,
            *device,
            jobs.jobs,
            json.json,
        ),
        Command::Push { jobs, json } => transfer::push(cli, ws, jobs.jobs, json.json),
        Command::Export {
            selectors,
            python: _,
            output,
            targets,
            all_configs,
            fleet,
        } => export::run(
            cli,
            ws,
            selectors,
            output,
            &targets.targets,
            *all_configs,
            fleet.as_deref(),
        ),
        Command::Coverage {
            kernels,
            fleet,
            problems,
            trace,
            require,
            json,
        } => fleet::coverage(
            ws,
            &fleet::CoverageArgs {
                kernels: &kernels.kernels,
                fleet: fleet.as_deref(),
                problems: problems.as_deref(),
                trace: trace.as_deref(),
                require,
                json: json.json,
            },
        ),
        Command::Bundle {
            kernels,
            output,
            fleet,
            trace,
            json,
            ..
        } => fleet::bundle(
            ws,
            &fleet::BundleArgs {
                kernels: &kernels.kernels,
                output: output.as_deref(),
                fleet: fleet.as_deref(),
                trace: trace.as_deref(),
                json: json.json,
                quiet: cli.quiet,
            },
        ),
        Command::Tune { kernels, run, json } => tune::run(ws, kernels, *run, *json),
        Command::Gc {
            dry_run,
            json,
            all_unreferenced,
        } => gc::run(ws, *dry_run, *all_unreferenced, json.json),
        Command::AttestWorker { .. }
        | Command::Completions { .. }
        | Command::Toolchain { .. }
        | Command::Init { .. } => Ok(ExitCode::SUCCESS),
    }
}

/// The kernels a command names, or `None` when it is about the whole project (and so
/// also about any kernel that could not be read).
fn named_kernels(command: &Command) -> Option<Vec<String>> {
    let named = |kernels: &[String]| (!kernels.is_empty()).then(|| kernels.to_vec());
    match command {
        Command::Build(args) => named(&args.kernels),
        Command::Ls { kernels, .. }
        | Command::Fetch { kernels, .. }
        | Command::Coverage { kernels, .. }
        | Command::Bundle { kernels, .. } => named(&kernels.kernels),
        Command::Tune { kernels, .. } => named(kernels),
        Command::Explain { config, .. } | Command::Path { config, .. } => {
            Some(vec![config.kernel.clone()])
        }
        Command::Export { selectors, .. } => named(
            &selectors
                .iter()
                .map(|s| s.kernel.clone())
                .collect::<Vec<_>>(),
        ),
        Command::Smoke { .. }
        | Command::AttestWorker { .. }
        | Command::Completions { .. }
        | Command::Toolchain { .. }
        | Command::Init { .. } => Some(Vec::new()),
        Command::Verify { .. }
        | Command::Doctor { .. }
        | Command::Push { .. }
        | Command::Gc { .. } => None,
    }
}

/// After a command about the whole project ran over the kernels that could be read:
/// each broken kernel's error, and exit 2.
fn report_broken(broken: &[kart::project::BrokenKernel]) -> Result<ExitCode> {
    for b in broken {
        print_error(&b.error);
    }
    let names: Vec<String> = broken
        .iter()
        .map(|b| format!("`{}` ({})", b.name, b.manifest.display()))
        .collect();
    Err(Error::usage(
        format!(
            "{} kernel(s) could not be read: {}; the command ran over the others",
            broken.len(),
            names.join(", ")
        ),
        Some("fix the errors above; their kart.lock records are kept as they were".into()),
    ))
}
