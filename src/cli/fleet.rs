//! `kart coverage` and `kart bundle`: what a fleet of GPUs loads, and one file with
//! just that.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use kart::deploy::attest::{ATTEST_FILE, AttestFile};
use kart::deploy::coverage::{Coverage, CoverageInput, Need};
use kart::deploy::tune::{TUNE_FILE, TuneFile};
use kart::error::{Error, Result};
use kart::project::fleet::{FleetGpu, read_fleet_file};
use kart::store::lockfile::{LOCK_FILE, Lockfile, lock_path};
use kart::store::sidecar::Sidecar as _;
use kart::workspace::Workspace;

/// The lock and sidecars every fleet command reads.
struct Records {
    lock: Lockfile,
    tune: TuneFile,
    attest: AttestFile,
}

fn records(ws: &Workspace) -> Result<Records> {
    let root = &ws.project.root;
    let lock = Lockfile::read(&lock_path(root), Path::new(LOCK_FILE))?.ok_or_else(|| {
        Error::usage(
            "no kart.lock: coverage and bundles are about what the lock names",
            Some("run `kart build` first".into()),
        )
    })?;
    let tune = TuneFile::read(&root.join(TUNE_FILE), Path::new(TUNE_FILE))?;
    let attest = AttestFile::read(&root.join(ATTEST_FILE), Path::new(ATTEST_FILE))?;
    Ok(Records { lock, tune, attest })
}

/// The fleet: `--fleet FILE`, else kart.toml's `[[fleet]]`, else the GPUs of
/// kart.attest and kart.tune; and where it came from.
fn fleet(
    ws: &Workspace,
    file: Option<&Path>,
    records: &Records,
) -> Result<(Vec<FleetGpu>, String)> {
    if let Some(file) = file {
        return Ok((read_fleet_file(file, file)?, file.display().to_string()));
    }
    if !ws.project.fleet.is_empty() {
        return Ok((ws.project.fleet.clone(), "kart.toml [[fleet]]".into()));
    }
    let gpus = kart::deploy::coverage::fleet_of_records(&records.attest, &records.tune);
    if gpus.is_empty() {
        return Err(Error::usage(
            "no fleet: kart.toml has no [[fleet]], and kart.attest and kart.tune name no GPU",
            Some("declare the GPUs in kart.toml (`[[fleet]]` with `name` and `capability`) or pass --fleet FILE".into()),
        ));
    }
    Ok((gpus, "the GPUs of kart.attest and kart.tune".into()))
}

/// What `kart coverage` was asked.
pub struct CoverageArgs<'a> {
    pub kernels: &'a [String],
    pub fleet: Option<&'a Path>,
    pub problems: Option<&'a Path>,
    pub trace: Option<&'a Path>,
    pub require: &'a [Need],
    pub json: bool,
}

/// `kart coverage`.
pub fn coverage(ws: &Workspace, args: &CoverageArgs<'_>) -> Result<ExitCode> {
    let records = records(ws)?;
    kart::deploy::coverage::check_kernels(&records.lock, args.kernels)?;
    let (gpus, source) = fleet(ws, args.fleet, &records)?;
    let Records { lock, tune, attest } = records;
    let problems = kart::deploy::problems::load(&ws.project, args.problems, args.trace)?
        .map(|(p, _)| p)
        .unwrap_or_default();
    let report = kart::deploy::coverage::coverage(&CoverageInput {
        project: &ws.project,
        lock: &lock,
        tune: &tune,
        attest: &attest,
        fleet: &gpus,
        fleet_source: source,
        kernels: args.kernels,
        problems: &problems,
    });
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else {
        print_coverage(&report);
    }
    let failing: Vec<String> = report
        .failing(args.require)
        .map(|r| {
            let gaps: Vec<String> = r
                .gaps
                .iter()
                .filter(|g| args.require.contains(g))
                .map(|g| format!("{g:?}").to_lowercase())
                .collect();
            format!("{} on {}: {}", r.kernel, r.gpu, gaps.join(", "))
        })
        .collect();
    if failing.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!(
        "error: {} kernel(s) on the fleet miss what --require asks:",
        failing.len()
    );
    for line in &failing {
        eprintln!("  {line}");
    }
    Ok(ExitCode::from(1))
}

fn print_coverage(report: &Coverage) {
    println!("fleet: {}", report.fleet_source);
    let mut table = vec![[
        "KERNEL".to_string(),
        "GPU".into(),
        "CUBIN".into(),
        "TUNED".into(),
        "ATTESTED".into(),
    ]];
    let mut notes = Vec::new();
    let mut unbuilt = Vec::new();
    for r in &report.rows {
        let gpu = format!(
            "{} ({}{})",
            r.gpu.strip_prefix("NVIDIA ").unwrap_or(&r.gpu),
            r.capability,
            r.cuda
                .as_ref()
                .map_or(String::new(), |c| format!(", CUDA {c}"))
        );
        let how: Vec<String> = r
            .loads
            .iter()
            .map(|(how, n)| format!("{n} {}", how.replace('_', " ")))
            .collect();
        let cubin = format!("{}/{} ({})", r.cubins, r.configs, how.join(", "));
        let tuned = if !r.tunable {
            "-".to_string()
        } else if r.problems.is_empty() {
            format!("{} records", r.tune_records)
        } else {
            let exact = r.problems.iter().filter(|p| p.source == "exact").count();
            format!(
                "{} records; {exact}/{} problems exact",
                r.tune_records,
                r.problems.len()
            )
        };
        let attested = format!("{}/{}", r.attested, r.loadable);
        for p in r.problems.iter().filter(|p| p.source != "exact") {
            let problem: Vec<String> = p.problem.iter().map(|(k, v)| format!("{k}={v}")).collect();
            notes.push(format!(
                "  {} on {}: {} -> {} ({})",
                r.kernel,
                gpu,
                problem.join(","),
                p.answer,
                p.source
            ));
        }
        for p in &r.unbuilt {
            let problem: Vec<String> = p.iter().map(|(k, v)| format!("{k}={v}")).collect();
            unbuilt.push(format!("  {} on {}: {}", r.kernel, gpu, problem.join(",")));
        }
        table.push([r.kernel.clone(), gpu, cubin, tuned, attested]);
    }
    let widths: Vec<usize> = (0..5)
        .map(|i| {
            table
                .iter()
                .map(|row| row[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in &table {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:w$}"))
            .collect();
        println!(
            "{}",
            kart::untrusted::for_terminal(line.join("  ").trim_end())
        );
    }
    if !notes.is_empty() {
        println!("problems without a record of their own:");
        for n in notes {
            println!("{}", kart::untrusted::for_terminal(&n));
        }
    }
    if !unbuilt.is_empty() {
        println!(
            "problems with no artifact (build them with `kart build --problems FILE` or `--trace FILE`):"
        );
        for n in unbuilt {
            println!("{}", kart::untrusted::for_terminal(&n));
        }
    }
    let gaps: BTreeSet<String> = report
        .rows
        .iter()
        .flat_map(|r| r.gaps.iter().map(|g| format!("{g:?}").to_lowercase()))
        .collect();
    if !gaps.is_empty() {
        println!(
            "gaps: {} (make CI refuse them with --require {})",
            gaps.iter().cloned().collect::<Vec<_>>().join(", "),
            gaps.into_iter().collect::<Vec<_>>().join(",")
        );
    }
}

/// What `kart bundle` was asked.
pub struct BundleArgs<'a> {
    pub kernels: &'a [String],
    pub output: Option<&'a Path>,
    pub fleet: Option<&'a Path>,
    pub trace: Option<&'a Path>,
    pub json: bool,
    pub quiet: bool,
}

/// `kart bundle`.
pub fn bundle(ws: &Workspace, args: &BundleArgs<'_>) -> Result<ExitCode> {
    let Some(output) = args.output else {
        return Err(Error::usage(
            "where to? `kart bundle` needs -o FILE (or --inspect FILE)",
            None,
        ));
    };
    let records = records(ws)?;
    let (gpus, source) = fleet(ws, args.fleet, &records)?;
    let Records { lock, tune, attest } = records;
    let mut made_for: Vec<String> = gpus.iter().map(FleetGpu::short).collect();
    let traced = match args.trace {
        Some(path) => {
            let trace = kart::deploy::problems::read_trace(path)?;
            made_for.push(format!("the configs of a trace of {} records", trace.len()));
            Some(kart::deploy::bundle::traced_configs(
                &ws.project,
                &lock,
                &tune,
                &gpus,
                &trace,
            ))
        }
        None => None,
    };
    let chosen = kart::deploy::bundle::select(&lock, &gpus, args.kernels, traced.as_ref())?;
    let bundle =
        kart::deploy::bundle::make(output, &ws.store, &lock, &chosen, &tune, &attest, made_for)?;
    let file_bytes = std::fs::metadata(output).map(|m| m.len()).unwrap_or(0);
    let all_bytes: u64 = {
        let mut seen = BTreeSet::new();
        lock.artifacts
            .iter()
            .filter(|a| seen.insert(&a.digest))
            .map(|a| a.size)
            .sum()
    };
    let blobs = bundle.blobs()?;
    let bundled_bytes: u64 = blobs.iter().map(|b| b.size).sum();
    if args.json {
        let report = serde_json::json!({
            "path": output,
            "fleet": source,
            "artifacts": chosen.len(),
            "blobs": blobs.len(),
            "bytes": bundled_bytes,
            "file_bytes": file_bytes,
            "lock_artifacts": lock.artifacts.len(),
            "lock_bytes": all_bytes,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else if !args.quiet {
        eprintln!(
            "wrote {}: {} of kart.lock's {} artifacts ({:.1} of {:.1} MB of cubins), {:.1} MB on disk; every blob checked",
            output.display(),
            chosen.len(),
            lock.artifacts.len(),
            bundled_bytes as f64 / 1e6,
            all_bytes as f64 / 1e6,
            file_bytes as f64 / 1e6,
        );
        eprintln!(
            "fleet: {source}: {}",
            gpus.iter()
                .map(FleetGpu::short)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `kart bundle --inspect`: the bundle at `path`, named `shown` (as given).
pub fn inspect(path: &Path, shown: &Path, json: bool) -> Result<ExitCode> {
    let bundle = kart::store::bundle::Bundle::open(path)?;
    let rows = kart::deploy::bundle::inspect(&bundle)?;
    let tune = TuneFile::from_bundle(&bundle)?;
    let index = bundle.index();
    let attestations = if index.attest.trim().is_empty() {
        0
    } else {
        kart::store::sidecar::parse::<AttestFile>(
            &index.attest,
            &PathBuf::from(format!("{}:kart.attest", shown.display())),
        )?
        .records
        .len()
    };
    if json {
        let report = serde_json::json!({
            "path": shown,
            "kart": index.kart,
            "made_for": index.made_for,
            "rows": rows,
            "tune_records": tune.records.len(),
            "attestations": attestations,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!("{} (kart {})", shown.display(), index.kart);
    println!("made for: {}", index.made_for.join(", "));
    let width = rows
        .iter()
        .map(|r| r.kernel.len())
        .max()
        .unwrap_or(6)
        .max(6);
    println!(
        "{:width$}  TARGET  ARTIFACTS      BYTES     STORED",
        "KERNEL"
    );
    let (mut n, mut bytes, mut stored) = (0, 0, 0);
    for r in &rows {
        println!(
            "{:width$}  {:6}  {:>9}  {:>9}  {:>9}",
            r.kernel, r.target, r.artifacts, r.bytes, r.stored
        );
        n += r.artifacts;
        bytes += r.bytes;
        stored += r.stored;
    }
    println!(
        "{:width$}  {:6}  {n:>9}  {bytes:>9}  {stored:>9}",
        "total", ""
    );
    println!(
        "{} tuning records, {attestations} attestations; every blob checked",
        tune.records.len()
    );
    Ok(ExitCode::SUCCESS)
}
