//! `kart tune`: the records of kart.tune, or the kernels' tuning programs.

use std::process::ExitCode;

use kart::error::{IoContext, Result};
use kart::workspace::Workspace;

use super::print_json;

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
    let path = ws.project.root.join(kart::tune::TUNE_FILE);
    let tune = kart::tune::TuneFile::read(&path, std::path::Path::new(kart::tune::TUNE_FILE))?;
    let lock = ws.lock()?;
    let records: Vec<&kart::tune::TuneRecord> =
        tune.records.iter().filter(|r| wanted(&r.kernel)).collect();
    if json {
        print_json(&records);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:12} {:16} {:44} {:>10}  {:52} STALE",
        "KERNEL", "GPU", "PROBLEM", "MEDIAN µs", "CONFIG"
    );
    for r in records {
        let stale = r.is_stale(&lock);
        let problem: Vec<String> = r.problem.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!(
            "{:12} {:16} {:44} {:>10.1}  {:52} {}",
            r.kernel,
            r.gpu.strip_prefix("NVIDIA ").unwrap_or(&r.gpu),
            problem.join(","),
            r.median_us,
            // A variant's win names the variant.
            match &r.variant {
                Some(v) => format!("{v}[{}]", r.config),
                None => r.config.to_string(),
            },
            if stale { "yes" } else { "-" }
        );
    }
    Ok(ExitCode::SUCCESS)
}
