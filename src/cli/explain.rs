//! `kart explain`: every input of an action key, and what changed against the lock.

use std::process::ExitCode;

use kart::build::explain_change;
use kart::build::key::{ArtifactKind, action_key, action_preimage, kernel_input_files};
use kart::build::manifest::{Config, ParamValue};
use kart::error::{Error, Result};
use kart::store::lockfile::describe;
use kart::target::TargetArch;
use kart::workspace::Workspace;

use super::Cli;

/// `kart explain`.
pub fn run(
    cli: &Cli,
    ws: &Workspace,
    kernel_name: &str,
    params: &[(String, ParamValue)],
    target: Option<TargetArch>,
    ptx: bool,
) -> Result<ExitCode> {
    let kernel = ws.project.kernel(kernel_name)?;
    let config = Config(params.iter().cloned().collect());
    let missing: Vec<&String> = kernel
        .params
        .keys()
        .filter(|k| !config.0.contains_key(*k))
        .collect();
    let unknown: Vec<&String> = config
        .0
        .keys()
        .filter(|k| !kernel.params.contains_key(*k))
        .collect();
    if !missing.is_empty() || !unknown.is_empty() {
        return Err(Error::usage(
            format!("explain needs one value for each param of `{kernel_name}`"),
            Some(format!(
                "missing: {}; unknown: {}; params: {}",
                list(&missing),
                list(&unknown),
                kernel.params.keys().cloned().collect::<Vec<_>>().join(", ")
            )),
        ));
    }
    if !kernel.configs().contains(&config) {
        return Err(Error::usage(
            format!(
                "{config} is not a config of `{kernel_name}` (a value is not in the grid, or it is excluded)"
            ),
            None,
        ));
    }
    let target = target.unwrap_or(kernel.targets[0]);
    let kind = if ptx {
        ArtifactKind::Ptx
    } else {
        ArtifactKind::Cubin
    };
    let toolchain = ws.toolchain(cli.nvcc.as_deref())?;
    let files = kernel_input_files(&ws.project.root, kernel)?;
    let preimage = action_preimage(&toolchain, kernel, &config, target, kind, &files);
    let key = action_key(&preimage);
    println!(
        "{}",
        describe(kernel_name, &config, &target.to_string(), kind)
    );
    println!("action key {key}");
    for (name, value) in &preimage.0 {
        let value = value.lines().collect::<Vec<_>>().join(" | ");
        println!("  {name}: {value}");
    }
    let lock = ws.lock()?;
    match lock.find(kernel_name, &config, &target.to_string(), kind) {
        None => println!("not in kart.lock"),
        Some(a) if a.key == key => println!("matches kart.lock (blob {})", a.digest),
        Some(a) => {
            println!("differs from kart.lock (locked key {}):", a.key);
            for line in explain_change(ws, &a.key, &preimage) {
                println!("  {line}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn list(items: &[&String]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}
