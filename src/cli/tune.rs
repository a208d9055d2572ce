//! `kart tune`: the records of kart.tune, or the kernels' tuning programs.

use std::process::ExitCode;

use kart::error::{IoContext, Result};
use kart::workspace::Workspace;

use super::output::print_json;
use kart::store::sidecar::Sidecar as _;

/// `kart tune`.
pub fn run(ws: &Workspace, kernels: &[String], run: bool, json: bool) -> Result<ExitCode> {
    for k in kernels {
        ws.project.kernel(k)?;
    }
    let wanted = |name: &str| kernels.is_empty() || kernels.iter().any(|k| k == name);
    if run {
        let mut failed = false;
        let mut ran = 0;
        for kernel in ws.project.kernels.iter().filter(|k| wanted(&k.name)) {
            let Some(program) = kernel
                .tune
                .as_ref()
                .map(|t| &t.program)
                .filter(|p| !p.is_empty())
            else {
                // Named on the command line: say why nothing runs for it.
                if !kernels.is_empty() {
                    eprintln!(
                        "tune: {}: no tuning program (add `program = [\"path/to/program\", \"tune\"]` to [tune] in {})",
                        kernel.name,
                        kernel.manifest.display()
                    );
                }
                continue;
            };
            let binary = ws.project.root.join(&program[0]);
            if program[0].contains('/') && !binary.is_file() {
                let hint = match program[0].strip_prefix("target/release/examples/") {
                    Some(example) => {
                        format!("build it first: cargo build --release --example {example}")
                    }
                    None => "build it first (the path is relative to the project root)".into(),
                };
                return Err(kart::error::Error::environment(
                    format!(
                        "{}: the tuning program `{}` of {} does not exist",
                        kernel.name,
                        program[0],
                        kernel.manifest.display()
                    ),
                    hint,
                ));
            }
            eprintln!("tune: {}: running {}", kernel.name, program.join(" "));
            let status = std::process::Command::new(&program[0])
                .args(&program[1..])
                .current_dir(&ws.project.root)
                .status()
                .at("run the tuning program", std::path::Path::new(&program[0]))?;
            failed |= !status.success();
            ran += 1;
        }
        if ran == 0 && !failed {
            eprintln!("tune: no kernel selected has a tuning program; nothing ran");
        }
        return Ok(if failed {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        });
    }
    let path = ws.project.root.join(kart::deploy::tune::TUNE_FILE);
    let tune = kart::deploy::tune::TuneFile::read(
        &path,
        std::path::Path::new(kart::deploy::tune::TUNE_FILE),
    )?;
    let lock = ws.lock()?;
    let records: Vec<&kart::deploy::tune::TuneRecord> =
        tune.records.iter().filter(|r| wanted(&r.kernel)).collect();
    if json {
        print_json(&records);
        return Ok(ExitCode::SUCCESS);
    }
    // Columns as wide as their widest cell, so every kernel's rows line up.
    let rows: Vec<[String; 6]> = records
        .iter()
        .map(|r| {
            let problem: Vec<String> = r.problem.iter().map(|(k, v)| format!("{k}={v}")).collect();
            [
                r.kernel.clone(),
                r.gpu.strip_prefix("NVIDIA ").unwrap_or(&r.gpu).to_string(),
                problem.join(","),
                format!("{:.1}", r.median_us),
                // A variant's win names the variant.
                match &r.variant {
                    Some(v) => format!("{v}[{}]", r.config),
                    None => r.config.to_string(),
                },
                if r.is_stale(&lock) { "yes" } else { "-" }.to_string(),
            ]
        })
        .collect();
    let header = ["KERNEL", "GPU", "PROBLEM", "MEDIAN µs", "CONFIG", "STALE"];
    let width = |i: usize| {
        rows.iter()
            .map(|r| r[i].chars().count())
            .chain([header[i].chars().count()])
            .max()
            .unwrap_or(0)
    };
    let (w0, w1, w2, w3, w4) = (width(0), width(1), width(2), width(3), width(4));
    println!(
        "{:w0$}  {:w1$}  {:w2$}  {:>w3$}  {:w4$}  {}",
        header[0], header[1], header[2], header[3], header[4], header[5]
    );
    for r in &rows {
        println!(
            "{:w0$}  {:w1$}  {:w2$}  {:>w3$}  {:w4$}  {}",
            r[0], r[1], r[2], r[3], r[4], r[5]
        );
    }
    Ok(ExitCode::SUCCESS)
}
