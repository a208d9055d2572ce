//! `kart ls`: the lock as a table.

use std::process::ExitCode;

use kart::error::Result;
use kart::maintain;
use kart::pipeline::workspace::Workspace;

use super::print_json;

/// `kart ls [KERNEL…] [-p NAME=VALUE…]`.
pub fn run(
    ws: &Workspace,
    kernels: &[String],
    params: &[(String, kart::model::ParamValue)],
    json: bool,
) -> Result<ExitCode> {
    let rows = maintain::list(ws, kernels, params)?;
    if json {
        print_json(&rows);
        return Ok(ExitCode::SUCCESS);
    }
    let cfg_width = rows
        .iter()
        .map(|r| config_text(r).len())
        .max()
        .unwrap_or(6)
        .max(6);
    let kernel_width = rows
        .iter()
        .map(|r| r.kernel.len())
        .max()
        .unwrap_or(6)
        .max(6);
    // Entries only where a template entry's instance says more than its name.
    let show_entries = rows
        .iter()
        .any(|r| r.entries.iter().any(|e| e.contains('<')));
    println!(
        "{:kernel_width$}  {:cfg_width$}  {:8}  {:>9}  {:>4}  {:>7}  {:>6}  {:5}  ATTESTED{}",
        "KERNEL",
        "CONFIG",
        "TARGET",
        "SIZE",
        "REGS",
        "SMEM",
        "SPILLS",
        "LOCAL",
        if show_entries { "  ENTRIES" } else { "" }
    );
    for r in &rows {
        let target = if r.kind == "ptx" {
            format!("{} ptx", r.target)
        } else {
            r.target.clone()
        };
        println!(
            "{:kernel_width$}  {:cfg_width$}  {:8}  {:>9}  {:>4}  {:>7}  {:>6}  {:5}  {}{}",
            r.kernel,
            config_text(r),
            target,
            r.size,
            r.registers,
            r.shared_bytes,
            r.spill_bytes,
            if r.local { "yes" } else { "no" },
            if r.attested.is_empty() {
                "-".to_string()
            } else {
                r.attested.join(",")
            },
            if show_entries {
                format!("  {}", r.entries.join(" "))
            } else {
                String::new()
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The config, then its derived params after `;` (`BLOCK_M=128,NUM_WARPS=4; ROWS=32`).
fn config_text(r: &maintain::ListRow) -> String {
    if r.derived.is_empty() {
        return r.config.to_string();
    }
    let derived: Vec<String> = r.derived.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{}; {}", r.config, derived.join(","))
}
