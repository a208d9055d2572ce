//! `kart build`.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use kart::error::{Error, Result};
use kart::pipeline::compile::CompileFailure;
use kart::pipeline::{BuildOptions, BuildReporter, Selection, build};
use kart::workspace::Workspace;

use super::args::{BuildArgs, Cli};
use super::output::print_json;
use super::progress::{CliReporter, build_bar};
use super::remote::{bearer_token, open_remote};

/// `kart build`.
pub fn run(cli: &Cli, ws: &mut Workspace, args: &BuildArgs) -> Result<ExitCode> {
    // Problem params take their values from the problems (none without a file).
    let problems =
        kart::deploy::problems::load(&ws.project, args.problems.as_deref(), args.trace.as_deref())?;
    let bound = match &problems {
        Some((problems, from)) => ws.project.bind_problems(Some(problems), from)?,
        None => {
            refuse_dropping_problem_configs(ws, args)?;
            ws.project.bind_problems(None, "")?
        }
    };
    if !cli.quiet {
        for note in &bound.notes {
            eprintln!("note: {note}");
        }
        for kernel in ws.project.kernels.iter().filter(|k| {
            !k.launch_params_found.is_empty()
                && (args.kernels.is_empty() || args.kernels.contains(&k.name))
        }) {
            let names: Vec<&str> = kernel
                .launch_params_found
                .iter()
                .map(String::as_str)
                .collect();
            let (them, reach) = match names.len() {
                1 => ("it", "reaches"),
                _ => ("them", "reach"),
            };
            eprintln!(
                "note: {}: {} {reach} no compile input; configs that differ only in {them} share one compile (`launch_params` in {} says so and silences this note)",
                kernel.name,
                names.join(", "),
                kernel.manifest.display()
            );
        }
    }
    let ws: &Workspace = ws;
    if args.explain_grid {
        return explain_grid(ws, &args.kernels, &args.config.params, args.json);
    }
    let start = Instant::now();
    let mut options = BuildOptions {
        selection: Selection {
            kernels: args.kernels.clone(),
            params: args.config.params.iter().cloned().collect(),
            targets: args.targets.clone(),
        },
        timeout: Duration::from_secs(args.timeout.max(1)),
        locked: args.locked,
        shard: args.shard,
        nvcc: cli.nvcc.clone(),
        lock_timeout: Duration::from_secs(cli.lock_timeout),
        push: args.push,
        entries_only: args.entries_only,
        fail_fast: args.fail_fast,
        skip_infeasible: args.skip_infeasible,
        keep_temps: args.keep_temps,
        batch: args.batch.map(usize::from),
        ..BuildOptions::default()
    };
    if let Some(jobs) = args.jobs {
        if jobs == 0 {
            return Err(Error::usage("--jobs must be at least 1", None));
        }
        options.jobs = jobs;
    }
    if !args.no_remote {
        options.remote = open_remote(cli, ws, 16)?
            // `--locked` asks a remote only for entries to check digests against, and
            // only a trusted remote's entries count.
            .filter(|r| !args.locked || r.trusted)
            .map(std::sync::Arc::new);
    }
    if options.remote.is_none() && (args.push || args.entries_only) {
        return Err(kart::remote::transfer::no_remote_error());
    }
    if !args.locked
        && let Some((executor, jobs)) = open_executor(cli, ws, args)?
    {
        options.jobs = args.jobs.unwrap_or(jobs);
        options.executor = Some(executor);
    }
    let mut reporter = CliReporter::new(cli.quiet);
    reporter.bar = build_bar(cli.quiet, args.locked);
    let reporter_ref = &reporter;
    struct WithBar<'a>(&'a CliReporter);
    impl BuildReporter for WithBar<'_> {
        fn planned(&self, selected: usize, to_compile: usize) {
            if let Some(bar) = &self.0.bar {
                bar.set_length(to_compile as u64);
                if to_compile == 0 {
                    bar.finish_and_clear();
                }
            }
            self.0.planned(selected, to_compile);
        }
        fn compiled(&self, artifact: &str, result: std::result::Result<Duration, &CompileFailure>) {
            self.0.compiled(artifact, result);
        }
        fn note(&self, message: &str) {
            self.0.note(message);
        }
    }
    let result = build(ws, &options, &WithBar(reporter_ref));
    if let Some(bar) = &reporter_ref.bar {
        bar.finish_and_clear();
    }
    let summary = result?;
    if args.verbose {
        replay_warnings(ws, cli.nvcc.as_deref(), &options.selection)?;
    }
    let secs = start.elapsed().as_secs_f64();
    if args.json {
        print_json(&serde_json::json!({ "seconds": secs, "summary": summary }));
    }
    if !cli.quiet {
        if args.locked {
            let unchecked = match summary.digests_unchecked {
                0 => String::new(),
                n => format!(
                    "; {n} digest(s) unchecked (no action entry in the store or on a trusted remote to compare with)"
                ),
            };
            eprintln!(
                "kart.lock is up to date: {} artifacts checked in {secs:.3} s{unchecked}",
                summary.selected
            );
        } else {
            let lock = match (options.shard, summary.lock_changed) {
                (Some(s), _) => format!("shard {}/{}: kart.lock not written", s.index, s.count),
                (None, true) => format!("kart.lock updated ({} artifacts)", summary.lock_entries.0),
                (None, false) => "kart.lock unchanged".into(),
            };
            let remote = match &options.remote {
                Some(r) if summary.from_remote > 0 || summary.pushed > 0 || args.push => format!(
                    ", {} from the remote ({} blobs downloaded){}",
                    summary.from_remote,
                    summary.downloaded,
                    if args.push {
                        format!(", {} blobs pushed to {}", summary.pushed, r.url())
                    } else {
                        String::new()
                    }
                ),
                _ => String::new(),
            };
            let excluded = match summary.excluded_infeasible {
                0 => String::new(),
                n => format!(", {n} over a resource limit excluded"),
            };
            let shared = match summary.shared_compiles {
                0 => String::new(),
                n => format!(", {n} sharing one of those compiles (launch-only params)"),
            };
            let pruned = match summary.pruned {
                0 => String::new(),
                n => format!(", {n} pruned by [prune]"),
            };
            eprintln!(
                "{} artifacts: {} compiled{shared}, {} from the store{remote}{excluded}{pruned} in {secs:.3} s; {lock}",
                summary.selected, summary.compiled, summary.from_store
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The executor to compile on (`--executor`, else kart.toml's `[executor]`), with how
/// many compiles to send at once; `None` without one or with `--no-executor`.
fn open_executor(
    cli: &Cli,
    ws: &Workspace,
    args: &BuildArgs,
) -> Result<Option<(kart::pipeline::remote_exec::ExecutorOptions, usize)>> {
    if args.remote_exec.no_executor {
        return Ok(None);
    }
    let config = ws.project.executor.as_ref();
    let Some(url) = args
        .remote_exec
        .executor
        .clone()
        .filter(|u| !u.trim().is_empty())
        .or_else(|| config.map(|c| c.url.clone()))
    else {
        return Ok(None);
    };
    let jobs = config.map_or(kart::project::DEFAULT_EXECUTOR_JOBS, |c| c.jobs);
    // The token goes only where the remote cache's rules let it: to a URL given with it
    // (--executor, KART_EXECUTOR) or named by KART_REMOTE_TOKEN_URL.
    let token = bearer_token(&url, args.remote_exec.executor.as_deref(), cli.quiet);
    let executor = kart::remote::exec::open(&url, jobs, token)?;
    let options = kart::pipeline::remote_exec::ExecutorOptions {
        executor,
        deadline: args
            .remote_exec
            .executor_timeout
            .or_else(|| config.and_then(|c| c.timeout)),
        local_jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    Ok(Some((options, jobs)))
}

fn replay_warnings(
    ws: &Workspace,
    nvcc: Option<&std::path::Path>,
    selection: &Selection,
) -> Result<()> {
    let toolchain = ws.toolchain(nvcc)?;
    let planned = ws.plan(&toolchain)?;
    for p in ws.select(&planned, selection)? {
        if let Ok(Some(entry)) = ws.store.get_entry(&p.key) {
            let warnings = kart::pipeline::compile::warnings(&entry.stderr);
            if !warnings.is_empty() {
                eprintln!("{} {}:", entry.kernel, entry.config);
                for w in warnings {
                    eprintln!("  {}", kart::untrusted::for_terminal(w));
                }
            }
        }
    }
    Ok(())
}

/// `kart build --explain-grid [--json]`.
fn explain_grid(
    ws: &Workspace,
    kernels: &[String],
    params: &[(String, kart::model::ParamValue)],
    json: bool,
) -> Result<ExitCode> {
    for name in kernels {
        ws.project.kernel(name)?;
    }
    let selected = || {
        ws.project
            .kernels
            .iter()
            .filter(|k| kernels.is_empty() || kernels.contains(&k.name))
    };
    for (name, _) in params {
        if !selected().any(|k| k.params.contains_key(name)) {
            return Err(Error::usage(
                format!("no selected kernel has a param `{name}`"),
                None,
            ));
        }
    }
    let mut reports = Vec::new();
    for kernel in selected() {
        // `-p NAME=VALUE` narrows the grid to the combinations with that value.
        let mut narrowed = kernel.params.clone();
        for (name, value) in params {
            if let Some(values) = narrowed.get_mut(name) {
                values.retain(|v| v == value);
            }
        }
        let grid = kart::project::grid::Grid {
            params: &narrowed,
            ..kernel.grid()
        };
        let start = Instant::now();
        let (report, _) = grid.report().map_err(|e| {
            Error::usage(
                format!("{}: config {}: {}", kernel.name, e.config, e.error),
                None,
            )
        })?;
        let millis = start.elapsed().as_secs_f64() * 1e3;
        if json {
            let steps: Vec<serde_json::Value> = report
                .steps
                .iter()
                .map(|(step, removed)| serde_json::json!({ "step": step, "removes": removed }))
                .collect();
            let derived: Vec<&str> = kernel.derived.iter().map(|d| d.name.as_str()).collect();
            reports.push(serde_json::json!({
                "kernel": kernel.name,
                "params": kernel.params.len(),
                "raw": report.raw,
                "steps": steps,
                "kept": report.kept,
                "derived": derived,
                "targets": kernel.targets.iter().map(|t| t.to_string()).collect::<Vec<_>>(),
                "artifacts": report.kept * kernel.targets.len(),
                "prune": kernel.prune.as_ref().map(|p| p.text()),
                "milliseconds": millis,
            }));
            continue;
        }
        let width = report.steps.iter().map(|(s, _)| s.len()).max().unwrap_or(0);
        println!(
            "{}: {} raw combinations of {} params",
            kernel.name,
            report.raw,
            kernel.params.len()
        );
        for (step, removed) in &report.steps {
            println!("  {step:width$}  removes {removed}");
        }
        let derived = if kernel.derived.is_empty() {
            String::new()
        } else {
            let names: Vec<&str> = kernel.derived.iter().map(|d| d.name.as_str()).collect();
            format!(", each with derived {}", names.join(", "))
        };
        println!(
            "  {} configs kept{derived}, x {} targets ({:.1} ms)",
            report.kept,
            kernel.targets.len(),
            millis
        );
        if let Some(prune) = &kernel.prune {
            println!(
                "  [prune] {}: applied after compile, to what ptxas reports (kart build says what it leaves out)",
                prune.text()
            );
        }
    }
    if json {
        print_json(&reports);
    }
    Ok(ExitCode::SUCCESS)
}

/// A build without problems would drop the lock's configs of kernels with
/// `[problem_params]` (they have no values without them): refused, so that those configs
/// leave the lock only when a problems file says so (an empty one drops them all).
/// `--locked` and `--explain-grid` write nothing and are not refused.
fn refuse_dropping_problem_configs(ws: &Workspace, args: &BuildArgs) -> Result<()> {
    let problem_driven = ws
        .project
        .kernels
        .iter()
        .any(|k| !k.problem_params.is_empty());
    // Most projects have no such kernel: their builds do not read the lock for this.
    if !problem_driven || args.locked || args.explain_grid || args.shard.is_some() {
        return Ok(());
    }
    let lock = kart::store::lockfile::Lockfile::read(
        &kart::store::lockfile::lock_path(&ws.project.root),
        std::path::Path::new(kart::store::lockfile::LOCK_FILE),
    )?;
    let Some(lock) = lock else {
        return Ok(());
    };
    for kernel in ws
        .project
        .kernels
        .iter()
        .filter(|k| !k.problem_params.is_empty())
    {
        let n = lock.of_kernel(&kernel.name).len();
        if n > 0 {
            return Err(Error::usage(
                format!(
                    "kart.lock has {n} artifact(s) of `{}`, built for problems ([problem_params] in {}); without --problems or --trace this build would drop them",
                    kernel.name,
                    kernel.manifest.display()
                ),
                Some(
                    "pass the problems file or trace they were built for again (`kart build --problems FILE`); an empty problems file drops them".into(),
                ),
            ));
        }
    }
    Ok(())
}
