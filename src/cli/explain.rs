//! `kart explain`: prints what [`kart::pipeline::explain::explain`] finds.

use std::process::ExitCode;

use kart::error::Result;
use kart::model::{ArtifactKind, Config, ParamValue};
use kart::target::TargetArch;
use kart::workspace::Workspace;

use super::args::Cli;
use super::output::print_json;

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
    let config = params.iter().cloned().collect::<Config>();
    let kind = if ptx {
        ArtifactKind::Ptx
    } else {
        ArtifactKind::Cubin
    };
    let e = kart::pipeline::explain::explain(
        ws,
        cli.nvcc.as_deref(),
        kernel_name,
        &config,
        target,
        kind,
    )?;
    if json {
        print_json(&e);
        return Ok(ExitCode::SUCCESS);
    }
    // Every line is escaped: inputs come from files, and old keys' inputs from
    // action entries another machine may have written.
    let show = |s: &str| kart::untrusted::for_terminal(s).into_owned();
    println!("{}", show(&e.artifact));
    println!("action key {}", e.key);
    for (name, value) in &e.inputs.0 {
        let value = value.lines().collect::<Vec<_>>().join(" | ");
        println!("  {}: {}", show(name), show(&value));
    }
    for t in &e.templates {
        let symbol = t.symbol.as_deref().unwrap_or("(not built)");
        println!(
            "entry {}: {} = {} -> {}",
            show(&t.entry),
            show(&t.written),
            show(&t.instance),
            show(symbol)
        );
    }
    if e.changes.is_empty() {
        println!("{}", show(&e.lock));
    } else {
        println!("{}:", show(&e.lock));
        for line in &e.changes {
            println!("  {}", show(line));
        }
    }
    Ok(ExitCode::SUCCESS)
}
