//! `kart toolchain install | list | path | gc`.

use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressStyle};

use kart::error::{Error, Result};
use kart::install::{GcPolicy, Home, InstallProgress, ToolchainPins};
use kart::project::Project;
use kart::project::library::{Library, LibrarySource};

use super::args::{Cli, ToolchainAction};
use super::output::print_json;

pub fn run(cli: &Cli, project: &Project, action: &ToolchainAction) -> Result<ExitCode> {
    let home = Home::from_env()?;
    match action {
        ToolchainAction::Install { json } => install(cli, &home, project, json.json),
        ToolchainAction::Path { what } => path(&home, project, what.as_deref()),
        ToolchainAction::Gc {
            installs,
            unused_for,
            dry_run,
        } => {
            let policy = GcPolicy {
                keep: used_by(&home, Some(project)),
                named: installs.clone(),
                unused_for: unused_for.saturating_mul(86_400),
            };
            gc(cli, &home, &policy, *dry_run)
        }
        ToolchainAction::List { .. } => Ok(ExitCode::SUCCESS),
    }
}

fn pins(project: &Project) -> Result<ToolchainPins> {
    ToolchainPins::of(project).ok_or_else(|| {
        Error::usage(
            "kart.toml pins no nvcc release",
            Some("add `[toolchain]` with `nvcc = \"13.0\"` to kart.toml".into()),
        )
    })
}

fn pip_libraries(project: &Project) -> Vec<&Library> {
    project
        .libraries
        .values()
        .filter(|l| matches!(l.source, LibrarySource::Pip(_)))
        .collect()
}

/// A bar per download on a terminal; one line per wheel otherwise; nothing with -q.
struct Bars {
    bar: ProgressBar,
    quiet: bool,
}

impl InstallProgress for Bars {
    fn start(&self, wheel: &str, total: Option<u64>) {
        if self.quiet {
            return;
        }
        if self.bar.is_hidden() {
            eprintln!(
                "downloading {}{}",
                kart::untrusted::for_terminal(wheel),
                total.map_or(String::new(), |t| format!(" ({:.1} MB)", t as f64 / 1e6))
            );
        }
        self.bar.reset();
        self.bar.set_length(total.unwrap_or(0));
        self.bar
            .set_message(kart::untrusted::for_terminal(wheel).into_owned());
    }
    fn advance(&self, done: u64) {
        self.bar.set_position(done);
    }
    fn finish(&self, _wheel: &str) {
        self.bar.set_position(self.bar.length().unwrap_or(0));
    }
}

fn install(cli: &Cli, home: &Home, project: &Project, json: bool) -> Result<ExitCode> {
    let pins = ToolchainPins::of(project);
    let libraries = pip_libraries(project);
    if pins.is_none() && libraries.is_empty() {
        return Err(Error::usage(
            "kart.toml pins nothing kart installs (no [toolchain] nvcc, no [library.*] pip)",
            Some("add `[toolchain]` with `nvcc = \"13.0\"` to kart.toml".into()),
        ));
    }
    let bar = if cli.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(0)
    };
    bar.set_style(
        ProgressStyle::with_template("{msg:.50} {bytes}/{total_bytes} {bytes_per_sec} {wide_bar}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let progress = Bars {
        bar,
        quiet: cli.quiet,
    };
    let report = kart::install::install(home, pins.as_ref(), &libraries, &progress)?;
    progress.bar.finish_and_clear();
    // Installing (or finding installed) is a use by this project.
    for (_, folder) in report.installed.iter().chain(&report.present) {
        kart::install::record_use(home, folder, &project.root);
    }
    if json {
        print_json(&report);
    } else if !cli.quiet {
        for (what, path) in &report.installed {
            eprintln!("installed {what} in {}", path.display());
        }
        for (what, path) in &report.present {
            eprintln!("{what}: already installed in {}", path.display());
        }
        if report.downloaded > 0 || report.cached > 0 {
            eprintln!(
                "downloaded {:.1} MB, took {:.1} MB of wheels from the home's cache; every wheel checked against its sha256",
                report.downloaded as f64 / 1e6,
                report.cached as f64 / 1e6
            );
        }
        let s = &report.sharing;
        if s.files > 0 {
            eprintln!(
                "{} files: {:.1} MB new, {:.1} MB shared with other installs (hard links to one read-only copy{})",
                s.files,
                s.new_bytes as f64 / 1e6,
                s.shared_bytes as f64 / 1e6,
                if s.copied > 0 {
                    format!("; {} copied where no link could be made", s.copied)
                } else {
                    String::new()
                }
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn path(home: &Home, project: &Project, what: Option<&str>) -> Result<ExitCode> {
    if let Some(name) = what.filter(|w| *w != "nvcc") {
        let Some(library) = project.libraries.get(name) else {
            let mut names: Vec<&str> = vec!["nvcc"];
            names.extend(project.libraries.keys().map(String::as_str));
            return Err(Error::usage(
                format!(
                    "kart.toml has no [library.{}]",
                    kart::untrusted::for_terminal(name)
                ),
                Some(format!("one of: {}", names.join(", "))),
            ));
        };
        let Some(folder) = kart::install::installed_library(home, library) else {
            return Err(Error::environment(
                format!(
                    "header library `{name}` is not installed in {}",
                    home.root.display()
                ),
                "run `kart toolchain install`",
            ));
        };
        println!("{}", folder.display());
        return Ok(ExitCode::SUCCESS);
    }
    let nvcc = what.is_some();
    let pins = pins(project)?;
    let Some(found) = kart::install::installed_nvcc(home, &pins) else {
        return Err(kart::install::not_installed(home, &pins));
    };
    let folder = home.toolchain_folder(&pins)?;
    kart::install::record_use(home, &folder, &project.root);
    let shown = if nvcc { found } else { folder };
    println!("{}", shown.display());
    Ok(ExitCode::SUCCESS)
}

/// The installs `project` uses.
fn used_by(home: &Home, project: Option<&Project>) -> Vec<std::path::PathBuf> {
    let Some(project) = project else {
        return Vec::new();
    };
    let mut keep = Vec::new();
    if let Some(pins) = ToolchainPins::of(project)
        && let Ok(name) = pins.install_name()
    {
        keep.push(home.root.join("toolchains").join(name));
    }
    for library in pip_libraries(project) {
        if let Some(folder) = kart::install::installed_library(home, library) {
            keep.push(folder);
        }
    }
    keep
}

pub fn list(project: Option<&Project>, json: bool) -> Result<ExitCode> {
    let home = Home::from_env()?;
    let installed = kart::install::list(&home);
    if json {
        print_json(&installed);
        return Ok(ExitCode::SUCCESS);
    }
    let used = used_by(&home, project);
    if installed.is_empty() {
        eprintln!(
            "nothing installed in {} (`kart toolchain install` in a project)",
            home.root.display()
        );
    }
    let now = kart::install::usage::now();
    for i in &installed {
        let mark = if used.contains(&i.path) { "*" } else { " " };
        let name = i
            .path
            .file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned());
        let holds = match i.record.kind.as_str() {
            "toolchain" => format!(
                "nvcc {} {}",
                i.record.name,
                kart::install::describe_components(&i.components())
            ),
            _ => format!(
                "library {} ({})",
                i.record.name,
                i.record.requirements.join(", ")
            ),
        };
        println!(
            "{mark} {name}  {}  {:.1} MB, {:.1} MB its own",
            kart::untrusted::for_terminal(&holds),
            i.bytes as f64 / 1e6,
            i.own_bytes as f64 / 1e6,
        );
        if i.uses.is_empty() {
            println!(
                "      installed {}, used by no project since",
                kart::install::ago(now.saturating_sub(i.installed_at))
            );
        }
        for u in &i.uses {
            println!(
                "      used by {} {}",
                kart::untrusted::for_terminal(&u.project.display().to_string()),
                kart::install::ago(now.saturating_sub(u.at))
            );
        }
    }
    if !installed.is_empty() {
        println!("(in {})", home.root.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn gc(cli: &Cli, home: &Home, policy: &GcPolicy, dry_run: bool) -> Result<ExitCode> {
    let outcome = if dry_run {
        kart::install::plan(home, policy)?
    } else {
        kart::install::gc(home, policy)?
    };
    let verb = if dry_run { "would remove" } else { "removed" };
    for d in &outcome.decisions {
        let name = d
            .install
            .path
            .file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned());
        if d.remove {
            println!(
                "{verb} {name} ({:.1} MB): {}",
                d.install.own_bytes as f64 / 1e6,
                d.why
            );
        } else if dry_run || !cli.quiet {
            println!("keep {name}: {}", d.why);
        }
    }
    let freed = &outcome.freed;
    if freed.wheels > 0 {
        println!(
            "{verb} {} cached wheel(s) no install that stays was unpacked from ({:.1} MB)",
            freed.wheels,
            freed.wheel_bytes as f64 / 1e6
        );
    }
    if freed.files > 0 {
        println!(
            "{verb} {} shared file(s) no install links any more ({:.1} MB)",
            freed.files,
            freed.file_bytes as f64 / 1e6
        );
    }
    if !cli.quiet {
        let removed: Vec<_> = outcome.decisions.iter().filter(|d| d.remove).collect();
        let bytes: u64 = removed.iter().map(|d| d.install.own_bytes).sum();
        eprintln!(
            "{verb} {} install(s), {:.1} MB of files no other install shares (installs unused for {} days or named; see --unused-for)",
            removed.len(),
            bytes as f64 / 1e6,
            policy.unused_for / 86_400
        );
    }
    Ok(ExitCode::SUCCESS)
}
