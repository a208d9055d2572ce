//! Shell completion through clap's dynamic completer: the shell calls kart back as the
//! user types (`KART_COMPLETE=SHELL kart -- kart …`), so kernel and param names come
//! from the project in the current folder, and hidden commands are never offered.

use std::io::Write as _;
use std::process::ExitCode;

use clap_complete::CompletionCandidate;
use clap_complete::env::Shells;

use kart::error::{Error, IoContext as _, Result};
use kart::project::Project;

/// The environment variable that turns a run of kart into a completion request.
pub const VAR: &str = "KART_COMPLETE";

/// Answers a completion request for the command line `command` builds and exits, if
/// this run is one.
pub fn answer_if_asked(command: fn() -> clap::Command) {
    clap_complete::CompleteEnv::with_factory(command)
        .var(VAR)
        .complete();
}

/// `kart completions SHELL`: the shell code that registers the completer.
pub fn registration(shell: clap_complete::Shell) -> Result<ExitCode> {
    let name = shell.to_string();
    let shells = Shells::builtins();
    let completer = shells.completer(&name).ok_or_else(|| {
        Error::usage(
            format!("kart cannot complete for {name}"),
            Some("use bash, zsh, fish, elvish or powershell".into()),
        )
    })?;
    let mut out = Vec::new();
    completer
        .write_registration(VAR, "kart", "kart", "kart", &mut out)
        .at("write the completion script to", "stdout")?;
    std::io::stdout()
        .write_all(&out)
        .at("write the completion script to", "stdout")?;
    Ok(ExitCode::SUCCESS)
}

/// The project in the current folder, if there is one to read.
fn project() -> Option<Project> {
    Project::discover(&std::env::current_dir().ok()?).ok()
}

/// The kernels of the project, each with its folder as help.
pub fn kernels() -> Vec<CompletionCandidate> {
    let Some(project) = project() else {
        return Vec::new();
    };
    project
        .kernels
        .iter()
        .map(|k| CompletionCandidate::new(&k.name).help(Some(k.dir.display().to_string().into())))
        .collect()
}

/// `NAME=VALUE` for every value of every param of the project's kernels.
pub fn params() -> Vec<CompletionCandidate> {
    let Some(project) = project() else {
        return Vec::new();
    };
    let mut pairs = std::collections::BTreeMap::<String, Vec<&str>>::new();
    for k in &project.kernels {
        for (name, values) in &k.params {
            for v in values {
                pairs
                    .entry(format!("{name}={v}"))
                    .or_default()
                    .push(&k.name);
            }
        }
    }
    pairs
        .into_iter()
        .map(|(pair, kernels)| CompletionCandidate::new(pair).help(Some(kernels.join(", ").into())))
        .collect()
}
