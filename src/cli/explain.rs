//! `kart explain`: every input of an action key, and what changed against the lock.

use std::process::ExitCode;

use kart::build::explain_change;
use kart::build::key::{action_key, action_preimage, kernel_input_files};
use kart::build::workspace::Workspace;
use kart::error::{Error, Result};
use kart::model::ArtifactKind;
use kart::model::{Config, ParamValue};
use kart::store::lockfile::describe;
use kart::target::TargetArch;

use super::{Cli, print_json};

/// `kart explain`.
pub fn run(
    cli: &Cli,
    ws: &Workspace,
    kernel_name: &str,
    params: &[(String, ParamValue)],
    target: Option<TargetArch>,
    ptx: bool,
    json: bool,
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
    toolchain.require_libraries([kernel])?;
    let files = kernel_input_files(&ws.project.root, kernel)?;
    let preimage = action_preimage(
        &ws.project.root,
        &toolchain,
        kernel,
        &config,
        target,
        kind,
        &files,
    );
    let key = action_key(&preimage);
    let lock = ws.lock()?;
    let (verdict, changes) = match lock.find(kernel_name, &config, &target.to_string(), kind) {
        None => ("not in kart.lock".to_string(), Vec::new()),
        Some(a) if a.key == key => (format!("matches kart.lock (blob {})", a.digest), Vec::new()),
        Some(a) => (
            format!("differs from kart.lock (locked key {})", a.key),
            explain_change(ws, &a.key, &preimage),
        ),
    };
    let artifact = describe(kernel_name, &config, &target.to_string(), kind);
    // Template entries: the instance of this config, and its symbol once built.
    let locked = lock.find(kernel_name, &config, &target.to_string(), kind);
    let instances: Vec<serde_json::Value> = kernel
        .template_instances(&config)
        .into_iter()
        .map(|(t, instance)| {
            let symbol = locked
                .filter(|a| a.key == key)
                .and_then(|a| a.entries.iter().find(|e| e.name == t.name))
                .and_then(|e| e.symbol.clone());
            serde_json::json!({"entry": t.name, "written": t.written, "instance": instance, "symbol": symbol})
        })
        .collect();
    if json {
        print_json(&serde_json::json!({
            "artifact": artifact,
            "key": key,
            "inputs": preimage.0.iter().map(|(n, v)| serde_json::json!({"name": n, "value": v})).collect::<Vec<_>>(),
            "lock": verdict,
            "changes": changes,
            "templates": instances,
        }));
        return Ok(ExitCode::SUCCESS);
    }
    println!("{artifact}");
    println!("action key {key}");
    for (name, value) in &preimage.0 {
        let value = value.lines().collect::<Vec<_>>().join(" | ");
        println!("  {name}: {value}");
    }
    for i in &instances {
        let symbol = i["symbol"].as_str().unwrap_or("(not built)");
        println!(
            "entry {}: {} = {} -> {symbol}",
            i["entry"].as_str().unwrap_or(""),
            i["written"].as_str().unwrap_or(""),
            i["instance"].as_str().unwrap_or("")
        );
    }
    if changes.is_empty() {
        println!("{verdict}");
    } else {
        println!("{verdict}:");
        for line in changes {
            println!("  {line}");
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
